"""Bottleneck analysis: step regimes and micro-batch sweeps (paper §IV-C); the Streaming DiLoCo
tuner (§IV-D) lives in `perfmodel.diloco.tuner` and is re-exported here.

Regime of a step. An FSDP island has one compute and one communication stream. Whatever one
stream waits for is the other, so each stream's idle time measures how much the *other* one
holds the step back: compute idle time = exposed communication (infinitely fast links would save
about that much) and communication idle time = exposed compute. With
IDLE_FRACTION_THRESHOLD = θ (fraction of the step time):

* "compute" (compute-bound):       compute idle <= θ and communication idle > θ
* "communication" (comm.-bound):   communication idle <= θ and compute idle > θ
* "mixed":                         otherwise — both streams nearly saturated (balanced), or both
                        idle for long stretches (the critical path alternates: e.g. forward
                        compute-bound and backward communication-bound).

θ = 10 %: a resource that can save at most 10 % of the step is not the bottleneck at the
accuracy of the model (the paper reports median errors of 5-15 %), and the pipeline fill and
drain of a step (first all_gather, last reduce_scatter) stay below that for models with a few
dozen units.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from perfmodel.costs.model import CostModel
from perfmodel.sim.fastpath import fast_step, model_fast_costs
from perfmodel.sim.fsdp import StepResult
from perfmodel.spec.arch import ModelSpec
from perfmodel.spec.hardware import IslandSpec

if TYPE_CHECKING:
    import pandas as pd

logger = logging.getLogger(__name__)

IDLE_FRACTION_THRESHOLD = 0.10
"""θ: a stream idle at most this fraction of the step is saturated (see module docstring)."""
COMPUTE_BOUND = "compute"
"""Label of a compute-bound step (the island table's `bound` vocabulary, DESIGN §3)."""
COMM_BOUND = "communication"
"""Label of a communication-bound step."""
MIXED = "mixed"
"""Label of a step bound by both streams in turn, or by neither."""


def classify_regime(step_time_s: Any, compute_busy_s: Any, comm_busy_s: Any) -> Any:
    """Regime label(s) from step time and the busy time of each stream (scalars or arrays)."""
    t = np.asarray(step_time_s, dtype=float)
    safe = np.where(t > 0, t, 1.0)
    compute_idle = np.where(t > 0, 1.0 - np.asarray(compute_busy_s) / safe, 0.0)
    comm_idle = np.where(t > 0, 1.0 - np.asarray(comm_busy_s) / safe, 1.0)
    theta = IDLE_FRACTION_THRESHOLD
    labels = np.where((compute_idle <= theta) & (comm_idle > theta), COMPUTE_BOUND,
                      np.where((comm_idle <= theta) & (compute_idle > theta), COMM_BOUND, MIXED))
    return str(labels) if labels.ndim == 0 else labels


@dataclass(frozen=True, kw_only=True, slots=True)
class StepAnalysis:
    """Where the time of one simulated step goes."""

    regime: str
    """compute, communication or mixed (which resource bounds the step)."""
    step_time_s: float
    """Makespan."""
    compute_idle_s: float
    """Compute stream idle (waiting for communication)."""
    comm_idle_s: float
    """Communication stream idle (waiting for compute)."""
    exposed_comm_s: float
    """Communication not overlapped by compute."""
    critical_comm_fraction: float
    """Share of the critical path spent in communication tasks."""
    largest_compute_gap_s: float
    """Longest single compute-stream gap."""


def analyse_step(result: StepResult) -> StepAnalysis:
    """Regime and idle accounting of an FSDP step simulated by the graph."""
    sched = result.schedule
    path = [sched.intervals[i].task for i in sched.critical_path]
    path_s = sum(t.duration_s for t in path)
    gaps = [end - start for stats in sched.streams.values() if stats.stream == "compute"
            for start, end in stats.gaps]
    return StepAnalysis(
        regime=classify_regime(result.step_time_s, result.compute_busy_s, result.comm_busy_s),
        step_time_s=result.step_time_s, compute_idle_s=result.compute_idle_s,
        comm_idle_s=result.comm_idle_s, exposed_comm_s=result.exposed_comm_s,
        critical_comm_fraction=(sum(t.duration_s for t in path if t.is_comm) / path_s
                                if path_s else 0.0),
        largest_compute_gap_s=max(gaps, default=0.0))

# ---- micro-batch sweeps -----------------------------------------------------------------------

def batch_sweep(model: ModelSpec, profile: CostModel, island: IslandSpec, *, seq_len: int,
                micro_batches: Sequence[int], ac: str | None = "none", accum_steps: int = 1,
                max_micro_batch: int | None = None, recipe: Any = None) -> pd.DataFrame:
    """Step time, throughput and regime per micro-batch (fast path). Points beyond
    `max_micro_batch` (the memory limit) are kept and marked fits=False."""
    import pandas as pd  # lazy: the CLI starts without pandas (issue 29)
    mb = np.asarray(sorted(set(micro_batches)), dtype=int)
    if mb.size == 0 or mb.min() < 1:
        raise ValueError(f"micro-batches must be >= 1, got {list(micro_batches)}")
    fast = fast_step(model_fast_costs(model, profile, island, seq_len=seq_len, micro_batches=mb,
                                      recipe=recipe, ac=ac))
    step = fast.step_time_s(accum_steps)
    # m sequences per data-parallel rank: model-parallel ranks (tp, cp, pp) share them
    dp = (recipe.parallel.resolve(island.num_gpus).dp if recipe is not None
          else island.num_gpus)
    tokens = accum_steps * mb * seq_len * dp
    compute, comm = fast.compute_busy_s(accum_steps), fast.comm_busy_s(accum_steps)
    return pd.DataFrame({
        "model": model.name, "gpus": island.num_gpus, "nodes": island.num_nodes,
        "gpus_per_node": island.gpus_per_node, "micro_batch": mb, "step_time_s": step,
        "relative_step_time": step / step[0], "tokens_per_s": tokens / step,
        "tokens_per_s_per_gpu": tokens / step / island.num_gpus,
        "compute_idle_frac": 1 - compute / step, "comm_idle_frac": 1 - comm / step,
        "bound": classify_regime(step, compute, comm),
        "fits": mb <= max_micro_batch if max_micro_batch is not None else True,
    })


def transition_micro_batch(sweep: pd.DataFrame) -> int | None:
    """Smallest swept micro-batch that is compute-bound while the one before it is not."""
    regimes, mbs = list(sweep["bound"]), list(sweep["micro_batch"])
    for prev, cur, m in zip(regimes, regimes[1:], mbs[1:], strict=False):
        if cur == COMPUTE_BOUND and prev != COMPUTE_BOUND:
            return int(m)
    return None


def regime_changes(sweep: pd.DataFrame) -> list[tuple[int, str, str]]:
    """(micro_batch, regime before, regime at) for every change along the sweep."""
    rows = list(zip(sweep["micro_batch"], sweep["bound"], strict=True))
    return [(int(m), a, b) for (_, a), (m, b) in zip(rows, rows[1:], strict=False) if a != b]
