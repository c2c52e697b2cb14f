"""Expected goodput of a training job under failures (issue 28): what `predict --failures` adds.

Step-level figures (step time, tokens/s, MFU) never include failures; this module turns them into
expected figures for a run.

* One island (FSDP, or DiLoCo with one island): one interruption anywhere stops the whole job,
  so the interruption rate is λ = G·r (G GPUs of the job, r failures per GPU-hour of the GPU
  type, `perfmodel.spec.reliability_catalog`). The job checkpoints every τ of compute; a
  checkpoint of `checkpoint_bytes` (master weights + AdamW moments) is written at the nodes'
  storage bandwidth: sync stalls for the write δ, async stalls for the sourced fraction of it and
  finishes the write in the background (a failure before it is durable loses one more segment:
  Daly's model with δ → the stall and every restart R → R + the write). τ minimises Daly's exact
  expected time (`perfmodel.spec.failure_model.daly_interval_s`, at least the write time when async)
  and goodput = 1 / `daly_wall_factor`.
* Several DiLoCo islands: an island's failure stops that island only. It loses the outer step it
  fails in, restarts (restart + fetching the global fp32 model over the WAN) and rejoins at the
  next outer step; the outer steps it misses train without its share, so the run needs more of
  them: goodput = participation a (`failure_model.island_participation`, the same for identical
  islands) and the expected time is the failure-free time / a. The global model is checkpointed
  off the critical path at outer steps (no stall).

`perfmodel.sim.failures` simulates both processes; tests/test_failures.py holds these closed
forms to it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from perfmodel.spec import failure_model
from perfmodel.spec.errors import UserInputError
from perfmodel.spec.failure_model import (
    CHECKPOINT_MODES,
    FAILURE_LIMITS,
    failure_limit_problem,
)
from perfmodel.spec.formulas import DTYPE_BYTES
from perfmodel.spec.inputs import check_limit
from perfmodel.spec.reliability_catalog import (
    async_stall_fraction,
    checkpoint_write_gbit_s_per_node,
    failures_per_gpu_hour,
    restart_s,
)

SECONDS_PER_HOUR = 3600.0


def _optional_positive(name: str, value: float | None, *, zero_ok: bool = False) -> None:
    if value is None:
        return
    ok = (not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)
          and (value >= 0 if zero_ok else value > 0))
    if not ok:
        bound = ">= 0" if zero_ok else "> 0"
        raise UserInputError(f"FailureSpec.{name} = {value!r}: must be a finite number {bound}",
                             hint=f"pass --{name.replace('_', '-')} with a value {bound}, or "
                                  "leave it out for the catalog default.")
    problem = failure_limit_problem(name, float(value)) if name in FAILURE_LIMITS else ""
    if problem:
        raise UserInputError(f"FailureSpec.{name} = {value!r}: {problem}",
                             hint=f"pass --{name.replace('_', '-')} within that range (README, "
                                  "section Limits).")


@dataclass(frozen=True, kw_only=True, slots=True)
class FailureSpec:
    """What `predict --failures` is told; None fields take the sourced catalog defaults
    (catalogs/reliability/)."""

    failures_per_gpu_hour: float | None = None
    """Interruptions per GPU-hour (default: the GPU type's published figure)."""
    restart_s: float | None = None
    """Seconds from an interruption to training again, checkpoint reload included."""
    checkpoint_write_gbit_s_per_node: float | None = None
    """Checkpoint write bandwidth per node, Gbit/s (all nodes write their shards at once)."""
    checkpoint_mode: str | None = None
    """sync or async (default: sync)."""
    train_tokens: float | None = None
    """Tokens of the run, for the expected wall time (None: per-step figures only)."""
    usd_per_gpu_hour: float | None = None
    """Price of a GPU-hour, for the expected cost (None: no cost)."""

    def __post_init__(self) -> None:
        _optional_positive("failures_per_gpu_hour", self.failures_per_gpu_hour, zero_ok=True)
        _optional_positive("restart_s", self.restart_s, zero_ok=True)
        _optional_positive("checkpoint_write_gbit_s_per_node",
                           self.checkpoint_write_gbit_s_per_node)
        _optional_positive("train_tokens", self.train_tokens)
        _optional_positive("usd_per_gpu_hour", self.usd_per_gpu_hour, zero_ok=True)
        for name, key in (("train_tokens", "train_tokens"),
                          ("usd_per_gpu_hour", "usd_per_gpu_hour")):
            value = getattr(self, name)
            if value is not None:
                check_limit(key, value, field=f"--{name.replace('_', '-')}")
        if self.checkpoint_mode is not None and self.checkpoint_mode not in CHECKPOINT_MODES:
            raise UserInputError(f"FailureSpec.checkpoint_mode = {self.checkpoint_mode!r}",
                                 hint=f"use one of {', '.join(CHECKPOINT_MODES)}.")


@dataclass(frozen=True, kw_only=True, slots=True)
class JobReliability:
    """Expected goodput of a job and the assumptions behind it."""

    goodput: float
    """Useful (failure-free) time over expected wall time: Llama 3's 'effective training time'."""
    model: str
    """'checkpointed job' (one failure stops the job) or 'independent islands' (DiLoCo)."""
    failures_per_gpu_hour: float
    """Interruption rate per GPU-hour used."""
    interruptions_per_hour: float
    """Rate of interruptions that stop the job (one island's, for islands)."""
    restart_s: float
    """Restart time after an interruption."""
    checkpoint_bytes: float
    """Bytes of one checkpoint (0 for islands: they do not checkpoint on the critical path)."""
    checkpoint_write_s: float
    """Time to write one checkpoint at the job's storage bandwidth."""
    checkpoint_stall_s: float
    """Training stall per checkpoint (the write when sync, the snapshot when async)."""
    checkpoint_mode: str
    """sync or async."""
    checkpoint_interval_s: float | None
    """Compute time between checkpoints (Daly's optimum; None for islands)."""
    young_interval_s: float | None
    """Young's first-order interval, for comparison (None for islands)."""
    outer_step_s: float | None = None
    """Outer-step period of DiLoCo islands (None for a checkpointed job)."""
    sources: tuple[str, ...] = ()
    """Where each default came from."""

    def record(self, step_time_s: float) -> dict[str, Any]:
        """The fields `predict --failures` prints, in output order."""
        out: dict[str, Any] = {
            "goodput": self.goodput,
            "expected_step_time_s": step_time_s / self.goodput,
            "failure_model": self.model,
            "failures_per_gpu_hour": self.failures_per_gpu_hour,
            "interruptions_per_hour": self.interruptions_per_hour,
            "mtbf_s": (SECONDS_PER_HOUR / self.interruptions_per_hour
                       if self.interruptions_per_hour > 0 else math.inf),
            "restart_s": self.restart_s,
            "checkpoint_mode": self.checkpoint_mode,
            "checkpoint_bytes": self.checkpoint_bytes,
            "checkpoint_write_s": self.checkpoint_write_s,
            "checkpoint_stall_s": self.checkpoint_stall_s,
            "checkpoint_interval_s": self.checkpoint_interval_s,
            "checkpoint_interval_steps": (None if self.checkpoint_interval_s is None
                                          else self.checkpoint_interval_s / step_time_s),
            "young_interval_s": self.young_interval_s,
        }
        if self.outer_step_s is not None:
            out["outer_step_s"] = self.outer_step_s
        out["failure_sources"] = "; ".join(self.sources)
        return out


def _defaults(spec: FailureSpec, gpu: str) -> tuple[float, float, float, list[str]]:
    sources = []
    if spec.failures_per_gpu_hour is None:
        found = failures_per_gpu_hour(gpu)
        rate = found.value
        sources.append(f"failures per GPU-hour {found.source}")
    else:
        rate = spec.failures_per_gpu_hour
        sources.append("failures per GPU-hour: given")
    if spec.restart_s is None:
        found = restart_s()
        restart = found.value
        sources.append(f"restart {found.value:g} s: {found.source}")
    else:
        restart = spec.restart_s
        sources.append("restart: given")
    if spec.checkpoint_write_gbit_s_per_node is None:
        found = checkpoint_write_gbit_s_per_node()
        gbit = found.value
        sources.append(f"checkpoint write {found.value:g} Gbit/s per node: {found.source}")
    else:
        gbit = spec.checkpoint_write_gbit_s_per_node
        sources.append("checkpoint write bandwidth: given")
    return rate, restart, gbit, sources


def checkpointed_job(*, spec: FailureSpec, gpu: str, num_gpus: int, num_nodes: int,
                     params: float, master_dtype: str, mode: str,
                     step_time_s: float | None = None) -> JobReliability:
    """Goodput of a job that one interruption stops (module docstring); with `step_time_s` the
    checkpoints fall on step boundaries."""
    rate_gpu_h, restart, gbit, sources = _defaults(spec, gpu)
    size = float(failure_model.checkpoint_bytes(params, master_dtype))
    write_s = size * 8.0 / (gbit * 1e9 * num_nodes)
    if mode == "async":
        fraction = async_stall_fraction()
        stall, lag = write_s * fraction.value, write_s
        sources.append(f"async stall fraction {fraction.value:.4g}: {fraction.source}")
    else:
        stall, lag = write_s, 0.0
    rate = rate_gpu_h * num_gpus / SECONDS_PER_HOUR
    factor, interval = failure_model.checkpointed_wall_factor(
        rate_per_s=rate, stall_s=stall, write_lag_s=lag, restart_s=[restart], weights=[1.0],
        step_s=step_time_s)
    young = float(failure_model.young_interval_s(1.0 / rate, stall)) if rate > 0 else math.inf
    goodput = 1.0 / factor
    return JobReliability(goodput=goodput, model="checkpointed job (one interruption stops it)",
                          failures_per_gpu_hour=rate_gpu_h,
                          interruptions_per_hour=rate * SECONDS_PER_HOUR, restart_s=restart,
                          checkpoint_bytes=size, checkpoint_write_s=write_s,
                          checkpoint_stall_s=stall, checkpoint_mode=mode,
                          checkpoint_interval_s=interval, young_interval_s=young,
                          sources=tuple(sources))


def independent_islands(*, spec: FailureSpec, gpu: str, gpus_per_island: int, params: float,
                        outer_step_s: float, wan_bytes_per_s: float, mode: str) -> JobReliability:
    """Goodput of identical DiLoCo islands that fail alone (module docstring): a rejoining island
    restarts and fetches the fp32 global model over the WAN."""
    rate_gpu_h, restart, _, sources = _defaults(spec, gpu)
    fetch_s = float(params) * DTYPE_BYTES["fp32"] / wan_bytes_per_s
    rate = rate_gpu_h * gpus_per_island / SECONDS_PER_HOUR
    goodput = failure_model.island_participation(rate, outer_step_s, [restart + fetch_s], [1.0])
    sources.append(f"rejoin fetches the fp32 model over the WAN ({fetch_s:.3g} s)")
    return JobReliability(goodput=goodput,
                          model="independent islands (an island's failure stops it alone)",
                          failures_per_gpu_hour=rate_gpu_h,
                          interruptions_per_hour=rate * SECONDS_PER_HOUR,
                          restart_s=restart + fetch_s, checkpoint_bytes=0.0,
                          checkpoint_write_s=0.0, checkpoint_stall_s=0.0, checkpoint_mode=mode,
                          checkpoint_interval_s=None, young_interval_s=None,
                          outer_step_s=outer_step_s, sources=tuple(sources))
