"""ParallelLayout: validation, placement of every group against a rank-by-rank enumeration of
torchtitan's mesh, the per-rank shard of the compute features, the inline collectives of the
step graph, async TP's overlap rule, and the layout flags of the CLI."""

from __future__ import annotations

import json
from dataclasses import fields, replace
from typing import Any

import numpy as np
import pytest

from perfmodel.api.layout import parse_named_layout
from perfmodel.costs.features import PASS_FEATURES, RankShard, local_model, unit_feature_affine
from perfmodel.profiles.profile import default_profile
from perfmodel.sim.fastpath import fast_step, model_fast_costs
from perfmodel.sim.fsdp import (
    async_tp_exposed_s,
    inline_collectives,
    simulate_step,
    step_costs,
)
from perfmodel.spec.catalog import get_gpu, get_model
from perfmodel.spec.errors import UserInputError
from perfmodel.spec.hardware import IslandSpec
from perfmodel.spec.layout import DIMENSIONS, ParallelLayout, place_group, with_layout_fields
from perfmodel.spec.recipe import TrainingRecipe, recipe_from_mapping

# ---- validation -------------------------------------------------------------------------------

@pytest.mark.parametrize("fields_", [
    {"tp": 0}, {"pp": -1}, {"cp": 1.5}, {"dp_replicate": True}, {"dp_shard": 0},
    {"dp_shard": -2}, {"pp_schedule": "zero-bubble"}, {"sequence_parallel": "yes"},
    {"virtual_stages": 2}, {"pp_schedule": "interleaved-1f1b"},
    {"async_tp": True}, {"tp": 2, "sequence_parallel": False, "async_tp": True},
    {"virtual_stages": 2, "pp_schedule": "interleaved-1f1b"},
])
def test_bad_layouts_are_user_errors_with_a_fix(fields_: dict[str, object]) -> None:
    with pytest.raises(UserInputError) as err:
        ParallelLayout(**fields_)  # type: ignore[arg-type]
    assert err.value.hint


@pytest.mark.parametrize(("base", "given", "schedule"), [
    ({}, {"pp": 4, "virtual_stages": 3}, "interleaved-1f1b"),
    ({"pp": 4, "virtual_stages": 3, "pp_schedule": "interleaved-1f1b"}, {"virtual_stages": 1},
     "1f1b"),
    ({}, {"pp": 4, "pp_schedule": "gpipe"}, "gpipe"),
    ({"pp": 4}, {"tp": 2}, "1f1b"),
])
def test_the_schedule_follows_the_virtual_stages_unless_given(
        base: dict[str, Any], given: dict[str, Any], schedule: str) -> None:
    layout = with_layout_fields(ParallelLayout(**base), **given)
    assert layout.pp_schedule == schedule
    # the same rule on the other roads in: CLI flags over a recipe, a recipe's parallel block
    flagged = recipe_from_mapping({"parallel": base}).with_overrides(**given)
    assert flagged.parallel == layout
    if not base:
        assert recipe_from_mapping({"parallel": given}).parallel == layout


def test_a_given_schedule_is_kept_and_checked_not_replaced() -> None:
    with pytest.raises(UserInputError, match="virtual_stages 4 with pp_schedule 'gpipe'"):
        with_layout_fields(ParallelLayout(), pp=4, virtual_stages=4, pp_schedule="gpipe")
    layout, _ = parse_named_layout("tp=8,pp=16,dp_shard=128,v=4")
    assert (layout.pp_schedule, layout.virtual_stages) == ("interleaved-1f1b", 4)


def test_dp_shard_is_what_the_other_degrees_leave() -> None:
    layout = ParallelLayout(tp=8, dp_replicate=2).resolve(64)
    assert (layout.dp_shard, layout.world_size, layout.dp, layout.fsdp_degree) == (4, 64, 8, 4)
    assert ParallelLayout(cp=2).resolve(16).fsdp_degree == 16       # FSDP shards over dp x cp
    assert ParallelLayout().resolve(24).dp_shard == 24


def test_a_layout_that_cannot_split_the_gpus_names_the_nearest_valid_one() -> None:
    with pytest.raises(UserInputError) as err:
        ParallelLayout(tp=3).resolve(64)
    assert "tp 4 (dp_shard 16)" in err.value.hint
    with pytest.raises(UserInputError) as err:
        ParallelLayout(tp=2, dp_shard=3).resolve(8)
    assert "8" in str(err.value)


@pytest.mark.parametrize(("layout", "hint"), [
    (ParallelLayout(pp=16, virtual_stages=100, pp_schedule="interleaved-1f1b"),
     "--virtual-stages 7 (pp 16 x 7 = 112 stages)"),
    (ParallelLayout(pp=100, virtual_stages=2, pp_schedule="interleaved-1f1b"),
     "--virtual-stages 1"),
    (ParallelLayout(pp=200), "use pp 126 or less"),
])
def test_too_many_stages_name_the_nearest_that_fit(layout: ParallelLayout, hint: str) -> None:
    model = get_model("Llama-3.1-405B")          # 126 blocks
    with pytest.raises(UserInputError) as err:
        layout.check_model(num_layers=model.num_layers, num_heads=model.num_heads,
                           num_kv_heads=model.num_kv_heads,
                           intermediate_size=model.intermediate_size, seq_len=8192)
    assert hint in err.value.hint


@pytest.mark.parametrize(("layout", "message"), [
    (ParallelLayout(tp=3), "query heads"),
    (ParallelLayout(tp=64), "query heads"),
    (ParallelLayout(cp=3), "sequence"),
    (ParallelLayout(pp=64), "stage"),
])
def test_model_rules(layout: ParallelLayout, message: str) -> None:
    # Llama-3-8B: 32 heads, 8 kv heads, FFN 14336, 32 layers; sequence 4096
    model = get_model("Llama-3-8B")
    with pytest.raises(UserInputError, match=message):
        layout.check_model(num_layers=model.num_layers, num_heads=model.num_heads,
                           num_kv_heads=model.num_kv_heads,
                           intermediate_size=model.intermediate_size, seq_len=4100)


def test_kv_heads_are_replicated_when_tp_exceeds_them() -> None:
    ParallelLayout(tp=16).check_model(num_layers=2, num_heads=32, num_kv_heads=8,
                                      intermediate_size=1024, seq_len=64)
    with pytest.raises(UserInputError, match="key/value"):
        ParallelLayout(tp=4).check_model(num_layers=2, num_heads=12, num_kv_heads=6,
                                         intermediate_size=1024, seq_len=64)


# ---- placement ----------------------------------------------------------------------------------

def _enumerated_groups(layout: ParallelLayout, dimension: str) -> list[list[int]]:
    """Every group of `dimension`: ranks numbered over the mesh (dp_replicate, pp, dp_shard, cp,
    tp) with tp innermost, as torchtitan's init_device_mesh numbers them."""
    order = list(reversed(DIMENSIONS))             # outermost first
    shape = [layout.size(d) for d in order]
    ranks = np.arange(layout.world_size).reshape(shape)
    axis = order.index(dimension)
    moved = np.moveaxis(ranks, axis, -1).reshape(-1, layout.size(dimension))
    return [list(map(int, g)) for g in moved]


LAYOUTS = [
    ParallelLayout(tp=8), ParallelLayout(tp=4, dp_replicate=2), ParallelLayout(tp=2, cp=2),
    ParallelLayout(tp=2, cp=4, dp_replicate=2), ParallelLayout(dp_replicate=4),
    ParallelLayout(tp=8, pp=4), ParallelLayout(tp=4, pp=2, dp_replicate=2), ParallelLayout(cp=8),
    ParallelLayout(tp=16),
]


@pytest.mark.parametrize("gpus_per_node", [8, 4])
@pytest.mark.parametrize("layout", LAYOUTS,
                         ids=lambda lay: lay.resolve(64).describe().replace(" ", ""))
def test_placement_matches_a_rank_by_rank_enumeration(layout: ParallelLayout,
                                                      gpus_per_node: int) -> None:
    layout = layout.resolve(64)
    for dimension in DIMENSIONS:
        groups = _enumerated_groups(layout, dimension)
        assert len(groups) * layout.size(dimension) == 64
        placed = layout.group(dimension, gpus_per_node=gpus_per_node, intra_link="nvlink",
                              inter_link="ib", nics_per_node=8)
        for members in groups:
            nodes = {r // gpus_per_node for r in members}
            per_node = {n: sum(1 for r in members if r // gpus_per_node == n) for n in nodes}
            assert placed.nodes == len(nodes), (dimension, members)
            assert placed.members_per_node == max(per_node.values()), (dimension, members)
            expected = (() if len(members) == 1 else ("nvlink",) if len(nodes) == 1
                        else ("ib",) if max(per_node.values()) == 1 else ("nvlink", "ib"))
            assert placed.links == expected, (dimension, members)
        if placed.crosses_nodes:
            # groups of this dimension crossing one node share its NICs
            crossing = sum(1 for g in groups if any(r // gpus_per_node == 0 for r in g))
            assert placed.nics == pytest.approx(min(placed.members_per_node, 8 / crossing))


def test_a_group_of_one_needs_no_link() -> None:
    group = place_group("tp", size=1, stride=1, gpus_per_node=8, intra_link="nvlink",
                        inter_link="ib", nics_per_node=8)
    assert group.links == () and not group.crosses_nodes


# ---- per-rank compute ---------------------------------------------------------------------------

def test_tensor_parallel_shard_divides_the_block_matmuls() -> None:
    model = get_model("Llama-3-8B")
    shard = local_model(model, 8)
    assert shard.block_matmul_params * 8 == model.block_matmul_params
    assert shard.num_heads * 8 == model.num_heads and shard.num_kv_heads == 1
    assert shard.hidden_size == model.hidden_size
    whole, _ = unit_feature_affine(model, 4096, "block", "forward")
    part, _ = unit_feature_affine(model, 4096, "block", "forward", shard=RankShard(tp=8))
    matmul = PASS_FEATURES.index("tok_block_matmul")
    assert part[matmul] * 8 == pytest.approx(whole[matmul])
    # kv heads replicated beyond tp = 8: a tp 16 rank holds one kv head, not half of one
    assert local_model(model, 16).num_kv_heads == 1


def test_context_parallel_divides_every_per_token_feature() -> None:
    model = get_model("Llama-3-8B")
    for phase in ("forward", "backward"):
        whole, const = unit_feature_affine(model, 8192, "block", phase)
        part, part_const = unit_feature_affine(model, 8192, "block", phase,
                                               shard=RankShard(cp=4))
        np.testing.assert_allclose(part * 4, whole)
        np.testing.assert_allclose(part_const, const)


def test_sequence_parallel_divides_only_the_hidden_width_work() -> None:
    model = get_model("Llama-3-8B")
    plain, _ = unit_feature_affine(model, 4096, "block", "forward", shard=RankShard(tp=4))
    sp, _ = unit_feature_affine(model, 4096, "block", "forward",
                                shard=RankShard(tp=4, sequence_parallel=True))
    hidden = PASS_FEATURES.index("tok_hidden")
    assert sp[hidden] * 4 == pytest.approx(plain[hidden])
    others = [i for i in range(len(PASS_FEATURES)) if i != hidden]
    np.testing.assert_allclose(sp[others], plain[others])


# ---- the step graph ---------------------------------------------------------------------------

def _recipe(**layout: object) -> TrainingRecipe:
    return TrainingRecipe(parallel=ParallelLayout(**layout))  # type: ignore[arg-type]


def test_inline_collectives_per_block() -> None:
    # without checkpointing: what the blocks' own passes issue (recompute: test_tp_recompute_*)
    sp = replace(_recipe(tp=2), ac="none")
    no_sp = replace(_recipe(tp=2, sequence_parallel=False), ac="none")
    assert [op for op, _, _ in inline_collectives(sp, "block_forward")] == [
        "all_gather", "reduce_scatter", "all_gather", "reduce_scatter"]
    assert [op for op, _, _ in inline_collectives(no_sp, "block_forward")] == ["all_reduce"] * 2
    assert [op for op, _, _ in inline_collectives(no_sp, "block_backward")] == ["all_reduce"] * 5
    # the norm weights' partial gradients: FSDP2's post-backward (test_layout_order records it)
    post = inline_collectives(sp, "block_post_backward", 2)
    assert [kind for _, _, kind in post] == ["norm_weight"] * 2
    cp = inline_collectives(_recipe(cp=2), "block_forward")
    assert cp == (("all_gather", "cp", "kv"),)
    assert inline_collectives(_recipe(), "block_forward") == ()
    assert inline_collectives(_recipe(dp_replicate=2), "block_backward") == ()


def _island(nodes: int = 4) -> IslandSpec:
    gpu = get_gpu("H100-SXM5-80GB")
    return IslandSpec(gpu=gpu, num_nodes=nodes, gpus_per_node=8, intra_link=gpu.intra_node_link,
                      inter_link=gpu.inter_node_link, nics_per_node=gpu.nics_per_node)


FAST_LAYOUTS = [dict(tp=2), dict(tp=8), dict(tp=8, sequence_parallel=False), dict(cp=2),
                dict(tp=4, cp=2), dict(dp_replicate=2), dict(tp=8, dp_replicate=2),
                dict(tp=8, async_tp=True), dict(tp=2, cp=2, dp_replicate=2, async_tp=True)]


@pytest.mark.parametrize("layout", FAST_LAYOUTS, ids=lambda d: ",".join(f"{k}={v}"
                                                                        for k, v in d.items()))
@pytest.mark.parametrize("accum", [1, 3])
def test_fast_path_equals_the_graph(layout: dict[str, object], accum: int) -> None:
    model, profile = get_model("Llama-3-8B"), default_profile("H100-SXM5-80GB")
    recipe = _recipe(**layout)
    for ac in ("op-sac", "layer:3"):
        r = replace(recipe, ac=ac)
        fast = fast_step(model_fast_costs(model, profile, _island(), seq_len=4096,
                                          micro_batches=np.array([1, 2]), recipe=r))
        for i, m in enumerate((1, 2)):
            costs = step_costs(model, profile, _island(), seq_len=4096, micro_batch=m, recipe=r)
            graph = simulate_step(costs, accum_steps=accum).step_time_s
            assert fast.step_time_s(accum)[i] == pytest.approx(graph, rel=1e-12)


def test_layout_costs_keep_the_recipe_as_given_so_islands_share_a_plan() -> None:
    model, profile = get_model("Llama-3-8B"), default_profile("H100-SXM5-80GB")
    recipe = _recipe(tp=8)
    a = step_costs(model, profile, _island(2), seq_len=4096, micro_batch=1, recipe=recipe)
    b = step_costs(model, profile, _island(4), seq_len=4096, micro_batch=1, recipe=recipe)
    assert a.recipe == b.recipe == recipe
    assert a.plan(1) == b.plan(1)


def test_default_layout_is_plain_fsdp_bit_for_bit() -> None:
    model, profile = get_model("Llama-3-8B"), default_profile("H100-SXM5-80GB")
    plain = step_costs(model, profile, _island(), seq_len=4096, micro_batch=1)
    explicit = step_costs(model, profile, _island(), seq_len=4096, micro_batch=1,
                          recipe=_recipe(dp_shard=32))
    assert simulate_step(plain).step_time_s == simulate_step(explicit).step_time_s


def test_tensor_parallel_inline_collectives_cost_time() -> None:
    model, profile = get_model("Llama-3-8B"), default_profile("H100-SXM5-80GB")
    costs = step_costs(model, profile, _island(), seq_len=4096, micro_batch=1, recipe=_recipe(tp=8))
    block = costs.units[0]
    assert len(block.forward_inline_s) == 4 and all(t > 0 for t in block.forward_inline_s)
    hsdp = step_costs(model, profile, _island(), seq_len=4096, micro_batch=1,
                      recipe=_recipe(dp_replicate=4))
    assert hsdp.units[0].replicate_s > 0
    kinds = [t.kind for t in hsdp.plan(1)]
    assert kinds.count("all_reduce") == model.num_layers + 1


# ---- async TP ------------------------------------------------------------------------------------

def test_async_tp_hides_communication_behind_the_matmuls() -> None:
    model = local_model(get_model("Llama-3-8B"), 4)
    recipe = replace(_recipe(tp=4, async_tp=True), ac="none")
    # matmuls far longer than the collectives: each exposes one chunk, c / tp
    small = async_tp_exposed_s(model, 4096, recipe, "block_forward", (1e-3,) * 4, 10.0, 20.0)
    assert small == pytest.approx((2.5e-4,) * 4)
    # no matmul time: nothing to hide behind
    none = async_tp_exposed_s(model, 4096, recipe, "block_forward", (1e-3,) * 4, 0.0, 0.0)
    assert none == pytest.approx((1e-3,) * 4)
    # never more than inline, at least one chunk; the norm all-reduces and the collectives a
    # recompute re-issues (op-sac: the forward all-gathers) are priced by their own pass
    for ac in ("none", "op-sac", "full"):
        r = replace(recipe, ac=ac)
        entries = inline_collectives(r, "block_backward")
        for block_s in np.geomspace(1e-5, 1.0, 20):
            out = async_tp_exposed_s(model, 4096, r, "block_backward", (1e-3,) * len(entries),
                                     block_s, 2 * block_s)
            for (op, _, kind), o in zip(entries, out, strict=True):
                low = 1e-3 if kind == "norm_weight" else 1e-3 / 4
                assert low - 1e-15 <= o <= 1e-3 + 1e-15, (ac, op, kind)


def test_async_tp_speeds_the_step_up() -> None:
    model, profile = get_model("Llama-3.1-70B"), default_profile("H100-SXM5-80GB")
    times = [simulate_step(step_costs(model, profile, _island(8), seq_len=8192, micro_batch=1,
                                      recipe=_recipe(tp=8, async_tp=a))).step_time_s
             for a in (False, True)]
    assert times[1] < times[0]


# ---- recipe and CLI ----------------------------------------------------------------------------

def test_recipe_overrides_and_yaml_reach_the_layout() -> None:
    recipe = TrainingRecipe().with_overrides(tp=4, sequence_parallel=False, ac="full")
    assert recipe.parallel == ParallelLayout(tp=4, sequence_parallel=False)
    assert recipe.ac == "full"
    loaded = recipe_from_mapping({"base": "torchtitan", "parallel": {"tp": 2, "cp": 2}},
                                 source="r.yaml")
    assert loaded.parallel == ParallelLayout(tp=2, cp=2)
    with pytest.raises(UserInputError, match="parallel"):
        recipe_from_mapping({"parallel": {"tensor_parallel": 2}}, source="r.yaml")


def test_predict_json_layout_has_exactly_the_layout_fields(run_cli: Any) -> None:
    code, out, err = run_cli("predict", "Llama-3-8B", "--gpu", "H100-SXM5-80GB", "--nodes", "2",
                     "--seq-len", "4096", "--tp", "8", "--dp-replicate", "2",
                     "--no-sequence-parallel", "--format", "json")
    assert code == 0, err
    record = json.loads(out)
    assert set(record["layout"]) == {f.name for f in fields(ParallelLayout)}
    assert record["layout"] == {**ParallelLayout(tp=8, dp_replicate=2, sequence_parallel=False,
                                                 dp_shard=1).to_dict()}
    for key in ("step_time_s", "tokens_per_s_per_gpu", "mfu", "peak_gib"):
        assert key in record
    # m sequences per data-parallel rank: 2 replicas x 1 shard rank share the 16 GPUs' tokens
    tokens = record["tokens_per_s_per_gpu"] * 16 * record["step_time_s"]
    assert tokens == pytest.approx(2 * 4096)


def test_sweep_and_predict_agree_on_throughput_under_a_layout(run_cli: Any) -> None:
    code, out, err = run_cli("predict", "Llama-3-8B", "--gpu", "H100-SXM5-80GB", "--nodes", "2",
                     "--seq-len", "4096", "--tp", "4", "--format", "json")
    assert code == 0, err
    predicted = json.loads(out)["tokens_per_s_per_gpu"]
    code, out, err = run_cli("sweep", "Llama-3-8B", "--gpu", "H100-SXM5-80GB", "--nodes", "2",
                     "--seq-len", "4096", "--tp", "4", "--micro-batches", "1", "--format",
                     "json")
    assert code == 0, err
    rows = json.loads(out)
    rows = rows["points"] if isinstance(rows, dict) else rows
    assert rows[0]["tokens_per_s_per_gpu"] == pytest.approx(predicted, rel=1e-9)


@pytest.mark.parametrize("args", [
    ("--tp", "3"), ("--tp", "64"), ("--cp", "3"), ("--async-tp",), ("--tp", "0"),
    ("--virtual-stages", "2"), ("--pp", "2", "--virtual-stages", "2", "--pp-schedule", "gpipe"),
])
def test_layouts_that_cannot_run_exit_2_with_a_fix(args: tuple[str, ...],
                                                  run_cli: Any) -> None:
    code, out, err = run_cli("predict", "Llama-3-8B", "--gpu", "H100-SXM5-80GB", "--nodes", "2",
                     "--seq-len", "4096", *args)
    assert code == 2, out
    assert "To fix:" in err and "Traceback" not in err


def test_virtual_stages_alone_pick_the_interleaved_schedule(run_cli: Any) -> None:
    code, out, err = run_cli("predict", "Llama-3.1-8B", "--gpu", "H100-SXM5-80GB", "--nodes", "2",
                             "--seq-len", "4096", "--pp", "2", "--virtual-stages", "4",
                             "--accum", "4", "--format", "json")
    assert code == 0, err
    layout = json.loads(out)["layout"]
    assert (layout["pp_schedule"], layout["virtual_stages"]) == ("interleaved-1f1b", 4)


def test_pipeline_degrees_are_refused_until_pipelines_are_modelled(run_cli: Any) -> None:
    code, out, err = run_cli("predict", "Llama-3-8B", "--gpu", "H100-SXM5-80GB", "--nodes", "2",
                     "--seq-len", "4096", "--pp", "2")
    assert code == 2 and "To fix:" in err


def test_memory_takes_the_layout_and_reports_it(run_cli: Any) -> None:
    code, out, err = run_cli("memory", "Llama-3.1-70B", "--gpu", "H100-SXM5-80GB", "--nodes", "8",
                     "--seq-len", "8192", "--tp", "8", "--format", "json")
    assert code == 0, err
    tp8 = json.loads(out)
    assert tp8["layout"]["tp"] == 8 and tp8["layout"]["dp_shard"] == 8
    assert (tp8["num_gpus"], tp8["gpus_per_node"]) == (64, 8)
    code, out, err = run_cli("memory", "Llama-3.1-70B", "--gpu", "H100-SXM5-80GB", "--nodes", "8",
                     "--seq-len", "8192", "--format", "json", "--allow-oom")  # does not fit
    fsdp = json.loads(out)
    # tp divides each rank's activations (the tracker checks how much: test_memory_layouts)
    assert tp8["breakdown_gib"]["activations"] < fsdp["breakdown_gib"]["activations"] / 2


def test_island_tables_refuse_a_layout() -> None:
    from perfmodel.spec.hardware import ClusterSpec
    from perfmodel.tables import build_island_table  # lazy: the table module is heavy
    gpu = get_gpu("H100-SXM5-80GB")
    cluster = ClusterSpec(
        name="c", gpu=gpu, num_nodes=1, gpus_per_node=8, allowed_gpus_per_node=(8,),
        usd_per_gpu_hour=2.0, intra_link=gpu.intra_node_link, inter_link=gpu.inter_node_link,
        nics_per_node=gpu.nics_per_node, wan_bw_bytes_per_s=1.25e9, wan_latency_s=0.05)
    with pytest.raises(UserInputError, match="layout"):
        build_island_table(get_model("Llama-3-8B"), seq_len=2048, clusters=[cluster],
                           recipe=_recipe(tp=2))
