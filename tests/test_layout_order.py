"""The simulator's collectives equal what real torch steps of parallel layouts issue (gloo, CPU).

`perfmodel.bench.layout_record` trains a 2-block Llama with torchtitan's tensor-parallel plan
(with and without sequence parallelism), FSDP2 x TP on a 2 x 2 mesh and HSDP on a 2 x 2 mesh,
under several checkpointing and accumulation modes (`RECORDED_CASES`), and records every
collective rank 0 issues in one step, with its micro-step, phase, unit, mesh dimension, dtype
and size. The recording is the dataset catalogs/profiles/data/layout-orders.csv, made by

    python -m perfmodel.bench.layout_record -o catalogs/profiles/data/layout-orders.csv

(about 2 minutes on 2 cores; every rank's sequence is checked identical while recording). Here
the simulator's plan for each case (`simulated_collectives`) must list, per stream, the same
collectives in the same order; a live re-recording of small cases must equal the dataset.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from perfmodel.bench.layout_order import (
    ORDER_SPEC,
    RECORDED_CASES,
    Collective,
    by_stream,
    key_of,
    read_orders,
    simulated_collectives,
)
from perfmodel.sim.fsdp import COMM_STREAM, COMPUTE_STREAM, inline_collectives
from perfmodel.spec.layout import ParallelLayout
from perfmodel.spec.paths import catalog_dir
from perfmodel.spec.recipe import DEFAULT_RECIPE

DATASET = catalog_dir() / "profiles" / "data" / "layout-orders.csv"


@pytest.fixture(scope="module")
def recorded() -> dict[str, list[Collective]]:
    return read_orders(DATASET)


def test_dataset_holds_every_case(recorded: dict[str, list[Collective]]) -> None:
    assert set(recorded) == set(RECORDED_CASES)
    assert all(recorded[name] for name in RECORDED_CASES)


@pytest.mark.parametrize("name", list(RECORDED_CASES))
def test_simulated_order_equals_recorded(recorded: dict[str, list[Collective]],
                                         name: str) -> None:
    world, run = RECORDED_CASES[name]
    real = by_stream(recorded[name])
    simulated = simulated_collectives(ORDER_SPEC, run, world)
    assert real[COMPUTE_STREAM] == simulated[COMPUTE_STREAM]
    assert real[COMM_STREAM] == simulated[COMM_STREAM]


def test_recorded_cases_cover_the_claims(recorded: dict[str, list[Collective]]) -> None:
    """The dataset shows what the claims rest on, so that a case list shrunk by mistake fails
    here: every tensor-parallel collective kind, HSDP's replica all-reduce, collectives inside
    the optimizer and recomputed ones."""
    def ops(name: str, **where: str) -> set[tuple[str, str]]:
        return {(r.op, r.group) for r in recorded[name]
                if all(getattr(r, k) == v for k, v in where.items())}

    assert ops("tp") == {("all_reduce", "tp"), ("all_gather", "tp")}
    assert ("reduce_scatter", "tp") in ops("tp-sp") and ("all_gather", "tp") in ops("tp-sp")
    assert ops("tp-sp", phase="optimizer") == {("all_reduce", "tp")}
    assert ops("fsdp-tp-sp", phase="optimizer") == set()
    assert ("all_reduce", "dp_replicate") in ops("hsdp")
    # checkpointing recomputes forward collectives: more in backward than without it
    assert (sum(r.phase == "backward" for r in recorded["tp-op-sac"])
            > sum(r.phase == "backward" for r in recorded["tp"]))
    assert {r.dtype for r in recorded["fsdp-tp-sp"]} == {"bf16", "fp32"}


def test_a_wrong_plan_is_caught(recorded: dict[str, list[Collective]]) -> None:
    """The comparison can fail: the same case planned without sequence parallelism, or with an
    inferred dp_shard (planned as FSDP: norm gradients all-reduced every micro-step in
    post-backward, not once in the optimizer), differs from the recording."""
    world, run = RECORDED_CASES["tp-sp"]
    real = by_stream(recorded["tp-sp"])
    no_sp = replace(run, recipe=replace(
        run.recipe, parallel=replace(run.recipe.parallel, sequence_parallel=False)))
    assert simulated_collectives(ORDER_SPEC, no_sp, world)[COMPUTE_STREAM] != real[COMPUTE_STREAM]
    inferred = replace(run, recipe=replace(run.recipe, parallel=ParallelLayout(tp=2)))
    assert simulated_collectives(ORDER_SPEC, inferred, world)[COMPUTE_STREAM] != \
        real[COMPUTE_STREAM]


def test_inline_collectives_per_place() -> None:
    """The claim in numbers for one block of torchtitan's recipe (op-sac) with sequence
    parallelism under FSDP: forward AG RS AG RS; backward AG, the recomputed AG AG (op-sac
    saves reduce-scatters), RS AG RS; the post-backward all-reduces one partial gradient per
    norm; nothing inside the optimizer."""
    recipe = replace(DEFAULT_RECIPE, parallel=ParallelLayout(tp=4))
    ops = {where: [op for op, _, _ in inline_collectives(recipe, where, 2, 9)]
           for where in ("block_forward", "block_backward", "block_post_backward", "optimizer")}
    assert ops["block_forward"] == ["all_gather", "reduce_scatter"] * 2
    assert ops["block_backward"] == ["all_gather"] * 3 + ["reduce_scatter", "all_gather",
                                                          "reduce_scatter"]
    assert ops["block_post_backward"] == ["all_reduce"] * 2
    assert ops["optimizer"] == []
    pure = replace(DEFAULT_RECIPE, parallel=ParallelLayout(tp=4, dp_shard=1))
    assert inline_collectives(pure, "block_post_backward", 2, 9) == ()
    assert len(inline_collectives(pure, "optimizer", 2, 9)) == 9


# ---- live: real gloo runs ------------------------------------------------------------------

LIVE = ("tp-sp",)


def _live(names: tuple[str, ...]) -> dict[str, list[Collective]]:
    pytest.importorskip("torch")
    # lazy: torch, the optional [bench] extra
    from perfmodel.bench.layout_record import record_layout_orders

    world = RECORDED_CASES[names[0]][0]
    assert all(RECORDED_CASES[n][0] == world for n in names)
    per_rank = record_layout_orders(ORDER_SPEC, [RECORDED_CASES[n][1] for n in names],
                                    world_size=world)
    for rank in per_rank[1:]:
        assert rank == per_rank[0], "the ranks issued different collectives"
    return dict(zip(names, per_rank[0], strict=True))


def test_live_recording_equals_dataset_and_simulator(
        recorded: dict[str, list[Collective]]) -> None:
    """A pure-TP case re-recorded now (2 gloo ranks) equals the dataset collective by
    collective, and so the simulator."""
    live = _live(LIVE)
    for name in LIVE:
        assert [key_of(r) for r in live[name]] == [key_of(r) for r in recorded[name]]
        assert live[name] == recorded[name]


@pytest.mark.slow
def test_live_recording_of_four_rank_layouts(recorded: dict[str, list[Collective]]) -> None:
    """FSDP2 x TP and HSDP on 2 x 2 meshes re-recorded now (4 gloo ranks) equal the dataset."""
    names = tuple(n for n, (world, _) in RECORDED_CASES.items() if world == 4)
    live = _live(names)
    for name in names:
        assert live[name] == recorded[name]
