"""PyTorch's own FSDP2 memory tracker as ground truth: `shardmeter bench memory`.

Each case builds the project's torch model (`perfmodel.bench.model`) under
`torch._subclasses.fake_tensor.FakeTensorMode` with the fake process group (`FakeStore`,
backend "fake"), so no real memory is touched and an 8B or 70B model at S = 8192 runs on a laptop:
the DeviceMesh is created before fake mode, the model is wrapped exactly as the training recipe
says (`perfmodel.bench.recipe_wrap.shard_with_recipe`), the fused AdamW state is created by one
step on zero gradients (`init_optimizer_state`; under FakeTensorMode the lazy state creation of a
first real step would also count DTensor propagation temporaries that a real run never
allocates), and then two optimizer steps of k micro-steps (`train_step`, in the recipe's
accumulation mode; `MemoryCase.steps`) run under
`torch.distributed._tools.fsdp2_mem_tracker.FSDPMemTracker`, which keeps the global peak.

One row per case: the peak per GPU and the tracker's breakdown of that peak by category
(sharded/unsharded parameters, sharded/unsharded gradients, activations, temporaries, all-gather
and reduce-scatter buffers, optimizer state, inputs). Rows are appended one at a time and a rerun
skips the cases already in the file (`perfmodel.bench.common.CsvLog`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from copy import deepcopy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfmodel.bench.common import CsvLog, resolve_dtype
from perfmodel.bench.environment import append_environment, environment_record
from perfmodel.spec.arch import ModelSpec
from perfmodel.spec.errors import UserInputError
from perfmodel.spec.recipe import TrainingRecipe

logger = logging.getLogger(__name__)

CATEGORIES = {"Sharded Param": "sharded_param_bytes", "Unsharded Param": "unsharded_param_bytes",
              "Buffer": "buffer_bytes", "Sharded Grad": "sharded_grad_bytes",
              "Unsharded Grad": "unsharded_grad_bytes", "Activation": "activation_bytes",
              "Temp": "temp_bytes", "All Gather": "all_gather_bytes",
              "Reduce Scatter": "reduce_scatter_bytes", "OptState": "optimizer_bytes",
              "Inputs": "inputs_bytes"}
"""FSDPMemTracker category -> dataset column (bytes of that category at the peak)."""

SHAPE_COLUMNS = ("model", "family", "hidden_size", "num_hidden_layers", "num_attention_heads",
                 "num_key_value_heads", "head_dim", "intermediate_size", "vocab_size",
                 "tie_word_embeddings")
CASE_COLUMNS = ("world_size", "seq_len", "micro_batch", "accum_steps", "accum_mode", "ac",
                "recipe", "param_dtype", "reduce_dtype", "attention", "tensors")
COLUMNS = (*SHAPE_COLUMNS, *CASE_COLUMNS, "peak_bytes", *CATEGORIES.values(), "wall_s",
           "torch_version")
KEY_COLUMNS = ("model", *CASE_COLUMNS)


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryCase:
    """One tracked configuration."""

    config_id: str
    """Dataset `model` column (catalog name or config path)."""
    spec: ModelSpec
    """Architecture."""
    world_size: int
    """FSDP ranks sharing the states (nodes x GPUs per node)."""
    seq_len: int
    """S: tokens per sequence."""
    micro_batch: int
    """m: sequences per rank per micro-step."""
    accum_steps: int
    """k: micro-steps per optimizer step."""
    recipe: TrainingRecipe
    """How the model is wrapped and trained (its `ac` and `accum_mode` are the case's)."""
    steps: int = 2
    """Optimizer steps tracked after the optimizer state exists. Every tracked step is the same
    steady state (the tests check that 1 and 2 give the same peak), so a long sweep on a shared
    CPU may track one; the count is recorded in the dataset's env.json."""

    def __post_init__(self) -> None:
        for name in ("world_size", "seq_len", "micro_batch", "accum_steps", "steps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UserInputError(f"{name} must be a positive integer, got {value!r}",
                                     hint=f"pass {name} >= 1.")
        if self.recipe.attention != "sdpa":
            raise UserInputError("bench memory runs the project model, which uses SDPA attention",
                                 hint="use --attention sdpa (the default) for bench memory.")
        if self.recipe.loss != "unfused":
            raise UserInputError("bench memory runs the project model's unfused cross-entropy",
                                 hint="use --loss unfused (the default) for bench memory.")

    def key(self, tensors: str) -> dict[str, Any]:
        """The CSV resume key of this case."""
        r = self.recipe
        return {"model": self.config_id, "world_size": self.world_size, "seq_len": self.seq_len,
                "micro_batch": self.micro_batch, "accum_steps": self.accum_steps,
                "accum_mode": r.accum_mode, "ac": r.ac, "recipe": r.name,
                "param_dtype": r.param_dtype, "reduce_dtype": r.reduce_dtype,
                "attention": r.attention, "tensors": tensors}


def shape_columns(config_id: str, spec: ModelSpec) -> dict[str, Any]:
    """The architecture columns of a row."""
    return {"model": config_id, "family": spec.family, "hidden_size": spec.hidden_size,
            "num_hidden_layers": spec.num_layers, "num_attention_heads": spec.num_heads,
            "num_key_value_heads": spec.num_kv_heads, "head_dim": spec.d,
            "intermediate_size": spec.intermediate_size, "vocab_size": spec.vocab_size,
            "tie_word_embeddings": spec.tie_word_embeddings}


def breakdown_columns(snapshot: Mapping[Any, int]) -> dict[str, int]:
    """Tracker peak snapshot (one device) -> `peak_bytes` and one column per category."""
    out = {"peak_bytes": int(snapshot["Total"])}
    by_name = {getattr(k, "value", k): int(v) for k, v in snapshot.items()}
    for name, column in CATEGORIES.items():
        out[column] = by_name.get(name, 0)
    return out


def _global_peak_tracker(model: Any, optimizer: Any) -> Any:
    """FSDPMemTracker that keeps only the global peak snapshot.

    The stock tracker also updates a per-module peak for every active module after every op,
    which costs about a third of the run time of a 32-block model; the global peak and its
    breakdown (the only figures the dataset keeps) are updated exactly as the stock
    `_update_peak_stats` does (same private fields, torch 2.13)."""

    # lazy: torch, the optional [bench] extra
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker

    class GlobalPeakTracker(FSDPMemTracker):  # type: ignore[no-untyped-call]  # untyped torch
        def _update_peak_stats(self, peak_state: Any) -> None:
            for dev, snap in self._curr_mem_snap.items():
                if self._peak_mem.get(dev, 0) < snap["Total"]:
                    self._peak_mem[dev] = snap["Total"]
                    self._peak_mem_snap[dev] = deepcopy(snap)

    return GlobalPeakTracker(model, optimizer)


def tracked_steps(model: Any, optimizer: Any, tokens: Any, case: MemoryCase, *,
                  steps: int = 2, context: Any = None) -> dict[str, int]:
    """Run `steps` training steps under FSDPMemTracker; the peak snapshot as dataset columns.
    `context`: what each micro-step runs inside (`recipe_wrap.train_step`)."""
    # lazy: torch, the optional [bench] extra
    from perfmodel.bench.recipe_wrap import init_optimizer_state, train_step

    init_optimizer_state(model, optimizer)
    tracker = _global_peak_tracker(model, optimizer)
    tracker.track_inputs((tokens,))
    with tracker:
        for _ in range(steps):
            train_step(model, optimizer, tokens, accum_steps=case.accum_steps, recipe=case.recipe,
                       before_micro_step=tracker.reset_mod_stats, context=context)
    peaks = tracker.get_tracker_snapshot("peak")
    device = max(peaks, key=lambda d: peaks[d]["Total"])
    return breakdown_columns(peaks[device])


def run_fake_case(case: MemoryCase) -> dict[str, Any]:
    """Track one case under FakeTensorMode with the fake process group; returns its row."""
    # lazy: torch, the optional [bench] extra
    import torch
    import torch.distributed as dist
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    # lazy: torch, the optional [bench] extra
    from perfmodel.bench.model import build_model
    from perfmodel.bench.recipe_wrap import make_optimizer, shard_with_recipe

    start_s = time.perf_counter()
    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", rank=0, world_size=case.world_size, store=FakeStore())
    try:
        # The mesh must exist before fake mode: its process groups are real objects.
        mesh = init_device_mesh("cpu", (case.world_size,))
        with FakeTensorMode():
            model = build_model(case.spec, dtype=resolve_dtype(case.recipe.master_dtype))
            shard_with_recipe(model, case.recipe, mesh=mesh)
            optimizer = make_optimizer(model, case.recipe)
            tokens = torch.randint(0, case.spec.vocab_size, (case.micro_batch, case.seq_len))
            columns = tracked_steps(model, optimizer, tokens, case, steps=case.steps)
    finally:
        dist.destroy_process_group()
    return {**shape_columns(case.config_id, case.spec), **case.key("fake"), **columns,
            "wall_s": time.perf_counter() - start_s, "torch_version": torch.__version__}


def run_cases(cases: Iterable[MemoryCase], out_path: str | Path, *,
              limit: int | None = None) -> dict[str, int]:
    """Track every case not yet in `out_path`, appending one row each; counts of done/skipped."""
    log = CsvLog(out_path, COLUMNS, KEY_COLUMNS)
    done = log.done_keys()
    cases = list(cases)
    append_environment(out_path, environment_record(
        device="fake", threads=1,
        extra={"benchmark": "memory", "tracked_steps": sorted({c.steps for c in cases})}))
    counts = {"measured": 0, "skipped": 0}
    for case in cases:
        if log.key_of(case.key("fake")) in done:
            counts["skipped"] += 1
            continue
        if limit is not None and counts["measured"] >= limit:
            break
        row = run_fake_case(case)
        log.append([row])
        counts["measured"] += 1
        logger.info("%s G=%d S=%d m=%d k=%d %s ac=%s: peak %.2f GiB (%.1f s)", case.config_id,
                    case.world_size, case.seq_len, case.micro_batch, case.accum_steps,
                    case.recipe.accum_mode, case.recipe.ac, row["peak_bytes"] / 2**30,
                    row["wall_s"])
    return counts
