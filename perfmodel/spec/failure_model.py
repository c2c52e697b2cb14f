"""The failure model's closed forms (issue 28): one home for each, numpy only.

`perfmodel.costs.reliability` (predict) and `planner.model.risk` (plans, through the
`perfmodel.facts` door) call these; `perfmodel.sim.failures` simulates the same processes event by
event without them, and tests/test_failures.py holds the two together (within 2 % on a grid).

Checkpointed job: Daly, "A higher order estimate of the optimum checkpoint interval for restart
dumps", Future Gener. Comput. Syst. 22 (2006) 303-312. DiLoCo islands: the renewal argument of
`island_participation`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from perfmodel.spec.formulas import DTYPE_BYTES, dtype_bytes

CHECKPOINT_MODES = ("sync", "async")
"""Training checkpoints: synchronous (training stalls for the whole write) or asynchronous
(training stalls for a snapshot; the write finishes in the background, torch DCP async_save)."""

FAILURE_LIMITS: dict[str, tuple[float, float, str]] = {
    "failures_per_gpu_hour": (0.0, 1.0, "one interruption per GPU-hour, 50,000x Llama 3's H100 "
                                        "rate; beyond, every figure is zero goodput"),
    "preemptions_per_node_hour": (0.0, 10.0, "a node reclaimed every six minutes; beyond, no "
                                              "outer step completes"),
    "restart_s": (0.0, 1e6, "eleven days"),
    "spot_capacity_wait_s": (0.0, 1e6, "eleven days"),
    "checkpoint_write_gbit_s_per_node": (1e-6, 1e6, "1 kbit/s to 1 Pbit/s per node"),
    "egress_usd_per_gb": (0.0, 100.0, "a thousand times the dearest published egress rate"),
}
"""(least, most, why) of every failure-model input (README "Limits")."""


def failure_limit_problem(name: str, value: float) -> str:
    """Why `value` is outside FAILURE_LIMITS[name] (empty: inside)."""
    low, high, why = FAILURE_LIMITS[name]
    if not math.isfinite(value) or value < low or value > high:
        return f"must be between {low:g} and {high:g} ({why})"
    return ""


CHECKPOINT_OPTIMIZER_STATES = 2
"""fp32 tensors per parameter besides the master weights that a checkpoint saves (AdamW's two
moments)."""


def checkpoint_bytes(params: Any, master_dtype: str = "fp32",
                     optimizer_states: int = CHECKPOINT_OPTIMIZER_STATES) -> Any:
    """Bytes of one training checkpoint: the master weights in `master_dtype` plus
    `optimizer_states` fp32 tensors per parameter (AdamW: 4 + 2·4 = 12 B/param with fp32 master
    weights), as torch.distributed.checkpoint saves the model and optimizer state dicts."""
    return (np.asarray(params, dtype=float)
            * (dtype_bytes(master_dtype) + optimizer_states * DTYPE_BYTES["fp32"]))


def young_interval_s(mtbf_s: Any, checkpoint_s: Any) -> Any:
    """Young's first-order optimum compute time between checkpoints, sqrt(2·δ·M)."""
    return np.sqrt(2.0 * np.asarray(checkpoint_s, dtype=float) * np.asarray(mtbf_s, dtype=float))


def daly_interval_s(mtbf_s: Any, checkpoint_s: Any) -> Any:
    """The compute time τ between checkpoints that minimises Daly's exact expected wall time
    (`daly_wall_factor`): d/dτ (e^{(τ+δ)/M} − 1)/τ = 0 ⇔ e^{(τ+δ)/M}(1 − τ/M) = 1, i.e.
    τ* = M·(1 + W₀(−e^{−1−δ/M})) with W₀ the principal Lambert branch. Solved as y = τ/M, the root
    in (0, 1) of −ln(1−y) − y = δ/M (convex and increasing), by Newton from the right
    (monotone convergence); Young's sqrt(2δM) is its first-order term. Broadcasts."""
    m = np.asarray(mtbf_s, dtype=float)
    d = np.asarray(checkpoint_s, dtype=float) / m
    far = -np.expm1(-(1.0 + d))  # the root's limit 1 − e^{−(1+δ/M)} when δ/M is large
    y = np.minimum(np.sqrt(2.0 * d), far)  # g(y0) >= 0: Newton stays right
    with np.errstate(divide="ignore", invalid="ignore"):
        for _ in range(100):
            g = -np.log1p(-y) - y - d
            step = g * (1.0 - y) / np.maximum(y, 1e-300)
            y = np.where(np.isfinite(step), y - step, far)
            if np.all(np.abs(step[np.isfinite(step)] if np.ndim(step) else step)
                      <= 1e-15 * np.maximum(np.max(y), 1e-300)):
                break
    result = m * np.where((y > 0) & (y < 1), y, far)
    return float(result) if np.ndim(result) == 0 else result


def restart_factor(rate_per_s: Any, restart_s: Any, weights: Any) -> Any:
    """E_R = 1 / Σ_t w_t·e^{−λ·R_t}: Daly's e^{λR} when restarts after an interruption of type t
    (probability w_t) take R_t and may themselves be interrupted (a new restart of the new
    interruption's type follows). Reduces to e^{λR} for one type."""
    lam = np.asarray(rate_per_s, dtype=float)
    r = np.atleast_1d(np.asarray(restart_s, dtype=float))
    w = np.atleast_1d(np.asarray(weights, dtype=float))
    survive = float(np.sum(w * np.exp(-lam * r)))
    return 1.0 / survive if survive > 0 else math.inf  # inf: no restart ever completes


def daly_wall_factor(rate_per_s: float, interval_s: float, checkpoint_s: float,
                     restart_factor_value: float) -> float:
    """Expected wall time per unit of useful compute under Daly's exact exponential model:
    T_w/T_s = E_R·(e^{λ(τ+δ)} − 1)/(λ·τ) for compute τ between checkpoints that each stall δ, a
    Poisson interruption rate λ, and restart factor E_R (`restart_factor`); 1 + δ/τ when λ = 0.
    Every interruption loses the segment in progress (Daly, Future Gener. Comput. Syst. 22 (2006)
    303–312, eq. 13)."""
    if rate_per_s <= 0.0:
        return 1.0 + checkpoint_s / interval_s
    with np.errstate(over="ignore"):  # an overflow is an infinite expected time
        grow = float(np.expm1(rate_per_s * (interval_s + checkpoint_s)))
    return restart_factor_value * grow / (rate_per_s * interval_s)


def island_participation(rate_per_s: float, period_s: float, restart_s: Any,
                         weights: Any) -> float:
    """Fraction of DiLoCo outer steps an island contributes to, when it fails alone (Poisson rate
    λ), loses the outer step it fails in, restarts for R_t seconds (type t with probability w_t;
    a restart is not itself interrupted) and rejoins at the first outer-step boundary after
    that, with a fixed period T between boundaries.

    Renewal argument: an island up at a boundary completes the step with p = e^{−λT}, so it
    contributes p/(1−p) steps on average before a failure; the failure at X (exponential,
    conditioned on X < T) costs k = ⌈(X + R)/T⌉ steps: with R = jT + r, k = j + 1 + [X > T − r],
    E[k] = Σ_t w_t·(j_t + 1 + (e^{−λ(T−r_t)} − e^{−λT})/(1 − e^{−λT})). Participation
    a = (p/(1−p)) / (p/(1−p) + E[k]) = p / (p + (1−p)·E[k]); 1 when λ = 0. Decreasing in T."""
    if rate_per_s <= 0.0:
        return 1.0
    lam, period = float(rate_per_s), float(period_s)
    p = math.exp(-lam * period)
    q = -math.expm1(-lam * period)
    expected_k = 0.0
    for r_total, w in zip(np.atleast_1d(np.asarray(restart_s, dtype=float)).tolist(),
                          np.atleast_1d(np.asarray(weights, dtype=float)).tolist(), strict=True):
        j = math.floor(r_total / period)
        r = r_total - j * period
        # (e^{−λ(T−r)} − e^{−λT})/(1 − e^{−λT}), by expm1 while λr is small (no cancellation)
        late = (p * math.expm1(lam * r) if lam * r < 1.0 else math.exp(-lam * (period - r)) - p)
        expected_k += w * (j + 1 + late / q)
    return p / (p + q * expected_k) if p > 0 else 0.0


def checkpointed_wall_factor(*, rate_per_s: float, stall_s: float, write_lag_s: float,
                             restart_s: Any, weights: Any,
                             step_s: float | None = None) -> tuple[float, float]:
    """(expected wall time per unit of useful compute, compute time between checkpoints) of a job
    that one interruption stops, checkpointing at the best interval.

    Synchronous checkpoints: `stall_s` is the write, `write_lag_s` 0. Asynchronous: `stall_s` is
    the snapshot and the write completes `write_lag_s` later in the background, so an
    interruption before it is durable loses one more segment — Daly's model with every restart
    R_t → R_t + write_lag_s — and the interval is at least the write (a snapshot waits for the
    previous write). With `step_s` checkpoints fall on step boundaries: of the whole-step
    intervals around Daly's optimum (at least one step) the one with the smaller factor is taken
    (the factor is unimodal in τ)."""
    if rate_per_s <= 0.0:
        interval = math.inf if step_s is None else math.inf
        return 1.0, interval
    factor = restart_factor(rate_per_s, np.asarray(restart_s, dtype=float) + write_lag_s, weights)
    best = max(float(daly_interval_s(1.0 / rate_per_s, stall_s)), write_lag_s)
    if step_s is None:
        return daly_wall_factor(rate_per_s, best, stall_s, factor), best
    least = max(1, math.ceil(write_lag_s / step_s - 1e-12))
    low = max(least, math.floor(best / step_s))
    candidates = {low, max(least, math.ceil(best / step_s))}
    options = [(daly_wall_factor(rate_per_s, k * step_s, stall_s, factor), k * step_s)
               for k in sorted(candidates)]
    return min(options)
