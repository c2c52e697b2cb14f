"""Shared benchmark plumbing: append-only CSV with resume, environment record, statistics.

Datasets are written row by row (flushed and fsynced), so an interrupted run loses at most the
measurement in flight; rerunning the same command skips every key already in the file.
The environment of each session (torch version, device, CPU model, threads, date, command) is
appended to a sidecar JSON file `<csv>.env.json`.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import logging
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfmodel.errors import DatasetError, UserInputError

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


class CsvLog:
    """An append-only CSV dataset keyed by some of its columns (resume support)."""

    def __init__(self, path: str | Path, columns: Sequence[str], key_columns: Sequence[str]) -> None:
        self.path = Path(path)
        self.columns = list(columns)
        self.key_columns = list(key_columns)
        self._check_header()

    def _check_header(self) -> None:
        if not self.path.is_file() or self.path.stat().st_size == 0:
            return
        with self.path.open(newline="") as fh:
            header = next(csv.reader(fh), [])
        if header != self.columns:
            raise DatasetError(
                f"{self.path}: existing header {header} does not match this benchmark's columns "
                f"{self.columns}",
                hint="write to a new output file (-o) or delete the old one.")

    def rows(self) -> list[dict[str, str]]:
        """Rows already in the file (strings, as read)."""
        if not self.path.is_file():
            return []
        with self.path.open(newline="") as fh:
            return list(csv.DictReader(fh))

    def key_of(self, row: Mapping[str, Any]) -> tuple[str, ...]:
        """The resume key of a row, normalised to strings."""
        return tuple(_cell(row[c]) for c in self.key_columns)

    def done_keys(self) -> set[tuple[str, ...]]:
        """Keys of the rows already written."""
        return {self.key_of(r) for r in self.rows()}

    def append(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Append rows and flush them to disk (header first if the file is new)."""
        rows = list(rows)
        if not rows:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        new = not self.path.is_file() or self.path.stat().st_size == 0
        with self.path.open("a", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=self.columns, extrasaction="raise")
            if new:
                writer.writeheader()
            for row in rows:
                writer.writerow({c: _cell(row[c]) for c in self.columns})
            fh.flush()
            os.fsync(fh.fileno())


def _cell(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.9g}"
    return str(value)


# ---- environment --------------------------------------------------------------------------

def cpu_model_name() -> str:
    """CPU model from /proc/cpuinfo (Linux), else platform.processor()."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def environment_record(*, device: str, threads: int, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What produced a dataset: software versions, device, CPU, threads, date, command line."""
    import torch

    record: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": " ".join(sys.argv),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
        "cpu_model": cpu_model_name(),
        "cpu_count": os.cpu_count(),
        "threads": threads,
        "device": device,
        "device_name": device_name(device),
    }
    record.update(memory_environment())
    if device == "cuda" and torch.cuda.is_available():
        record["cuda"] = torch.version.cuda
        record["device_count"] = torch.cuda.device_count()
    if extra:
        record.update(extra)
    return record


HUGEPAGE_TUNABLE = "glibc.malloc.hugetlb=1"
"""glibc tunable making malloc request transparent huge pages (madvise): the CPU benchmarks' setting."""


def memory_environment() -> dict[str, Any]:
    """Allocator-relevant settings and the machine load when a session starts."""
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = float("nan")
    return {"glibc_tunables": os.environ.get("GLIBC_TUNABLES", ""),
            "transparent_hugepage": thp.read_text().strip() if thp.is_file() else "n/a",
            "loadavg_1m_at_start": load}


def warn_small_pages(device: str) -> None:
    """On Linux CPUs, fresh large tensors pay one page fault per 4 KiB unless malloc uses huge
    pages (measured here: ~0.33 s per GiB, 6x more than with huge pages): say how to avoid it."""
    if device == "cpu" and sys.platform.startswith("linux") \
            and HUGEPAGE_TUNABLE not in os.environ.get("GLIBC_TUNABLES", ""):
        logger.warning("GLIBC_TUNABLES=%s is not set: large fresh tensors (gradients, optimizer "
                       "temporaries) will be dominated by 4 KiB page faults. To fix: start the "
                       "command as `GLIBC_TUNABLES=%s shardmeter bench ...`", HUGEPAGE_TUNABLE,
                       HUGEPAGE_TUNABLE)


def device_name(device: str) -> str:
    """Human name of the device the benchmark runs on."""
    import torch

    if device == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return cpu_model_name()


def append_environment(csv_path: str | Path, record: Mapping[str, Any]) -> Path:
    """Append one session record to `<csv>.env.json` (a JSON object with a `sessions` list)."""
    path = Path(f"{csv_path}.env.json")
    payload: dict[str, Any] = {"sessions": []}
    if path.is_file():
        try:
            payload = json.loads(path.read_text())
        except json.JSONDecodeError:
            logger.warning("%s is not valid JSON; starting a new environment record", path)
            payload = {"sessions": []}
    payload.setdefault("sessions", []).append(dict(record))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path


# ---- checks and setup ---------------------------------------------------------------------

def resolve_device(device: str) -> str:
    """Validate --device; 'cuda' needs a CUDA build with a visible GPU."""
    import torch

    if device not in ("cpu", "cuda"):
        raise UserInputError(f"unknown device {device!r}", hint="use --device cpu or --device cuda.")
    if device == "cuda" and not torch.cuda.is_available():
        raise UserInputError("--device cuda but torch sees no CUDA GPU",
                             hint="run on a machine with a GPU and a CUDA build of torch, or use --device cpu.")
    return device


def resolve_dtype(name: str) -> Any:
    """torch dtype from its short name (float32, bfloat16, float16)."""
    import torch

    table = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
             "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}
    if name not in table:
        raise UserInputError(f"unknown dtype {name!r}", hint="use float32, bfloat16 or float16.")
    return table[name]


def dtype_name(dtype: Any) -> str:
    """Short name of a torch dtype ('float32', 'bfloat16', ...)."""
    return str(dtype).removeprefix("torch.")


def set_threads(threads: int) -> int:
    """Pin torch's intra-op threads (recorded with every row); returns the value set."""
    import torch

    if threads < 1:
        raise UserInputError(f"--threads must be >= 1, got {threads}", hint="pass --threads 1 (the default).")
    torch.set_num_threads(threads)
    return torch.get_num_threads()


def is_oom(err: BaseException) -> bool:
    """Out-of-memory on GPU (torch.OutOfMemoryError) or a failed CPU allocation."""
    import torch

    if isinstance(err, torch.OutOfMemoryError):
        return True
    return isinstance(err, RuntimeError) and "can't allocate memory" in str(err)


def time_budget_left(start_s: float, cap_s: float) -> float:
    """Seconds left of a per-configuration cap (inf when there is no cap)."""
    return math.inf if cap_s <= 0 else cap_s - (time.perf_counter() - start_s)


def make_progress() -> Any:
    """A rich progress bar with completed/total, elapsed time and ETA (stderr)."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                    console=Console(stderr=True))


def read_space_yaml(path: Path, *, what: str, example: str) -> Any:
    """Parse a design-space YAML file; a missing or malformed file is a UserInputError."""
    import yaml

    try:
        return yaml.safe_load(path.read_text())
    except FileNotFoundError as err:
        raise UserInputError(f"{what} {path} not found",
                             hint=f"pass --space {example} or another existing file.") from err
    except yaml.YAMLError as err:
        raise UserInputError(f"{path}: not valid YAML ({err})",
                             hint=f"fix {path} (see {example} for the format).") from err
