#!/usr/bin/env python
"""Stage memory of pipeline-parallel training tracked in PyTorch, and the model against it.

Tracks pipeline ranks with torch's own schedules under the fake process group and
FakeTensorMode (`perfmodel.bench.pipeline_memory`; needs the [bench] extra) and appends one row
per rank to a CSV, skipping rows already there (rerun to resume); or compares a dataset with
`perfmodel.costs.memory.pipeline_memory` (no torch).

    .venv/bin/python -m scripts.bench_pipeline_memory --grid \\
        -o catalogs/profiles/data/memory-tracker-pipeline.csv            # 24 configs, seed 0
    .venv/bin/python -m scripts.bench_pipeline_memory --heldout \\
        -o catalogs/profiles/data/memory-tracker-pipeline-heldout.csv    # 20 configs, seed 24
    .venv/bin/python -m scripts.bench_pipeline_memory --moe-grid \
        -o catalogs/profiles/data/memory-tracker-moe-pipeline.csv        # 36 MoE configs, seed 0
    .venv/bin/python -m scripts.bench_pipeline_memory --moe-heldout \
        -o catalogs/profiles/data/memory-tracker-moe-pipeline-heldout.csv  # 16, seed 2426
    .venv/bin/python -m scripts.bench_pipeline_memory --grid --list      # the cases, no run
    .venv/bin/python -m scripts.bench_pipeline_memory \\
        --compare catalogs/profiles/data/memory-tracker-pipeline.csv --rows   # no torch

The grid is `grid_cases(configs=24, seed=0)` and the held-out set `heldout_cases(seed=24)`; the
MoE stages' grid `moe_grid_cases(configs=36, seed=0)` and held-out set
`moe_heldout_cases(seed=2426)`; every draw is documented where it is defined.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from perfmodel.formatting import markdown_table
from perfmodel.profiles.pipeline_memory_validation import (
    compare_pipeline_memory,
    summary_markdown,
)

logger = logging.getLogger("scripts.bench_pipeline_memory")


def _compare(path: Path, rows: bool) -> None:
    records = compare_pipeline_memory(path)
    out = [summary_markdown(records, f"Stage memory, model vs tracker (`{path.name}`):")]
    if rows:
        body = [(r["model"], r["num_hidden_layers"], r["pp_schedule"], r["pp"],
                 r["virtual_stages"], r["dp_shard"], r["rank"], r["seq_len"], r["micro_batch"],
                 r["accum_steps"], r["ac"], f"{r['tracker_gib']:.3f}", f"{r['model_gib']:.3f}",
                 f"{r['error_pct']:+.2f}", f"{r['in_flight_torch']} / {r['in_flight_model']}",
                 r["moment"]) for r in records]
        out.append(markdown_table(
            ["model", "L", "schedule", "pp", "V", "dp_shard", "rank", "S", "m", "k", "AC",
             "tracker GiB", "model GiB", "error %", "in flight torch / model", "peak moment"],
            body))
    sys.stdout.write("\n\n".join(out) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--grid", action="store_true", help="the shipped grid")
    which.add_argument("--heldout", action="store_true", help="the 20 held-out configurations")
    which.add_argument("--moe-grid", action="store_true", help="the shipped grid of MoE stages")
    which.add_argument("--moe-heldout", action="store_true",
                       help="the 16 held-out configurations of MoE stages")
    which.add_argument("--compare", type=Path, metavar="CSV",
                       help="compare a dataset with the model (no torch)")
    parser.add_argument("-o", "--out", type=Path, help="CSV to append rows to")
    parser.add_argument("--seed", type=int, default=None,
                        help="draw seed [grid: 0, held-out: 24, MoE grid: 0, MoE held-out: "
                             "2426]")
    parser.add_argument("--configs", type=int, default=None,
                        help="configurations drawn [grid: 24, held-out: 20, MoE grid: 36, MoE "
                             "held-out: 16]")
    parser.add_argument("--limit", type=int, default=None, help="track at most N new rows")
    parser.add_argument("--list", action="store_true", help="print the cases, run nothing")
    parser.add_argument("--rows", action="store_true", help="with --compare: every row too")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.compare is not None:
        _compare(args.compare, args.rows)
        return 0
    # lazy: torch, the optional [bench] extra, only when tracking
    from perfmodel.bench import pipeline_memory as bench

    kw = {k: v for k, v in (("seed", args.seed), ("configs", args.configs)) if v is not None}
    draws = {"grid": bench.grid_cases, "heldout": bench.heldout_cases,
             "moe-grid": bench.moe_grid_cases, "moe-heldout": bench.moe_heldout_cases}
    name = next(n for n in draws if getattr(args, n.replace("-", "_")))
    cases = draws[name](**kw)
    if args.list:
        for c in cases:
            layout = c.recipe.parallel
            sys.stdout.write(f"{c.config_id} [{c.spec.num_layers} blocks] {layout.describe()} "
                             f"k={c.accum_steps} m={c.micro_batch} S={c.seq_len} "
                             f"ac={c.recipe.ac} ep={c.ep} cf={c.capacity_factor} "
                             f"rank {c.rank}\n")
        return 0
    if args.out is None:
        parser.error("give -o FILE to track (or --list)")
    start_s = time.perf_counter()
    draw = {"draw": name, **kw}
    counts = bench.run_cases(cases, args.out, limit=args.limit, extra=draw)
    logger.info("%s: %d tracked, %d already there (%.0f s)", args.out, counts["measured"],
                counts["skipped"], time.perf_counter() - start_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
