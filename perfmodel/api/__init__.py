"""The performance model's public API: typed requests in, typed results out (DESIGN §1).

The CLI, the scripts and library users call these; each returns a frozen result whose `record`
(or `records`) is the ordered mapping the CLI prints, so the CLI only parses and formats.

- `workload`: what a user names (`WorkloadSpec`, `OuterSpec`) resolved against the catalogs and
  profiles (`Workload`), the inner step simulated, DiLoCo settings and the sync link;
- `predict`: `predict` (with `FailureSpec`: expected goodput under failures), `simulate`,
  `sweep`, `memory` of one workload;
- `streaming`: Streaming DiLoCo studies (`streaming`, `bandwidth_for_utilisation`);
- `fit`: `shardmeter fit` and `shardmeter validate` (imported on its own: it loads the fitting
  libraries).
"""

from __future__ import annotations

from perfmodel.api.predict import (
    MemoryFit,
    Prediction,
    Simulation,
    Sweep,
    memory,
    predict,
    simulate,
    sweep,
)
from perfmodel.api.streaming import (
    BandwidthTable,
    StreamingStudy,
    bandwidth_for_utilisation,
    streaming,
)
from perfmodel.api.workload import OuterSpec, Workload, WorkloadSpec
from perfmodel.costs.reliability import FailureSpec
from perfmodel.spec.failure_model import CHECKPOINT_MODES

__all__ = [
    "CHECKPOINT_MODES",
    "BandwidthTable",
    "FailureSpec",
    "MemoryFit",
    "OuterSpec",
    "Prediction",
    "Simulation",
    "StreamingStudy",
    "Sweep",
    "Workload",
    "WorkloadSpec",
    "bandwidth_for_utilisation",
    "memory",
    "predict",
    "simulate",
    "streaming",
    "sweep",
]
