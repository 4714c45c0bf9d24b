"""Sources: the projections an attention core reads and the one that reads its context.

Recognising a projection (an activation times a weight), walking back from Q, K and V
through views, splits, joins and per-head norms to the projections they are made of
(stopping at barriers), following which feature axes and ranges of a fused projection
each role reads, and walking forward from the context to the output projection.
"""
