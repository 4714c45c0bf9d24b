"""A corpus of third-party attention implementations, each with its ground truth."""
