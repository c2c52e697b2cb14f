"""The recorded EP collective order (catalogs/profiles/data/moe-orders.csv, written by
`python -m perfmodel.bench.moe_record`): what it holds, that the command writes it again, and
that the simulator's typed plan (`perfmodel.sim.fsdp.step_plan` with `moe_layers`) lists the
same collectives per stream (`perfmodel.bench.moe_order` says where the two legitimately
differ and how the comparison accounts for it)."""

from __future__ import annotations

import csv
from collections import Counter
from dataclasses import replace

import pytest

from perfmodel.bench.layout_order import by_stream, read_orders, simulated_collectives
from perfmodel.bench.moe import expert_capacity
from perfmodel.bench.moe_order import COLUMNS, MOE_ORDER_SPEC, RECORDED_MOE_CASES
from perfmodel.sim.fsdp import (
    COMM_STREAM,
    COMPUTE_STREAM,
    StepCosts,
    TaskSpec,
    UnitCosts,
    simulate_step,
    step_plan,
)
from perfmodel.spec.layout import ParallelLayout
from perfmodel.spec.paths import catalog_dir
from perfmodel.spec.recipe import DEFAULT_RECIPE

PATH = catalog_dir() / "profiles" / "data" / "moe-orders.csv"


def test_every_case_is_recorded_with_the_columns() -> None:
    assert next(csv.reader(PATH.open())) == list(COLUMNS)
    assert set(read_orders(PATH)) == set(RECORDED_MOE_CASES)


@pytest.mark.parametrize("name", list(RECORDED_MOE_CASES))
def test_all_to_alls_per_moe_layer_and_micro_step(name: str) -> None:
    world, run = RECORDED_MOE_CASES[name]
    moe = MOE_ORDER_SPEC.moe
    assert moe is not None
    records = read_orders(PATH)[name]
    capacity = expert_capacity(run.micro_batch * run.seq_len, moe, run.capacity_factor)
    a2a = [r for r in records if r.op == "all_to_all"]
    # dispatch and combine in forward; their reverses in backward, after a full-AC recompute
    per_step = Counter((r.micro_step, r.phase) for r in a2a)
    backward = 4 if run.recipe.ac == "full" else 2
    for step in range(run.accum_steps):
        assert per_step[(step, "forward")] == 2 * len(moe.moe_layers)
        assert per_step[(step, "backward")] == backward * len(moe.moe_layers)
    for r in a2a:
        assert r.group == "ep" and r.unit == f"block{moe.moe_layers[0]}"
        assert r.in_numel == r.out_numel == moe.num_experts * capacity * MOE_ORDER_SPEC.hidden_size
    fsdp = {(r.group, r.unit) for r in records if r.op in ("all_gather", "reduce_scatter")}
    expert_units = {u for g, u in fsdp if g == "efsdp"}
    # the experts' own FSDP unit issues collectives only when efsdp = world / ep > 1
    assert expert_units == ({"block1.experts"} if world // run.ep > 1 else set())
    assert {g for g, _ in fsdp} - {"efsdp"} == {"dp_shard"}


@pytest.mark.slow
def test_recording_command_writes_the_shipped_rows() -> None:
    from perfmodel.bench.moe_record import record_moe_orders

    world, run = RECORDED_MOE_CASES["ep2"]
    recorded = record_moe_orders(["ep2"], world)
    assert all(ranks[0] == recorded[0][0] for ranks in recorded)
    assert recorded[0][0] == read_orders(PATH)["ep2"]
    with PATH.open() as f:
        rows = [row for row in csv.DictReader(f) if row["case"] == "ep2"]
    assert {(r["world_size"], r["ep"], r["accum_steps"], r["micro_batch"], r["seq_len"])
            for r in rows} == {(str(world), str(run.ep), str(run.accum_steps),
                                str(run.micro_batch), str(run.seq_len))}


# ---- the simulator against the recording ------------------------------------------------------

@pytest.mark.parametrize("name", list(RECORDED_MOE_CASES))
def test_simulated_order_equals_recorded(name: str) -> None:
    """Per stream, the typed plan's collectives equal the recorded ones: the all-to-alls on the
    compute stream, FSDP2's (the experts' own unit over efsdp too) on the communication one."""
    world, run = RECORDED_MOE_CASES[name]
    real = by_stream(read_orders(PATH)[name], run.ep)
    simulated = simulated_collectives(MOE_ORDER_SPEC, run.layout_run(), world)
    assert real[COMPUTE_STREAM] and real[COMM_STREAM]
    assert real[COMPUTE_STREAM] == simulated[COMPUTE_STREAM]
    assert real[COMM_STREAM] == simulated[COMM_STREAM]


def test_a_wrong_plan_is_caught() -> None:
    """The comparison fails on real errors: the MoE layer in the wrong block (wrong unit and a
    missing all-to-all owner), a wrong all-to-all size (capacity factor), no expert
    parallelism (all-to-alls missing, the experts gathered with the block), and ep = world
    (no expert FSDP unit gathered over efsdp)."""
    world, run = RECORDED_MOE_CASES["ep2-efsdp2"]
    real = by_stream(read_orders(PATH)["ep2-efsdp2"], run.ep)
    moe = MOE_ORDER_SPEC.moe
    assert moe is not None
    first = replace(MOE_ORDER_SPEC, moe=replace(moe, moe_layers=(0,)))
    assert simulated_collectives(first, run.layout_run(), world) != real
    wider = replace(run, capacity_factor=1.5)
    assert simulated_collectives(MOE_ORDER_SPEC, wider.layout_run(), world)[COMPUTE_STREAM] \
        != real[COMPUTE_STREAM]
    no_ep = simulated_collectives(MOE_ORDER_SPEC, replace(run, ep=1).layout_run(), world)
    assert no_ep[COMPUTE_STREAM] == [] and no_ep[COMM_STREAM] != real[COMM_STREAM]
    all_ep = simulated_collectives(MOE_ORDER_SPEC, replace(run, ep=4).layout_run(), world)
    assert all_ep[COMM_STREAM] != real[COMM_STREAM]


def _untyped(plan: tuple[TaskSpec, ...]) -> list[tuple[object, ...]]:
    return [(t.name, t.stream, t.kind, t.unit, t.cost, t.group, t.payload)
            for t in plan if t.group != "expert_fsdp"]


def test_typed_plan_of_an_all_moe_model_is_the_mean_plan() -> None:
    """When every layer is an MoE layer the typed blocks are the mean block: the typed plan is
    the planner's plan plus the experts' own FSDP tasks (ep > 1), under every checkpointing
    mode; a dense block of a typed plan has no all-to-all."""
    for ac in ("none", "op-sac", "full"):
        recipe = replace(DEFAULT_RECIPE.with_overrides(ac=ac), parallel=ParallelLayout(ep=2))
        mean = step_plan(5, recipe=recipe, accum_steps=2)
        typed = step_plan(5, recipe=recipe, accum_steps=2, moe_layers=(0, 1, 2, 3))
        assert _untyped(typed) == _untyped(mean)
        experts = [t for t in typed if t.group == "expert_fsdp"]
        assert len(experts) == 2 * 2 * 4 + 2 * 3   # AG + RS per block per micro-step, bwd AGs
        dense = step_plan(5, recipe=recipe, accum_steps=2, moe_layers=(1, 3))
        assert {t.unit for t in dense if t.kind == "all_to_all"} == {1, 3}
        assert {t.unit for t in dense if t.group == "expert_fsdp"} == {1, 3}


def test_typed_step_times_the_expert_units() -> None:
    """A typed step is timed like any other: its expert collectives run on the communication
    stream for the durations its units give them."""
    block = UnitCosts(name="b", forward_s=1.0, backward_s=2.0, all_gather_s=0.5,
                      reduce_scatter_s=0.5, forward_inline_s=(0.1, 0.1),
                      backward_inline_s=(0.1, 0.1), expert_all_gather_s=0.25,
                      expert_reduce_scatter_s=0.75)
    dense = replace(block, forward_inline_s=(), backward_inline_s=(), expert_all_gather_s=0.0,
                    expert_reduce_scatter_s=0.0)
    root = replace(dense, name="root")
    recipe = replace(DEFAULT_RECIPE.with_overrides(ac="none"), parallel=ParallelLayout(ep=2))
    costs = StepCosts(units=(replace(dense, name="block0"), replace(block, name="block1"), root),
                      optimizer_s=0.0, recipe=recipe, moe_layers=(1,))
    result = simulate_step(costs)
    # gathers: root, block0, block1 + experts, block0 again in backward; reduce-scatters: 3 + 1;
    # block1's four all-to-alls (communication, run inline on the compute stream)
    assert result.comm_busy_s == pytest.approx(4 * 0.5 + 0.25 + 3 * 0.5 + 0.75 + 4 * 0.1)
    assert result.compute_busy_s == pytest.approx(3 * 3.0)
    with pytest.raises(ValueError, match="moe_layers"):
        step_plan(3, recipe=recipe, moe_layers=(2,))
