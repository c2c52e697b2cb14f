"""Bottleneck analysis: step regimes, micro-batch sweeps, the Streaming DiLoCo tuner (paper §IV-C/D).

Regime of a step. An FSDP island has one compute and one communication stream. Whatever one
stream waits for is the other, so each stream's idle time measures how much the *other* one
holds the step back: compute idle time = exposed communication (infinitely fast links would save
about that much) and communication idle time = exposed compute. With
IDLE_FRACTION_THRESHOLD = θ (fraction of the step time):

* "compute" (compute-bound):       compute idle <= θ and communication idle > θ
* "communication" (comm.-bound):   communication idle <= θ and compute idle > θ
* "mixed":                         otherwise — both streams nearly saturated (balanced), or both idle for
                        long stretches (the critical path alternates: e.g. forward compute-bound
                        and backward communication-bound).

θ = 10 %: a resource that can save at most 10 % of the step is not the bottleneck at the
accuracy of the model (the paper reports median errors of 5-15 %), and the pipeline fill and
drain of a step (first all_gather, last reduce_scatter) stay below that for models with a few
dozen units.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from perfmodel.arch import ModelSpec
from perfmodel.diloco import (
    PSEUDO_GRADIENT_BYTES,
    StreamingConfig,
    StreamingResult,
    fragment_exchange_s,
    fragment_params,
    simulate_streaming,
    streaming_steps_to_simulate,
)
from perfmodel.fastpath import fast_step, model_fast_costs
from perfmodel.fsdp import CostModel, StepResult
from perfmodel.hardware import IslandSpec

logger = logging.getLogger(__name__)

IDLE_FRACTION_THRESHOLD = 0.10
"""θ: a stream idle at most this fraction of the step is saturated (see module docstring)."""
COMPUTE_BOUND = "compute"
"""Label of a compute-bound step (the island table's `bound` vocabulary, DESIGN §3)."""
COMM_BOUND = "communication"
"""Label of a communication-bound step."""
MIXED = "mixed"
"""Label of a step bound by both streams in turn, or by neither."""
DEFAULT_MAX_DELAY_STEPS = 5
"""Streaming DiLoCo overlaps of a few inner steps kept the loss close to the blocking baseline
(Douillard et al. 2025); longer delays merge staler fragments, so replicas drift. Assumption."""
DEFAULT_MAX_SYNC_EVERY = 100
"""Each fragment synchronised at least every 100 inner steps (the H of the Streaming DiLoCo
experiments); rarer synchronisation lets replicas drift apart. Assumption."""


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
        critical_comm_fraction=sum(t.duration_s for t in path if t.is_comm) / path_s if path_s else 0.0,
        largest_compute_gap_s=max(gaps, default=0.0))


# ---- micro-batch sweeps -----------------------------------------------------------------------

def batch_sweep(model: ModelSpec, profile: CostModel, island: IslandSpec, *, seq_len: int,
                micro_batches: Sequence[int], ac: str = "none", accum_steps: int = 1,
                max_micro_batch: int | None = None) -> pd.DataFrame:
    """Step time, throughput and regime per micro-batch (fast path). Points beyond
    `max_micro_batch` (the memory limit) are kept and marked fits=False."""
    mb = np.asarray(sorted(set(micro_batches)), dtype=int)
    if mb.size == 0 or mb.min() < 1:
        raise ValueError(f"micro-batches must be >= 1, got {list(micro_batches)}")
    fast = fast_step(model_fast_costs(model, profile, island, seq_len=seq_len, micro_batches=mb, ac=ac))
    step = fast.step_time_s(accum_steps)
    tokens = accum_steps * mb * seq_len * island.num_gpus
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


# ---- Streaming DiLoCo tuner -----------------------------------------------------------------

@dataclass(frozen=True, kw_only=True, slots=True)
class WanLink:
    """The inter-island network a pseudo-gradient crosses."""

    num_islands: int
    """M islands exchanging."""
    bw_bytes_per_s: float
    """Slowest uplink, bytes/s."""
    latency_s: float
    """Largest latency, seconds."""
    dtype: str = "fp32"
    """Pseudo-gradient dtype (fp32, bf16, int8)."""

    def __post_init__(self) -> None:
        if self.num_islands < 1 or self.bw_bytes_per_s <= 0 or self.latency_s < 0:
            raise ValueError("need num_islands >= 1, bandwidth > 0 and latency >= 0")
        if self.dtype not in PSEUDO_GRADIENT_BYTES:
            raise ValueError(f"dtype must be one of {sorted(PSEUDO_GRADIENT_BYTES)}, got {self.dtype!r}")


def run_streaming(model: ModelSpec, *, step_s: float, wan: WanLink, config: StreamingConfig,
                  num_steps: int | None = None) -> StreamingResult:
    """Simulate a Streaming DiLoCo configuration."""
    exchange = fragment_exchange_s(model, config.num_fragments, dtype=wan.dtype,
                                   num_islands=wan.num_islands, bw_bytes_per_s=wan.bw_bytes_per_s,
                                   latency_s=wan.latency_s)
    return simulate_streaming(step_s=step_s, exchange_s=exchange, config=config,
                              num_steps=num_steps or streaming_steps_to_simulate(config))


@dataclass(frozen=True, kw_only=True, slots=True)
class StreamingTuning:
    """The tuner's choice and what else would remove blocking."""

    config: StreamingConfig | None
    """Fewest fragments, then shortest delay, that never block (None: nothing within the bounds)."""
    result: StreamingResult | None
    """Simulation of the chosen configuration."""
    max_delay_steps: int
    """Upper bound on τ (staleness bound against replica drift)."""
    max_sync_every: int
    """Upper bound on H = F·τ (each fragment synchronised at least this often)."""
    remedies: tuple[str, ...]
    """Changes that remove blocking of the configuration asked about (empty if it does not block)."""


def tune_streaming(model: ModelSpec, *, step_s: float, wan: WanLink,
                   max_delay_steps: int = DEFAULT_MAX_DELAY_STEPS,
                   max_sync_every: int = DEFAULT_MAX_SYNC_EVERY,
                   current: StreamingConfig | None = None) -> StreamingTuning:
    """Fewest fragments F, then shortest delay τ, with one fragment sent every τ steps (paper
    §IV-D: "one fragment sent every i delay steps", so H = F·τ) that keep the compute stream from
    blocking, subject to τ <= max_delay_steps and H <= max_sync_every (the bounds against drift).
    With a `current` configuration, also lists remedies for its blocking."""
    if step_s <= 0 or max_delay_steps < 1 or max_sync_every < 1:
        raise ValueError("need step_s > 0, max_delay_steps >= 1 and max_sync_every >= 1")
    chosen = _search(model, step_s=step_s, wan=wan, max_delay_steps=max_delay_steps,
                     max_sync_every=max_sync_every)
    remedies: tuple[str, ...] = ()
    if current is not None and run_streaming(model, step_s=step_s, wan=wan, config=current).blocks:
        remedies = _remedies(model, step_s=step_s, wan=wan, current=current,
                             max_delay_steps=max_delay_steps, max_sync_every=max_sync_every)
    return StreamingTuning(config=chosen[0] if chosen else None, result=chosen[1] if chosen else None,
                           max_delay_steps=max_delay_steps, max_sync_every=max_sync_every,
                           remedies=remedies)


def _search(model: ModelSpec, *, step_s: float, wan: WanLink, max_delay_steps: int,
            max_sync_every: int) -> tuple[StreamingConfig, StreamingResult] | None:
    for fragments in range(1, model.num_layers + 1):
        exchange = max(fragment_exchange_s(model, fragments, dtype=wan.dtype, num_islands=wan.num_islands,
                                           bw_bytes_per_s=wan.bw_bytes_per_s, latency_s=wan.latency_s))
        # With the send interval equal to τ an exchange never waits for the previous one, so
        # it blocks iff it outlasts τ steps: start from the smallest τ that passes that test.
        delay = max(1, int(np.ceil(exchange / step_s)))
        while delay <= max_delay_steps and fragments * delay <= max_sync_every:
            config = StreamingConfig(num_fragments=fragments, sync_every=fragments * delay, delay_steps=delay)
            result = run_streaming(model, step_s=step_s, wan=wan, config=config)
            if not result.blocks:
                return config, result
            delay += 1  # float rounding at the boundary: the simulation has the last word
    return None


def _remedies(model: ModelSpec, *, step_s: float, wan: WanLink, current: StreamingConfig,
              max_delay_steps: int, max_sync_every: int) -> tuple[str, ...]:
    out: list[str] = []
    interval = current.send_interval

    def ok(config: StreamingConfig, link: WanLink = wan) -> bool:
        return not run_streaming(model, step_s=step_s, wan=link, config=config).blocks

    for fragments in range(current.num_fragments + 1, model.num_layers + 1):
        cfg = StreamingConfig(num_fragments=fragments, sync_every=fragments * interval,
                              delay_steps=current.delay_steps)
        if cfg.sync_every <= max_sync_every and ok(cfg):
            out.append(f"more fragments: F={fragments} (H={cfg.sync_every}, τ={cfg.delay_steps}) does not block")
            break
    for delay in range(current.delay_steps + 1, max_delay_steps + 1):
        # Coupled schedule (a fragment every τ steps, as in the paper) stays coupled.
        every = delay if interval == current.delay_steps else interval
        cfg = StreamingConfig(num_fragments=current.num_fragments,
                              sync_every=current.num_fragments * every, delay_steps=delay)
        if cfg.sync_every <= max_sync_every and ok(cfg):
            out.append(f"longer delay: τ={delay} (F={cfg.num_fragments}, H={cfg.sync_every}) does not block")
            break
    for dtype in ("bf16", "int8"):
        if PSEUDO_GRADIENT_BYTES[dtype] < PSEUDO_GRADIENT_BYTES[wan.dtype]:
            link = WanLink(num_islands=wan.num_islands, bw_bytes_per_s=wan.bw_bytes_per_s,
                           latency_s=wan.latency_s, dtype=dtype)
            if ok(current, link):
                out.append(f"lower pseudo-gradient dtype: {dtype} does not block")
                break
    needed = required_wan_bw_bytes_per_s(model, step_s=step_s, wan=wan, config=current)
    out.append("faster WAN alone cannot help: latency exceeds the overlap window" if needed is None
               else f"faster WAN: >= {needed * 8 / 1e9:.3g} Gbit/s does not block")
    return tuple(out)


def required_wan_bw_bytes_per_s(model: ModelSpec, *, step_s: float, wan: WanLink,
                                config: StreamingConfig) -> float | None:
    """Smallest WAN bandwidth at which every exchange fits its window (exact when τ <= H/F)."""
    window = min(config.delay_steps, config.send_interval) * step_s
    m = wan.num_islands
    latency = 2 * (m - 1) * wan.latency_s
    if m == 1:
        return 0.0
    if window <= latency:
        return None
    largest = max(fragment_params(model, config.num_fragments)) * PSEUDO_GRADIENT_BYTES[wan.dtype]
    return 2 * (m - 1) / m * largest / (window - latency)


# ---- paper figure 6 situations ----------------------------------------------------------------

EXAMPLE_MODEL = "Llama-3-8B"
"""Workload of the figure 6 examples (any model works; fragment sizes differ by at most a block
plus the embedding or LM head)."""
EXAMPLE_GPU = "H100-SXM5-80GB"
"""GPU of the figure 6 examples."""
EXAMPLE_BASE = StreamingConfig(num_fragments=3, sync_every=6, delay_steps=2)
"""Situation A/B: three fragments, one sent every two inner steps (paper: six steps, an outer step
every two iterations)."""
SLOW_EXCHANGE_STEPS = 2.5
"""B's WAN is sized so the largest of the base fragments needs 2.5 inner steps: longer than the
2-step window (blocks), shorter than a 3-step one (D) and, halved by doubling F, within 2 (C)."""
FAST_WAN_FACTOR = 10.0
"""A's WAN is this much faster than B's."""


def streaming_examples(model: ModelSpec, *, step_s: float, latency_s: float, num_islands: int = 2,
                       dtype: str = "fp32") -> dict[str, tuple[WanLink, StreamingConfig, str]]:
    """The four situations of the paper's figure 6 for `model` at inner step time `step_s`:
    A fast WAN (no blocking), B slow WAN (blocks), C = B with twice the fragments, D = B with a
    3-step delay. The WAN bandwidths are derived from the step time (SLOW_EXCHANGE_STEPS)."""
    if num_islands < 2:
        raise ValueError("the examples need >= 2 islands (one island exchanges nothing)")
    base = EXAMPLE_BASE
    latency = 2 * (num_islands - 1) * latency_s
    budget = SLOW_EXCHANGE_STEPS * step_s - latency
    if budget <= 0:
        raise ValueError(f"WAN latency {latency_s} s alone outlasts {SLOW_EXCHANGE_STEPS} inner steps of {step_s} s")
    largest = max(fragment_params(model, base.num_fragments)) * PSEUDO_GRADIENT_BYTES[dtype]
    slow_bw = 2 * (num_islands - 1) / num_islands * largest / budget
    slow = WanLink(num_islands=num_islands, bw_bytes_per_s=slow_bw, latency_s=latency_s, dtype=dtype)
    fast = WanLink(num_islands=num_islands, bw_bytes_per_s=FAST_WAN_FACTOR * slow_bw, latency_s=latency_s, dtype=dtype)
    more = StreamingConfig(num_fragments=2 * base.num_fragments, sync_every=2 * base.sync_every,
                           delay_steps=base.delay_steps)
    longer = StreamingConfig(num_fragments=base.num_fragments, sync_every=base.num_fragments * 3, delay_steps=3)
    return {
        "A": (fast, base, "fast WAN: every exchange fits its 2-step window"),
        "B": (slow, base, f"slow WAN: a fragment needs {SLOW_EXCHANGE_STEPS} steps, the window is 2: training blocks"),
        "C": (slow, more, "remedy 1: twice the fragments halve each exchange (full exchange 6 -> 12 steps)"),
        "D": (slow, longer, "remedy 2: delay 2 -> 3 steps leaves the exchange more time (full exchange 6 -> 9 steps)"),
    }
