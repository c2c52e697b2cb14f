"""Record the collectives a real FSDP2 training step issues, in order (reusable ground truth).

`attach_recorder(model)` installs, on every `FSDPModule` of a model sharded with
`shard_with_recipe`, FSDP2's own default all-gather / reduce-scatter implementations extended by
one line that logs the call (`FSDPModule.set_custom_all_gather` / `set_custom_reduce_scatter`,
public API): torch still decides when and what to gather or reduce — the recorder only observes
the op, the unit, the dtype and the unsharded element count of every collective as issued.

`record_orders(spec, runs)` spawns a `world_size`-rank gloo job (CPU, real `fully_shard`, real
`torch.distributed`) that trains one optimizer step per (recipe, accumulation steps) run with
`perfmodel.bench.recipe_wrap.train_step`, and returns rank 0's records. `simulated_order` is the
same list as `perfmodel.sim.fsdp` schedules it, so the two can be compared
(tests/test_fsdp_order.py).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from perfmodel.bench.common import resolve_dtype, spawn_gloo_job
from perfmodel.sim.fsdp import step_plan
from perfmodel.spec.arch import ModelSpec
from perfmodel.spec.recipe import TrainingRecipe, recipe_from_mapping

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True, slots=True)
class CollectiveRecord:
    """One collective FSDP2 issued."""

    op: str
    """all_gather or reduce_scatter."""
    unit: str
    """FSDP unit: block{i} or root."""
    dtype: str
    """Recipe-style dtype name of the payload (fp32, bf16, fp16)."""
    numel: int
    """Elements of the unsharded payload (all ranks together, padding included)."""
    micro_step: int
    """Index of the micro-step (0-based) the collective was issued in."""


_DTYPE_NAMES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def _unit_names(model: Any) -> dict[int, str]:
    """id(FSDP module) -> unit name: the root, and block{i} for model.layers[i]."""
    names = {id(model): "root"}
    for i, block in enumerate(model.layers):
        names[id(block)] = f"block{i}"
    return names


def attach_recorder(model: Any, records: list[CollectiveRecord], micro_step: list[int]) -> None:
    """Log every collective of every FSDP unit of `model` into `records`; `micro_step[0]` is
    read at each call (the caller advances it)."""
    # lazy: torch, the optional [bench] extra
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.fsdp._fully_shard._fsdp_collectives import (
        DefaultAllGather,
        DefaultReduceScatter,
    )

    def dtype_of(tensor: Any) -> str:
        name = str(tensor.dtype).removeprefix("torch.")
        return _DTYPE_NAMES.get(name, name)

    class RecordingAllGather(DefaultAllGather):
        def __init__(self, unit: str) -> None:
            self.unit = unit

        def __call__(self, output_tensor: Any, input_tensor: Any, group: Any,
                     async_op: bool = False) -> Any:
            records.append(CollectiveRecord(
                op="all_gather", unit=self.unit, dtype=dtype_of(input_tensor),
                numel=output_tensor.numel(), micro_step=micro_step[0]))
            return super().__call__(output_tensor, input_tensor, group, async_op)

    class RecordingReduceScatter(DefaultReduceScatter):
        def __init__(self, unit: str) -> None:
            self.unit = unit

        def __call__(self, output_tensor: Any, input_tensor: Any, group: Any, op: Any,
                     async_op: bool = False) -> Any:
            records.append(CollectiveRecord(
                op="reduce_scatter", unit=self.unit, dtype=dtype_of(input_tensor),
                numel=input_tensor.numel(), micro_step=micro_step[0]))
            return super().__call__(output_tensor, input_tensor, group, op, async_op)

    names = _unit_names(model)
    for module in model.modules():
        if isinstance(module, FSDPModule) and id(module) in names:
            module.set_custom_all_gather(RecordingAllGather(names[id(module)]))
            module.set_custom_reduce_scatter(RecordingReduceScatter(names[id(module)]))


def _worker(rank: int, world_size: int, store: str, out: str, spec_json: str,
            runs_json: str) -> None:
    """One rank: for each run, build and shard the model, record one training step."""
    # lazy: torch, the optional [bench] extra
    import torch
    import torch.distributed as dist

    # lazy: torch, the optional [bench] extra
    from perfmodel.bench.model import build_model, random_tokens
    from perfmodel.bench.recipe_wrap import make_optimizer, shard_with_recipe, train_step

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world_size)
    spec = ModelSpec(**json.loads(spec_json))
    results = []
    for run in json.loads(runs_json):
        recipe = recipe_from_mapping(run["recipe"], source="record_orders")
        model = build_model(spec, dtype=resolve_dtype(recipe.master_dtype), seed=0)
        model = shard_with_recipe(model, recipe)
        records: list[CollectiveRecord] = []
        micro = [-1]
        attach_recorder(model, records, micro)

        def advance(micro: list[int] = micro) -> None:
            micro[0] += 1

        tokens = random_tokens(spec, run["micro_batch"], run["seq_len"], seed=rank)
        train_step(model, make_optimizer(model, recipe), tokens, accum_steps=run["accum_steps"],
                   recipe=recipe, before_micro_step=advance)
        results.append([asdict(r) for r in records])
    if rank == 0:
        Path(out).write_text(json.dumps(results))
    dist.barrier()
    dist.destroy_process_group()


@dataclass(frozen=True, kw_only=True, slots=True)
class OrderRun:
    """One recorded training step."""

    recipe: TrainingRecipe
    """Recipe the step trains with (MixedPrecisionPolicy, resharding, accumulation mode)."""
    accum_steps: int = 2
    """Micro-steps k."""
    micro_batch: int = 1
    """Sequences per rank per micro-step."""
    seq_len: int = 16
    """Tokens per sequence."""


def record_orders(spec: ModelSpec, runs: Sequence[OrderRun], *,
                  world_size: int = 2) -> list[list[CollectiveRecord]]:
    """Rank 0's collectives of one real FSDP2 step per run (gloo, CPU, `world_size` processes)."""
    spec_json = json.dumps({k: getattr(spec, k) for k in spec.__dataclass_fields__})
    runs_json = json.dumps([{"recipe": _recipe_mapping(r.recipe), "accum_steps": r.accum_steps,
                             "micro_batch": r.micro_batch, "seq_len": r.seq_len} for r in runs])
    raw = spawn_gloo_job(_worker, world_size, spec_json, runs_json)
    return [[CollectiveRecord(**r) for r in run] for run in raw]


def _recipe_mapping(recipe: TrainingRecipe) -> dict[str, Any]:
    data = recipe.to_dict()
    data.pop("outer", None)  # FSDP training does not read the DiLoCo settings
    return data


def simulated_order(num_blocks: int, recipe: TrainingRecipe,
                    accum_steps: int) -> list[tuple[str, str, int]]:
    """(op, unit, micro-step) of every collective of the simulated step, in issue order."""

    names = [f"block{i}" for i in range(num_blocks)] + ["root"]
    return [(spec.kind, names[spec.unit], spec.micro_step)
            for spec in step_plan(num_blocks + 1, recipe=recipe, accum_steps=accum_steps)
            if spec.kind in ("all_gather", "reduce_scatter") and spec.unit is not None]
