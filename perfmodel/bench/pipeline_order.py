"""Record what torch.distributed.pipelining runs in a training step, in order (ground truth for the
pipeline simulator's orders; issue 24).

Per pipeline rank, the recorder logs every compute action (`PipelineStage.forward_one_chunk` /
`backward_one_chunk`: stage, F or B, micro-batch) and every point-to-point operation the schedule
posts (`schedules._batch_p2p`, the one function all of torch's schedules post through: send or
receive, peer rank, shape, dtype, bytes, the batch it was posted in), each tagged with torch's
own meaning (SEND_F, RECV_F, SEND_B, RECV_B; stage, micro-batch) by wrapping the stage's
`get_{fwd,bwd}_{send,recv}_ops`. Only Python attributes are replaced, and only while recording.
The step recorded is the second: the first also runs torch's one-off warm-up exchange.

Two sources:

* `record_gloo(cases)`: `world_size` real CPU processes on gloo (torch.multiprocessing), the
  benchmark transformer split into stages (`perfmodel.bench.pipeline_stages`), real tensors, real
  send/recv; one model and schedule per case.
* `record_fake(cases)`: one process plays each rank in turn against torch's fake process group
  (every collective and p2p a no-op), so any pp runs without that many processes. A rank's order
  does not depend on timing (the runtime only blocks on waits), and for pp 2 the fake orders equal
  the gloo ones token for token (tests/test_pipeline_order.py); the fake group cannot carry the
  first step's shape vote, so the stages are put in static-shape mode directly (they are given
  static shapes anyway).

`write_orders` appends the records to a CSV (`ORDER_COLUMNS`; `shardmeter bench pipeline-order`
writes catalogs/profiles/data/pp-order.csv) and `read_orders` reads them back without torch.
"""

from __future__ import annotations

import csv
import datetime
import json
import os
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Self

from perfmodel.bench.common import CsvLog
from perfmodel.bench.environment import append_environment, environment_record
from perfmodel.spec.arch import ModelSpec
from perfmodel.spec.errors import DatasetError, UserInputError
from perfmodel.spec.layout import PP_SCHEDULES
from perfmodel.spec.pipeline import check_schedule

ORDER_SPEC = ModelSpec(name="pp-order", hidden_size=32, num_layers=8, num_heads=4, num_kv_heads=2,
                       intermediate_size=64, vocab_size=128)
"""The model the orders are recorded on: 8 blocks, so up to 8 stages (pp 4 x 2 virtual)."""
ORDER_MICRO_BATCH = 2
"""Sequences per micro-batch of the recorded steps."""
ORDER_SEQ_LEN = 16
"""Tokens per sequence of the recorded steps."""

_DTYPE_NAMES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "int64": "int64"}


@dataclass(frozen=True, kw_only=True, slots=True)
class OrderCase:
    """One recorded schedule."""

    schedule: str
    """gpipe, 1f1b or interleaved-1f1b."""
    pp: int
    """Pipeline ranks."""
    virtual_stages: int = 1
    """Stages per rank (interleaved 1F1B: 2 or more)."""
    micro_batches: int
    """Micro-batches k per step."""

    def __post_init__(self) -> None:
        if self.schedule not in PP_SCHEDULES:
            raise UserInputError(f"unknown pipeline schedule {self.schedule!r}",
                                 hint=f"use one of {', '.join(PP_SCHEDULES)}.")
        if self.pp < 2 or self.virtual_stages < 1:
            raise UserInputError(f"pp {self.pp}, virtual stages {self.virtual_stages}: a recorded "
                                 "pipeline needs pp >= 2 and virtual_stages >= 1",
                                 hint="record pp 2 (gloo) or pp 4 (fake process group).")
        if (self.virtual_stages > 1) != (self.schedule == "interleaved-1f1b"):
            raise UserInputError(f"{self.schedule} with {self.virtual_stages} virtual stages",
                                 hint="interleaved-1f1b takes 2 or more virtual stages, gpipe "
                                      "and 1f1b one.")
        check_schedule(self.schedule, self.pp, self.virtual_stages, self.micro_batches)
        if self.pp * self.virtual_stages > ORDER_SPEC.num_layers:
            raise UserInputError(f"{self.pp * self.virtual_stages} stages: the recording model "
                                 f"has {ORDER_SPEC.num_layers} blocks",
                                 hint=f"use pp x virtual_stages <= {ORDER_SPEC.num_layers}.")


@dataclass(frozen=True, kw_only=True, slots=True)
class OrderRecord:
    """One action a pipeline rank ran or posted, in its order."""

    source: str
    """gloo (real processes) or fake (torch's fake process group, one process)."""
    schedule: str
    """The case's schedule."""
    pp: int
    """The case's pipeline ranks."""
    virtual_stages: int
    """The case's stages per rank."""
    micro_batches: int
    """The case's micro-batches per step."""
    micro_batch: int
    """Sequences per micro-batch."""
    seq_len: int
    """Tokens per sequence."""
    hidden_size: int
    """Model width."""
    rank: int
    """Pipeline rank that ran or posted it."""
    seq: int
    """Position in the rank's sequence (0-based)."""
    action: str
    """F, B (compute) or SEND_F, RECV_F, SEND_B, RECV_B (point-to-point)."""
    stage: int
    """Global stage index (the posting stage for p2p, as torch tags it)."""
    micro: int
    """Micro-batch index."""
    peer: int = -1
    """Rank at the other end of a p2p operation (-1 for compute)."""
    shape: str = ""
    """Tensor shape of a p2p operation, e.g. 2x16x32."""
    dtype: str = ""
    """Element type of a p2p operation (fp32, bf16, ...)."""
    payload_bytes: int = 0
    """Bytes of a p2p operation."""
    batch: int = -1
    """Index of the batch the operation was posted in (operations of one batch are posted
    together); -1 for compute."""


ORDER_COLUMNS = tuple(f.name for f in fields(OrderRecord))
ORDER_KEY = ("source", "schedule", "pp", "virtual_stages", "micro_batches", "rank", "seq")
_NUMERIC = ("pp", "virtual_stages", "micro_batches", "micro_batch", "seq_len", "hidden_size",
            "rank", "seq", "stage", "micro", "peer", "payload_bytes", "batch")


P2P_METHODS = (("get_fwd_send_ops", "SEND_F"), ("get_fwd_recv_ops", "RECV_F"),
               ("get_bwd_send_ops", "SEND_B"), ("get_bwd_recv_ops", "RECV_B"))
"""A torch stage's methods that build its p2p operations, and the kind each one's tag names."""


class StageHooks:
    """Hooks on a rank's torch stages, undone on exit: `schedules._batch_p2p` hands every
    posted batch of p2p operations to `on_batch` (each operation carrying the
    `_shardmeter_tag` (kind, stage, micro) its stage's P2P_METHODS put on it), and subclasses
    wrap each stage's passes in `wrap_stage` (with `wrap_method`). Used by `Recorder` here and
    by `perfmodel.bench.pp_moe_record`."""

    def __init__(self, stages: Sequence[Any]) -> None:
        self.stages = list(stages)
        self._undo: list[Callable[[], None]] = []

    def on_batch(self, ops: list[Any]) -> None:
        """One batch of p2p operations, before torch posts it."""

    def wrap_stage(self, stage: Any) -> None:
        """Wrap `stage`'s passes (before its p2p methods are tagged)."""

    def wrap_method(self, stage: Any, method: str,
                    make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
        """Replace `stage.method` by `make(original)` until exit."""
        setattr(stage, method, make(getattr(stage, method)))
        self._undo.append(lambda: delattr(stage, method))

    def __enter__(self) -> Self:
        # lazy: torch, the optional [bench] extra
        from torch.distributed.pipelining import schedules

        original = schedules._batch_p2p

        def batch_p2p(ops: list[Any], desc: str | None = None) -> list[Any]:
            self.on_batch(ops)
            return original(ops, desc)

        setattr(schedules, "_batch_p2p", batch_p2p)  # noqa: B010  (a private function)
        self._undo.append(lambda: setattr(schedules, "_batch_p2p", original))
        for stage in self.stages:
            self.wrap_stage(stage)
            for method, kind in P2P_METHODS:
                self._wrap_tag(stage, method, kind)
        return self

    def _wrap_tag(self, stage: Any, method: str, kind: str) -> None:
        def make(original: Callable[..., Any]) -> Callable[..., Any]:
            def ops(micro: int, *args: Any, **kwargs: Any) -> Any:
                out = original(micro, *args, **kwargs)
                for op in out:
                    op._shardmeter_tag = (kind, int(stage.stage_index), int(micro))
                return out
            return ops

        self.wrap_method(stage, method, make)

    def __exit__(self, *exc: object) -> None:
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()


class Recorder(StageHooks):
    """`StageHooks` that record each pass and each p2p operation in order (module doc);
    `records` fills while `recording` is true."""

    def __init__(self, stages: Sequence[Any], make: Callable[..., OrderRecord]) -> None:
        super().__init__(stages)
        self._make = make
        self._batches = 0
        self.recording = False
        self.records: list[OrderRecord] = []

    def _add(self, **kw: Any) -> None:
        if self.recording:
            self.records.append(self._make(seq=len(self.records), **kw))

    def on_batch(self, ops: list[Any]) -> None:
        if not (ops and self.recording):
            return
        for op in ops:
            kind, stage, micro = getattr(op, "_shardmeter_tag", ("?", -1, -1))
            name = str(op.tensor.dtype).removeprefix("torch.")
            self._add(action=kind, stage=stage, micro=micro, peer=int(op.peer),
                      shape="x".join(str(n) for n in op.tensor.shape),
                      dtype=_DTYPE_NAMES.get(name, name),
                      payload_bytes=op.tensor.numel() * op.tensor.element_size(),
                      batch=self._batches)
        self._batches += 1

    def wrap_stage(self, stage: Any) -> None:
        for method, kind in (("forward_one_chunk", "F"), ("backward_one_chunk", "B")):
            self._wrap_compute(stage, method, kind)

    def _wrap_compute(self, stage: Any, method: str, kind: str) -> None:
        def make(original: Callable[..., Any]) -> Callable[..., Any]:
            def run(micro: int, *args: Any, **kwargs: Any) -> Any:
                out = original(micro, *args, **kwargs)
                self._add(action=kind, stage=int(stage.stage_index), micro=int(micro))
                return out
            return run

        self.wrap_method(stage, method, make)


def _record_rank(case: OrderCase, rank: int, source: str, group: Any = None,
                 static_vote: bool = False) -> list[OrderRecord]:
    """Build this rank's stages and schedule for `case`, run two steps, return the second's
    records."""
    # lazy: torch, the optional [bench] extra
    import torch

    # lazy: these modules import torch
    from perfmodel.bench.model import build_model, random_tokens
    from perfmodel.bench.pipeline_stages import (
        make_stage_optimizer,
        pipeline_schedule,
        train_step,
    )

    model = build_model(ORDER_SPEC, seed=0)
    run = pipeline_schedule(model, schedule=case.schedule, pp=case.pp,
                            virtual_stages=case.virtual_stages, rank=rank,
                            micro_batches=case.micro_batches, micro_batch=ORDER_MICRO_BATCH,
                            seq_len=ORDER_SEQ_LEN, device=torch.device("cpu"), group=group)
    if static_vote:
        _skip_shape_vote(run.schedule)
    optimizer = make_stage_optimizer(list(run.modules.values()))
    tokens = random_tokens(ORDER_SPEC, ORDER_MICRO_BATCH * case.micro_batches, ORDER_SEQ_LEN,
                           seed=1)

    def make(**kw: Any) -> OrderRecord:
        return OrderRecord(source=source, schedule=case.schedule, pp=case.pp,
                           virtual_stages=case.virtual_stages, micro_batches=case.micro_batches,
                           micro_batch=ORDER_MICRO_BATCH, seq_len=ORDER_SEQ_LEN,
                           hidden_size=ORDER_SPEC.hidden_size, rank=rank, **kw)

    with Recorder(run.stages, make) as recorder:
        train_step(run, optimizer, tokens)
        recorder.recording = True
        train_step(run, optimizer, tokens)
        recorder.recording = False
    return recorder.records


def _skip_shape_vote(schedule: Any) -> None:
    """Under the fake process group the first step's vote (a real send/recv whose value picks
    static or inferred shapes) reads garbage: put the stages in static mode directly."""
    # lazy: torch, the optional [bench] extra
    from torch.distributed.pipelining._utils import InferenceMode

    def warmup(stages: Sequence[Any], *args: Any, **kwargs: Any) -> None:
        for stage in stages:
            stage._inference_mode = InferenceMode.STATIC

    schedule._warmup_p2p = warmup


def _gloo_worker(rank: int, world_size: int, store: str, cases_json: str, out_dir: str) -> None:
    # lazy: torch, the optional [bench] extra
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank,
                            world_size=world_size, timeout=datetime.timedelta(seconds=120))
    records: list[OrderRecord] = []
    for raw in json.loads(cases_json):
        records += _record_rank(OrderCase(**raw), rank, "gloo")
        dist.barrier()
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps([asdict(r) for r in records]))
    dist.barrier()
    dist.destroy_process_group()


def record_gloo(cases: Sequence[OrderCase]) -> list[OrderRecord]:
    """Every rank's records of one real step per case (2 gloo processes; all cases need the same
    pp, the number of processes)."""
    # lazy: torch, the optional [bench] extra
    import torch.multiprocessing as mp

    if not cases:
        return []
    sizes = {c.pp for c in cases}
    if len(sizes) != 1:
        raise UserInputError(f"gloo cases with different pp {sorted(sizes)}",
                             hint="record one pp per call (the number of processes).")
    (world,) = sizes
    cases_json = json.dumps([asdict(c) for c in cases])
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(  # type: ignore[attr-defined,no-untyped-call]  # untyped torch API
            _gloo_worker, args=(world, os.path.join(tmp, "store"), cases_json, tmp),
            nprocs=world, join=True)
        out: list[OrderRecord] = []
        for rank in range(world):
            out += [OrderRecord(**r)
                    for r in json.loads(Path(tmp, f"rank{rank}.json").read_text())]
    return out


def record_fake(cases: Sequence[OrderCase]) -> list[OrderRecord]:
    """Every rank's records of one step per case, each rank run alone in this process against
    torch's fake process group (module doc)."""
    # lazy: torch, the optional [bench] extra
    import torch
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise UserInputError("a process group is already initialised in this process",
                             hint="record fake orders in a fresh process.")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    out: list[OrderRecord] = []
    try:
        for case in cases:
            for rank in range(case.pp):
                dist.init_process_group("fake", store=FakeStore(), rank=rank,
                                        world_size=case.pp)
                try:
                    out += _record_rank(case, rank, "fake", static_vote=True)
                finally:
                    dist.destroy_process_group()
    finally:
        torch.set_num_threads(threads)
    return out


# ---- the dataset ---------------------------------------------------------------------------

def order_log(path: str | Path) -> CsvLog:
    """The order dataset at `path` (validated; created on the first append)."""
    return CsvLog(path, ORDER_COLUMNS, ORDER_KEY, numeric_columns=_NUMERIC)


def recorded_cases(path: str | Path) -> set[tuple[str, str, int, int, int]]:
    """(source, schedule, pp, virtual_stages, micro_batches) of every case already in the file."""
    return {(r["source"], r["schedule"], int(r["pp"]), int(r["virtual_stages"]),
             int(r["micro_batches"])) for r in order_log(path).rows()}


def write_orders(path: str | Path, records: Iterable[OrderRecord]) -> int:
    """Append records (rows already there are kept, not duplicated); returns rows written."""
    return order_log(path).append(asdict(r) for r in records)


def read_orders(path: str | Path) -> list[OrderRecord]:
    """The records of an order dataset (no torch needed)."""
    p = Path(path)
    if not p.is_file():
        raise DatasetError(f"{p}: no such file",
                           hint="record it with `shardmeter bench pipeline-order -o FILE`.")
    out = []
    with p.open(newline="") as fh:
        for raw in csv.DictReader(fh):
            values: dict[str, Any] = {k: (int(v) if k in _NUMERIC else v) for k, v in raw.items()}
            out.append(OrderRecord(**values))
    return out


# ---- the shipped recording -----------------------------------------------------------------

def _cases(spec: Sequence[tuple[str, int, int, Sequence[int]]]) -> tuple[OrderCase, ...]:
    return tuple(OrderCase(schedule=s, pp=pp, virtual_stages=v, micro_batches=k)
                 for s, pp, v, ks in spec for k in ks)


GLOO_CASES = _cases([("gpipe", 2, 1, (2, 4, 8)), ("1f1b", 2, 1, (2, 4, 8)),
                     ("interleaved-1f1b", 2, 2, (2, 4, 8))])
"""Recorded on 2 real gloo processes: the three schedules, pp 2, k 2, 4 and 8."""
FAKE_CASES = GLOO_CASES + _cases([
    ("interleaved-1f1b", 2, 3, (4,)), ("interleaved-1f1b", 2, 4, (4,)),
    ("gpipe", 4, 1, (2, 8)), ("1f1b", 4, 1, (4, 8)), ("interleaved-1f1b", 4, 2, (4, 8, 12))])
"""Recorded on the fake process group: the gloo cases again (the two sources must agree), more
virtual stages (4 is more than torch keeps unsharded at once) and pp 4."""
SOURCES = ("gloo", "fake")


@dataclass(frozen=True, kw_only=True, slots=True)
class OrderDataset:
    """What `record_order_dataset` did."""

    path: Path
    """The dataset written."""
    recorded: tuple[tuple[str, OrderCase], ...]
    """(source, case) recorded in this call."""
    skipped: int
    """Cases already in the file."""
    rows: int
    """Rows in the file now."""


def record_order_dataset(out: str | Path, *,
                         sources: Sequence[str] = SOURCES) -> OrderDataset:
    """Record the shipped cases (`GLOO_CASES`, `FAKE_CASES`) of `sources` that `out` lacks,
    append them and the session's environment (`<out>.env.json`)."""
    bad = [s for s in sources if s not in SOURCES]
    if bad:
        raise UserInputError(f"unknown order source(s) {bad}",
                             hint=f"use some of {', '.join(SOURCES)}.")
    done = recorded_cases(out)
    todo = [(source, case) for source in sources
            for case in (GLOO_CASES if source == "gloo" else FAKE_CASES)
            if (source, case.schedule, case.pp, case.virtual_stages, case.micro_batches)
            not in done]
    recorded: list[tuple[str, OrderCase]] = []
    if todo:
        append_environment(out, environment_record(
            device="cpu", threads=1,
            extra={"benchmark": "pipeline-order", "sources": list(sources),
                   "model": asdict(ORDER_SPEC), "micro_batch": ORDER_MICRO_BATCH,
                   "seq_len": ORDER_SEQ_LEN}))
        gloo = [c for s, c in todo if s == "gloo"]
        for pp in sorted({c.pp for c in gloo}):
            write_orders(out, record_gloo([c for c in gloo if c.pp == pp]))
        fake = [c for s, c in todo if s == "fake"]
        write_orders(out, record_fake(fake))
        recorded = todo
    return OrderDataset(path=Path(out), recorded=tuple(recorded), skipped=len(done),
                        rows=len(order_log(out).rows()))
