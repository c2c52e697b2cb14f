#!/usr/bin/env python3
"""The memory model's allocator reserve against a GPU's FSDP2 steps (scripts/gpu_bench.sh).

    python -m scripts.reserve_check OUT/gpu-fsdp.csv [-o OUT/gpu-reserve.csv]

Reads a `shardmeter bench fsdp --backend nccl` dataset and the allocator statistics its CUDA
workers wrote beside it (`<data>.allocator.csv`), and prints, per step, the reserve the memory
model assumes (`perfmodel.costs.memory.MemoryConfig`: 512 MiB + 5 % of the tracked peak) beside
the measured one (torch.cuda.max_memory_reserved - max_memory_allocated, plus the device memory
outside the caching allocator), then the medians (`perfmodel.profiles.reserve_validation`).
Without CUDA statistics (a CPU machine, or a dataset measured on CPU) it says so and exits 0:
there is nothing to compare.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path

from perfmodel.formatting import markdown_table
from perfmodel.profiles.reserve_validation import allocator_path, compare_reserve
from perfmodel.spec.errors import ShardMeterError

COLUMNS = ("model", "seq_len", "micro_batch", "grad_accum", "world_size", "ac",
           "measured_allocated_mib", "predicted_tracked_mib", "measured_fragmentation_mib",
           "measured_fragmentation_fraction", "measured_outside_allocator_mib",
           "measured_reserve_mib", "predicted_reserve_mib", "reserve_error_pct")


def _cell(value: object) -> str:
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", help="bench fsdp CSV measured on CUDA")
    parser.add_argument("-o", "--out", default=None, help="also write the comparison as CSV")
    args = parser.parse_args(argv)
    sidecar = allocator_path(args.data)
    if not sidecar.is_file():
        print(f"reserve check skipped: {sidecar} does not exist (the allocator statistics are "
              "written by `bench fsdp` on CUDA only; this machine or this dataset has no GPU "
              "run). Nothing to compare.")
        return 0
    try:
        records = compare_reserve(args.data, sidecar)
    except ShardMeterError as err:
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code
    if not records:
        print(f"reserve check: no row of {args.data} has allocator statistics in {sidecar}")
        return 0
    print(markdown_table(list(COLUMNS), [[_cell(r[c]) for c in COLUMNS] for r in records]))
    fraction = statistics.median(r["measured_fragmentation_fraction"] for r in records)
    outside = statistics.median(r["measured_outside_allocator_mib"] for r in records)
    error = statistics.median(abs(r["reserve_error_pct"]) for r in records)
    first = records[0]
    print(f"\n{len(records)} steps: measured fragmentation median {100 * fraction:.2f} % of the "
          f"allocated peak (assumed {100 * first['assumed_fragmentation_fraction']:.2f} %); "
          f"outside the allocator median {outside:.0f} MiB (assumed "
          f"{first['assumed_fixed_reserve_mib']:.0f} MiB); whole reserve: median absolute error "
          f"{error:.1f} %.")
    if args.out:
        out = Path(args.out)
        with out.open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(records[0]))
            writer.writeheader()
            writer.writerows(records)
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
