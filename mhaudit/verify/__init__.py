"""Verify: a report and its model -> the report's figures beside torch's own counters.

Each reference is taken by its own road, never by the audit's arithmetic: one real no_grad
CPU forward of copies of the user's model at the audited dtype, where it fits the size
limits (:mod:`mhaudit.verify.reference`), gives MemTracker's activation peak, the KV cache
it returns and, for a model with routed experts, FlopCounterMode's count with the experts'
grouped matmuls as routed; FlopCounterMode on fake tensors counts the other FLOPs
(:func:`~mhaudit.verify.checks.verify`); with ``--train``, MemTracker tracks one real
steady-state training step of CPU copies of it, where that fits the size limits
(:func:`~mhaudit.verify.training.training_check`).
"""
