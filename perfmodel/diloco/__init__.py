"""Training across islands: DiLoCo and Streaming DiLoCo on top of the island step.

`graph` (DiLoCo's outer step: island steps, blocking outer all-reduce, outer optimizer),
`fragments` (Streaming DiLoCo's fragment schedule), `streaming` (the Streaming DiLoCo run graph:
exchanges overlapping inner steps), `tuner` (blocking, bandwidth for a utilisation target,
fragment/delay recommendations), `examples` (the paper's figure 6 situations).
"""
