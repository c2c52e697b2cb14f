"""The recorded EP collective order (catalogs/profiles/data/moe-orders.csv, written by
`python -m perfmodel.bench.moe_record`): what it holds, and that the command writes it again."""

from __future__ import annotations

import csv
from collections import Counter

import pytest

from perfmodel.bench.layout_order import read_orders
from perfmodel.bench.moe import expert_capacity
from perfmodel.bench.moe_order import COLUMNS, MOE_ORDER_SPEC, RECORDED_MOE_CASES
from perfmodel.spec.paths import catalog_dir

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
