"""The pipeline step graph (perfmodel.sim.pipeline): per-rank order, the textbook bubbles, the
fast path and its affine form, stage costs and the worst stage."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from perfmodel.profiles.profile import default_profile
from perfmodel.sim.fsdp import inline_collectives, layout_unit_durations
from perfmodel.sim.pipeline import (
    PipelineCosts,
    StageCosts,
    affine_points,
    evaluate_pipeline,
    kind_model,
    pipeline_costs,
    pipeline_decomposition,
    pipeline_plan,
    simulate_pipeline,
)
from perfmodel.spec.arch import ModelSpec, MoeSpec
from perfmodel.spec.catalog import get_gpu, get_model
from perfmodel.spec.errors import UserInputError
from perfmodel.spec.hardware import IslandSpec
from perfmodel.spec.layout import ParallelLayout
from perfmodel.spec.pipeline import rank_order, stage_blocks
from perfmodel.spec.recipe import TrainingRecipe


def _uniform(pp: int, v: int, schedule: str, *, forward_s: float = 1.0,
             backward_s: float = 2.0, p2p_s: float = 0.0) -> PipelineCosts:
    stages = tuple(StageCosts(stage=s, first_block=s, num_blocks=1, forward_s=forward_s / v,
                              backward_s=backward_s / v, forward_inline_s=0.0,
                              backward_inline_s=0.0, all_gather_s=0.0, reduce_scatter_s=0.0,
                              replicate_s=0.0) for s in range(pp * v))
    layout = ParallelLayout(pp=pp, virtual_stages=v, pp_schedule=schedule, dp_shard=1)
    return PipelineCosts(stages=stages, p2p_s=p2p_s, optimizer_s=(0.0,) * pp, layout=layout)


@pytest.mark.parametrize(("pp", "k"), [(2, 2), (2, 4), (4, 4), (4, 8), (8, 16)])
@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_bubble_of_uniform_stages_is_pp_minus_one_passes(schedule: str, pp: int, k: int) -> None:
    # GPipe and 1F1B (Narayanan et al. 2021, §2.2): (k + pp - 1)·(F + B) without communication
    result = simulate_pipeline(_uniform(pp, 1, schedule), micro_batches=k)
    assert result.step_time_s == pytest.approx((k + pp - 1) * 3.0)
    assert result.bubble_s == pytest.approx((pp - 1) * 3.0)


@pytest.mark.parametrize(("pp", "v", "k"), [(2, 2, 4), (4, 2, 4), (4, 2, 8), (4, 4, 8),
                                            (4, 2, 16), (8, 2, 8)])
def test_interleaving_divides_the_bubble_by_the_virtual_stages(pp: int, v: int, k: int) -> None:
    result = simulate_pipeline(_uniform(pp, v, "interleaved-1f1b"), micro_batches=k)
    assert result.step_time_s == pytest.approx(k * 3.0 + (pp - 1) * 3.0 / v)


@pytest.mark.parametrize(("schedule", "v"), [("gpipe", 1), ("1f1b", 1),
                                             ("interleaved-1f1b", 2)])
def test_each_rank_computes_in_its_schedule_order(schedule: str, v: int) -> None:
    costs = _uniform(4, v, schedule, p2p_s=0.1)
    result = simulate_pipeline(costs, micro_batches=8)
    for rank in range(4):
        intervals = sorted((i for i in result.schedule.intervals
                            if i.task.island == f"pp {rank}"
                            and i.task.kind in ("forward", "backward")),
                           key=lambda i: i.start_s)
        simulated = [i.task.name.split()[0] + " " + i.task.name.split()[1] for i in intervals]
        expected = [f"{a.pass_}{a.stage} m{a.micro}" for a in rank_order(schedule, 4, v, 8, rank)]
        assert simulated == expected


def test_transfers_and_fsdp_collectives_per_step() -> None:
    plan = pipeline_plan(ParallelLayout(pp=4, dp_shard=2), 8, replicate=False)
    kinds = [t.kind for t in plan]
    # one all-gather and one reduce-scatter per stage per step (no reshard after forward),
    # and one each of the root unit's share on the two end stages
    assert kinds.count("all_gather") == 4 + 2 and kinds.count("reduce_scatter") == 4 + 2
    # each micro-batch crosses 3 boundaries forward and 3 backward
    assert kinds.count("send_recv") == 2 * 3 * 8
    assert kinds.count("optimizer") == 4
    hsdp = pipeline_plan(ParallelLayout(pp=4, dp_shard=2, dp_replicate=2), 8, replicate=True)
    assert [t.kind for t in hsdp].count("all_reduce") - kinds.count("all_reduce") == 4 + 2


def _island(nodes: int, gpu: str = "H100-SXM5-80GB") -> IslandSpec:
    g = get_gpu(gpu)
    return IslandSpec(gpu=g, num_nodes=nodes, gpus_per_node=8, intra_link=g.intra_node_link,
                      inter_link=g.inter_node_link, nics_per_node=g.nics_per_node)


LAYOUTS = [ParallelLayout(pp=2), ParallelLayout(pp=4, tp=2),
           ParallelLayout(pp=4, tp=8, pp_schedule="gpipe"),
           ParallelLayout(pp=2, virtual_stages=2, pp_schedule="interleaved-1f1b"),
           ParallelLayout(pp=4, tp=4, dp_replicate=2, sequence_parallel=False),
           ParallelLayout(pp=2, cp=2, tp=2, async_tp=True)]


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda lay: lay.resolve(64).describe())
def test_fast_path_equals_the_graph(layout: ParallelLayout) -> None:
    model, profile = get_model("Llama-3-8B"), default_profile("H100-SXM5-80GB")
    recipe = TrainingRecipe(parallel=layout, ac="layer:3")
    arrays = pipeline_costs(model, profile, _island(8), seq_len=4096,
                            micro_batch=np.array([1, 2, 4]), recipe=recipe)
    k = max(layout.pp, 4)
    fast = evaluate_pipeline(arrays, k).makespan_s
    for i, m in enumerate((1, 2, 4)):
        one = pipeline_costs(model, profile, _island(8), seq_len=4096, micro_batch=m,
                             recipe=recipe)
        assert fast[i] == pytest.approx(simulate_pipeline(one, micro_batches=k).step_time_s,
                                        rel=1e-12)


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda lay: lay.resolve(64).describe())
def test_step_time_is_affine_in_the_micro_batches_once_the_pipeline_is_full(
        layout: ParallelLayout) -> None:
    model, profile = get_model("Llama-3-8B"), default_profile("H100-SXM5-80GB")
    costs = pipeline_costs(model, profile, _island(8), seq_len=4096, micro_batch=1,
                           recipe=TrainingRecipe(parallel=layout))
    form = pipeline_decomposition(costs)
    k0, _ = affine_points(layout)
    assert form.min_accum == k0
    for k in range(k0, 8 * layout.pp + 1, form.accum_multiple):
        graph = simulate_pipeline(costs, micro_batches=k)
        assert form.step_time_s(k)[0] == pytest.approx(graph.step_time_s, rel=1e-9), k
        busy = evaluate_pipeline(costs, k)
        assert (form.compute_fixed_s + k * form.compute_micro_s)[0] == pytest.approx(
            busy.compute_busy_s[0], rel=1e-9)


def test_stage_costs_follow_the_cut_and_the_last_stage_holds_the_head() -> None:
    model, profile = get_model("Llama-3.1-405B"), default_profile("H100-SXM5-80GB")
    costs = pipeline_costs(model, profile, _island(2048), seq_len=8192, micro_batch=1,
                           recipe=TrainingRecipe(ac="full",
                                                 parallel=ParallelLayout(tp=8, pp=16)))
    assert tuple(s.num_blocks for s in costs.stages) == stage_blocks(126, 16)
    block = costs.stages[1].forward_s / 8
    assert costs.stages[0].forward_s == pytest.approx(7 * block)
    assert costs.stages[15].forward_s > 7 * block            # LM head and loss
    assert costs.worst_rank in range(1, 15)                  # an 8-block stage paces it
    assert "blocks" in costs.worst_label()


def test_sequence_parallel_sends_a_tp_shard_of_the_activations() -> None:
    model, profile = get_model("Llama-3-8B"), default_profile("H100-SXM5-80GB")

    def p2p(sp: bool) -> float:
        layout = ParallelLayout(pp=2, tp=4, sequence_parallel=sp)
        big = pipeline_costs(model, profile, _island(8), seq_len=4096, micro_batch=64,
                             recipe=TrainingRecipe(parallel=layout))
        return float(big.p2p_s)

    # at a large payload the latency is negligible: the bytes differ by tp
    assert p2p(False) / p2p(True) == pytest.approx(4.0, rel=1e-3)


def test_one_f_one_b_needs_pp_micro_batches() -> None:
    with pytest.raises(UserInputError, match="at least pp micro-batches"):
        simulate_pipeline(_uniform(4, 1, "1f1b"), micro_batches=2)
    assert simulate_pipeline(_uniform(4, 1, "gpipe"), micro_batches=2).step_time_s > 0


def test_contention_slows_compute_under_collectives() -> None:
    costs = _uniform(2, 1, "1f1b", p2p_s=0.5)
    slowed = replace(costs, overlap_slowdown=1.5)
    assert (simulate_pipeline(slowed, micro_batches=4).step_time_s
            >= simulate_pipeline(costs, micro_batches=4).step_time_s)
    assert evaluate_pipeline(slowed, 4).makespan_s[0] == pytest.approx(
        simulate_pipeline(slowed, micro_batches=4).step_time_s, rel=1e-12)


def test_first_forward_gathers_block_by_block_and_the_reduce_follows_the_last_backward(
) -> None:
    """As torch 2.13 runs FSDP2 under PP (recorded: tests/test_pp_moe_order.py): the root
    unit's share first, then each block's gather before its first forward; every reduce-scatter
    after the stage's whole last backward (`perform_reduce_grad`), root first."""
    plan = pipeline_plan(ParallelLayout(pp=2, dp_shard=4), 4, blocks=(3, 2))
    gathers = [t for t in plan if t.kind == "all_gather"]
    scatters = [t for t in plan if t.kind == "reduce_scatter"]
    assert [t.cost for t in gathers] == (
        [("root_all_gather_s", 0, 1)] + [("block_all_gather_s", 0, j) for j in range(3)]
        + [("root_all_gather_s", 1, 1)] + [("block_all_gather_s", 1, j) for j in range(2)])
    assert [t.cost for t in scatters if t.rank == 0] == (
        [("root_reduce_scatter_s", 0, 1)] + [("block_reduce_scatter_s", 0, j) for j in range(3)])
    # block j's first forward waits for block j's gather only (the next one is prefetched),
    # the first block for the root's too
    first = [i for i, t in enumerate(plan) if t.name.startswith("F0 m0 block")]
    assert [plan[i].deps[-1] for i in first] == [plan.index(g) for g in gathers[1:4]]
    assert plan.index(gathers[0]) in plan[first[0]].deps
    # every reduce-scatter follows the whole last backward and its inline collectives
    for rs in scatters:
        (inline,) = rs.deps
        assert plan[inline].name == f"B{rs.cost[1]} m3 inline"
        back = plan[inline - 1] if plan[inline - 1].stream == "compute" else None
        assert back is not None and back.kind == "backward" and back.name == f"B{rs.cost[1]} m3"


def test_splitting_by_blocks_keeps_the_fast_path_equal_to_the_graph() -> None:
    model, profile = get_model("Llama-3-8B"), default_profile("H100-SXM5-80GB")
    recipe = TrainingRecipe(parallel=ParallelLayout(pp=4, tp=2, dp_replicate=2))
    arrays = pipeline_costs(model, profile, _island(8), seq_len=4096,
                            micro_batch=np.array([1, 3]), recipe=recipe)
    assert arrays.blocks == stage_blocks(32, 4)
    fast = evaluate_pipeline(arrays, 8).makespan_s
    for i, m in enumerate((1, 3)):
        one = pipeline_costs(model, profile, _island(8), seq_len=4096, micro_batch=m,
                             recipe=recipe)
        assert fast[i] == pytest.approx(simulate_pipeline(one, micro_batches=8).step_time_s,
                                        rel=1e-12)


# ---- MoE stages (tp 1, ep borrowing dp_shard inside each stage) -------------------------------

FIRST_DENSE_MOE = ModelSpec(
    name="pp-moe", hidden_size=1024, num_layers=8, num_heads=16, num_kv_heads=8,
    intermediate_size=4096, vocab_size=32000,
    moe=MoeSpec(num_experts=16, experts_per_token=2, expert_intermediate_size=1024,
                moe_layers=(2, 3, 4, 5, 6, 7)))
"""8 blocks, the first two dense (DeepSeek's first_k_dense): pp 4 puts them alone on stage 0."""
MOE_LAYOUTS = [ParallelLayout(pp=2, ep=4), ParallelLayout(pp=4, ep=2, pp_schedule="gpipe"),
               ParallelLayout(pp=2, virtual_stages=2, pp_schedule="interleaved-1f1b", ep=8),
               ParallelLayout(pp=4, ep=2, dp_replicate=2)]


@pytest.mark.parametrize("layout", MOE_LAYOUTS, ids=lambda lay: lay.resolve(64).describe())
def test_moe_fast_path_equals_the_graph_and_the_affine_form_holds(
        layout: ParallelLayout) -> None:
    profile = default_profile("H100-SXM5-80GB")
    recipe = TrainingRecipe(parallel=layout, ac="layer:3")
    arrays = pipeline_costs(FIRST_DENSE_MOE, profile, _island(8), seq_len=2048,
                            micro_batch=np.array([1, 2]), recipe=recipe)
    k = max(layout.pp, 4)
    fast = evaluate_pipeline(arrays, k).makespan_s
    for i, m in enumerate((1, 2)):
        one = pipeline_costs(FIRST_DENSE_MOE, profile, _island(8), seq_len=2048, micro_batch=m,
                             recipe=recipe)
        assert fast[i] == pytest.approx(simulate_pipeline(one, micro_batches=k).step_time_s,
                                        rel=1e-12)
    form = pipeline_decomposition(arrays)
    for k in range(form.min_accum, 4 * layout.pp + 1, form.accum_multiple):
        graph = simulate_pipeline(replace(arrays, stages=tuple(
            _pick(s, 0) for s in arrays.stages), p2p_s=np.atleast_1d(arrays.p2p_s)[0],
            optimizer_s=tuple(np.atleast_1d(o)[0] for o in arrays.optimizer_s)),
            micro_batches=k)
        assert form.step_time_s(k)[0] == pytest.approx(graph.step_time_s, rel=1e-9), k


def _pick(stage: StageCosts, i: int) -> StageCosts:
    """Configuration i of an array-valued stage."""
    def one(v: object) -> object:
        if isinstance(v, tuple):
            return tuple(one(x) for x in v)
        return float(np.atleast_1d(np.asarray(v, dtype=float))[i])
    return replace(stage, **{f: one(getattr(stage, f)) for f in (
        "forward_s", "backward_s", "forward_inline_s", "backward_inline_s", "all_gather_s",
        "reduce_scatter_s", "replicate_s", "root_all_gather_s", "root_reduce_scatter_s",
        "root_replicate_s", "block_forward_s", "block_all_gather_s", "block_reduce_scatter_s",
        "block_replicate_s")})


def test_each_stage_costs_its_own_block_kinds() -> None:
    """pp 4: stage 0 holds the two dense blocks, the others MoE blocks. The dense stage has no
    all-to-all and its blocks cost dense blocks; an MoE stage's blocks cost MoE blocks (the
    all-to-alls of a whole MoE layer each, the experts' FSDP share); the mean block of pp = 1
    would price every stage alike."""
    profile = default_profile("H100-SXM5-80GB")
    recipe = TrainingRecipe(parallel=ParallelLayout(pp=4, ep=4), ac="none")
    costs = pipeline_costs(FIRST_DENSE_MOE, profile, _island(2), seq_len=2048, micro_batch=1,
                           recipe=recipe)
    layout = recipe.parallel.resolve(16)
    dense = layout_unit_durations(kind_model(FIRST_DENSE_MOE, "dense"), profile, _island(2),
                                  seq_len=2048, micro_batch=1, recipe=recipe, layout=layout)
    moe = layout_unit_durations(kind_model(FIRST_DENSE_MOE, "moe"), profile, _island(2),
                                seq_len=2048, micro_batch=1, recipe=recipe, layout=layout)
    mean = layout_unit_durations(FIRST_DENSE_MOE, profile, _island(2), seq_len=2048,
                                 micro_batch=1, recipe=recipe, layout=layout)
    s0, s1 = costs.stages[0], costs.stages[1]
    assert s0.forward_inline_s == 0.0 and s0.backward_inline_s == 0.0   # no all-to-all
    assert s1.forward_inline_s == pytest.approx(2 * sum(moe.inline["block_forward"]))
    assert [op for op, _, _ in inline_collectives(recipe, "block_forward")] == \
        ["all_to_all", "all_to_all"]
    assert s0.block_forward_s == (dense.block_forward_s,) * 2
    assert s1.block_forward_s == (moe.block_forward_s,) * 2
    assert s0.block_all_gather_s == (dense.block_all_gather_s,) * 2
    assert s1.block_all_gather_s == (moe.block_all_gather_s,) * 2
    # (efsdp = dp_shard / ep = 1 here: an MoE block gathers only its dense part)
    assert len({moe.block_all_gather_s, mean.block_all_gather_s, dense.block_all_gather_s}) == 3
    assert s1.forward_inline_s != pytest.approx(2 * sum(mean.inline["block_forward"]))
    assert costs.stage_time_s(0) == pytest.approx(
        2 * (dense.block_forward_s + dense.block_backward_s))
    assert costs.stage_time_s(1) == pytest.approx(
        2 * (moe.block_forward_s + moe.block_backward_s + sum(moe.inline["block_forward"])
             + sum(moe.inline["block_backward"])))
    # the stage totals are the per-block parts (and the root's share on the end stages)
    for stage in costs.stages:
        assert stage.all_gather_s == pytest.approx(sum(stage.block_all_gather_s)
                                                   + stage.root_all_gather_s)
        assert stage.forward_s == pytest.approx(sum(stage.block_forward_s))
