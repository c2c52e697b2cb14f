"""The performance model's public API: typed requests in, typed results out (DESIGN §1).

The CLI, the scripts and library users call these; each returns a frozen result whose `record`
(or `records`) is the ordered mapping the CLI prints, so the CLI only parses and formats.

- `workload`: what a user names (`WorkloadSpec`, `OuterSpec`) resolved against the catalogs and
  profiles (`Workload`), the inner step simulated, DiLoCo settings and the sync link;
- `predict`: `predict` (with `FailureSpec`: expected goodput under failures), `simulate`,
  `sweep`, `memory` of one workload;
- `models`: the catalog listing and the parameter report of one model (`catalog_models`,
  `parameter_report`);
- `streaming`: Streaming DiLoCo studies (`streaming`, `bandwidth_for_utilisation`, and
  `published_bandwidth_comparison`: the latter for every cell of the paper's table);
- `verdict`: the one-line answer of a prediction or memory report and, when the step does not fit
  the GPU, the binding phase and the smallest computed fix (`DoesNotFitError`, `memory_fixes`);
- `prices`: `import_prices`, a dated price list from SkyPilot's catalog (imported on its own);
- `fit`: `shardmeter fit` and `shardmeter validate` (imported on its own: it loads the fitting
  libraries).
"""

from __future__ import annotations

from perfmodel.api.models import ParameterReport, catalog_models, parameter_report
from perfmodel.api.predict import (
    MemoryFit,
    MemoryReport,
    Prediction,
    Simulation,
    Sweep,
    memory,
    memory_report,
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
from perfmodel.api.verdict import (
    DoesNotFitError,
    MemoryFix,
    memory_answer,
    memory_fixes,
    peak_memory,
    prediction_answer,
)
from perfmodel.api.workload import OuterSpec, Workload, WorkloadSpec
from perfmodel.costs.reliability import FailureSpec
from perfmodel.spec.failure_model import CHECKPOINT_MODES

__all__ = [
    "CHECKPOINT_MODES",
    "BandwidthTable",
    "DoesNotFitError",
    "MemoryFix",
    "FailureSpec",
    "MemoryFit",
    "MemoryReport",
    "OuterSpec",
    "ParameterReport",
    "Prediction",
    "Simulation",
    "StreamingStudy",
    "Sweep",
    "Workload",
    "WorkloadSpec",
    "bandwidth_for_utilisation",
    "catalog_models",
    "memory",
    "memory_answer",
    "memory_fixes",
    "memory_report",
    "parameter_report",
    "peak_memory",
    "predict",
    "prediction_answer",
    "simulate",
    "streaming",
    "sweep",
]
