"""perfmodel.tables: the island table the planner consumes."""

from __future__ import annotations

import numpy as np
import pytest

from perfmodel.costs.memory import max_micro_batch, memory_breakdown
from perfmodel.profiles.profile import default_profile
from perfmodel.sim.fsdp import step_costs, step_decomposition
from perfmodel.spec.catalog import get_gpu, get_model
from perfmodel.spec.errors import UserInputError
from perfmodel.spec.formulas import GIB
from perfmodel.spec.hardware import ClusterSpec
from perfmodel.spec.recipe import PAPER_RECIPE
from perfmodel.tables import TABLE_COLUMNS, ClusterRequest, build_island_table, island_table_for

MODEL = get_model("Llama-3.2-1B")
SEQ = 4096


def _cluster(
    name: str, gpu_name: str, nodes: int, allowed: tuple[int, ...], price: float
) -> ClusterSpec:
    gpu = get_gpu(gpu_name)
    return ClusterSpec(
        name=name, gpu=gpu, num_nodes=nodes, gpus_per_node=8, allowed_gpus_per_node=allowed,
        usd_per_gpu_hour=price, intra_link=gpu.intra_node_link, inter_link=gpu.inter_node_link,
        nics_per_node=gpu.nics_per_node, wan_bw_bytes_per_s=1.25e9, wan_latency_s=0.05,
    )


CLUSTERS = [
    _cluster("A", "H100-SXM5-80GB", 2, (1, 4, 8), 3.0),
    _cluster("B", "A100-PCIe-80GB", 1, (2, 8), 1.2),
]


@pytest.fixture(scope="module")
def table():
    return build_island_table(MODEL, seq_len=SEQ, ac="selective", clusters=CLUSTERS)


def test_columns_and_rows(table) -> None:
    assert tuple(table.columns) == TABLE_COLUMNS
    assert TABLE_COLUMNS[:10] == (
        "cluster", "gpu_type", "nodes", "gpus_per_node", "micro_batch", "microstep_s",
        "step_fixed_s", "usd_per_hour", "memory_gib", "bound",
    )
    for cluster in CLUSTERS:
        for nodes in range(1, cluster.num_nodes + 1):
            for g in cluster.allowed_gpus_per_node:
                largest = max_micro_batch(MODEL, gpu_memory_bytes=cluster.gpu.usable_memory_bytes,
                                          num_gpus=nodes * g, seq_len=SEQ, ac="selective")
                rows = table[
                    (table.cluster == cluster.name)
                    & (table.nodes == nodes)
                    & (table.gpus_per_node == g)
                ]
                assert list(rows.micro_batch) == list(range(1, largest + 1))
                assert (rows.usd_per_hour == nodes * g * cluster.usd_per_gpu_hour).all()
    assert set(table.bound) <= {"compute", "communication", "mixed"}
    # H100 calibrated; A100 PCIe: scaled prior
    assert set(table.provenance) == {"calibrated", "prior"}
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
        peak = memory_breakdown(
            MODEL, num_gpus=island.num_gpus, seq_len=SEQ, micro_batch=int(row.micro_batch),
            ac="selective",
        ).peak_bytes
        assert row.memory_gib == pytest.approx(peak / GIB)
        assert row.memory_gib <= cluster.gpu.usable_memory_bytes / GIB


def test_profiles_override_and_empty(table) -> None:
    base = default_profile("A100-PCIe-80GB")
    other = build_island_table(MODEL, seq_len=SEQ, ac="selective", clusters=CLUSTERS[1:],
                               profiles={"a100-pcie-80gb": base})
    assert other.equals(table[table.cluster == "B"].reset_index(drop=True))
    huge = get_model("Llama-3.1-405B")
    empty = build_island_table(
        huge, seq_len=SEQ, ac="none", clusters=[_cluster("C", "RTX-4090", 1, (1,), 0.5)]
    )
    assert empty.empty and tuple(empty.columns) == TABLE_COLUMNS


def test_recipe_shapes_the_table(table) -> None:
    """The paper recipe (no-sync, every unit resharded, no AC) gives other rows than torchtitan,
    each equal to the graph of that recipe; `ac` still overrides a recipe's mode."""
    paper = build_island_table(MODEL, seq_len=SEQ, clusters=CLUSTERS[:1], recipe=PAPER_RECIPE)
    assert (
        paper.attrs["recipe"]["name"] == "paper" and table.attrs["recipe"]["name"] == "torchtitan"
    )
    mine = table[table.cluster == "A"].reset_index(drop=True)
    assert not np.allclose(paper.microstep_s[: len(mine)], mine.microstep_s[: len(paper)])
    for _, row in paper.sample(5, random_state=1).iterrows():
        island = CLUSTERS[0].island(int(row.nodes), int(row.gpus_per_node))
        dec = step_decomposition(
            step_costs(
                MODEL, default_profile("H100-SXM5-80GB"), island, seq_len=SEQ,
                micro_batch=int(row.micro_batch), recipe=PAPER_RECIPE,
            )
        )
        assert row.microstep_s == pytest.approx(dec.microstep_s, rel=1e-9)
        assert row.step_fixed_s == pytest.approx(dec.step_fixed_s, rel=1e-9, abs=1e-12)
    overridden = build_island_table(
        MODEL, seq_len=SEQ, ac="full", clusters=CLUSTERS[:1], recipe=PAPER_RECIPE
    )
    assert overridden.attrs["recipe"]["ac"] == "full"


def test_instance_recipe_section_reaches_the_builder(tmp_path) -> None:
    from planner.model.instance import load_instance
    from planner.model.island_table import load_island_table

    text = """name: r
model: Llama-3.2-1B
training:
  seq_len: 2048
  global_batch_seqs: 64
  train_tokens: 1.0e9
  strategy: fsdp
  recipe: {base: paper, reduce_dtype: bf16, reshard_blocks_after_forward: true}
clusters:
  - {name: A, gpu: H100-SXM5-80GB, num_nodes: 1, gpus_per_node: 8, allowed_gpus_per_node: [8],
     price_usd_per_gpu_hour: 2.0}
"""
    path = tmp_path / "r.yaml"
    path.write_text(text)
    got = load_island_table(load_instance(path))
    want = island_table_for("Llama-3.2-1B", seq_len=2048, clusters=[ClusterRequest(
        name="A", gpu="H100-SXM5-80GB", num_nodes=1, gpus_per_node=8, allowed_gpus_per_node=(8,),
        usd_per_gpu_hour=2.0, wan_bw_bytes_per_s=1.25e9, wan_latency_s=0.05)],
        recipe=PAPER_RECIPE.with_overrides(reduce_dtype="bf16")).table
    np.testing.assert_allclose(got.microstep_s, want.microstep_s, rtol=1e-12)
    default = island_table_for(
        "Llama-3.2-1B",
        seq_len=2048,
        ac="selective",
        clusters=[
            ClusterRequest(
                name="A", gpu="H100-SXM5-80GB", num_nodes=1, gpus_per_node=8,
                allowed_gpus_per_node=(8,), usd_per_gpu_hour=2.0, wan_bw_bytes_per_s=1.25e9,
                wan_latency_s=0.05,
            )
        ],
    ).table
    assert not np.allclose(got.microstep_s[: len(default)], default.microstep_s[: len(got)])
    path.write_text(text.replace("reduce_dtype: bf16", "reduce_dtype: fp8"))
    with pytest.raises(UserInputError, match="reduce_dtype"):
        load_island_table(load_instance(path))
