"""Record every collective one rank issues, in issue order, as torch really runs it.

`CollectiveRecorder` is a `TorchDispatchMode`: DTensor (tensor parallelism, sequence
parallelism, loss parallelism) lowers to `torch.ops._c10d_functional.*` on plain local tensors
(the mode declines DTensor-typed calls so that DTensor unwraps first, as torch's
`CommDebugMode` does), and FSDP2 calls `c10d._allgather_base_` / `_reduce_scatter_base_` /
`allreduce_` through the dispatcher, from autograd hooks too, so the mode sees both. Each record
names the collective (all_gather, reduce_scatter, all_reduce, ...), the mesh dimension of its
process group (`mesh_group_names`), the phase (forward, backward, optimizer, other: torch's
`ModTracker` and optimizer step hooks), the unit it belongs to (block{i} or root: the
block whose module is active, else the root unit: the embedding, final norm, LM head and loss
belong to the root FSDP unit, as in `perfmodel.sim.fsdp`; for FSDP2's own collectives, the FSDP
unit whose all-gather or reduce-scatter it is, from `attach_unit_names`), dtype and element
counts.

What is recorded is the collective the framework asks for (gloo then runs a reduce-scatter as
an all-reduce below the dispatcher; NCCL runs it as asked): the torch-level sequence a GPU run
issues too. Used by `perfmodel.bench.layout_order` (tests/test_layout_order.py).
"""

from __future__ import annotations

import argparse
import json
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, replace
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed._tools.mod_tracker import ModTracker
from torch.distributed.tensor import DTensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from perfmodel.bench.common import CsvLog, resolve_dtype, spawn_gloo_job
from perfmodel.bench.environment import append_environment, environment_record
from perfmodel.bench.layout_order import (
    COLUMNS,
    ORDER_SPEC,
    RECORDED_CASES,
    Collective,
    LayoutRun,
)
from perfmodel.bench.model import build_model, random_tokens
from perfmodel.bench.parallel import layout_mesh
from perfmodel.bench.recipe_wrap import make_optimizer, parallelize_with_recipe, train_step
from perfmodel.profiles.fsdp_compare import recipe_cell, recipe_mapping
from perfmodel.spec.arch import ModelSpec
from perfmodel.spec.layout import ParallelLayout
from perfmodel.spec.recipe import TrainingRecipe, recipe_from_mapping

logger = logging.getLogger(__name__)

_DTYPE_NAMES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "float64": "fp64"}
_IN_ARGS = ("input", "input_tensor", "input_tensors", "inputs", "tensor", "tensors", "self")
_OUT_ARGS = ("output", "output_tensor", "output_tensors", "outputs", "out")
_KINDS = (("reduce_scatter", "reduce_scatter"), ("allgather", "all_gather"),
          ("all_gather", "all_gather"), ("allreduce", "all_reduce"), ("all_reduce", "all_reduce"),
          ("alltoall", "all_to_all"), ("all_to_all", "all_to_all"), ("broadcast", "broadcast"),
          ("barrier", "barrier"), ("send", "p2p"), ("recv", "p2p"))
_BLOCK = re.compile(r"\.layers\.(\d+)(\.|$)")


def _collective_packets() -> frozenset[Any]:
    c10d, fc = torch.ops.c10d, torch.ops._c10d_functional
    names_c10d = ("_allgather_base_", "_reduce_scatter_base_", "allreduce_", "allreduce_coalesced_",
                  "allgather_", "allgather_coalesced_", "allgather_into_tensor_coalesced_",
                  "reduce_scatter_", "reduce_scatter_tensor_coalesced_", "broadcast_",
                  "alltoall_", "alltoall_base_", "gather_", "scatter_", "reduce_", "send",
                  "recv_", "barrier")
    names_fc = ("all_reduce", "all_reduce_", "all_reduce_coalesced", "all_reduce_coalesced_",
                "all_gather_into_tensor", "all_gather_into_tensor_out",
                "all_gather_into_tensor_coalesced", "reduce_scatter_tensor",
                "reduce_scatter_tensor_out", "reduce_scatter_tensor_coalesced",
                "all_to_all_single", "broadcast", "broadcast_")
    packets = [getattr(c10d, n) for n in names_c10d if hasattr(c10d, n)]
    packets += [getattr(fc, n) for n in names_fc if hasattr(fc, n)]
    autograd = getattr(torch.ops, "_c10d_functional_autograd", None)
    for n in ("all_to_all_single", "all_gather_into_tensor", "reduce_scatter_tensor"):
        if autograd is not None and hasattr(autograd, n):
            packets.append(getattr(autograd, n))
    return frozenset(packets)


def _tensors(value: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(value)[0] if isinstance(t, torch.Tensor)]


def _kind(name: str) -> str:
    lower = name.lower()
    return next((kind for key, kind in _KINDS if key in lower), lower)


def dtype_name(dtype: torch.dtype) -> str:
    name = str(dtype).removeprefix("torch.")
    return _DTYPE_NAMES.get(name, name)


def mesh_group_names(mesh: Any) -> dict[tuple[int, ...], str]:
    """{ranks of this rank's group: mesh dimension name} of every dimension of a DeviceMesh
    (DTensor may run a dimension's collectives on a process group of its own with the same
    ranks, so a group is known by its members, not by its name)."""
    if mesh is None:
        return {}
    names = mesh.mesh_dim_names or tuple(str(i) for i in range(mesh.ndim))
    return {tuple(dist.get_process_group_ranks(mesh.get_group(i))): name
            for i, name in enumerate(names)}


class CollectiveRecorder(TorchDispatchMode):  # type: ignore[no-untyped-call]  # untyped torch
    """Records every collective dispatched while active (module docstring).

    Usage: ``with CollectiveRecorder(group_names, optimizer) as rec: train_step(...)``, then
    `rec.records`; set `micro_step` before each micro-step; `fsdp_unit` is set by the FSDP
    collectives `attach_unit_names` installs."""

    def __init__(self, group_names: dict[tuple[int, ...], str], optimizer: Any = None) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # untyped torch
        self.group_names = dict(group_names)
        self.records: list[Collective] = []
        self.micro_step = 0
        self.fsdp_unit: str | None = None
        self._packets = _collective_packets()
        self._tracker = ModTracker()  # type: ignore[no-untyped-call]  # untyped torch
        self._in_optimizer = False
        self._handles: list[Any] = []
        if optimizer is not None:
            self._handles = [
                optimizer.register_step_pre_hook(lambda *a: self._set_optimizer(True)),
                optimizer.register_step_post_hook(lambda *a: self._set_optimizer(False))]

    def _set_optimizer(self, active: bool) -> None:
        self._in_optimizer = active

    def __enter__(self) -> CollectiveRecorder:
        self._tracker.__enter__()  # type: ignore[no-untyped-call]  # untyped torch
        super().__enter__()  # type: ignore[no-untyped-call]  # untyped torch
        return self

    def __exit__(self, *args: Any) -> None:
        super().__exit__(*args)  # type: ignore[no-untyped-call]  # untyped torch
        self._tracker.__exit__(*args)  # type: ignore[no-untyped-call]  # untyped torch
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _phase(self) -> str:
        if self._in_optimizer:
            return "optimizer"
        if self._tracker.is_bw:
            return "backward"
        return "forward" if set(self._tracker.parents) - {"Global"} else "other"

    def _unit(self) -> str:
        for parent in self._tracker.parents:
            block = _BLOCK.search(parent)
            if block:
                return f"block{block.group(1)}"
        return "root"

    def _group(self, func: Any, bound: dict[str, Any]) -> str:
        group = None
        if "process_group" in bound:
            group = dist.ProcessGroup.unbox(bound["process_group"])
        elif "group_name" in bound:
            # lazy: a private torch helper, resolved only when a functional collective runs
            from torch.distributed.distributed_c10d import (  # type: ignore[attr-defined]
                _resolve_process_group,
            )

            group = _resolve_process_group(bound["group_name"])
        if group is None:
            return ""
        ranks = tuple(dist.get_process_group_ranks(group))
        if len(ranks) == dist.get_world_size():
            return self.group_names.get(ranks, "world")
        return self.group_names.get(ranks, group.group_name)

    def _record(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        schema = func._schema
        bound = {a.name: (args[i] if i < len(args) else kwargs.get(a.name, a.default_value))
                 for i, a in enumerate(schema.arguments)}
        ins = [t for name in _IN_ARGS if name in bound for t in _tensors(bound[name])]
        outs = [t for name in _OUT_ARGS if name in bound for t in _tensors(bound[name])]
        if not outs:  # functional collectives return their output; c10d's in-place ones mutate
            outs = _tensors(out) if func.namespace != "c10d" else list(ins)
        op = _kind(schema.name.split("::")[-1])
        group = self._group(func, bound)
        unit = self.fsdp_unit
        if unit is None and self.records and op == "all_reduce" and group == "dp_replicate":
            unit = self.records[-1].unit  # HSDP: FSDP2 all-reduces the shard it just reduced
        first = ins[0] if ins else outs[0]
        self.records.append(Collective(
            op=op, group=group, phase=self._phase(), unit=unit or self._unit(),
            dtype=dtype_name(first.dtype), in_numel=sum(t.numel() for t in ins),
            out_numel=sum(t.numel() for t in outs), element_bytes=first.element_size(),
            micro_step=self.micro_step))

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if any(issubclass(t, DTensor) for t in types):
            return NotImplemented  # DTensor desugars into local ops and functional collectives
        out = func(*args, **kwargs)
        if func._overloadpacket in self._packets:
            self._record(func, args, kwargs, out)
        return out


def attach_unit_names(model: Any, recorder: CollectiveRecorder,
                      extra_units: dict[int, str] | None = None) -> None:
    """Name the FSDP unit of each of FSDP2's all-gathers and reduce-scatters: FSDP2's own default
    implementations (`set_custom_all_gather` / `set_custom_reduce_scatter`, public API), which
    set `recorder.fsdp_unit` while they run. Units: block{i} for model.layers[i], root, and
    `extra_units` ({id(module): name}: FSDP units inside a block, an MoE layer's experts)."""
    # lazy: private FSDP2 module of the default collectives (only the recorder extends them)
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.fsdp._fully_shard._fsdp_collectives import (
        DefaultAllGather,
        DefaultReduceScatter,
    )

    class NamedAllGather(DefaultAllGather):
        def __init__(self, unit: str) -> None:
            self.unit = unit

        def __call__(self, output_tensor: Any, input_tensor: Any, group: Any,
                     async_op: bool = False) -> Any:
            recorder.fsdp_unit = self.unit
            try:
                return super().__call__(output_tensor, input_tensor, group, async_op)
            finally:
                recorder.fsdp_unit = None

    class NamedReduceScatter(DefaultReduceScatter):
        def __init__(self, unit: str) -> None:
            self.unit = unit

        def __call__(self, output_tensor: Any, input_tensor: Any, group: Any, op: Any,
                     async_op: bool = False) -> Any:
            recorder.fsdp_unit = self.unit
            try:
                return super().__call__(output_tensor, input_tensor, group, op, async_op)
            finally:
                recorder.fsdp_unit = None

    names = {id(model): "root"}
    for i, block in enumerate(model.layers):
        names[id(block)] = f"block{i}"
    names.update(extra_units or {})
    for module in model.modules():
        if isinstance(module, FSDPModule) and id(module) in names:
            module.set_custom_all_gather(NamedAllGather(names[id(module)]))
            module.set_custom_reduce_scatter(NamedReduceScatter(names[id(module)]))


# ---- a real gloo job (one home: `perfmodel.bench.moe_record` uses it too) --------------------

RecordJob = Callable[..., list[list[Collective]]]
"""`job(rank, world_size, *args)`: one rank's recorded collectives per case, in issue order
(a module-level function: `torch.multiprocessing.spawn` pickles it by name)."""


def _gloo_worker(rank: int, world_size: int, store: str, out: str, job: RecordJob,
                 job_args: tuple[Any, ...]) -> None:
    """One rank of `gloo_collectives`: runs `job` in a gloo process group (one thread), gathers
    every rank's records to rank 0, which writes them."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank,
                            world_size=world_size)
    try:
        results = [[asdict(r) for r in case] for case in job(rank, world_size, *job_args)]
        gathered: list[Any] = [None] * world_size
        dist.all_gather_object(gathered, results)
        if rank == 0:
            Path(out).write_text(json.dumps(gathered))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def gloo_collectives(job: RecordJob, job_args: tuple[Any, ...],
                     world_size: int) -> list[list[list[Collective]]]:
    """Every rank's collectives per case from one real `world_size`-rank gloo job on CPU
    (`RecordJob`): result[rank][case] in issue order."""
    raw = spawn_gloo_job(_gloo_worker, world_size, job, job_args)
    return [[[Collective(**r) for r in case] for case in ranks] for ranks in raw]


def record_warm_step(model: Any, optimizer: Any, tokens: Any, *, recipe: TrainingRecipe,
                     accum_steps: int, make_recorder: Callable[[], CollectiveRecorder],
                     extra_units: dict[int, str] | None = None) -> list[Collective]:
    """A warm-up step (lazy state, optimizer state), then one step recorded by the recorder
    `make_recorder` builds after it, with FSDP units named (`attach_unit_names`) and
    micro-steps numbered from 0."""
    train_step(model, optimizer, tokens, accum_steps=accum_steps, recipe=recipe)
    recorder = make_recorder()
    attach_unit_names(model, recorder, extra_units)
    micro = [-1]

    def advance() -> None:
        micro[0] += 1
        recorder.micro_step = micro[0]

    with recorder:
        train_step(model, optimizer, tokens, accum_steps=accum_steps, recipe=recipe,
                   before_micro_step=advance)
    return recorder.records


def record_to_csv(out_path: str | Path, names: Sequence[str], *,
                  cases: Mapping[str, tuple[int, Any]], columns: Sequence[str],
                  record: Callable[[list[str], int], list[list[list[Collective]]]],
                  case_fields: Callable[[str], dict[str, Any]],
                  benchmark: str) -> dict[str, int]:
    """Record the named `cases` (name -> (ranks, run)) with `record(names, world_size)` (one
    gloo job per world size), appending rank 0's collectives to `out_path` as rows of
    `columns`: `case_fields(name)`, `seq`, the `Collective` and torch's version (cases already
    in the file are skipped); ValueError if the ranks of a case did not issue identical
    sequences (the dataset keeps rank 0's)."""
    log = CsvLog(out_path, columns, ("case", "seq"))
    done = {row["case"] for row in log.rows()}
    todo = [n for n in names if n not in done]
    append_environment(out_path, environment_record(
        device="cpu", threads=1, extra={"benchmark": benchmark, "backend": "gloo"}))
    for world in sorted({cases[n][0] for n in todo}):
        batch = [n for n in todo if cases[n][0] == world]
        recorded = record(batch, world)
        for i, name in enumerate(batch):
            ranks = [per_rank[i] for per_rank in recorded]
            if any(r != ranks[0] for r in ranks):
                raise ValueError(f"{name}: the {world} ranks issued different collectives")
            log.append([{**case_fields(name), "seq": seq, **asdict(collective),
                         "torch_version": torch.__version__}
                        for seq, collective in enumerate(ranks[0])])
            logger.info("%s: %d collectives on each of %d ranks", name, len(ranks[0]), world)
    return {"recorded": len(todo), "skipped": len(names) - len(todo)}


def record_main(argv: Sequence[str] | None, *, description: str, cases: Mapping[str, Any],
                record_cases: Callable[[list[str], str], dict[str, int]]) -> None:
    """The recording commands' CLI: `-o CSV [--cases a,b]` (exit 2 naming an unknown case)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("-o", "--out", required=True, help="CSV (appended; rerun resumes)")
    parser.add_argument("--cases", default=",".join(cases),
                        help="comma-separated case names (default: all)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    names = [n for n in args.cases.split(",") if n]
    unknown = [n for n in names if n not in cases]
    if unknown:
        parser.error(f"--cases: unknown case(s) {', '.join(unknown)}\n"
                     f"To fix: pass names from {', '.join(cases)}")
    counts = record_cases(names, args.out)
    logger.info("%s: %d cases recorded, %d already there", args.out, counts["recorded"],
                counts["skipped"])


# ---- the layout cases --------------------------------------------------------------------------

def _data_rank(rank: int, layout: ParallelLayout) -> int:
    """The data-parallel index of a rank (tp and cp innermost: their ranks share a batch)."""
    return rank // (layout.tp * layout.cp)


def _layout_job(rank: int, world_size: int, spec_json: str,
                runs_json: str) -> list[list[Collective]]:
    """One rank: per run, build, parallelize and train a warm-up step, then record one step."""
    spec = ModelSpec(**json.loads(spec_json))
    results = []
    for run in json.loads(runs_json):
        recipe = recipe_from_mapping(run["recipe"], source="record_layout_orders")
        layout = recipe.parallel.resolve(world_size)
        recipe = replace(recipe, parallel=layout)
        mesh = layout_mesh(layout)
        model = build_model(spec, dtype=resolve_dtype(recipe.master_dtype), seed=0)
        model = parallelize_with_recipe(model, recipe, mesh)
        optimizer = make_optimizer(model, recipe)
        tokens = random_tokens(spec, run["micro_batch"], run["seq_len"],
                               seed=_data_rank(rank, layout))
        results.append(record_warm_step(
            model, optimizer, tokens, recipe=recipe, accum_steps=run["accum_steps"],
            make_recorder=partial(CollectiveRecorder, mesh_group_names(mesh), optimizer)))
    return results


def record_layout_orders(spec: ModelSpec, runs: Sequence[LayoutRun], *,
                         world_size: int) -> list[list[list[Collective]]]:
    """Every rank's collectives of one recorded step per run (after a warm-up step), from one
    real `world_size`-rank gloo job on CPU: result[rank][run] in issue order."""
    spec_json = json.dumps({k: getattr(spec, k) for k in spec.__dataclass_fields__})
    runs_json = json.dumps([{"recipe": recipe_mapping(r.recipe), "accum_steps": r.accum_steps,
                             "micro_batch": r.micro_batch, "seq_len": r.seq_len} for r in runs])
    return gloo_collectives(_layout_job, (spec_json, runs_json), world_size)


def _case_fields(name: str) -> dict[str, Any]:
    world, run = RECORDED_CASES[name]
    return {"case": name, "world_size": world, "recipe": recipe_cell(run.recipe),
            "accum_steps": run.accum_steps, "micro_batch": run.micro_batch,
            "seq_len": run.seq_len}


def record_cases(names: Sequence[str], out_path: str | Path) -> dict[str, int]:
    """Record the `RECORDED_CASES` named into `out_path` (`record_to_csv`)."""
    return record_to_csv(
        out_path, names, cases=RECORDED_CASES, columns=COLUMNS, case_fields=_case_fields,
        record=lambda batch, world: record_layout_orders(
            ORDER_SPEC, [RECORDED_CASES[n][1] for n in batch], world_size=world),
        benchmark="layout-orders")


def main(argv: Sequence[str] | None = None) -> None:
    """`python -m perfmodel.bench.layout_record -o catalogs/profiles/data/layout-orders.csv`"""
    record_main(argv, description="Record the collectives of real parallel-layout steps (gloo, "
                "CPU) for tests/test_layout_order.py.", cases=RECORDED_CASES,
                record_cases=record_cases)


if __name__ == "__main__":
    main()
