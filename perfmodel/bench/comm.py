"""Collective benchmark: all_gather, reduce_scatter and all_reduce through torch.distributed.

The CLI side: it builds the payload plan and launches `torchrun ... -m perfmodel.bench.comm_worker`
(one process per rank); rank 0 of the workers writes the dataset row by row. The payload is the
full unsharded size D in bytes (all_gather output, reduce_scatter input, all_reduce tensor),
log-spaced between --min-mib and --max-mib as in the paper (1-150 MiB).

Point-to-point (`--ops send_recv`, not in the default list): rank 0 sends a D-byte buffer to
the last rank, which receives it (`dist.send` / `dist.recv`, what a pipeline stage boundary
carries); the other ranks wait. The row's world_size is 2 (the pair) and its link the link
between those two ranks; payloads are any multiple of the element size.

Repeats (`--repeats R`, issue 27 item 6): the whole sweep is launched R times, each a fresh
torchrun (new processes, new process group), and every row carries its `repeat` (1..R), part of
the row's key; the spread between the repeats of one configuration is run-to-run noise, which
the `time_iqr_s` of one launch (its iterations' spread) does not see. `fit comm` fits their median
and keeps their spread in the profile (`perfmodel.costs.datasets.repeat_spread`). R = 1 (the
default) writes the columns as before, without `repeat`.

Inline (`--inline`, issue 23): each collective is timed as tensor parallelism issues it, on the
compute stream: torch's functional collective right after a matmul, waited on at once, no
barrier inside a round, the mean over rounds (`perfmodel.bench.comm_worker.time_inline`). Its
dataset is fitted with `fit comm --inline` into the profile's inline table.

Multi-node: pass torchrun's own rendezvous flags with --torchrun-args instead of the default
`--standalone`, e.g. `--torchrun-args "--nnodes 2 --node-rank 0 --rdzv-backend c10d
--rdzv-endpoint host0:29500"` on every node (node-rank differing), and --link naming the slowest
link of the ring (e.g. ib-ndr400). Only rank 0 (on the first node) writes the CSV.
"""

from __future__ import annotations

import logging
import math
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from perfmodel.bench.common import check_dtype_name, check_run_inputs
from perfmodel.spec.catalog import get_link
from perfmodel.spec.errors import ShardMeterError, UserInputError
from perfmodel.spec.inputs import check_limit

logger = logging.getLogger(__name__)

OPS = ("all_gather", "reduce_scatter", "all_reduce")
"""The collectives (the default --ops)."""
P2P_OPS = ("send_recv",)
"""Point-to-point operations (asked for by name)."""
ALL_OPS = OPS + P2P_OPS
COLUMNS = ("backend", "op", "link", "world_size", "payload_bytes", "time_s", "time_iqr_s", "iters")
KEY_COLUMNS = ("backend", "op", "link", "world_size", "payload_bytes")
REPEAT_COLUMN = "repeat"
"""With --repeats R > 1: which launch (1..R) measured the row (a key column)."""
MAX_REPEATS = 100
"""Most launches of one sweep (each a full torchrun; run-to-run noise needs a handful)."""
MIB = 1024**2


INLINE_COLUMNS = ("filler_side", "compute_s")
"""What an inline sweep's rows add: the side of the matmul each collective follows (a key
column) and that matmul's measured time, seconds."""


def dataset_columns(repeats: int, *, inline: bool = False
                    ) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(columns, key columns) of a sweep of `repeats` launches (`repeat` only when > 1; the
    inline columns only for an inline sweep)."""
    columns = (*COLUMNS, *(INLINE_COLUMNS if inline else ()))
    keys = (*KEY_COLUMNS, *(INLINE_COLUMNS[:1] if inline else ()))
    if repeats > 1:
        return (*columns, REPEAT_COLUMN), (*keys, REPEAT_COLUMN)
    return columns, keys


@dataclass(frozen=True, slots=True)
class CommSettings:
    """What the collective sweep measures and how."""

    backend: str
    """'gloo' (CPU tensors) or 'nccl' (CUDA tensors)."""
    link: str
    """Link name recorded per row (catalogs/links.csv), the slowest link of the ring."""
    ops: tuple[str, ...]
    """Collectives to measure."""
    min_mib: float
    """Smallest payload, MiB."""
    max_mib: float
    """Largest payload, MiB."""
    points: int
    """Log-spaced payload sizes."""
    iters: int
    """Timed repetitions per (op, payload)."""
    warmup: int
    """Untimed repetitions first."""
    threads: int = 1
    """torch threads per rank."""
    dtype: str = "float32"
    """Element type of the payload."""
    repeats: int = 1
    """Launches of the whole sweep (each a fresh torchrun); > 1 adds the `repeat` column."""
    inline: bool = False
    """Time each collective as issued inline on the compute stream (functional collective after
    a matmul, no barrier, the mean; `perfmodel.bench.comm_worker.time_inline`), the rows `fit
    comm --inline` reads. Not for send_recv."""


def payload_sizes(min_mib: float, max_mib: float, points: int, world_size: int,
                  elem_bytes: int) -> list[int]:
    """Log-spaced payload sizes in bytes, each a multiple of world_size x element size."""
    if not (math.isfinite(min_mib) and math.isfinite(max_mib)) or not 0 < min_mib <= max_mib \
            or points < 1:
        raise UserInputError(f"bad payload range {min_mib}-{max_mib} MiB with {points} points",
                             hint="use 0 < --min-mib <= --max-mib and --points >= 1.")
    check_limit("mib", max_mib, field="--max-mib")
    unit = world_size * elem_bytes
    raw = np.geomspace(min_mib * MIB, max_mib * MIB, points) if points > 1 else [min_mib * MIB]
    return sorted({max(unit, int(round(b / unit)) * unit) for b in raw})


def check_settings(s: CommSettings) -> None:
    """Reject unknown ops, backends and links with a clear message."""

    bad = [op for op in s.ops if op not in ALL_OPS]
    if bad:
        raise UserInputError(f"unknown collective(s) {bad}",
                             hint=f"use some of {', '.join(ALL_OPS)}.")
    if s.backend not in ("gloo", "nccl"):
        raise UserInputError(f"unknown backend {s.backend!r}",
                             hint="use --backend gloo (CPU) or nccl (CUDA).")
    get_link(s.link)
    if s.iters < 1 or s.warmup < 0:
        raise UserInputError(f"--iters must be >= 1 and --warmup >= 0, got {s.iters}, {s.warmup}",
                             hint="e.g. --iters 20 --warmup 3.")
    if s.inline and any(op in P2P_OPS for op in s.ops):
        raise UserInputError("--inline times collectives issued on the compute stream; "
                             "send_recv is not one", hint="drop send_recv from --ops.")
    if isinstance(s.repeats, bool) or not isinstance(s.repeats, int) \
            or not 1 <= s.repeats <= MAX_REPEATS:
        raise UserInputError(f"--repeats {s.repeats!r}: must be an integer from 1 to "
                             f"{MAX_REPEATS}",
                             hint="pass e.g. --repeats 3 (three launches of the sweep).")


def torchrun_command(module: str, worker_args: Sequence[str], *, nproc: int,
                     torchrun_args: str | None = None) -> list[str]:
    """`python -m torch.distributed.run` (= torchrun) for a worker module."""
    if nproc < 1:
        raise UserInputError(f"--nproc must be >= 1, got {nproc}",
                             hint="pass --nproc 2 on this machine.")
    rdzv = shlex.split(torchrun_args) if torchrun_args else ["--standalone"]
    return [sys.executable, "-m", "torch.distributed.run", *rdzv, "--nproc-per-node", str(nproc),
            "-m", module, *worker_args]


WORKER_LOG_SUFFIX = ".workers.log"
"""The workers' whole output (tracebacks included) goes to `<out><suffix>`, never the terminal."""
_RANK_PREFIX = re.compile(r"^\[(?:default)?rank\d+\]:\s?")
_LOG_LINE = re.compile(r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) ")
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit)\b:?.*$")


def launch(cmd: Sequence[str], *, threads: int, what: str, log_path: str | Path) -> None:
    """Run a torchrun command. The workers' log lines reach stderr; everything they print
    (tracebacks, torchrun's failure report) is appended to `log_path`; a failure is one error
    quoting the first exception a worker raised and naming the log."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1")
    logger.info("launching: %s", shlex.join(cmd))
    log = Path(log_path)
    log.parent.mkdir(parents=True, exist_ok=True)
    first_error: str | None = None
    with log.open("a", encoding="utf-8") as sink, subprocess.Popen(
            list(cmd), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            errors="replace") as proc:
        for line in proc.stdout or ():  # stdout=PIPE: always a stream
            sink.write(line)
            text = _RANK_PREFIX.sub("", line.rstrip("\n"))
            if _LOG_LINE.match(text):
                sys.stderr.write(text + "\n")
            elif (first_error is None and _EXCEPTION_LINE.match(text)
                  and "ChildFailedError" not in text):
                first_error = text.strip()
        returncode = proc.wait()
    if returncode != 0:
        raise ShardMeterError(
            f"{what} workers failed (torchrun exit code {returncode}): "
            f"{first_error or 'no exception message'}; the workers' whole output is in {log}",
            hint=f"read {log}; rerun the same command to resume (finished rows are kept).")


def check_launch(out_path: str | Path, settings: CommSettings, *, nproc: int,
                 torchrun_args: str | None = None) -> None:
    """Every check of a collective sweep that can run before torchrun (so a mistake is one clean
    message, not one traceback per rank)."""

    check_settings(settings)
    columns, key_columns = dataset_columns(settings.repeats, inline=settings.inline)
    check_run_inputs(out=out_path, columns=columns, key_columns=key_columns,
                     dtype=settings.dtype, threads=settings.threads, nproc=nproc,
                     iters=settings.iters, warmup=settings.warmup)
    if nproc < 2 and any(op in P2P_OPS for op in settings.ops) and not (
            torchrun_args and "--nnodes" in torchrun_args):
        raise UserInputError(f"--ops send_recv with --nproc {nproc}: a transfer needs two ranks",
                             hint="pass --nproc 2.")
    payload_sizes(settings.min_mib, settings.max_mib, settings.points, nproc,
                  check_dtype_name(settings.dtype))


def run_comm(out_path: str | Path, settings: CommSettings, *, nproc: int,
             torchrun_args: str | None = None) -> None:
    """Launch the collective sweep under torchrun, `settings.repeats` times (one fresh torchrun
    per repeat); rows go to out_path (resumable: a rerun measures only missing rows)."""
    check_launch(out_path, settings, nproc=nproc, torchrun_args=torchrun_args)
    args = ["--out", str(out_path), "--backend", settings.backend, "--link", settings.link,
            "--ops", ",".join(settings.ops), "--min-mib", str(settings.min_mib),
            "--max-mib", str(settings.max_mib), "--points", str(settings.points),
            "--iters", str(settings.iters), "--warmup", str(settings.warmup),
            "--threads", str(settings.threads), "--dtype", settings.dtype,
            *(["--inline"] if settings.inline else [])]
    for repeat in range(1, settings.repeats + 1):
        tagged = args + (["--repeat", str(repeat)] if settings.repeats > 1 else [])
        launch(torchrun_command("perfmodel.bench.comm_worker", tagged, nproc=nproc,
                                torchrun_args=torchrun_args),
               threads=settings.threads, what="collective benchmark"
               + (f" (repeat {repeat} of {settings.repeats})" if settings.repeats > 1 else ""),
               log_path=f"{out_path}{WORKER_LOG_SUFFIX}")
