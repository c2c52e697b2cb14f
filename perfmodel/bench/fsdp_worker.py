"""torchrun entry point of the FSDP2 end-to-end benchmark (one process per rank).

Launched by `shardmeter bench fsdp`. Per case: build the model with the same seed on every rank,
shard it and train exactly the run's `TrainingRecipe` (`perfmodel.bench.recipe_wrap`:
activation checkpointing, `fully_shard` per block then the root with the recipe's
MixedPrecisionPolicy and resharding, the recipe's accumulation mode, AdamW; a parallel layout
first applies torchtitan's tensor-parallel plan on its device mesh and shards over its
data-parallel dimensions, `perfmodel.bench.parallel`; the ranks of a tensor-parallel group train
the same batch); warm up, then time whole optimizer steps (k micro-steps) after a barrier,
keeping the slowest rank per step.
Peak memory: `torch.cuda.max_memory_allocated` on CUDA (and, in the sidecar
`<out>.allocator.csv`, the allocator statistics `perfmodel.profiles.reserve_validation` compares
with the memory model's reserve: peak reserved bytes, device bytes outside the allocator, the CUDA
context measured before the process group; the allocator is emptied before each case so that
one case's cached blocks do not count as the next one's fragmentation); on CPU the persistent
state (parameter
shards and Adam moments) plus the peak of the training thread's live bytes in the profiler's
allocator trace (`profile_memory=True`, rebuilt by `perfmodel.bench.alloc_trace`) over one extra
step, whose transient tensors (gradients, gathered parameters, activations, communication
buffers) are all allocated while profiling. (Rows measured before 2026-12-01 say
`profiler+persistent`: the raw "Total Allocated" maximum, which never drops for the frees gloo's
worker threads make, so it overstates; `shardmeter bench memory --real --like` re-measures them.)
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from perfmodel.bench.alloc_trace import window_peaks
from perfmodel.bench.comm_worker import device_sync, done_keys_rank0, setup
from perfmodel.bench.common import CsvLog, dtype_name, median_iqr, resolve_dtype
from perfmodel.bench.environment import append_environment, environment_record
from perfmodel.bench.fsdp import FsdpCase
from perfmodel.bench.model import build_model, random_tokens
from perfmodel.bench.parallel import layout_mesh
from perfmodel.bench.recipe_wrap import (
    make_optimizer,
    parallelize_with_recipe,
    shard_with_recipe,
    train_step,
)
from perfmodel.profiles.fsdp_compare import COLUMNS, KEY_COLUMNS, recipe_cell
from perfmodel.profiles.reserve_validation import ALLOCATOR_COLUMNS, allocator_path
from perfmodel.spec.recipe import DEFAULT_RECIPE, TrainingRecipe, recipe_from_mapping

logger = logging.getLogger("perfmodel.bench.fsdp_worker")


def parse_worker_args(argv: Sequence[str] | None, *, description: str | None, launcher: str,
                      iters: int, warmup: int) -> argparse.Namespace:
    """The arguments `perfmodel.bench.fsdp.launch_workers` passes a benchmark worker (FSDP2 or
    pipeline); `iters`/`warmup` are the defaults of a worker run by hand."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--out", required=True)
    p.add_argument("--plan", required=True, help=f"JSON list of cases (written by {launcher})")
    p.add_argument("--backend", default="gloo")
    p.add_argument("--link", default="gloo-loopback")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--iters", type=int, default=iters)
    p.add_argument("--warmup", type=int, default=warmup)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--recipe", default=None,
                   help="TrainingRecipe as a JSON mapping (default torchtitan)")
    return p.parse_args(argv)


def recipe_argument(args: argparse.Namespace) -> TrainingRecipe:
    """The --recipe argument of a worker (default torchtitan)."""
    return DEFAULT_RECIPE if not args.recipe else recipe_from_mapping(json.loads(args.recipe),
                                                                      source="--recipe")


def shard_model(case: FsdpCase, device: torch.device, dtype: torch.dtype,
                recipe: TrainingRecipe) -> Any:
    """The case's model sharded as the recipe says: FSDP2 over every rank
    (`recipe_wrap.shard_with_recipe`), or the recipe's parallel layout on its device mesh
    (`recipe_wrap.parallelize_with_recipe`: tensor parallelism, FSDP2 or HSDP)."""
    model = build_model(case.spec, device=device, dtype=dtype, seed=0)
    if recipe.parallel.is_default:
        return shard_with_recipe(model, recipe)
    return parallelize_with_recipe(model, recipe, layout_mesh(recipe.parallel, device.type))


def data_rank(recipe: TrainingRecipe) -> int:
    """This rank's data-parallel index: the ranks of one tensor- (and context-) parallel group,
    consecutive in the mesh, train the same batch."""
    layout = recipe.parallel
    return dist.get_rank() // (layout.tp * layout.cp)


def make_step(model: Any, optimizer: Any, tokens: torch.Tensor, grad_accum: int,
              sync: Callable[[], None], recipe: TrainingRecipe) -> Callable[[], None]:
    """One optimizer step of `grad_accum` micro-steps in the recipe's accumulation mode."""
    def step() -> None:
        train_step(model, optimizer, tokens, accum_steps=grad_accum, recipe=recipe)
        sync()
    return step


def timed_steps(step: Callable[[], None], *, iters: int, device: torch.device) -> list[float]:
    """Per-step wall times, max over ranks, each step started after a barrier."""
    times = []
    for _ in range(iters):
        dist.barrier()
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    slowest = torch.tensor(times, dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return slowest.cpu().tolist()


def persistent_bytes(model: Any, optimizer: Any) -> int:
    """Bytes of this rank's parameter shards and optimizer state tensors."""
    def local(t: torch.Tensor) -> torch.Tensor:
        return t.to_local() if hasattr(t, "to_local") else t

    total = sum(local(p).numel() * local(p).element_size() for p in model.parameters())
    for state in optimizer.state.values():
        for value in state.values():
            if torch.is_tensor(value):
                total += local(value).numel() * local(value).element_size()
    return int(total)


CPU_PEAK_WINDOW = "shardmeter_peak_step"


def cpu_peak_bytes(step: Callable[[], None], model: Any, optimizer: Any) -> int:
    """Persistent state plus the peak of the training thread's live bytes over one step, from
    the profiler's allocator trace (`perfmodel.bench.alloc_trace`: frees matched by address,
    lost frees counted until the address is reused, gloo's staging copies left out)."""
    # lazy: torch, the optional [bench] extra
    from torch.profiler import ProfilerActivity, profile, record_function


    with (profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof,
          record_function(CPU_PEAK_WINDOW)):
        step()
    (peak,) = window_peaks(prof, CPU_PEAK_WINDOW)
    return persistent_bytes(model, optimizer) + peak.live_bytes


def peak_memory(step: Callable[[], None], model: Any, optimizer: Any,
                device: torch.device) -> tuple[int, str]:
    """(peak bytes on the worst rank, how it was measured)."""
    if device.type == "cuda":
        value, source = torch.cuda.max_memory_allocated(device), "cuda.max_memory_allocated"
    else:
        value, source = cpu_peak_bytes(step, model, optimizer), "profiler-live+persistent"
    peak = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(peak, op=dist.ReduceOp.MAX)
    return int(peak.item()), source


def cuda_context_bytes() -> int:
    """Device bytes this process holds outside the caching allocator before the process group
    exists (the CUDA context and what it loaded so far): called before `setup`, whose eager NCCL
    initialisation allocates the communicator's buffers, which the reserve comparison counts."""
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    torch.cuda.set_device(device)
    torch.zeros(1, device=device)  # creates the context
    torch.cuda.synchronize(device)
    free, total = torch.cuda.mem_get_info(device)
    return int(total - free - torch.cuda.memory_reserved(device))


def allocator_stats(device: torch.device, context_bytes: int) -> dict[str, int]:
    """The caching allocator's peaks since the last reset and the device bytes outside it (less
    the CUDA context), each the maximum over ranks (`reserve_validation.ALLOCATOR_COLUMNS`)."""
    torch.cuda.synchronize(device)
    free, total = torch.cuda.mem_get_info(device)
    reserved = torch.cuda.memory_reserved(device)
    local = [torch.cuda.max_memory_allocated(device), torch.cuda.max_memory_reserved(device),
             max(int(total - free - reserved - context_bytes), 0), context_bytes]
    values = torch.tensor(local, dtype=torch.float64, device=device)
    dist.all_reduce(values, op=dist.ReduceOp.MAX)
    names = ALLOCATOR_COLUMNS[len(KEY_COLUMNS):]
    return {name: int(v) for name, v in zip(names, values.cpu().tolist(), strict=True)}


def run_case(case: FsdpCase, args: argparse.Namespace, device: torch.device,
             context_bytes: int = 0) -> tuple[dict[str, Any], dict[str, int] | None]:
    """Measure one case; returns its dataset row and, on CUDA, its allocator statistics."""
    dtype = resolve_dtype(args.dtype)
    recipe = _recipe(args)
    model = shard_model(case, device, dtype, recipe)
    optimizer = make_optimizer(model, recipe)
    tokens = random_tokens(case.spec, case.micro_batch, case.seq_len, device=device,
                           seed=1000 * data_rank(recipe) + case.micro_batch)
    sync = device_sync(device)
    step = make_step(model, optimizer, tokens, case.grad_accum, sync, recipe)
    for _ in range(args.warmup):
        step()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    spread = median_iqr(timed_steps(step, iters=args.iters, device=device))
    peak, source = peak_memory(step, model, optimizer, device)
    stats = allocator_stats(device, context_bytes) if device.type == "cuda" else None
    s = case.spec
    return {"model": case.config_id, "family": s.family, "hidden_size": s.hidden_size,
            "num_hidden_layers": s.num_layers, "num_attention_heads": s.num_heads,
            "num_key_value_heads": s.num_kv_heads, "head_dim": s.d,
            "intermediate_size": s.intermediate_size, "vocab_size": s.vocab_size,
            "tie_word_embeddings": s.tie_word_embeddings, "seq_len": case.seq_len,
            "micro_batch": case.micro_batch, "grad_accum": case.grad_accum,
            "world_size": dist.get_world_size(), "backend": args.backend, "link": args.link,
            "device": device.type, "dtype": dtype_name(dtype), "threads": args.threads,
            "step_time_s": spread.median_s, "step_time_iqr_s": spread.iqr_s, "iters": args.iters,
            "peak_memory_bytes": peak, "memory_source": source,
            "recipe": recipe_cell(recipe)}, stats


def _recipe(args: argparse.Namespace) -> TrainingRecipe:
    """The recipe to train; a parallel layout resolved on this job's ranks (so the dataset's
    recipe cell names every degree, dp_shard included)."""
    recipe = recipe_argument(args)
    if recipe.parallel.is_default:
        return recipe
    return replace(recipe, parallel=recipe.parallel.resolve(dist.get_world_size()))


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_worker_args(argv, description=__doc__, launcher="bench fsdp", iters=5, warmup=2)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    context = cuda_context_bytes() if args.backend == "nccl" else 0
    device = setup(args.backend, args.threads)
    rank = dist.get_rank()
    cases = [FsdpCase.from_json(c) for c in json.loads(Path(args.plan).read_text())]
    log = CsvLog(args.out, COLUMNS, KEY_COLUMNS)
    allocator_log = (CsvLog(allocator_path(args.out), ALLOCATOR_COLUMNS, KEY_COLUMNS)
                     if device.type == "cuda" else None)
    done = done_keys_rank0(log)
    if rank == 0:
        append_environment(args.out, environment_record(
            device=device.type, threads=args.threads,
            extra={"benchmark": "fsdp", "backend": args.backend,
                   "world_size": dist.get_world_size(), "dtype": args.dtype, "iters": args.iters,
                   "warmup": args.warmup, "recipe": args.recipe or "torchtitan"}))
    for case in cases:
        key = log.key_of({"model": case.config_id, "seq_len": case.seq_len,
                          "micro_batch": case.micro_batch, "grad_accum": case.grad_accum,
                          "world_size": dist.get_world_size(), "backend": args.backend,
                          "dtype": dtype_name(resolve_dtype(args.dtype)),
                          "recipe": recipe_cell(_recipe(args))})
        if key in done:
            continue
        if device.type == "cuda":  # no cached blocks of the previous case in this one's reserve
            torch.cuda.empty_cache()
        row, stats = run_case(case, args, device, context)
        if rank == 0:
            if allocator_log is not None and stats is not None:
                allocator_log.append([{k: row[k] for k in KEY_COLUMNS} | stats])
            log.append([row])
            logger.info("%s S=%d mb=%d ga=%d: %.4f s/step, peak %.1f MiB", case.config_id,
                        case.seq_len, case.micro_batch, case.grad_accum, row["step_time_s"],
                        row["peak_memory_bytes"] / 2**20)
        gc.collect()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
