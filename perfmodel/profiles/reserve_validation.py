"""The memory model's allocator reserve against CUDA measurements of the same FSDP2 steps.

Claim checked: `perfmodel.costs.memory.MemoryConfig` assumes that a GPU job holds, beyond the
tensors the model tracks, `reserve_bytes` (512 MiB: cuBLAS/cuDNN workspaces and NCCL's buffers)
plus `reserve_fraction` (5 %) of the tracked peak (the caching allocator's fragmentation,
memory_reserved beyond memory_allocated). Neither is fitted; both are ASSUMPTIONS until a GPU
measures them.

Why this comparison measures them: on CUDA, `shardmeter bench fsdp` (the worker,
`perfmodel.bench.fsdp_worker`) writes next to its dataset a sidecar `<data>.allocator.csv`
(`ALLOCATOR_COLUMNS`, one row per step row, same key): torch.cuda.max_memory_allocated and
max_memory_reserved over the timed steps (reset after warm-up, the allocator emptied before each
case), and the device memory outside the caching allocator (mem_get_info's used bytes less
memory_reserved, less the CUDA context measured before the process group existed: NCCL's
buffers, lazily loaded kernels, library handles). Each quantity is the maximum over ranks.
`compare_reserve` sets the model's reserve for the row's configuration and recipe
(`memory_breakdown`) beside the measured one:

* fragmentation: max_reserved - max_allocated, and as a fraction of max_allocated
  (model: `reserve_fraction`);
* outside the allocator (model: `reserve_bytes`);
* the whole reserve (their sum) against the model's (`reserve_bytes` + `reserve_fraction` x the
  predicted tracked peak).

No torch here: `scripts/reserve_check.py` runs it on `scripts/gpu_bench.sh`'s output. Checked by
tests/test_reserve_validation.py (the arithmetic on a sidecar, the refusal of a missing one).
"""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path
from typing import Any

from perfmodel.costs.features import spec_from_row
from perfmodel.costs.memory import DEFAULT_CONFIG, FP32_CONFIG, MemoryConfig, memory_breakdown
from perfmodel.profiles.fsdp_compare import KEY_COLUMNS, read_fsdp_dataset, row_recipe
from perfmodel.spec.errors import DatasetError
from perfmodel.spec.formulas import GIB

MIB = GIB / 1024
"""Bytes per MiB (the comparison's unit)."""
ALLOCATOR_COLUMNS = (*KEY_COLUMNS, "max_allocated_bytes", "max_reserved_bytes",
                     "outside_allocator_bytes", "context_bytes")
"""The sidecar's columns: the FSDP dataset's key, then (maximum over ranks) the caching
allocator's peak allocated and reserved bytes over the timed steps, the device bytes outside the
allocator at the end of them (CUDA context excluded) and that context."""


def allocator_path(data: str | Path) -> Path:
    """Where the FSDP benchmark writes the allocator sidecar of `data` on CUDA."""
    return Path(f"{data}.allocator.csv")


def _config(dtype: str) -> MemoryConfig:
    """The memory model's element sizes of the run's dtype, with the GPU reserve assumptions
    (the ones under test) whatever the dtype."""
    if dtype in ("float32", "fp32"):
        return replace(FP32_CONFIG, reserve_bytes=DEFAULT_CONFIG.reserve_bytes,
                       reserve_fraction=DEFAULT_CONFIG.reserve_fraction)
    return DEFAULT_CONFIG


def read_allocator_rows(path: str | Path) -> dict[tuple[str, ...], dict[str, float]]:
    """The sidecar's rows by key (`KEY_COLUMNS` as strings); DatasetError naming a missing file
    or column, or a value that is not a byte count."""
    p = Path(path)
    if not p.is_file():
        raise DatasetError(f"{p}: no such file (the allocator statistics of a CUDA run)",
                           hint="run `shardmeter bench fsdp --backend nccl ...` on a GPU: it "
                                "writes this file next to its dataset.")
    with p.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    missing = [c for c in ALLOCATOR_COLUMNS if rows and c not in rows[0]]
    if missing:
        raise DatasetError(f"{p}: missing column(s) {', '.join(missing)}",
                           hint="give the .allocator.csv written by `shardmeter bench fsdp`.")
    out = {}
    for i, row in enumerate(rows):
        values = {}
        for column in ALLOCATOR_COLUMNS[len(KEY_COLUMNS):]:
            try:
                values[column] = float(row[column])
            except ValueError:
                values[column] = float("nan")
            if not values[column] >= 0:
                raise DatasetError(f"{p}, line {i + 2}: column {column!r} = {row[column]!r}: "
                                   "must be a byte count >= 0",
                                   hint=f"delete line {i + 2} and rerun the benchmark.")
        out[tuple(row[k] for k in KEY_COLUMNS)] = values
    return out


def compare_reserve(data: str | Path,
                    allocator_data: str | Path | None = None) -> list[dict[str, Any]]:
    """Per step row of a `bench fsdp` CSV measured on CUDA: the model's reserve beside the
    measured one (module docstring); rows without allocator statistics are left out."""
    frame = read_fsdp_dataset(data)
    stats = read_allocator_rows(allocator_data or allocator_path(data))
    out = []
    for _, row in frame.iterrows():
        measured = stats.get(tuple(str(row[k]) for k in KEY_COLUMNS))
        if measured is None:
            continue
        recipe = row_recipe(row, str(data))
        config = _config(str(row["dtype"]))
        breakdown = memory_breakdown(
            spec_from_row(row), num_gpus=int(row["world_size"]), seq_len=int(row["seq_len"]),
            micro_batch=int(row["micro_batch"]), recipe=recipe,
            accum_steps=int(row["grad_accum"]), config=config)
        allocated, reserved = measured["max_allocated_bytes"], measured["max_reserved_bytes"]
        fragmentation = max(reserved - allocated, 0.0)
        outside = measured["outside_allocator_bytes"]
        reserve = fragmentation + outside
        out.append({
            "model": row["model"], "seq_len": int(row["seq_len"]),
            "micro_batch": int(row["micro_batch"]), "grad_accum": int(row["grad_accum"]),
            "world_size": int(row["world_size"]), "ac": recipe.ac,
            "measured_allocated_mib": allocated / MIB,
            "predicted_tracked_mib": breakdown.tracked_bytes / MIB,
            "measured_fragmentation_mib": fragmentation / MIB,
            "measured_fragmentation_fraction": fragmentation / allocated if allocated else
            float("nan"),
            "assumed_fragmentation_fraction": config.reserve_fraction,
            "measured_outside_allocator_mib": outside / MIB,
            "assumed_fixed_reserve_mib": config.reserve_bytes / MIB,
            "measured_reserve_mib": reserve / MIB,
            "predicted_reserve_mib": breakdown.reserve_bytes / MIB,
            "reserve_error_pct": (100.0 * (breakdown.reserve_bytes - reserve) / reserve
                                  if reserve else float("nan")),
            "context_mib": measured["context_bytes"] / MIB})
    return out
