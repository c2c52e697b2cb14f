"""The pipeline orders of the performance model equal what torch.distributed.pipelining runs.

Ground truth: catalogs/profiles/data/pp-order.csv, recorded by `shardmeter bench pipeline-order`
(`perfmodel.bench.pipeline_order`) from torch 2.13's ScheduleGPipe, Schedule1F1B and
ScheduleInterleaved1F1B: on 2 real gloo processes (pp 2, k 2, 4, 8) and on torch's fake process
group (the same cases, 3 and 4 virtual stages, pp 4). Per pipeline rank, the recorded compute
order must be `perfmodel.spec.pipeline.rank_order`, the compute and point-to-point sequence in
posting order `posting_order`, every send / receive must have the peer, shape, dtype and bytes the
model gives it (`boundary_bytes`), and the fake-group recordings must equal the gloo ones; the
simulator's plan (`perfmodel.sim.pipeline`) must send the recorded sends in the recorded order,
each a send_recv of those bytes. The file is checked without torch; one live re-recording per
source checks that the shipped file is what this torch still runs.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import pytest

from perfmodel.bench.pipeline_order import (
    ORDER_MICRO_BATCH,
    ORDER_SEQ_LEN,
    ORDER_SPEC,
    OrderRecord,
    read_orders,
)
from perfmodel.profiles.profile import default_profile
from perfmodel.sim.pipeline import pipeline_costs, pipeline_plan
from perfmodel.spec.catalog import get_gpu
from perfmodel.spec.hardware import IslandSpec
from perfmodel.spec.layout import ParallelLayout, place_group
from perfmodel.spec.pipeline import (
    Action,
    Transfer,
    boundary_bytes,
    p2p_order,
    posting_order,
    rank_order,
)
from perfmodel.spec.recipe import DEFAULT_RECIPE

DATA = Path(__file__).resolve().parent.parent / "catalogs" / "profiles" / "data" / "pp-order.csv"
Key = tuple[str, str, int, int, int, int]
"""(source, schedule, pp, virtual_stages, micro_batches, rank)."""


def _key(r: OrderRecord) -> Key:
    return (r.source, r.schedule, r.pp, r.virtual_stages, r.micro_batches, r.rank)


def _by_rank(records: list[OrderRecord]) -> dict[Key, list[OrderRecord]]:
    out: dict[Key, list[OrderRecord]] = defaultdict(list)
    for r in records:
        out[_key(r)].append(r)
    for rows in out.values():
        assert [r.seq for r in rows] == list(range(len(rows)))
    return dict(out)


def _token(r: OrderRecord) -> str:
    return f"{r.stage}{r.action}{r.micro}"


@pytest.fixture(scope="module")
def shipped() -> dict[Key, list[OrderRecord]]:
    return _by_rank(read_orders(DATA))


def test_the_recording_covers_every_schedule_on_gloo_and_pp_4(
        shipped: dict[Key, list[OrderRecord]]) -> None:
    cases = {(s, sched, pp, v) for s, sched, pp, v, _, _ in shipped}
    for schedule, v in (("gpipe", 1), ("1f1b", 1), ("interleaved-1f1b", 2)):
        assert ("gloo", schedule, 2, v) in cases and ("fake", schedule, 4, v) in cases
    # every rank of every case is there
    for source, schedule, pp, v, k, _ in shipped:
        assert all((source, schedule, pp, v, k, r) in shipped for r in range(pp))


def test_compute_order_per_rank_is_rank_order(shipped: dict[Key, list[OrderRecord]]) -> None:
    for (source, schedule, pp, v, k, rank), rows in shipped.items():
        recorded = [Action(r.stage, r.action, r.micro) for r in rows if r.action in ("F", "B")]
        assert recorded == list(rank_order(schedule, pp, v, k, rank)), (source, schedule, pp, v,
                                                                         k, rank)


def test_posting_order_with_transfers_is_the_models(
        shipped: dict[Key, list[OrderRecord]]) -> None:
    """Compute and point-to-point together, in the order torch issues them: receives right
    before their consumer for GPipe and 1F1B, as early as torch's lowering places them for
    interleaved 1F1B."""
    for (source, schedule, pp, v, k, rank), rows in shipped.items():
        expected = [str(item) for item in posting_order(schedule, pp, v, k, rank)]
        assert [_token(r) for r in rows] == expected, (source, schedule, pp, v, k, rank)


def test_every_transfer_has_the_models_peer_shape_dtype_and_bytes(
        shipped: dict[Key, list[OrderRecord]]) -> None:
    for (_, schedule, pp, v, k, rank), rows in shipped.items():
        transfers = [r for r in rows if r.action not in ("F", "B")]
        model = p2p_order(schedule, pp, v, k, rank)
        assert [Transfer(r.action, r.stage, r.micro, r.peer) for r in transfers] == list(model)
        for r in transfers:
            assert r.shape == f"{r.micro_batch}x{r.seq_len}x{r.hidden_size}"
            assert r.dtype == "fp32"
            assert r.payload_bytes == boundary_bytes(r.micro_batch, r.seq_len, r.hidden_size,
                                                     "fp32")


def test_fake_group_recordings_equal_the_gloo_ones(
        shipped: dict[Key, list[OrderRecord]]) -> None:
    gloo = [k for k in shipped if k[0] == "gloo"]
    assert len(gloo) >= 18
    for key in gloo:
        fake = ("fake", *key[1:])

        def fields(r: OrderRecord) -> tuple[object, ...]:
            return (r.action, r.stage, r.micro, r.peer, r.shape, r.dtype, r.payload_bytes,
                    r.batch)

        assert [fields(r) for r in shipped[fake]] == [fields(r) for r in shipped[key]], key


@pytest.mark.parametrize(("schedule", "v"), [("gpipe", 1), ("1f1b", 1), ("interleaved-1f1b", 2),
                                             ("interleaved-1f1b", 3), ("interleaved-1f1b", 4)])
@pytest.mark.parametrize(("pp", "k"), [(2, 2), (3, 6), (4, 8), (8, 8), (8, 16)])
def test_every_send_meets_one_receive_after_its_producer(schedule: str, v: int, pp: int,
                                                         k: int) -> None:
    """Beyond the recorded cases: each boundary carries one activation and one gradient per
    micro-batch; a send follows the pass that produced it at once; a receive comes before the
    pass that consumes it; sends and receives pair up across ranks."""
    stages = pp * v
    sends: set[tuple[str, int, int]] = set()
    recvs: set[tuple[str, int, int]] = set()
    for rank in range(pp):
        order = posting_order(schedule, pp, v, k, rank)
        for i, item in enumerate(order):
            if not isinstance(item, Transfer):
                continue
            if item.kind.startswith("SEND"):
                assert order[i - 1] == Action(item.stage, item.kind[-1], item.micro)
                to = item.stage + (1 if item.kind == "SEND_F" else -1)
                assert item.peer == to % pp
                sends.add((item.kind[-1], to, item.micro))
            else:
                consumer = Action(item.stage, item.kind[-1], item.micro)
                assert consumer in order[i + 1:]
                recvs.add((item.kind[-1], item.stage, item.micro))
    expected = {("F", s, m) for s in range(1, stages) for m in range(k)} | {
        ("B", s, m) for s in range(stages - 1) for m in range(k)}
    assert sends == recvs == expected


def test_boundary_bytes_follow_the_layout() -> None:
    assert boundary_bytes(2, 16, 32, "fp32") == 2 * 16 * 32 * 4
    assert boundary_bytes(1, 8192, 16384, "bf16", tp=8, cp=2) == 8192 / 2 * 16384 * 2 / 8
    assert boundary_bytes(1, 8192, 16384, "bf16", tp=8, sequence_parallel=False) == \
        8192 * 16384 * 2


def test_the_simulators_sends_are_the_recorded_ones(
        shipped: dict[Key, list[OrderRecord]]) -> None:
    """Each rank's send tasks in the simulator's plan, in plan order, are the sends torch
    posted, in posting order."""
    for (source, schedule, pp, v, k, rank), rows in shipped.items():
        layout = ParallelLayout(dp_shard=1, pp=pp, virtual_stages=v, pp_schedule=schedule)
        planned = []
        for task in pipeline_plan(layout, k):
            if task.rank == rank and task.kind == "send_recv":
                words = task.name.split()   # "send act 0->1 m3"
                stage, micro = int(words[2].split("->")[0]), int(words[3][1:])
                planned.append(("SEND_F" if words[1] == "act" else "SEND_B", stage, micro))
        recorded = [(r.action, r.stage, r.micro) for r in rows if r.action.startswith("SEND")]
        assert planned == recorded, (source, schedule, pp, v, k, rank)


@pytest.mark.parametrize(("gpu", "nodes", "per_node", "layout"), [
    ("CPU-x86-2core", 1, 2, ParallelLayout(dp_shard=1, pp=2)),
    ("H100-SXM5-80GB", 2, 8, ParallelLayout(pp=2, tp=2, cp=2)),
    ("H100-SXM5-80GB", 2, 8, ParallelLayout(pp=2, tp=4, sequence_parallel=False)),
])
def test_the_simulators_transfer_carries_the_recorded_bytes(gpu: str, nodes: int, per_node: int,
                                                            layout: ParallelLayout) -> None:
    """The simulator's boundary transfer is send_recv of `boundary_bytes` (the recorded payload
    on the recorded CPU case: 2 x 16 x 32 fp32), on the link the pp neighbours span."""
    device = get_gpu(gpu)
    island = IslandSpec(gpu=device, num_nodes=nodes, gpus_per_node=per_node,
                        intra_link=device.intra_node_link, inter_link=device.inter_node_link,
                        nics_per_node=device.nics_per_node)
    profile = default_profile(gpu)
    dtype = "fp32" if gpu.startswith("CPU") else "bf16"
    recipe = replace(DEFAULT_RECIPE.with_overrides(param_dtype=dtype, ac="none"),
                     parallel=layout)
    costs = pipeline_costs(ORDER_SPEC, profile, island, seq_len=ORDER_SEQ_LEN,
                           micro_batch=ORDER_MICRO_BATCH, recipe=recipe)
    resolved = layout.resolve(island.num_gpus)
    payload = boundary_bytes(ORDER_MICRO_BATCH, ORDER_SEQ_LEN, ORDER_SPEC.hidden_size, dtype,
                             tp=resolved.tp, cp=resolved.cp,
                             sequence_parallel=resolved.sequence_parallel)
    if gpu.startswith("CPU"):
        assert payload == 4096   # the recorded payload_bytes
    pair = place_group("pp", size=2, stride=resolved.stride("pp"),
                       gpus_per_node=per_node, intra_link=island.intra_link,
                       inter_link=island.inter_link, nics_per_node=island.nics_per_node)
    assert costs.p2p_s == pytest.approx(profile.group_comm_time_s("send_recv", pair, payload),
                                        rel=1e-12)


# ---- live re-recordings (torch) ----------------------------------------------------------------

def _live(records: list[OrderRecord], shipped: dict[Key, list[OrderRecord]]) -> None:
    live = _by_rank(records)
    assert live
    for key, rows in live.items():
        assert rows == shipped[key], key


def test_a_live_gloo_recording_equals_the_shipped_one(
        shipped: dict[Key, list[OrderRecord]]) -> None:
    """Two real gloo processes, interleaved 1F1B (the schedule with the most transfers) and
    1F1B: this torch still runs what the file records."""
    pytest.importorskip("torch")
    from perfmodel.bench.pipeline_order import OrderCase, record_gloo  # imports torch

    _live(record_gloo([OrderCase(schedule="interleaved-1f1b", pp=2, virtual_stages=2,
                                 micro_batches=4),
                       OrderCase(schedule="1f1b", pp=2, micro_batches=2)]), shipped)


def test_a_live_fake_group_recording_equals_the_shipped_one(
        shipped: dict[Key, list[OrderRecord]]) -> None:
    pytest.importorskip("torch")
    from perfmodel.bench.pipeline_order import OrderCase, record_fake  # imports torch

    _live(record_fake([OrderCase(schedule="1f1b", pp=4, micro_batches=4)]), shipped)
