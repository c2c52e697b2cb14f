"""Record every collective and transfer of a real pipeline of MoE stages (gloo, CPU, torchrun).

Claim: `main` records each `perfmodel.bench.pp_moe_order.RECORDED_PP_MOE_CASES` case not yet
in the output: the gloo cases by launching torchrun with `PP_MOE_WORLD` gloo ranks running this
module's worker, the fake-process-group cases in its own process (`record_fake`); each writes
every rank's operations of one training step (after a warm-up step) in issue order
(`perfmodel.bench.pp_moe_order` says what the step is and what a row holds).
Why: the ground truth of the pipeline simulator's per-rank order for MoE stages.
Checked by: tests/test_pp_moe_order.py (a live re-record of one case equals the shipped rows).

How: the collectives are seen by `perfmodel.bench.moe_record.GroupNameRecorder` (a
TorchDispatchMode: FSDP2's all-gathers / reduce-scatters with their unit's mesh, the EP
all-to-alls by their process group's name), the transfers by wrapping
`torch.distributed.pipelining.schedules._batch_p2p` (the one function every schedule posts
through) and the stages' `get_{fwd,bwd}_{send,recv}_ops` (to tag each op with torch's own
meaning), as `perfmodel.bench.pipeline_order` does; the pass running when an operation is
issued is tracked by wrapping the stages' `forward_one_chunk`, `backward_one_chunk` and
`perform_reduce_grad`. Only Python attributes are replaced, and only while recording.

The stages are built as torchtitan builds them under PP: the model cut by
`perfmodel.bench.pipeline_stages.stage_modules` (the simulator's cut), FSDP2 per stage on the
stage's dp_shard group with every unit kept unsharded after forward (torchtitan's default
under PP), an MoE layer's routed experts their own unit over efsdp (`shard_experts` keeps the
rank's E/ep experts), the boundary tensors in the recipe's param dtype (FSDP2 casts the stage
inputs and computes in it).
"""

from __future__ import annotations

import argparse
import datetime
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from perfmodel.bench.common import CsvLog
from perfmodel.bench.environment import append_environment, environment_record
from perfmodel.bench.pipeline_order import StageHooks
from perfmodel.bench.pp_moe_order import (
    COLUMNS,
    PP_MOE_RECIPE,
    PP_MOE_SPEC,
    PP_MOE_WORLD,
    RECORDED_PP_MOE_CASES,
    PpMoeCase,
    PpMoeRecord,
    case_fields,
)
from perfmodel.spec.errors import UserInputError

logger = logging.getLogger(__name__)

_P2P_KINDS = {"SEND_F": ("send", "P2P_F"), "RECV_F": ("recv", "P2P_F"),
              "SEND_B": ("send", "P2P_B"), "RECV_B": ("recv", "P2P_B")}


def _build(case: PpMoeCase, meshes: dict[str, Any], device: Any) -> tuple[Any, Any, Any]:
    """(schedule, stages, optimizer) of this rank for `case` (module doc)."""
    # lazy: torch, the optional [bench] extra
    import torch
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.pipelining import PipelineStage, schedules
    from torch.distributed.tensor import Shard

    # lazy: these modules import torch
    from perfmodel.bench.common import resolve_dtype
    from perfmodel.bench.moe import (
        MoeBlock,
        _placement_of,
        build_moe_model,
        expert_shard_dim,
        shard_experts,
    )
    from perfmodel.bench.pipeline_stages import SCHEDULE_CLASSES, scaled_loss, stage_modules
    from perfmodel.bench.recipe_wrap import make_optimizer, mixed_precision

    recipe = PP_MOE_RECIPE
    pp_mesh, dense, sparse = meshes["pp"], meshes["dp_shard"], meshes["sparse"]
    model = build_moe_model(PP_MOE_SPEC, capacity_factor=case.capacity_factor,
                            dtype=resolve_dtype(recipe.master_dtype), seed=0)
    shard_experts(model, sparse)
    moe = PP_MOE_SPEC.moe
    if moe is None:  # PP_MOE_SPEC is an MoE model; a typed error, as perfmodel.bench.moe's
        raise UserInputError(f"{PP_MOE_SPEC.name} is a dense model (no MoE layers)",
                             hint="give PP_MOE_SPEC routed experts (perfmodel.bench.pp_moe_order).")
    modules = stage_modules(model, case.pp, 1, pp_mesh.get_local_rank())
    mp = mixed_precision(recipe)
    dim = expert_shard_dim(case.dp_shard, moe)
    for module in modules.values():
        for layer in module.layers.values():
            block = next((m for m in layer.modules() if isinstance(m, MoeBlock)), None)
            if block is not None and case.ep > 1:   # the experts: a unit of their own
                experts = block.experts
                fully_shard(experts, mesh=sparse["efsdp"], reshard_after_forward=False,
                            mp_policy=mp, shard_placement_fn=_placement_of(
                                set(experts.parameters()), Shard(dim)))
            fully_shard(layer, mesh=dense, reshard_after_forward=False, mp_policy=mp)
        fully_shard(module, mesh=dense, reshard_after_forward=False, mp_policy=mp)
    num_stages = case.pp
    dtype = resolve_dtype(recipe.param_dtype)
    stages = []
    for s, module in modules.items():
        boundary = torch.empty(case.micro_batch, case.seq_len, PP_MOE_SPEC.hidden_size,
                               device=device, dtype=dtype)
        inp = (torch.empty(case.micro_batch, case.seq_len, dtype=torch.long, device=device)
               if s == 0 else boundary.clone().requires_grad_(True))
        out = (torch.empty(case.micro_batch, case.seq_len, PP_MOE_SPEC.vocab_size,
                           device=device, dtype=dtype) if s == num_stages - 1
               else boundary.clone().requires_grad_(True))
        stages.append(PipelineStage(module, s, num_stages, device, input_args=(inp,),
                                    output_args=(out,), group=pp_mesh.get_group()))
    cls = getattr(schedules, SCHEDULE_CLASSES[case.schedule])
    schedule = cls(stages[0], n_microbatches=case.micro_batches,
                   loss_fn=scaled_loss(case.micro_batches), scale_grads=False)
    optimizers = [make_optimizer(m, recipe) for m in modules.values()]
    return schedule, stages, optimizers


class _PassTracker(StageHooks):
    """`StageHooks` that track the pass running (module doc): `current` is the pass running and
    `p2p` receives each posted transfer with its tag."""

    def __init__(self, stages: Sequence[Any], p2p: Callable[..., None]) -> None:
        super().__init__(stages)
        self.current: tuple[int, str, int] = (-1, "OPTIMIZER", -1)
        self.on_pass: Callable[[tuple[int, str, int]], None] = lambda current: None
        """Called with `current` whenever it changes."""
        self._p2p = p2p

    def on_batch(self, ops: list[Any]) -> None:
        for op in ops:
            self._p2p(op, *getattr(op, "_shardmeter_tag", ("?", -1, -1)))

    def wrap_stage(self, stage: Any) -> None:
        for method, action in (("forward_one_chunk", "F"), ("backward_one_chunk", "B"),
                               ("perform_reduce_grad", "REDUCE")):
            self._wrap_pass(stage, method, action)

    def _wrap_pass(self, stage: Any, method: str, action: str) -> None:
        def make(original: Callable[..., Any]) -> Callable[..., Any]:
            def run(first: int, *args: Any, **kwargs: Any) -> Any:
                micro = -1 if action == "REDUCE" else int(first)
                self.current = (int(stage.stage_index), action, micro)
                self.on_pass(self.current)
                try:
                    return original(first, *args, **kwargs)
                finally:
                    self.current = (-1, "OPTIMIZER", -1)
                    self.on_pass(self.current)
            return run

        self.wrap_method(stage, method, make)


def record_case(case: PpMoeCase, meshes: dict[str, Any], rank: int) -> list[PpMoeRecord]:
    """Build this rank's stages for `case`, run a warm-up step, record the next one (on the
    fake process group the first step's shape vote is skipped: the stages are given static
    shapes, `perfmodel.bench.pipeline_order`)."""
    # lazy: torch, the optional [bench] extra
    import torch

    # lazy: these modules import torch
    from perfmodel.bench.layout_record import attach_unit_names, dtype_name
    from perfmodel.bench.model import random_tokens
    from perfmodel.bench.moe import DENSE_DIM, SPARSE_DIMS
    from perfmodel.bench.moe_record import GroupNameRecorder, group_names
    from perfmodel.bench.pipeline_stages import shifted_labels

    device = torch.device("cpu")
    schedule, stages, optimizers = _build(case, meshes, device)
    if case.source == "fake":
        # lazy: imports torch
        from perfmodel.bench.pipeline_order import _skip_shape_vote

        _skip_shape_vote(schedule)
    tokens = random_tokens(PP_MOE_SPEC, case.micro_batch * case.micro_batches, case.seq_len,
                           seed=meshes["dp_shard"].get_local_rank())
    first = any(s.stage_index == 0 for s in stages)
    last = any(s.stage_index == case.pp - 1 for s in stages)

    def step() -> None:
        schedule.step(*((tokens,) if first else ()),
                      target=shifted_labels(tokens) if last else None, return_outputs=False)
        for optimizer in optimizers:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    step()
    records: list[PpMoeRecord] = []
    units: dict[int, str] = {}
    unit_groups: dict[str, str] = {}
    for stage in stages:
        units[id(stage.submod)] = "root"
        for key, layer in stage.submod.layers.items():
            units[id(layer)] = f"block{key}"
            experts = getattr(getattr(layer, "mlp", None), "experts", None)
            if experts is not None and case.ep > 1:
                units[id(experts)] = f"block{key}.experts"
                unit_groups[f"block{key}.experts"] = SPARSE_DIMS[0]
    pass_of: list[tuple[int, str, int]] = []

    def add(**kw: Any) -> None:
        records.append(PpMoeRecord(case=case.name, rank=rank, seq=len(records), **kw))

    class PassRecorder(GroupNameRecorder):  # type: ignore[no-untyped-call]  # untyped torch
        """Tags each collective with the pass running when it is dispatched."""

        def _record(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                    out: Any) -> None:
            super()._record(func, args, kwargs, out)
            c = self.records[-1]
            if c.op == "p2p":   # the transfers come from `_batch_p2p` (module doc)
                return
            stage, action, micro = pass_of[-1]
            add(op=c.op, group=c.group if c.group != "world" else DENSE_DIM, stage=stage,
                action=action, micro=micro, unit=c.unit, peer=-1, dtype=c.dtype,
                in_numel=c.in_numel, out_numel=c.out_numel, element_bytes=c.element_bytes)

    recorder = PassRecorder(group_names(meshes["sparse"]), unit_groups)
    for stage in stages:
        attach_unit_names(stage.submod, recorder, units)

    def p2p(op: Any, kind: str, stage: int, micro: int) -> None:
        name, action = _P2P_KINDS.get(kind, ("p2p", "?"))
        numel = op.tensor.numel()
        add(op=name, group="pp", stage=stage, action=action, micro=micro, unit="",
            peer=int(op.peer), dtype=dtype_name(op.tensor.dtype),
            in_numel=numel if name == "send" else 0, out_numel=numel if name == "recv" else 0,
            element_bytes=op.tensor.element_size())

    with _PassTracker(stages, p2p) as tracker, recorder:
        pass_of.append(tracker.current)
        tracker.on_pass = pass_of.append
        step()
    return records


def _meshes(case: PpMoeCase) -> dict[str, Any]:
    """The (pp, dp_shard) mesh's pp and dp_shard dimensions and the sparse (efsdp, ep) mesh of
    this rank's stage (ep innermost), in the current process group."""
    # lazy: torch, the optional [bench] extra
    from torch.distributed.device_mesh import init_device_mesh

    # lazy: this module imports torch
    from perfmodel.bench.moe import SPARSE_DIMS

    mesh = init_device_mesh("cpu", (case.pp, case.dp_shard), mesh_dim_names=("pp", "dp_shard"))
    sparse = init_device_mesh("cpu", (case.pp, case.dp_shard // case.ep, case.ep),
                              mesh_dim_names=("pp_sparse", *SPARSE_DIMS))
    return {"pp": mesh["pp"], "dp_shard": mesh["dp_shard"], "sparse": sparse[SPARSE_DIMS]}


def _rows(case: PpMoeCase, records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Dataset rows of a case's records (every rank's, as dicts)."""
    # lazy: torch, the optional [bench] extra
    import torch

    return [{**case_fields(case), **{k: v for k, v in row.items() if k != "case"},
             "torch_version": torch.__version__} for row in records]


def _worker(out: str, names: list[str]) -> None:
    """One torchrun rank: every named gloo case; rank 0 appends all ranks' rows to `out`."""
    # lazy: torch, the optional [bench] extra
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=300))
    rank, world = dist.get_rank(), dist.get_world_size()
    try:
        log = CsvLog(out, COLUMNS, ("case", "rank", "seq"))
        for name in names:
            case = RECORDED_PP_MOE_CASES[name]
            if case.world_size != world or case.source != "gloo":
                raise UserInputError(f"case {name} is not a {world}-rank gloo case",
                                     hint=f"launch {PP_MOE_WORLD} ranks for the gloo cases.")
            records = record_case(case, _meshes(case), rank)
            gathered: list[Any] = [None] * world
            dist.all_gather_object(gathered, [asdict(r) for r in records])
            if rank == 0:
                log.append(_rows(case, [row for rows in gathered for row in rows]))
                logger.info("%s: %s operations per rank", name,
                            [len(rows) for rows in gathered])
            dist.barrier()
    finally:
        dist.destroy_process_group()


def record_fake(case: PpMoeCase) -> list[PpMoeRecord]:
    """Every rank's records of one step of `case`, each rank run in turn in this process
    against torch's fake process group (`PpMoeCase.source`)."""
    # lazy: torch, the optional [bench] extra
    import torch
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise UserInputError("a process group is already initialised in this process",
                             hint="record fake cases in a fresh process.")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    out: list[PpMoeRecord] = []
    try:
        for rank in range(case.world_size):
            dist.init_process_group("fake", store=FakeStore(), rank=rank,
                                    world_size=case.world_size)
            try:
                out += record_case(case, _meshes(case), rank)
            finally:
                dist.destroy_process_group()
    finally:
        torch.set_num_threads(threads)
    return out


def record_pp_moe_orders(out: str | Path, names: Sequence[str] | None = None) -> dict[str, int]:
    """Record the named cases (default: all) that `out` lacks: the gloo ones in one torchrun
    job of `PP_MOE_WORLD` ranks, the fake ones in this process (`record_fake`); the session's
    environment goes to `<out>.env.json`."""
    # lazy: the launcher's helpers (subprocess, torchrun command line)
    from perfmodel.bench.comm import launch, torchrun_command

    names = list(RECORDED_PP_MOE_CASES) if names is None else list(names)
    unknown = [n for n in names if n not in RECORDED_PP_MOE_CASES]
    if unknown:
        raise UserInputError(f"unknown case(s) {unknown}",
                             hint=f"use some of {', '.join(RECORDED_PP_MOE_CASES)}.")
    log = CsvLog(out, COLUMNS, ("case", "rank", "seq"))
    done = {row["case"] for row in log.rows()}
    todo = [n for n in names if n not in done]
    if todo:
        append_environment(out, environment_record(
            device="cpu", threads=1, extra={"benchmark": "pp-moe-order",
                                            "backends": ["gloo (torchrun)", "fake"],
                                            "gloo_ranks": PP_MOE_WORLD, "cases": todo}))
    gloo = [n for n in todo if RECORDED_PP_MOE_CASES[n].source == "gloo"]
    if gloo:
        cmd = torchrun_command("perfmodel.bench.pp_moe_record",
                               ["--worker", "--out", str(out), "--cases", ",".join(gloo)],
                               nproc=PP_MOE_WORLD)
        launch(cmd, threads=1, what="pp-moe-order", log_path=f"{out}.workers.log")
    for name in todo:
        case = RECORDED_PP_MOE_CASES[name]
        if case.source == "fake":
            records = record_fake(case)
            log.append(_rows(case, [asdict(r) for r in records]))
            logger.info("%s: %d operations on %d ranks", name, len(records), case.world_size)
    return {"recorded": len(todo), "skipped": len(names) - len(todo)}


def main(argv: Sequence[str] | None = None) -> None:
    """`python -m perfmodel.bench.pp_moe_record -o catalogs/profiles/data/pp-moe-order.csv`"""
    parser = argparse.ArgumentParser(description="Record every collective and transfer of real "
                                     "pipelines of MoE stages (torchrun, gloo, CPU).")
    parser.add_argument("-o", "--out", required=True, help="CSV (appended; rerun resumes)")
    parser.add_argument("--cases", default=",".join(RECORDED_PP_MOE_CASES),
                        help="comma-separated case names (default: all)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    names = [n for n in args.cases.split(",") if n]
    if args.worker:
        _worker(args.out, names)
        return
    if os.environ.get("LOCAL_RANK") is not None:
        parser.error("run the launcher outside torchrun (it starts torchrun itself)")
    try:
        counts = record_pp_moe_orders(args.out, names)
    except UserInputError as exc:
        parser.error(str(exc))
    logger.info("%s: %d cases recorded, %d already there", args.out, counts["recorded"],
                counts["skipped"])


if __name__ == "__main__":
    main()
