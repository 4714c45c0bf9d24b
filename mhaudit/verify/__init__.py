"""Verify: a report and its model -> the report's figures beside torch's own counters.

FlopCounterMode counts the forward's matmul and conv FLOPs, MemTracker the activations a
forward and a training step keep, both on fake tensors of the user's model
(:func:`~mhaudit.verify.checks.verify`).
"""
