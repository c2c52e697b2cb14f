"""What produced a dataset: the environment record and the energy counters of a benchmark
session, appended to the dataset's `<csv>.env.json` sidecar."""

from __future__ import annotations

import atexit
import ctypes
import datetime as dt
import json
import logging
import os
import platform
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


def cpu_model_name() -> str:
    """CPU model from /proc/cpuinfo (Linux), else platform.processor()."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def environment_record(*, device: str, threads: int,
                       extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What produced a dataset: software versions, device, CPU, threads, date, command line."""
    # lazy: torch, the optional [bench] extra
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


CACHING_MALLOCS = ("jemalloc", "tcmalloc")
"""malloc libraries that keep freed memory for reuse instead of unmapping it, as a GPU's caching
allocator does (the CPU benchmarks' setting since 2026-12-01)."""

JEMALLOC_CONF = "dirty_decay_ms:-1,muzzy_decay_ms:-1"
"""jemalloc options for the benchmarks: never hand freed pages back to the kernel, so a training
step's fresh buffers reuse warm memory from the previous step."""


def malloc_library(maps: Path = Path("/proc/self/maps")) -> str:
    """Which caching malloc (jemalloc, tcmalloc) this process runs on, or 'glibc'."""
    try:
        mapped = maps.read_text()
    except OSError:
        return "unknown"
    return next((name for name in CACHING_MALLOCS if f"lib{name}" in mapped), "glibc")


MALLCTL_ARENAS_ALL = 4096
"""jemalloc's arena index meaning every arena (`arena.<i>.purge`)."""


def release_freed_memory() -> None:
    """Hand the pages freed so far back to the kernel: the CPU's `torch.cuda.empty_cache()`.

    The benchmarks' jemalloc never purges by itself (a step's fresh buffers reuse the previous
    step's pages, as on a GPU); without this, memory freed by one configuration's model stays
    mapped in size classes the next one may not reuse, and a 150-shape sweep filled the 24 GB VM
    (2026-12-01)."""

    process = ctypes.CDLL(None)
    library = malloc_library()
    if library == "jemalloc":
        process.mallctl(f"arena.{MALLCTL_ARENAS_ALL}.purge".encode(), None, None, None,
                        ctypes.c_size_t(0))
    elif library == "tcmalloc":
        process.MallocExtension_ReleaseFreeMemory()
    elif library == "glibc" and hasattr(process, "malloc_trim"):
        process.malloc_trim(ctypes.c_size_t(0))


def memory_environment() -> dict[str, Any]:
    """Allocator-relevant settings and the machine load when a session starts."""
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = float("nan")
    return {"malloc_library": malloc_library(),
            "malloc_conf": os.environ.get("MALLOC_CONF", ""),
            "glibc_tunables": os.environ.get("GLIBC_TUNABLES", ""),
            "transparent_hugepage": thp.read_text().strip() if thp.is_file() else "n/a",
            "loadavg_1m_at_start": load}


def warn_small_pages(device: str) -> None:
    """On Linux CPUs, glibc's malloc unmaps every large freed tensor, so each step's fresh
    gradients and optimizer temporaries fault their pages in again, at a cost that swings with
    the VM's huge-page supply and that no GPU pays behind its caching allocator: say how to avoid
    it."""
    if device == "cpu" and sys.platform.startswith("linux") \
            and malloc_library() not in CACHING_MALLOCS:
        logger.warning("this process runs on glibc's malloc: large fresh tensors (gradients, "
                       "optimizer temporaries) will be dominated by page faults. To fix: install "
                       "jemalloc (Debian: apt-get install libjemalloc2) and start the command as "
                       "`LD_PRELOAD=libjemalloc.so.2 MALLOC_CONF=%s shardmeter bench ...`",
                       JEMALLOC_CONF)


def device_name(device: str) -> str:
    """Human name of the device the benchmark runs on."""
    # lazy: torch, the optional [bench] extra
    import torch

    if device == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return cpu_model_name()


POWERCAP = Path("/sys/class/powercap")
"""Linux RAPL energy counters (CPU package / DRAM zones), where the kernel exposes them."""


def energy_counters() -> dict[str, Any]:
    """Cumulative energy counters this machine exposes, for the power model (issue 14): NVML per
    GPU (`nvmlDeviceGetTotalEnergyConsumption`, mJ since the driver loaded; `pynvml`, optional)
    and RAPL powercap zones (µJ). `energy_unavailable` lists what is missing here."""
    out: dict[str, Any] = {}
    missing: list[str] = []
    try:
        # lazy: optional: NVIDIA's NVML bindings exist only on GPU hosts
        import pynvml  # optional: pip install nvidia-ml-py
    except ImportError:
        missing.append("NVML: pynvml is not installed (pip install nvidia-ml-py)")
    else:
        try:
            pynvml.nvmlInit()
            try:
                out["nvml"] = [_nvml_device(pynvml, i) for i in range(pynvml.nvmlDeviceGetCount())]
            finally:
                pynvml.nvmlShutdown()
        except pynvml.NVMLError as err:
            missing.append(f"NVML: {err}")
        if not out.get("nvml"):
            missing.append("NVML: no device with an energy counter")
    rapl = {}
    for counter in sorted(POWERCAP.glob("*/energy_uj")) if POWERCAP.is_dir() else []:
        try:
            rapl[counter.parent.name] = int(counter.read_text())
        except (OSError, ValueError):
            continue
    if rapl:
        out["rapl_uj"] = rapl
    else:
        missing.append(f"RAPL: no readable powercap energy counter at {POWERCAP}")
    if missing:
        out["energy_unavailable"] = missing
    return out


def _nvml_device(pynvml: Any, index: int) -> dict[str, Any]:
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    name = pynvml.nvmlDeviceGetName(handle)
    return {"index": index, "name": name.decode() if isinstance(name, bytes) else str(name),
            "energy_mj": int(pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)),
            "power_w": pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
            "power_limit_w": pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0}


def energy_delta(start: Mapping[str, Any], end: Mapping[str, Any],
                 window_s: float) -> dict[str, Any]:
    """Measured energy between two `energy_counters` snapshots, joules (RAPL wrap-arounds
    skipped)."""
    out: dict[str, Any] = {"window_s": window_s}
    before = {d["index"]: d["energy_mj"] for d in start.get("nvml", [])}
    gpus = [{"index": d["index"], "name": d["name"],
             "energy_j": (d["energy_mj"] - before[d["index"]]) / 1e3}
            for d in end.get("nvml", []) if d["index"] in before]
    if gpus:
        out["nvml"] = gpus
    rapl = {zone: (uj - start["rapl_uj"][zone]) / 1e6 for zone, uj in end.get("rapl_uj", {}).items()
            if zone in start.get("rapl_uj", {}) and uj >= start["rapl_uj"][zone]}
    if rapl:
        out["rapl_j"] = rapl
    if not gpus and not rapl:
        out["energy_unavailable"] = end.get("energy_unavailable", ["no energy counter"])
    return out


def _record_energy_at_exit(path: Path, index: int, start: Mapping[str, Any],
                           start_s: float) -> None:
    """atexit: the session's measured energy into its record (skipped when the file changed
    shape)."""
    try:
        payload = json.loads(path.read_text())
        session = payload["sessions"][index]
        session["energy_measured"] = energy_delta(start, energy_counters(),
                                                  time.monotonic() - start_s)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(payload, indent=2) + "\n")
        os.replace(tmp, path)
    except (OSError, ValueError, KeyError, IndexError) as err:
        logger.warning("could not record the session's measured energy in %s: %s", path, err)


RESUME_KEYS = ("benchmark", "torch", "python", "threads", "device", "device_name", "cpu_model",
               "malloc_library", "space", "named", "seed", "dtype", "iters", "warmup", "backend",
               "link", "world_size", "nproc", "recipe", "time_per_config_s", "memory_cap_bytes")
"""Environment fields whose change between the sessions of one dataset makes its rows measure
different things (`warn_changed_environment`)."""


def warn_changed_environment(csv_path: str | Path, previous: Mapping[str, Any],
                             record: Mapping[str, Any]) -> list[str]:
    """Warn when a session resumes a dataset whose last session ran under another environment
    (another torch, thread count, space, ...): rows of both end up in one file. Returns the
    changed fields as `key: old -> new`."""
    csv = Path(csv_path)
    if not csv.is_file() or csv.stat().st_size == 0:
        return []
    changed = [f"{key}: {previous[key]!r} -> {record[key]!r}" for key in RESUME_KEYS
               if key in previous and key in record and previous[key] != record[key]]
    if changed:
        logger.warning("%s: resuming a dataset measured under another environment (%s); its rows "
                       "will mix both. To fix: resume under the same settings, or write to a new "
                       "output file (-o).", csv, "; ".join(changed))
    return changed


def environment_sessions(csv_path: str | Path) -> list[dict[str, Any]]:
    """The session records of `<csv>.env.json` (`append_environment`'s file), oldest first;
    [] when the dataset has no sidecar."""
    path = Path(f"{csv_path}.env.json")
    sessions: list[dict[str, Any]] = json.loads(path.read_text())["sessions"] \
        if path.is_file() else []
    return sessions


def append_environment(csv_path: str | Path, record: Mapping[str, Any]) -> Path:
    """Append one session record to `<csv>.env.json` (a JSON object with a `sessions` list).

    The record gets the machine's energy counters now (`energy_at_start`) and, when the process
    exits normally, the energy measured since (`energy_measured`: NVML joules per GPU, RAPL joules
    per zone, or what is unavailable on this machine)."""
    path = Path(f"{csv_path}.env.json")
    start_s = time.monotonic()
    record = {**record, "energy_at_start": energy_counters()}
    payload: dict[str, Any] = {"sessions": []}
    if path.is_file():
        try:
            payload = json.loads(path.read_text())
        except json.JSONDecodeError:
            logger.warning("%s is not valid JSON; starting a new environment record", path)
            payload = {"sessions": []}
    sessions = payload.get("sessions")
    if isinstance(sessions, list) and sessions and isinstance(sessions[-1], dict):
        warn_changed_environment(csv_path, sessions[-1], record)
    payload.setdefault("sessions", []).append(dict(record))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2) + "\n")
    os.replace(tmp, path)  # a kill mid-write leaves the old record, never half a JSON file
    atexit.register(_record_energy_at_exit, path, len(payload["sessions"]) - 1,
                    record["energy_at_start"], start_s)
    return path
