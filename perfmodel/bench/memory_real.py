"""Is the tracker right? FSDPMemTracker on real tensors vs the CPU allocator, 2-rank gloo FSDP2.

Each case runs a real 2-process gloo job (`torch.multiprocessing`, one process per rank) that
wraps and trains the model exactly as `shardmeter bench memory` does (same recipe wrapper, same
fused AdamW, optimizer state created first), with real tensors on the CPU:

1. the optimizer state is created (as in the fake-mode bench), then one step runs under
   `FSDPMemTracker` (real tensors): the tracker's peak and breakdown;
2. two identical steps, each inside a `record_function` window, measured by torch's own CPU
   allocator accounting: the profiler runs with `profile_memory=True` from before the model is
   built, so its "Total Allocated" counter covers every live allocation of the process; the
   allocator peak is its maximum over a window, for the training thread's own allocations (frees
   matched by address), with the collective backend's staging buffers (allocated inside c10d ops)
   left out and FSDP collective buffers whose free the profiler lost (gloo released them on a
   worker thread) reported apart; the row keeps the lower and the higher of the two windows.

Like with like: the same rank, the same step, bytes as allocated (the CPU allocator does not
round). What the allocator sees and the tracker does not shows up as the difference; gloo's
worker threads' staging buffers are reported apart (`allocator_process_peak_bytes`): they
depend on thread timing and on the gloo backend (NCCL keeps its buffers outside the caching
allocator). Rank 0 writes one row per case.
"""

from __future__ import annotations

import logging
import socket
import time
from pathlib import Path

from perfmodel.bench.alloc_trace import window_peaks
from perfmodel.bench.common import CsvLog, resolve_dtype
from perfmodel.bench.environment import append_environment, environment_record
from perfmodel.bench.memory import COLUMNS as FAKE_COLUMNS
from perfmodel.bench.memory import MemoryCase, shape_columns, tracked_steps

logger = logging.getLogger(__name__)

COLUMNS = (*FAKE_COLUMNS, "allocator_peak_bytes", "allocator_staging_bytes",
           "allocator_retained_bytes", "allocator_peak_max_bytes", "allocator_process_peak_bytes",
           "tracker_vs_allocator_pct")
"""allocator_peak_bytes: the CPU allocator's live bytes of the training thread's allocations at
their peak (frees matched by address), less the collective backend's staging buffers (made
inside c10d ops, below the dispatcher where no tracker sees them; when gloo frees them depends
on thread timing), the lower of `WINDOWS` identical steps; allocator_staging_bytes: the staging
bytes live at that peak; allocator_retained_bytes: of the peak, FSDP's collective buffers
whose free the profiler did not record (a gloo worker thread dropped the last reference after
Python, and so the tracker, had released them; counted until their address is allocated again,
the latest they can have been freed; whether it happens depends on thread timing); _max: the
higher window; allocator_process_peak_bytes: the whole process, gloo's threads and staging
included (the higher window)."""
KEY_COLUMNS = ("model", "world_size", "seq_len", "micro_batch", "accum_steps", "accum_mode", "ac",
               "recipe", "param_dtype", "reduce_dtype", "attention", "tensors")
WORLD_SIZE = 2
WINDOW = "shardmeter_measured_step"
WINDOWS = 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rank_main(rank: int, case: MemoryCase, port: int, out: str) -> None:

    # lazy: torch, the optional [bench] extra
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.profiler import ProfilerActivity, profile, record_function

    # lazy: torch, the optional [bench] extra
    from perfmodel.bench.model import build_model, random_tokens
    from perfmodel.bench.recipe_wrap import make_optimizer, shard_with_recipe, train_step

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=WORLD_SIZE)
    start_s = time.perf_counter()
    # Profile from before the model exists so "Total Allocated" counts every live allocation.
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        mesh = init_device_mesh("cpu", (WORLD_SIZE,))
        model = build_model(case.spec, dtype=resolve_dtype(case.recipe.master_dtype))
        shard_with_recipe(model, case.recipe, mesh=mesh)
        optimizer = make_optimizer(model, case.recipe)
        tokens = random_tokens(case.spec, case.micro_batch, case.seq_len, seed=rank)
        columns = tracked_steps(model, optimizer, tokens, case, steps=1)  # warm state inside
        for _ in range(WINDOWS):
            dist.barrier()
            with record_function(WINDOW):
                train_step(model, optimizer, tokens, accum_steps=case.accum_steps,
                           recipe=case.recipe)
        dist.barrier()
    peaks = window_peaks(prof, WINDOW)
    low = min(peaks, key=lambda p: p.live_bytes)
    if rank == 0:

        tracked = columns["peak_bytes"]
        row = {**shape_columns(case.config_id, case.spec), **case.key("real"), **columns,
               "wall_s": time.perf_counter() - start_s, "torch_version": torch.__version__,
               "allocator_peak_bytes": low.live_bytes, "allocator_staging_bytes": low.staging_bytes,
               "allocator_retained_bytes": low.retained_bytes,
               "allocator_peak_max_bytes": max(p.live_bytes for p in peaks),
               "allocator_process_peak_bytes": max(p.process_bytes for p in peaks),
               "tracker_vs_allocator_pct": 100.0 * (tracked - low.live_bytes) / low.live_bytes}
        CsvLog(out, COLUMNS, KEY_COLUMNS).append([row])
    dist.destroy_process_group()


def run_real_case(case: MemoryCase, out_path: str | Path) -> None:
    """One 2-rank gloo run of `case` (its world size must be 2); rank 0 appends the row."""
    # lazy: torch, the optional [bench] extra
    import torch.multiprocessing as mp

    if case.world_size != WORLD_SIZE:
        raise ValueError(f"real-tensor runs use {WORLD_SIZE} ranks, got world_size "
                         f"{case.world_size}")
    mp.spawn(  # type: ignore[attr-defined,no-untyped-call]  # untyped torch API
        _rank_main, args=(case, _free_port(), str(out_path)), nprocs=WORLD_SIZE, join=True)


def run_real_cases(cases: list[MemoryCase], out_path: str | Path) -> dict[str, int]:
    """Every case not yet in `out_path` (resume), one gloo job each."""

    log = CsvLog(out_path, COLUMNS, KEY_COLUMNS)
    done = log.done_keys()
    append_environment(out_path, environment_record(device="cpu", threads=1,
                                                    extra={"benchmark": "memory-real",
                                                           "backend": "gloo",
                                                           "world_size": WORLD_SIZE}))
    counts = {"measured": 0, "skipped": 0}
    for case in cases:
        if log.key_of(case.key("real")) in done:
            counts["skipped"] += 1
            continue
        run_real_case(case, out_path)
        counts["measured"] += 1
    return counts
