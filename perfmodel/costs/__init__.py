"""What each piece of a training step costs, independent of how the pieces overlap.

`features` (static regression features per phase and unit), `compute` (the per-phase
relative-error regression), `comm` (ring collectives per link, fitted α-β), `memory` (peak memory
per GPU, phase by phase), `power` (energy and CO2 from activity), `nnls` (the one relative-error
NNLS fit), `datasets` (benchmark CSVs and MAPE), `model` (`CostModel`: the typed boundary the
simulator reads a hardware profile through).
"""
