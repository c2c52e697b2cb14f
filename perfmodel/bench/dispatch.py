"""DTensor's host dispatch under the tensor-parallel plan, per block and per root pass (issue 23).

    python -m torch.distributed.run --standalone --nproc-per-node 1 \
        -m perfmodel.bench.dispatch --out catalogs/profiles/data/cpu-tp-dispatch.csv

(normally launched by `shardmeter bench dispatch`; `shardmeter fit dispatch` fits the rows).

Claim: on a one-rank mesh, torchtitan's Llama TP plan (`perfmodel.bench.parallel.
apply_tensor_parallel`, with and without sequence parallelism) leaves every shape and every FLOP
of the plain model (a shard of one rank is the whole tensor) and has no peer to wait for, so the
time the planned model takes beyond the plain one is DTensor's host work: sharding propagation,
redistribution bookkeeping and local/DTensor conversions around each op of the plan, plus the
one-rank collectives it still issues. Each row times both at `layers` blocks of a tiny Llama
(widths a few dozen, so compute is a small part of either), forward alone (`pass` forward) and
forward then backward (`pass` step), the two models alternating in rounds so drift hits both;
`perfmodel.profiles.dispatch.dispatch_coefficients` regresses the median excess on the layers:
root + layers · block per pass (backward = step − forward).
Why: the compute model is fitted on plain modules, so this per-op host cost is absent from it;
it does not scale with widths (per op, not per FLOP), hence a tiny model. On a CPU it runs on the
rank's only thread and adds to the step; on a GPU the host runs ahead of the kernels it queues,
so a GPU profile carries none (`HardwareProfile.tp_dispatch_s`).
Checked by: tests/test_tp_dispatch.py (the fit recovers known coefficients; a real one-rank run
of the worker writes rows whose planned model is the slower).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from perfmodel.bench.comm import WORKER_LOG_SUFFIX, launch, torchrun_command
from perfmodel.bench.common import CsvLog, check_run_inputs
from perfmodel.bench.environment import append_environment, environment_record
from perfmodel.profiles.dispatch import COLUMNS, KEY_COLUMNS, PASSES
from perfmodel.spec.catalog import get_model
from perfmodel.spec.errors import UserInputError

logger = logging.getLogger("perfmodel.bench.dispatch")

LAYERS = (1, 2, 3, 4, 6)
"""Blocks of the measured models (the fit's regressor)."""
TINY_HIDDEN, TINY_HEADS, TINY_KV_HEADS, TINY_FFN, TINY_VOCAB = 64, 4, 2, 128, 512
"""The tiny Llama's widths (small-llama's architecture; every one divisible by tp)."""
SEQ_LEN = 32
ROUNDS = 5
"""Rounds of alternating timed blocks (plain, planned) per row."""


def run_dispatch(out_path: str, *, iters: int = 20, warmup: int = 5) -> None:
    """Launch the worker on one rank under torchrun (resumable: rows in `out_path` are kept)."""

    check_run_inputs(out=out_path, columns=COLUMNS, key_columns=KEY_COLUMNS, dtype="float32",
                     threads=1, nproc=1, iters=iters, warmup=warmup)
    launch(torchrun_command("perfmodel.bench.dispatch",
                            ["--out", str(out_path), "--iters", str(iters),
                             "--warmup", str(warmup)], nproc=1),
           threads=1, what="dispatch benchmark", log_path=f"{out_path}{WORKER_LOG_SUFFIX}")


# ---- the worker (torch) -------------------------------------------------------------------

def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", required=True)
    p.add_argument("--iters", type=int, default=20, help="timed repetitions per round")
    p.add_argument("--warmup", type=int, default=5)
    return p.parse_args(argv)


def _timed(run: Callable[[], None], iters: int) -> float:
    t0 = time.perf_counter()
    for _ in range(iters):
        run()
    return (time.perf_counter() - t0) / iters


def _plain_and_planned_s(plain: Any, planned: Any, tokens: Any, *, sequence_parallel: bool,
                         backward: bool, iters: int, warmup: int) -> tuple[float, float]:
    """Median per-repetition seconds of the plain and the planned model over ROUNDS alternating
    rounds (forward, with its backward when `backward`; the planned one's loss under
    `loss_parallel()` with sequence parallelism, as the plan's vocabulary-sharded logits need)."""
    # lazy: torch, the optional [bench] extra (the launcher half runs without it)
    from torch.distributed.tensor.parallel import loss_parallel

    def run(model: Any, context: Callable[[], Any]) -> None:
        with context():
            loss = model(tokens)
            if backward:
                loss.backward()
        model.zero_grad(set_to_none=True)

    planned_context = loss_parallel if sequence_parallel else contextlib.nullcontext
    for _ in range(warmup):
        run(plain, contextlib.nullcontext)
        run(planned, planned_context)
    plain_s, planned_s = [], []
    for _ in range(ROUNDS):
        plain_s.append(_timed(lambda: run(plain, contextlib.nullcontext), iters))
        planned_s.append(_timed(lambda: run(planned, planned_context), iters))
    return statistics.median(plain_s), statistics.median(planned_s)


def main(argv: Sequence[str] | None = None) -> None:
    """Measure every (sequence parallel, layers, pass) row not yet in --out (one rank)."""
    args = _parse(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    # lazy: torch, the optional [bench] extra
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    # lazy: the bench's modules that import torch at their top
    from perfmodel.bench.comm_worker import setup
    from perfmodel.bench.model import build_model, random_tokens
    from perfmodel.bench.parallel import apply_tensor_parallel

    device = setup("gloo", 1)
    if dist.get_world_size() != 1:
        raise UserInputError("the dispatch bench runs on one rank",
                             hint="launch it with --nproc-per-node 1.")
    mesh = init_device_mesh("cpu", (1,))
    log = CsvLog(args.out, COLUMNS, KEY_COLUMNS)
    done = log.done_keys()
    append_environment(args.out, environment_record(
        device=device.type, threads=1,
        extra={"benchmark": "dispatch", "seq_len": SEQ_LEN, "rounds": ROUNDS,
               "widths": {"hidden_size": TINY_HIDDEN, "num_heads": TINY_HEADS,
                          "num_kv_heads": TINY_KV_HEADS, "intermediate_size": TINY_FFN,
                          "vocab_size": TINY_VOCAB}}))
    base = get_model("small-llama")
    for sp in (True, False):
        for layers in LAYERS:
            spec = replace(base, name=f"tiny-llama-{layers}", num_layers=layers,
                           hidden_size=TINY_HIDDEN, num_heads=TINY_HEADS,
                           num_kv_heads=TINY_KV_HEADS, intermediate_size=TINY_FFN,
                           vocab_size=TINY_VOCAB)
            tokens = random_tokens(spec, 1, SEQ_LEN)
            plain = build_model(spec)
            planned = apply_tensor_parallel(build_model(spec), mesh, sequence_parallel=sp)
            for kind in PASSES:
                row = {"sequence_parallel": sp, "layers": layers, "pass": kind}
                if log.key_of(row) in done:
                    continue
                p, t = _plain_and_planned_s(plain, planned, tokens, sequence_parallel=sp,
                                            backward=kind == "step", iters=args.iters,
                                            warmup=args.warmup)
                log.append([row | {"plain_s": p, "tp_s": t, "excess_s": t - p,
                                   "iters": args.iters}])
                logger.info("sp %s, %d layers, %s: plain %.3f ms, planned %.3f ms", sp, layers,
                            kind, p * 1e3, t * 1e3)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
