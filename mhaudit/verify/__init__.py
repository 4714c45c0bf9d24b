"""Verify: a report and its model -> the report's figures beside torch's own counters.

FlopCounterMode counts the forward's matmul and conv FLOPs and MemTracker the activations
of a no_grad forward, both on fake tensors of the user's model
(:func:`~mhaudit.verify.checks.verify`); with ``--train``, MemTracker tracks one real
steady-state training step of CPU copies of it, where that fits the size limits
(:func:`~mhaudit.verify.training.training_check`).
"""
