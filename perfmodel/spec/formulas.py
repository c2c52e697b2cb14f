"""Shared formulas, dependency-free (numpy only): one home for each (DESIGN §1).

Imported by `perfmodel` and `planner` alike, so the planner's σ is the performance model's σ and a
dtype has one size everywhere. Every function broadcasts over numpy arrays where noted.
"""

from __future__ import annotations

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

OP_MULTIPLIER: dict[str, float] = {"all_gather": 1.0, "reduce_scatter": 1.0, "all_reduce": 2.0,
                                   "send_recv": 1.0}
"""Ring steps relative to all_gather: all_reduce = reduce_scatter + all_gather; send_recv is one
point-to-point transfer (pipeline stage boundaries): one step of the whole payload, α + D/B, for
any P > 1 (nccl-tests' sendrecv bus bandwidth is its algorithm bandwidth)."""


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
    if op == "send_recv":
        steps = np.where(P > 1.0, 1.0, 0.0)
        return steps, steps * np.asarray(payload_bytes, dtype=float)
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
    if op == "send_recv":
        p2p = np.where(P > 1.0, np.asarray(latency_s, dtype=float) + D / B, 0.0)
        return float(p2p) if np.ndim(p2p) == 0 else p2p
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
