"""Shared formulas, dependency-free (numpy only): one home for each (DESIGN §1).

Imported by `perfmodel` and `planner` alike, so the planner's σ is the performance model's σ and a
dtype has one size everywhere. Every function broadcasts over numpy arrays where noted.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

GIB = 1024**3
"""Bytes per GiB (memory figures are printed in GiB)."""
J_PER_KWH = 3.6e6
"""Joules per kilowatt-hour."""

DTYPE_BYTES: dict[str, float] = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "int8": 1.0, "fp4": 0.5}
"""Bytes per element. Quantised pseudo-gradients (int8, fp4) also send one fp32 scale per
`QUANT_GROUP_ELEMENTS` elements (`payload_bytes`)."""

QUANT_GROUP_ELEMENTS = 128
"""Elements sharing one fp32 scale when a pseudo-gradient is quantised to int8 or fp4."""

OP_MULTIPLIER: dict[str, float] = {"all_gather": 1.0, "reduce_scatter": 1.0, "all_reduce": 2.0}
"""Ring steps relative to all_gather: all_reduce = reduce_scatter + all_gather."""


def dtype_bytes(dtype: str) -> float:
    """Bytes per element of `dtype`; ValueError naming the known dtypes otherwise."""
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPE_BYTES)}")
    return DTYPE_BYTES[dtype]


def payload_bytes(num_elements: Any, dtype: str) -> Any:
    """Bytes on the wire for `num_elements` values of `dtype`, scales included for int8/fp4."""
    n = np.asarray(num_elements, dtype=float)
    size = n * dtype_bytes(dtype)
    if dtype in ("int8", "fp4"):
        size = size + np.ceil(n / QUANT_GROUP_ELEMENTS) * DTYPE_BYTES["fp32"]
    return float(size) if size.ndim == 0 else size


def ring_terms(op: str, world_size: Any, payload_bytes: Any) -> tuple[Any, Any]:
    """(latency steps, bytes each rank moves per unit of bandwidth) of a ring collective, so that
    its time is latency_steps·α + bytes·(1/B): k_op·(P−1) and k_op·(P−1)/P·D (0 where P <= 1) —
    `ring_time_s` factored, which the collective model's fit uses as its design matrix (the time
    is linear in α and 1/B)."""
    if op not in OP_MULTIPLIER:
        raise ValueError(f"unknown collective {op!r}; expected one of {', '.join(OP_MULTIPLIER)}")
    P = np.asarray(world_size, dtype=float)
    steps = OP_MULTIPLIER[op] * np.maximum(P - 1.0, 0.0)
    return steps, steps / np.maximum(P, 1.0) * np.asarray(payload_bytes, dtype=float)


def ring_time_s(op: str, world_size: Any, payload_bytes: Any, latency_s: Any,
                bandwidth_bytes_per_s: Any) -> Any:
    """Ring collective of a `payload_bytes` (unsharded) buffer over `world_size` ranks:
    k_op·(P−1)·(α + D/(P·B)), 0 where P <= 1 (paper §III-B). Broadcasts over arrays."""
    if op not in OP_MULTIPLIER:
        raise ValueError(f"unknown collective {op!r}; expected one of {', '.join(OP_MULTIPLIER)}")
    P = np.asarray(world_size, dtype=float)
    D = np.asarray(payload_bytes, dtype=float)
    B = np.asarray(bandwidth_bytes_per_s, dtype=float)
    steps = np.maximum(P - 1.0, 0.0)
    t = OP_MULTIPLIER[op] * steps * (np.asarray(latency_s, dtype=float)
                                     + D / (np.maximum(P, 1.0) * B))
    return float(t) if np.ndim(t) == 0 else t


def sync_time_s(num_islands: Any, payload_bytes: Any, bw_bytes_per_s: Any, latency_s: Any) -> Any:
    """σ, the blocking DiLoCo outer all-reduce across M islands (DESIGN §3):
    0 for M = 1, else 2(M−1)/M·P/bw + 2(M−1)·lat. Broadcasts over arrays."""
    return ring_time_s("all_reduce", num_islands, payload_bytes, latency_s, bw_bytes_per_s)


def bandwidth_for_sync_s(num_islands: Any, payload_bytes: Any, sync_s: Any, latency_s: Any) -> Any:
    """Inverse of `sync_time_s` in the bandwidth: the bytes/s that make σ equal `sync_s`
    (inf where the latency alone already takes `sync_s` or more)."""
    M = np.asarray(num_islands, dtype=float)
    budget = np.asarray(sync_s, dtype=float) - 2.0 * (M - 1.0) * np.asarray(latency_s, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        payload = np.asarray(payload_bytes, dtype=float)
        bw = np.where(budget > 0, 2.0 * (M - 1.0) / M * payload / budget, np.inf)
    bw = np.where(M <= 1, 0.0, bw)
    return float(bw) if np.ndim(bw) == 0 else bw


def six_n_flops_per_token(params: Any, num_layers: Any, hidden_size: Any, seq_len: Any) -> Any:
    """Model FLOPs per token in the convention llm-foundry and torchtitan publish MFU with:
    6·N + 12·L·h·S (3 x (2 FLOPs per parameter + QKᵀ and AV over the whole sequence, no causal
    discount)), N the total parameter count. Used to check published MFU figures, not to predict.
    Broadcasts over arrays."""
    return 6 * params + 12 * num_layers * hidden_size * seq_len


# ---- failures, checkpoints and restarts (issue 28) ---------------------------------------------
#
# One home for the closed forms every failure figure uses: `perfmodel.costs.reliability`
# (predict) and `planner.model.risk` (plans) call these; `perfmodel.sim.failures` simulates the
# same processes event by event without them (the tests compare the two).

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
    y = np.minimum(np.sqrt(2.0 * d), -np.expm1(-(1.0 + d)))  # g(y0) >= 0: Newton stays right
    for _ in range(100):
        g = -np.log1p(-y) - y - d
        step = g * (1.0 - y) / np.maximum(y, 1e-300)
        y = y - step
        if np.all(np.abs(step) <= 1e-15 * np.maximum(y, 1e-300)):
            break
    result = m * y
    return float(result) if np.ndim(result) == 0 else result


def restart_factor(rate_per_s: Any, restart_s: Any, weights: Any) -> Any:
    """E_R = 1 / Σ_t w_t·e^{−λ·R_t}: Daly's e^{λR} when restarts after an interruption of type t
    (probability w_t) take R_t and may themselves be interrupted (a new restart of the new
    interruption's type follows). Reduces to e^{λR} for one type."""
    lam = np.asarray(rate_per_s, dtype=float)
    r = np.atleast_1d(np.asarray(restart_s, dtype=float))
    w = np.atleast_1d(np.asarray(weights, dtype=float))
    return 1.0 / float(np.sum(w * np.exp(-lam * r)))


def daly_wall_factor(rate_per_s: float, interval_s: float, checkpoint_s: float,
                     restart_factor_value: float) -> float:
    """Expected wall time per unit of useful compute under Daly's exact exponential model:
    T_w/T_s = E_R·(e^{λ(τ+δ)} − 1)/(λ·τ) for compute τ between checkpoints that each stall δ, a
    Poisson interruption rate λ, and restart factor E_R (`restart_factor`); 1 + δ/τ when λ = 0.
    Every interruption loses the segment in progress (Daly, Future Gener. Comput. Syst. 22 (2006)
    303–312, eq. 13)."""
    if rate_per_s <= 0.0:
        return 1.0 + checkpoint_s / interval_s
    return float(restart_factor_value * np.expm1(rate_per_s * (interval_s + checkpoint_s))
                 / (rate_per_s * interval_s))


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
        expected_k += w * (j + 1 + p * math.expm1(lam * r) / q)
    return p / (p + q * expected_k)


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
