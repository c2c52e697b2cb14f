#!/usr/bin/env python
"""The MoE memory model against FSDPMemTracker (issue 26): one row per tracked configuration and
the summary (MAPE, worst), as Markdown on stdout.

    .venv/bin/python -m scripts.moe_memory_report                 # the shipped grid
    .venv/bin/python -m scripts.moe_memory_report PATH [PATH ...]  # other tracker CSVs (held-out)

The datasets are `perfmodel.bench.memory_moe`'s (fixed-capacity routing; `python -m
scripts.make_memory_moe --grid | --heldout`); the comparison is
`perfmodel.profiles.memory_validation.compare_layouts`, the one tests/test_moe_step.py checks
against the goal (MAPE <= 3 %, worst <= 8 %). Nothing here is fitted.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from perfmodel.formatting import markdown_table
from perfmodel.profiles.memory_validation import (
    MOE_DATASET,
    compare_layouts,
    dataset_path,
    summarize,
)


def report(path: Path) -> str:
    """The rows and the summary of one tracker CSV."""
    records = compare_layouts(path)
    rows = [(Path(r["model"]).parent.name or r["model"], r["world_size"], r["ep"], r["ac"],
             r["micro_batch"], f"{r['tracker_gib']:.3f}", f"{r['model_gib']:.3f}",
             f"{r['error_pct']:+.2f}", r["phase"]) for r in records]
    summary = summarize(records)
    table = markdown_table(("model", "GPUs", "ep", "ac", "m", "tracker GiB", "model GiB",
                            "error %", "model's peak phase"), rows)
    return (f"## {path.name}\n\n{table}\n\n{summary['rows']} rows: MAPE "
            f"{summary['mape_pct']:.2f} %, worst {summary['worst_pct']:.2f} %\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path,
                        help="tracker CSVs (default: the shipped MoE grid)")
    args = parser.parse_args(argv)
    for path in args.paths or [dataset_path(MOE_DATASET)]:
        sys.stdout.write(report(path) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
