"""How the pieces of a step overlap: task graphs on streams and the schedules built from them.

`graph` (multi-stream task graphs and their exact list-schedule simulator, compute-communication
contention), `fsdp` (the FSDP2 step as PyTorch runs it: task plan, durations from a CostModel,
the exact affine decomposition T(k) = fixed + k·micro-step), `fastpath` (that same plan compiled
once and evaluated vectorised), `analysis` (regimes and micro-batch sweeps), `trace` (Perfetto
traces and timeline figures). Parallel layouts add their schedules here.
"""
