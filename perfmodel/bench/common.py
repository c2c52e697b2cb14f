"""Shared benchmark plumbing: append-only CSV with resume, environment record, statistics.

Datasets are written row by row (one write + fsync per batch), so an interrupted run loses at most
the measurement in flight; rerunning the same command skips every key already in the file
(`CsvLog` documents how a damaged file is detected).
The environment of each session (torch version, device, CPU model, threads, date, command) is
appended to a sidecar JSON file `<csv>.env.json`.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfmodel.spec.errors import DatasetError, UserInputError, did_you_mean
from perfmodel.spec.formulas import dtype_bytes
from perfmodel.spec.inputs import load_yaml

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Spread:
    """Median and interquartile range of repeated timings."""

    median_s: float
    """Median, seconds."""
    iqr_s: float
    """Interquartile range (75th minus 25th percentile), seconds."""
    count: int
    """Number of samples."""


def median_iqr(values_s: Sequence[float]) -> Spread:
    """Median and IQR of timings (IQR 0 for fewer than 2 samples)."""
    if not values_s:
        raise ValueError("median_iqr needs at least one value")
    if len(values_s) < 2:
        return Spread(float(values_s[0]), 0.0, len(values_s))
    q1, _, q3 = statistics.quantiles(values_s, n=4, method="inclusive")
    return Spread(float(statistics.median(values_s)), float(q3 - q1), len(values_s))


NUMERIC_SUFFIXES = ("_s", "_bytes", "_size", "_layers", "_heads", "_dim", "_len", "_batch",
                    "_accum", "_mib", "_gib", "_count", "_pct")
"""Column-name endings of numeric dataset columns (checked on resume when not listed)."""
NUMERIC_NAMES = frozenset({"iters", "warmup", "threads", "world_size", "nproc", "seed"})
"""Numeric dataset columns whose names have none of the NUMERIC_SUFFIXES."""


def looks_numeric(column: str) -> bool:
    """Whether a dataset column holds numbers, judged by its name (see NUMERIC_SUFFIXES)."""
    return column in NUMERIC_NAMES or column.endswith(NUMERIC_SUFFIXES)


class CsvLog:
    """An append-only CSV dataset keyed by some of its columns (resume support).

    Data safety: every batch of rows reaches the file in one `write` + fsync. Reading the file
    drops a partial last line (the trace of a killed run: its rows are measured again) and
    refuses a damaged file (NUL bytes, a line with the wrong number of fields, a non-numeric
    or non-finite number, a duplicate key, another header) naming the file and line.
    Appending skips rows whose key is already in the file, so a row is never duplicated.
    """

    def __init__(self, path: str | Path, columns: Sequence[str], key_columns: Sequence[str], *,
                 numeric_columns: Sequence[str] | None = None) -> None:
        self.path = Path(path)
        self.columns = list(columns)
        self.key_columns = list(key_columns)
        self.numeric_columns = [c for c in self.columns if looks_numeric(c)] \
            if numeric_columns is None else list(numeric_columns)
        self._keys: set[tuple[str, ...]] | None = None
        self.rows()  # validate (and repair a partial last line) before any measurement

    def _fail(self, line: int | None, problem: str, hint: str | None = None) -> DatasetError:
        where = f"{self.path}, line {line}" if line is not None else str(self.path)
        return DatasetError(f"{where}: {problem}", hint=hint or (
            f"delete line {line} of {self.path} (rerunning the same command measures it again), "
            "or write to a new output file (-o)."))

    def _text(self) -> str:
        """The file's complete lines; a partial last line is cut off the file first."""
        if self.path.is_dir():
            raise self._fail(None, "is a directory, not a CSV file",
                             f"pass a file name, e.g. -o {self.path / 'data.csv'}.")
        if not self.path.is_file():
            return ""
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            keep = data.rfind(b"\n") + 1
            logger.warning("%s: dropping a partial last line (%d bytes) left by an interrupted "
                           "run; its measurement is repeated", self.path, len(data) - keep)
            os.truncate(self.path, keep)
            data = data[:keep]
        nul = data.find(b"\0")
        if nul >= 0:
            raise self._fail(data.count(b"\n", 0, nul) + 1,
                             "contains NUL bytes (the file is corrupt)")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as err:
            raise self._fail(data.count(b"\n", 0, err.start) + 1, "is not UTF-8 text") from err

    def rows(self) -> list[dict[str, str]]:
        """Rows already in the file (strings, as read), validated."""
        text = self._text()
        if not text.strip():
            self._keys = set()
            return []
        reader = csv.reader(io.StringIO(text, newline=""))
        header = next(reader)
        if header != self.columns:
            raise self._fail(1, f"existing header {header} does not match this benchmark's columns "
                             f"{self.columns}",
                             "write to a new output file (-o) or delete the old one.")
        out: list[dict[str, str]] = []
        seen: dict[tuple[str, ...], int] = {}
        for fields in reader:
            line = reader.line_num
            if not fields:
                continue
            if len(fields) != len(self.columns):
                raise self._fail(line, f"{len(fields)} fields where the header has "
                                       f"{len(self.columns)}")
            row = dict(zip(self.columns, fields, strict=True))
            self._check_numbers(row, line)
            key = self.key_of(row)
            if key in seen:
                raise self._fail(line, f"duplicate of line {seen[key]} "
                                       f"(same {', '.join(self.key_columns)} = {', '.join(key)})")
            seen[key] = line
            out.append(row)
        self._keys = set(seen)
        return out

    def _check_numbers(self, row: Mapping[str, str], line: int) -> None:
        for column in self.numeric_columns:
            value = row[column].strip()
            try:
                number = float(value)
            except ValueError:
                number = math.nan
            if not math.isfinite(number):
                raise self._fail(line, f"column {column!r} = {value!r} is not a finite number")

    def key_of(self, row: Mapping[str, Any]) -> tuple[str, ...]:
        """The resume key of a row, normalised to strings."""
        return tuple(_cell(row[c]) for c in self.key_columns)

    def done_keys(self) -> set[tuple[str, ...]]:
        """Keys of the rows already written."""
        return {self.key_of(r) for r in self.rows()}

    def append(self, rows: Iterable[Mapping[str, Any]]) -> int:
        """Append the rows whose key is new in one write, fsynced (header first if the file is
        new); returns how many were written."""
        if self._keys is None:
            self.rows()
        keys = self._keys if self._keys is not None else set()
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=self.columns, extrasaction="raise",
                                lineterminator="\n")
        written = 0
        for row in rows:
            key = self.key_of(row)
            if key in keys:
                logger.warning("%s: a row with key %s is already there; not written again",
                               self.path, key)
                continue
            keys.add(key)
            writer.writerow({c: _cell(row[c]) for c in self.columns})
            written += 1
        if not written:
            return 0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        new = not self.path.is_file() or self.path.stat().st_size == 0
        header = io.StringIO()
        if new:
            csv.writer(header, lineterminator="\n").writerow(self.columns)
        _append_atomic(self.path, (header.getvalue() + buffer.getvalue()).encode("utf-8"))
        return written


def _append_atomic(path: Path, data: bytes) -> None:
    """Append `data` with O_APPEND in as few writes as the kernel allows, then fsync."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def _cell(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.9g}"
    return str(value)


# ---- checks and setup ---------------------------------------------------------------------

def resolve_device(device: str) -> str:
    """Validate --device; 'cuda' needs a CUDA build with a visible GPU."""
    # lazy: torch, the optional [bench] extra
    import torch

    if device not in ("cpu", "cuda"):
        raise UserInputError(f"unknown device {device!r}",
                             hint="use --device cpu or --device cuda.")
    if device == "cuda" and not torch.cuda.is_available():
        raise UserInputError("--device cuda but torch sees no CUDA GPU",
                             hint="run on a machine with a GPU and a CUDA build of torch, "
                                  "or use --device cpu.")
    return device


BENCH_DTYPE_ALIASES = {"float32": "fp32", "fp32": "fp32", "bfloat16": "bf16", "bf16": "bf16",
                       "float16": "fp16", "fp16": "fp16"}
"""Benchmark dtype names (the --dtype flag) and the `perfmodel.spec.formulas` dtype each one is."""
DTYPE_ELEMENT_BYTES = {name: int(dtype_bytes(short)) for name, short in BENCH_DTYPE_ALIASES.items()}
"""Element size in bytes of each --dtype name: derived from
`perfmodel.spec.formulas.DTYPE_BYTES`."""


def check_dtype_name(name: str) -> int:
    """Validate a --dtype name without importing torch; returns the element size in bytes."""
    if name not in DTYPE_ELEMENT_BYTES:
        raise UserInputError(f"--dtype {name}: unknown dtype; "
                             f"{did_you_mean(name, DTYPE_ELEMENT_BYTES)}",
                             hint="use float32, bfloat16 or float16.")
    return DTYPE_ELEMENT_BYTES[name]


def resolve_dtype(name: str) -> Any:
    """torch dtype from its short name (float32, bfloat16, float16)."""
    # lazy: torch, the optional [bench] extra
    import torch

    check_dtype_name(name)
    table = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
             "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}
    return table[name]


def check_run_inputs(*, out: str | Path, columns: Sequence[str], key_columns: Sequence[str],
                     dtype: str, threads: int, nproc: int = 1, iters: int = 1,
                     warmup: int = 0) -> None:
    """Everything a benchmark launch can check before torch or torchrun starts: the output CSV
    (a file of another benchmark, or a damaged one, is refused), dtype, threads, ranks, repeats."""
    for flag, value, low in (("--threads", threads, 1), ("--nproc", nproc, 1),
                             ("--iters", iters, 1), ("--warmup", warmup, 0)):
        if value < low:
            raise UserInputError(f"{flag} {value}: must be >= {low}",
                                 hint=f"pass {flag} {max(low, 1)} or more.")
    check_dtype_name(dtype)
    CsvLog(out, columns, key_columns)


def positive_int(path: Path, field: str, value: Any) -> int:
    """A positive integer read from a YAML file (not a boolean, not 2.5, not 'abc')."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or value != int(value) or value < 1:
        raise UserInputError(f"{path}: field {field!r} = {value!r}: must be a positive integer",
                             hint=f"write a whole number >= 1 for {field} in {path}.")
    return int(value)


def dtype_name(dtype: Any) -> str:
    """Short name of a torch dtype ('float32', 'bfloat16', ...)."""
    return str(dtype).removeprefix("torch.")


def set_threads(threads: int) -> int:
    """Pin torch's intra-op threads (recorded with every row); returns the value set."""
    # lazy: torch, the optional [bench] extra
    import torch

    if threads < 1:
        raise UserInputError(f"--threads must be >= 1, got {threads}",
                             hint="pass --threads 1 (the default).")
    torch.set_num_threads(threads)
    return torch.get_num_threads()


def is_oom(err: BaseException) -> bool:
    """Out-of-memory on GPU (torch.OutOfMemoryError) or a failed CPU allocation."""
    # lazy: torch, the optional [bench] extra
    import torch

    if isinstance(err, torch.OutOfMemoryError):
        return True
    return isinstance(err, RuntimeError) and "can't allocate memory" in str(err)


def time_budget_left(start_s: float, cap_s: float) -> float:
    """Seconds left of a per-configuration cap (inf when there is no cap)."""
    return math.inf if cap_s <= 0 else cap_s - (time.perf_counter() - start_s)


def read_space_yaml(path: Path, *, what: str, example: str) -> Any:
    """Parse a design-space YAML file; a missing or malformed file is a UserInputError."""

    return load_yaml(path, what=what, hint=f"pass --space {example} or another existing, valid "
                     "YAML file.")


def reject_unknown_keys(path: Path, where: str, raw: Mapping[str, Any], known: Sequence[str], *,
                        example: str) -> None:
    """A YAML mapping may hold only `known` keys (a typo must not be silently ignored)."""
    for key in raw:
        if key not in known:
            dotted = f"{where}.{key}" if where else str(key)
            raise UserInputError(f"{path}: unknown key {dotted!r}; {did_you_mean(str(key), known)}",
                                 hint=f"fix {path} (see {example} for the format).")


def spawn_gloo_job(worker: Callable[..., None], world_size: int, *args: Any) -> Any:
    """Run `worker(rank, world_size, store, out, *args)` in `world_size` fresh processes
    (torch.multiprocessing's spawn), `store` a file for the gloo rendezvous and `out` a file rank 0
    writes its JSON result to, and return that result: the one launch of every recorded gloo job
    (`perfmodel.bench.fsdp_order`, `perfmodel.bench.layout_record`)."""
    # lazy: torch's process launcher, only for a job (the [bench] extra)
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "records.json")
        mp.spawn(  # type: ignore[attr-defined,no-untyped-call]  # untyped torch API
            worker, args=(world_size, os.path.join(tmp, "store"), out, *args),
            nprocs=world_size, join=True)
        return json.loads(Path(out).read_text())
