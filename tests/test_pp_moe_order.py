"""The recorded step of a pipeline of MoE stages (catalogs/profiles/data/pp-moe-order.csv,
written by `python -m perfmodel.bench.pp_moe_record`: 4 gloo ranks under torchrun, pp 2 x
dp_shard 2, ep 2, a dense stage and an MoE stage, GPipe and 1F1B; the same on torch's fake
process group, which must agree, and 8 fake ranks with the experts FSDP-sharded over efsdp 2):
the simulator's per-rank collectives and transfers (`perfmodel.sim.pipeline.
pipeline_collectives`) equal it, stream by stream, in op, group, pass, unit, peer, dtype and
bytes; and the recording command still writes the shipped rows (slow)."""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path

import pytest

from perfmodel.bench.pp_moe_order import (
    COLUMNS,
    PP_MOE_SPEC,
    PP_MOE_WORLD,
    RECORDED_PP_MOE_CASES,
    PpMoeCase,
    PpMoeRecord,
    read_pp_moe_orders,
)
from perfmodel.sim.pipeline import PlannedCollective, kind_model, pipeline_collectives
from perfmodel.spec.arch import ModelSpec
from perfmodel.spec.paths import catalog_dir

PATH = catalog_dir() / "profiles" / "data" / "pp-moe-order.csv"
Key = tuple[str, str, int, str, int, str, int, str, float]
"""(op, group, stage, pass, micro, unit, peer pipeline rank, dtype, payload bytes)."""
_GROUP = {"dp_shard": "fsdp", "efsdp": "expert_fsdp"}
"""The recorder's mesh dimensions as the simulator names the groups."""


def _stream(r: PpMoeRecord) -> str:
    if r.op in ("send", "recv"):
        return "p2p"
    return "compute" if r.group in ("ep", "tp", "cp") else "comm"


def recorded_streams(rows: list[PpMoeRecord], case: PpMoeCase) -> dict[str, list[Key]]:
    """A rank's recorded operations by the simulator's stream, each as a `Key`: an
    all-to-all's bytes are what the rank sends to the other ranks (the recorded buffer holds
    its own slice too: times (ep - 1) / ep, as tests/test_moe_order.py compares them), a
    peer is its pipeline rank (global rank // dp_shard), a pass F / B / REDUCE."""
    out: dict[str, list[Key]] = {"compute": [], "comm": [], "p2p": []}
    for r in rows:
        payload = float(r.payload_bytes)
        if r.op == "all_to_all":
            payload = payload * (case.ep - 1) / case.ep
        pass_ = r.action.removeprefix("P2P_")
        peer = r.peer // case.dp_shard if r.peer >= 0 else -1
        unit = "" if r.op in ("send", "recv") else r.unit
        out[_stream(r)].append((r.op, _GROUP.get(r.group, r.group), r.stage, pass_, r.micro,
                                unit, peer, r.dtype, payload))
    return out


def simulated_streams(model: ModelSpec, case: PpMoeCase) -> dict[int, dict[str, list[Key]]]:
    """Per pipeline rank, the simulator's collectives by stream (plan order)."""
    planned = pipeline_collectives(model, case.recipe(), num_gpus=case.pp * case.dp_shard,
                                   seq_len=case.seq_len, micro_batch=case.micro_batch,
                                   micro_batches=case.micro_batches)

    def key(c: PlannedCollective) -> Key:
        return (c.op, c.group, c.stage, c.pass_, c.micro, c.unit, c.peer, c.dtype,
                c.payload_bytes)

    out: dict[int, dict[str, list[Key]]] = {}
    for rank, collectives in planned.items():
        streams: dict[str, list[Key]] = {"compute": [], "comm": [], "p2p": []}
        for c in collectives:
            streams[c.stream].append(key(c))
        out[rank] = streams
    return out


@pytest.fixture(scope="module")
def shipped() -> dict[str, dict[int, list[PpMoeRecord]]]:
    return read_pp_moe_orders(PATH)


def test_every_case_and_rank_is_recorded(
        shipped: dict[str, dict[int, list[PpMoeRecord]]]) -> None:
    with PATH.open() as fh:
        assert next(csv.reader(fh)) == list(COLUMNS)
    assert set(shipped) == set(RECORDED_PP_MOE_CASES)
    gloo = [c for c in RECORDED_PP_MOE_CASES.values() if c.source == "gloo"]
    assert {"gpipe", "1f1b"} == {c.schedule for c in gloo}
    assert {c.world_size for c in gloo} == {PP_MOE_WORLD}
    for name, ranks in shipped.items():
        assert sorted(ranks) == list(range(RECORDED_PP_MOE_CASES[name].world_size))
    # the experts' own FSDP units issue collectives only where efsdp = dp_shard / ep > 1
    for name, ranks in shipped.items():
        case = RECORDED_PP_MOE_CASES[name]
        efsdp = {r.unit for rows in ranks.values() for r in rows if r.group == "efsdp"}
        assert efsdp == ({"block1.experts"} if case.dp_shard // case.ep > 1 else set()), name
    # both stage kinds are there: the dense stage issues no all-to-all, the MoE stage does
    moe = PP_MOE_SPEC.moe
    assert moe is not None and not PP_MOE_SPEC.is_moe_layer(0) and PP_MOE_SPEC.is_moe_layer(1)
    for rows in shipped["gpipe-k2"].values():
        stages = {r.stage for r in rows if r.op == "all_to_all"}
        assert stages == ({1} if rows[0].rank >= 2 else set())


def test_fake_group_recordings_equal_the_gloo_ones(
        shipped: dict[str, dict[int, list[PpMoeRecord]]]) -> None:
    """The fake process group (one process playing each rank) records what the real gloo
    processes issue, so its 8-rank cases stand for what gloo would record there."""
    pairs = [(n, f"fake-{n}") for n, c in RECORDED_PP_MOE_CASES.items() if c.source == "gloo"]
    assert len(pairs) == 4
    for gloo, fake in pairs:
        assert {rank: [replace(r, case=gloo) for r in rows]
                for rank, rows in shipped[fake].items()} == shipped[gloo], gloo


@pytest.mark.parametrize("name", list(RECORDED_PP_MOE_CASES))
def test_simulated_order_equals_recorded(
        name: str, shipped: dict[str, dict[int, list[PpMoeRecord]]]) -> None:
    """Every rank, every stream: the transfers (sends and receives, in posting order), the
    inline all-to-alls of the MoE stage's passes, FSDP2's gathers (root share, then each
    block, in the first forward) and reduce-scatters (after the last backward, root first)."""
    case = RECORDED_PP_MOE_CASES[name]
    simulated = simulated_streams(PP_MOE_SPEC, case)
    for rank, rows in shipped[name].items():
        real = recorded_streams(rows, case)
        assert real["p2p"] and real["comm"]
        mine = simulated[rank // case.dp_shard]
        for stream in ("p2p", "compute", "comm"):
            assert mine[stream] == real[stream], (name, rank, stream)


def test_a_wrong_plan_is_caught(shipped: dict[str, dict[int, list[PpMoeRecord]]]) -> None:
    """The comparison fails on real errors: the mean block (every block carrying MoE
    all-to-alls, as the pp = 1 shortcut prices it), the MoE layer in the other stage, no
    expert parallelism (no all-to-alls; the experts gathered with the block), and a schedule
    other than the recorded one."""
    def matches(model: ModelSpec, run: PpMoeCase, recorded: str) -> bool:
        simulated = simulated_streams(model, run)
        real = RECORDED_PP_MOE_CASES[recorded]
        return all(simulated[rank // run.dp_shard] == recorded_streams(rows, real)
                   for rank, rows in shipped[recorded].items())

    case = RECORDED_PP_MOE_CASES["1f1b-k4"]
    assert matches(PP_MOE_SPEC, case, case.name)
    assert not matches(kind_model(PP_MOE_SPEC, "moe"), case, case.name)
    moe = PP_MOE_SPEC.moe
    assert moe is not None
    assert not matches(replace(PP_MOE_SPEC, moe=replace(moe, moe_layers=(0,))), case, case.name)
    assert not matches(PP_MOE_SPEC, replace(case, ep=1), case.name)
    assert not matches(PP_MOE_SPEC, replace(case, schedule="gpipe"), case.name)
    # 8 ranks: the experts FSDP-sharded over efsdp 2 (gathered after the block, reduced after
    # it); ep 4 (efsdp 1) leaves them out
    wide = RECORDED_PP_MOE_CASES["fake-1f1b-k4-dp4"]
    assert matches(PP_MOE_SPEC, wide, wide.name)
    assert not matches(PP_MOE_SPEC, replace(wide, ep=4), wide.name)


@pytest.mark.slow
def test_recording_command_writes_the_shipped_rows(
        shipped: dict[str, dict[int, list[PpMoeRecord]]], tmp_path: Path) -> None:
    """A fresh torchrun job (4 gloo ranks, about 15 s on two cores: marked slow, as
    tests/test_moe_order.py's re-record) of the smallest case writes the shipped rows."""
    pytest.importorskip("torch")
    from perfmodel.bench.pp_moe_record import record_pp_moe_orders  # imports torch

    out = tmp_path / "pp-moe-order.csv"
    assert record_pp_moe_orders(out, ["gpipe-k2"]) == {"recorded": 1, "skipped": 0}
    live = read_pp_moe_orders(out)
    assert set(live) == {"gpipe-k2"} and live["gpipe-k2"] == shipped["gpipe-k2"]
    with out.open() as fh:
        rows = list(csv.DictReader(fh))
    assert {r["torch_version"] for r in rows} == {_shipped_torch_version()}
    # a rerun records nothing (the case is there)
    assert record_pp_moe_orders(out, ["gpipe-k2"]) == {"recorded": 0, "skipped": 1}


def _shipped_torch_version() -> str:
    with PATH.open() as fh:
        (version,) = {r["torch_version"] for r in csv.DictReader(fh)}
    return version


def test_a_live_fake_group_recording_equals_the_shipped_one(
        shipped: dict[str, dict[int, list[PpMoeRecord]]]) -> None:
    """This torch still issues what the file records (one process, the fake process group)."""
    pytest.importorskip("torch")
    from perfmodel.bench.pp_moe_record import record_fake  # imports torch

    live: dict[int, list[PpMoeRecord]] = {}
    for record in record_fake(RECORDED_PP_MOE_CASES["fake-gpipe-k2"]):
        live.setdefault(record.rank, []).append(record)
    assert live == shipped["fake-gpipe-k2"]
