"""Pattern readers: rules of thumb that read one attention variant from what the graph computes.

Masks (causal, diagonal, window), windows of one sequence, extra logit columns and
head mixing, the score dtype, joint streams, spatial reduction, padded head dims and
what the code caches per key/value position. Each reads the graph, never class names.
"""
