"""perfmodel.tables: the island table the planner consumes."""

from __future__ import annotations

import pytest

from perfmodel.catalog import get_gpu, get_model
from perfmodel.fsdp import step_costs, step_decomposition
from perfmodel.hardware import GIB, ClusterSpec
from perfmodel.memory import max_micro_batch, memory_breakdown
from perfmodel.profile import default_profile
from perfmodel.tables import TABLE_COLUMNS, build_island_table

MODEL = get_model("Llama-3.2-1B")
SEQ = 4096


def _cluster(name: str, gpu_name: str, nodes: int, allowed: tuple[int, ...], price: float) -> ClusterSpec:
    gpu = get_gpu(gpu_name)
    return ClusterSpec(name=name, gpu=gpu, num_nodes=nodes, gpus_per_node=8, allowed_gpus_per_node=allowed,
                       usd_per_gpu_hour=price, intra_link=gpu.intra_node_link, inter_link=gpu.inter_node_link,
                       nics_per_node=gpu.nics_per_node, wan_bw_bytes_per_s=1.25e9, wan_latency_s=0.05)


CLUSTERS = [_cluster("A", "H100-SXM5-80GB", 2, (1, 4, 8), 3.0), _cluster("B", "A100-PCIe-80GB", 1, (2, 8), 1.2)]


@pytest.fixture(scope="module")
def table():
    return build_island_table(MODEL, seq_len=SEQ, ac="selective", clusters=CLUSTERS)


def test_columns_and_rows(table) -> None:
    assert tuple(table.columns) == TABLE_COLUMNS
    assert TABLE_COLUMNS[:10] == ("cluster", "gpu_type", "nodes", "gpus_per_node", "micro_batch", "microstep_s",
                                  "step_fixed_s", "usd_per_hour", "memory_gib", "bound")
    for cluster in CLUSTERS:
        for nodes in range(1, cluster.num_nodes + 1):
            for g in cluster.allowed_gpus_per_node:
                largest = max_micro_batch(MODEL, gpu_memory_bytes=cluster.gpu.usable_memory_bytes,
                                          num_gpus=nodes * g, seq_len=SEQ, ac="selective")
                rows = table[(table.cluster == cluster.name) & (table.nodes == nodes) & (table.gpus_per_node == g)]
                assert list(rows.micro_batch) == list(range(1, largest + 1))
                assert (rows.usd_per_hour == nodes * g * cluster.usd_per_gpu_hour).all()
    assert set(table.bound) <= {"compute", "communication", "mixed"}
    assert set(table.provenance) == {"prior"}
    assert (table.microstep_s > 0).all() and (table.step_fixed_s >= 0).all()


def test_rows_match_the_graph_and_memory_model(table) -> None:
    for _, row in table.sample(8, random_state=3).iterrows():
        cluster = next(c for c in CLUSTERS if c.name == row.cluster)
        island = cluster.island(int(row.nodes), int(row.gpus_per_node))
        costs = step_costs(MODEL, default_profile(cluster.gpu.name), island, seq_len=SEQ,
                           micro_batch=int(row.micro_batch), ac="selective")
        dec = step_decomposition(costs)
        assert row.microstep_s == pytest.approx(dec.microstep_s, rel=1e-9)
        assert row.step_fixed_s == pytest.approx(dec.step_fixed_s, rel=1e-9, abs=1e-12)
        peak = memory_breakdown(MODEL, num_gpus=island.num_gpus, seq_len=SEQ, micro_batch=int(row.micro_batch),
                                ac="selective").peak_bytes
        assert row.memory_gib == pytest.approx(peak / GIB)
        assert row.memory_gib <= cluster.gpu.usable_memory_bytes / GIB


def test_profiles_override_and_empty(table) -> None:
    base = default_profile("A100-PCIe-80GB")
    other = build_island_table(MODEL, seq_len=SEQ, ac="selective", clusters=CLUSTERS[1:],
                               profiles={"a100-pcie-80gb": base})
    assert other.equals(table[table.cluster == "B"].reset_index(drop=True))
    huge = get_model("Llama-3.1-405B")
    empty = build_island_table(huge, seq_len=SEQ, ac="none", clusters=[_cluster("C", "RTX-4090", 1, (1,), 0.5)])
    assert empty.empty and tuple(empty.columns) == TABLE_COLUMNS
