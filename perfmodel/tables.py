"""Per-island throughput/cost tables: the one thing the planner consumes (DESIGN §3).

For every island option (cluster, nodes n = 1..num_nodes, g in allowed_gpus_per_node) and every
micro-batch m = 1..(largest that fits the GPU's usable memory) one row:

    cluster, gpu_type, nodes, gpus_per_node, micro_batch, microstep_s, step_fixed_s,
    usd_per_hour, memory_gib, bound, provenance

microstep_s / step_fixed_s are the exact decomposition of the FSDP step graph (perfmodel.fsdp),
evaluated by the vectorised fast path; usd_per_hour = n·g·usd_per_gpu_hour; memory_gib is the
predicted peak per GPU; bound is the regime of a single-micro-step step (perfmodel.analysis);
provenance is the profile's ('measured' or 'prior').
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from perfmodel.analysis import classify_regime
from perfmodel.arch import ModelSpec
from perfmodel.fastpath import FastCosts, fast_step, model_fast_costs
from perfmodel.hardware import GIB, ClusterSpec

logger = logging.getLogger(__name__)

TABLE_COLUMNS = ("cluster", "gpu_type", "nodes", "gpus_per_node", "micro_batch", "microstep_s",
                 "step_fixed_s", "usd_per_hour", "memory_gib", "bound", "provenance")


def build_island_table(model: ModelSpec, *, seq_len: int, ac: str, clusters: Sequence[ClusterSpec],
                       profiles: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """The island table of `model` over `clusters` (profiles keyed by GPU name; default: the GPU's
    default profile, measured beating prior)."""
    from perfmodel.memory import max_micro_batch, memory_coefficients

    if seq_len < 1:
        raise ValueError(f"seq_len must be >= 1, got {seq_len}")
    costs: list[FastCosts] = []
    meta: list[dict[str, Any]] = []
    for cluster in clusters:
        profile = _profile_for(cluster.gpu.name, profiles)
        for nodes in range(1, cluster.num_nodes + 1):
            for gpn in cluster.allowed_gpus_per_node:
                gpus = nodes * gpn
                largest = max_micro_batch(model, gpu_memory_bytes=cluster.gpu.usable_memory_bytes,
                                          num_gpus=gpus, seq_len=seq_len, ac=ac)
                if largest < 1:
                    logger.info("%s %dx%d: not even micro-batch 1 fits; no rows", cluster.name, nodes, gpn)
                    continue
                mb = np.arange(1, largest + 1)
                costs.append(model_fast_costs(model, profile, cluster.island(nodes, gpn), seq_len=seq_len,
                                              micro_batches=mb, ac=ac))
                peak = memory_coefficients(model, num_gpus=gpus, seq_len=seq_len, ac=ac).peak_bytes(mb)
                meta.append({"cluster": cluster.name, "gpu_type": cluster.gpu.name, "nodes": nodes,
                             "gpus_per_node": gpn, "micro_batch": mb,
                             "usd_per_hour": gpus * cluster.usd_per_gpu_hour, "memory_gib": peak / GIB,
                             "provenance": getattr(profile, "provenance", "unknown")})
    if not costs:
        return pd.DataFrame({c: [] for c in TABLE_COLUMNS})
    fast = fast_step(_concat(costs))
    frame = pd.concat([pd.DataFrame(m) for m in meta], ignore_index=True)
    frame["microstep_s"] = fast.microstep_s
    frame["step_fixed_s"] = fast.step_fixed_s
    frame["bound"] = classify_regime(fast.step_time_s(1), fast.compute_busy_s(1), fast.comm_busy_s(1))
    return frame.loc[:, list(TABLE_COLUMNS)]


def _profile_for(gpu_name: str, profiles: Mapping[str, Any] | None) -> Any:
    if profiles is not None:
        for key, profile in profiles.items():
            if key.lower() == gpu_name.lower():
                return profile
    from perfmodel.profile import default_profile

    return default_profile(gpu_name)


def _concat(parts: Sequence[FastCosts]) -> FastCosts:
    """One FastCosts over all options (same model, so the same unit sequence): one vectorised pass."""
    return FastCosts(
        forward_s=np.concatenate([p.forward_s for p in parts], axis=1),
        backward_s=np.concatenate([p.backward_s for p in parts], axis=1),
        all_gather_s=np.concatenate([p.all_gather_s for p in parts], axis=1),
        reduce_scatter_s=np.concatenate([p.reduce_scatter_s for p in parts], axis=1),
        optimizer_s=np.concatenate([p.optimizer_s for p in parts]),
        unit_types=parts[0].unit_types)


# ---- the planner's entry point (the planner imports perfmodel only through this module) -------

@dataclass(frozen=True, kw_only=True, slots=True)
class ClusterRequest:
    """What the planner knows of a cluster: names and numbers from its instance file."""

    name: str
    """Cluster name."""
    gpu: str
    """Catalog GPU name (did-you-mean on typos)."""
    num_nodes: int
    """Nodes available."""
    gpus_per_node: int
    """GPUs per node available."""
    allowed_gpus_per_node: tuple[int, ...]
    """GPUs-per-node counts an island may use."""
    usd_per_gpu_hour: float
    """Resolved price of one GPU-hour."""
    wan_bw_bytes_per_s: float
    """WAN uplink, bytes/s."""
    wan_latency_s: float
    """WAN latency, seconds."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelTable:
    """An island table together with the model facts the planner needs."""

    table: pd.DataFrame
    """Rows as in TABLE_COLUMNS."""
    parameters: int
    """Total model parameters (sets the pseudo-gradient size)."""
    model_name: str
    """Resolved model name."""


def island_table_for(model: str, *, seq_len: int, ac: str,
                     clusters: Sequence[ClusterRequest]) -> ModelTable:
    """Resolve catalog names and build the island table (catalog errors name the bad value)."""
    from perfmodel.catalog import get_gpu, get_model

    spec = get_model(model)
    specs = []
    for c in clusters:
        gpu = get_gpu(c.gpu)
        specs.append(ClusterSpec(
            name=c.name, gpu=gpu, num_nodes=c.num_nodes, gpus_per_node=c.gpus_per_node,
            allowed_gpus_per_node=tuple(c.allowed_gpus_per_node), usd_per_gpu_hour=c.usd_per_gpu_hour,
            intra_link=gpu.intra_node_link, inter_link=gpu.inter_node_link,
            nics_per_node=gpu.nics_per_node, wan_bw_bytes_per_s=c.wan_bw_bytes_per_s,
            wan_latency_s=c.wan_latency_s))
    table = build_island_table(spec, seq_len=seq_len, ac=ac, clusters=specs)
    return ModelTable(table=table, parameters=spec.total_params, model_name=spec.name)
