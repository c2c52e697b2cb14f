"""torchrun entry point of the collective benchmark (one process per rank).

`python -m torch.distributed.run --standalone --nproc-per-node N -m perfmodel.bench.comm_worker
--out DATA.csv ...` — normally launched by `shardmeter bench comm`. Every timed repetition starts
after a barrier; each rank times its own call and the per-repetition maximum over ranks is kept;
rank 0 writes median and IQR per (op, payload) and skips rows already in the file.
`--inline` times each collective as tensor parallelism issues it instead (`time_inline`: no
barrier inside a round, the mean of the rounds; `perfmodel.costs.comm` module doc).
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import Any, cast

import torch
import torch.distributed as dist

from perfmodel.bench.comm import P2P_OPS, REPEAT_COLUMN, dataset_columns, payload_sizes
from perfmodel.bench.common import CsvLog, median_iqr, resolve_dtype
from perfmodel.bench.environment import append_environment, environment_record

logger = logging.getLogger("perfmodel.bench.comm_worker")


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", required=True)
    p.add_argument("--backend", default="gloo")
    p.add_argument("--link", default="gloo-loopback")
    p.add_argument("--ops", default="all_gather,reduce_scatter,all_reduce",
                   help="comma list of all_gather, reduce_scatter, all_reduce, send_recv")
    p.add_argument("--min-mib", type=float, default=1.0)
    p.add_argument("--max-mib", type=float, default=150.0)
    p.add_argument("--points", type=int, default=12)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--repeat", type=int, default=0,
                   help="which launch of a repeated sweep (1..R) writes the rows; 0: not repeated")
    p.add_argument("--inline", action="store_true",
                   help="time each collective as tensor parallelism issues it (time_inline)")
    return p.parse_args(argv)


def collective(op: str, payload_elems: int, world: int, device: torch.device,
               dtype: torch.dtype) -> Callable[[], None]:
    """A closure running one collective on preallocated buffers of the full payload size."""
    shard = payload_elems // world
    if op == "all_gather":
        inp = torch.ones(shard, device=device, dtype=dtype)
        out = torch.empty(payload_elems, device=device, dtype=dtype)
        gather = getattr(dist, "all_gather_single", dist.all_gather_into_tensor)
        return lambda: gather(out, inp)
    if op == "reduce_scatter":
        inp = torch.ones(payload_elems, device=device, dtype=dtype)
        out = torch.empty(shard, device=device, dtype=dtype)
        scatter = getattr(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)
        return lambda: scatter(out, inp)
    buf = torch.ones(payload_elems, device=device, dtype=dtype)
    return lambda: dist.all_reduce(buf)


def functional_collective(op: str, payload_elems: int, world: int, device: torch.device,
                          dtype: torch.dtype) -> Callable[[], None]:
    """A closure issuing one collective the way DTensor does (torch's functional collectives,
    then `wait_tensor`), on buffers of the full payload size."""
    # lazy: a private-named torch module, needed only by the inline sweep
    import torch.distributed._functional_collectives as funcol

    group: Any = dist.group.WORLD
    wait = cast(Callable[[torch.Tensor], torch.Tensor], funcol.wait_tensor)   # untyped in torch
    shard = torch.ones(payload_elems // world, device=device, dtype=dtype)
    full = torch.ones(payload_elems, device=device, dtype=dtype)
    def run() -> None:
        if op == "all_gather":
            wait(funcol.all_gather_tensor(shard, 0, group))
        elif op == "reduce_scatter":
            wait(funcol.reduce_scatter_tensor(full, "sum", 0, group))
        else:
            wait(funcol.all_reduce(full, "sum", group))
    return run


INLINE_FILLER_SIDES = (128, 256, 384, 512, 768, 1024)
"""Sides of the fp32 matmuls an inline repetition starts with (0.1 to about 50 ms on one CPU
thread: the compute segments between a tensor-parallel step's collectives, which on the CPU
profile's TP steps reach tens of ms), each a configuration of its own."""
INLINE_BLOCK = 5
"""Repetitions per timed block of an inline round (filler alone, then filler + collective)."""


def time_inline(run: Callable[[], None], *, filler_side: int, iters: int, warmup: int,
                device: torch.device) -> tuple[list[float], list[float]]:
    """Per-round cost of one collective issued inline, and per-round time of the filler alone
    (both max over ranks): each round times INLINE_BLOCK repetitions of a `filler_side` matmul
    alone, then INLINE_BLOCK of the filler followed by the collective, with no barrier inside
    the round; the round's cost is the difference per repetition. So it holds what an inline
    collective adds to a step after that much compute: its transfer, the ranks' skew and the
    compute slowed beside the library's threads, which the barrier of `time_collective`
    removes."""
    sync = device_sync(device)
    a = torch.randn(filler_side, filler_side, device=device)
    b = torch.randn(filler_side, filler_side, device=device)

    def block(with_collective: bool) -> float:
        sync()
        t0 = time.perf_counter()
        for _ in range(INLINE_BLOCK):
            torch.mm(a, b)
            if with_collective:
                run()
        sync()
        return time.perf_counter() - t0

    excess, filler = [], []
    for i in range(warmup + iters):
        dist.barrier()   # between rounds only: a round's collectives meet whatever skew builds
        alone, both = block(False), block(True)
        if i >= warmup:
            excess.append((both - alone) / INLINE_BLOCK)
            filler.append(alone / INLINE_BLOCK)
    slowest = torch.tensor([excess, filler], dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    rows = slowest.cpu().tolist()
    return rows[0], rows[1]


def point_to_point(payload_elems: int, world: int, device: torch.device,
                   dtype: torch.dtype) -> Callable[[], None]:
    """A closure running one transfer of the payload from rank 0 to the last rank (module doc of
    `perfmodel.bench.comm`); the other ranks do nothing."""
    if world < 2:
        raise ValueError("send_recv needs at least two ranks")
    buf = torch.ones(payload_elems, device=device, dtype=dtype)
    rank, last = dist.get_rank(), world - 1
    if rank == 0:
        return lambda: dist.send(buf, dst=last)
    if rank == last:
        def receive() -> None:
            dist.recv(buf, src=0)
        return receive
    return lambda: None


def device_sync(device: torch.device | str) -> Callable[[], None]:
    """What waits for the device's queued work before a clock is read (nothing on the CPU); the
    one home of that rule for every benchmark worker."""
    return torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)


def time_collective(run: Callable[[], None], *, iters: int, warmup: int,
                    device: torch.device) -> list[float]:
    """Per-repetition times (max over ranks) of `run`, each started after a barrier."""
    sync = device_sync(device)
    times = []
    for i in range(warmup + iters):
        dist.barrier()
        sync()
        t0 = time.perf_counter()
        run()
        sync()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    slowest = torch.tensor(times, dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return slowest.cpu().tolist()


def done_keys_rank0(log: CsvLog) -> set[tuple[str, ...]]:
    """Rank 0 reads the keys already written; every rank receives them."""
    holder: list[object] = [log.done_keys() if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(holder, src=0)
    return holder[0]  # type: ignore[return-value]


def setup(backend: str, threads: int) -> torch.device:
    """Initialise the process group; CUDA ranks bind to their local GPU."""

    torch.set_num_threads(threads)
    if backend == "nccl":
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
        dist.init_process_group(backend, device_id=device)
        return device
    dist.init_process_group(backend)
    return torch.device("cpu")


def main(argv: Sequence[str] | None = None) -> None:
    args = _parse(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    device = setup(args.backend, args.threads)
    rank, world = dist.get_rank(), dist.get_world_size()
    dtype = resolve_dtype(args.dtype)
    elem = torch.tensor([], dtype=dtype).element_size()
    log = CsvLog(args.out, *dataset_columns(2 if args.repeat else 1, inline=args.inline))
    tag = {REPEAT_COLUMN: args.repeat} if args.repeat else {}
    done = done_keys_rank0(log)
    if rank == 0:
        append_environment(args.out, environment_record(
            device=device.type, threads=args.threads,
            extra={"benchmark": "comm", "backend": args.backend, "world_size": world,
                   "link": args.link, **tag,
                   **({"issue": "inline", "block": INLINE_BLOCK} if args.inline else {})}))
    for op in args.ops.split(","):
        p2p = op in P2P_OPS
        for size in payload_sizes(args.min_mib, args.max_mib, args.points, 1 if p2p else world,
                                  elem):
            row = {"backend": args.backend, "op": op, "link": args.link,
                   "world_size": 2 if p2p else world, "payload_bytes": size, "iters": args.iters,
                   **tag}
            if args.inline:
                for side in INLINE_FILLER_SIDES:
                    inline_row = row | {"filler_side": side}
                    if log.key_of(inline_row) in done:
                        continue
                    run = functional_collective(op, size // elem, world, device, dtype)
                    times, filler = time_inline(run, filler_side=side, iters=args.iters,
                                                warmup=args.warmup, device=device)
                    # the mean: a step pays every repetition's cost, its tail included
                    time_s = sum(times) / len(times)
                    if rank == 0:
                        log.append([inline_row | {
                            "time_s": time_s, "time_iqr_s": median_iqr(times).iqr_s,
                            "compute_s": sum(filler) / len(filler)}])
                        logger.info("%s %d ranks %.3f MiB after %d-matmul: %.6f s inline", op,
                                    world, size / 2**20, side, time_s)
                continue
            if log.key_of(row) in done:
                continue
            run = (point_to_point(size // elem, world, device, dtype) if p2p
                   else collective(op, size // elem, world, device, dtype))
            times = time_collective(run, iters=args.iters, warmup=args.warmup, device=device)
            spread = median_iqr(times)
            if rank == 0:
                log.append([row | {"time_s": spread.median_s, "time_iqr_s": spread.iqr_s}])
                logger.info("%s %d ranks %.2f MiB: %.6f s", op, world, size / 2**20,
                            spread.median_s)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
