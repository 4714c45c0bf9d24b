"""Fake execution: a model's forward and training step run on fake tensors, storages counted.

The home below the tracer for what the tracer and the phases both run: the fake-tensor
mode (:mod:`~mhaudit.fake.mode`), the model's state and inputs swapped for fakes at the
audited dtype (:mod:`~mhaudit.fake.run`, :mod:`~mhaudit.fake.swap`), and the live-storage
counters that see every storage an op makes and Python frees (:mod:`~mhaudit.fake.live`,
:mod:`~mhaudit.fake.counter`). It imports only the data model and torch.
"""
