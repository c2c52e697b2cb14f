"""Training across islands: DiLoCo and Streaming DiLoCo on top of the island step.

`graph` (DiLoCo's outer step: island steps, blocking outer all-reduce, outer optimizer),
`fragments` (Streaming DiLoCo's fragment schedule), `streaming` (the Streaming DiLoCo run graph:
exchanges overlapping inner steps, each gating only its own layers' forward, and its closed-form
steady state), `tuner` (blocking, bandwidth for a utilisation target, fragment/delay
recommendations), `examples` (the paper's figure 6 situations), `published` (the Streaming
DiLoCo paper's bandwidth table as data, validation only).
"""
