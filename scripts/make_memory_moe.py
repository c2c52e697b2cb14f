#!/usr/bin/env python3
"""Track the per-rank memory of mixture-of-experts training under expert parallelism (issue 26).

    .venv/bin/python -m scripts.make_memory_moe --grid --jobs 2     # the shipped grid
    .venv/bin/python -m scripts.make_memory_moe --heldout --jobs 2  # the held-out cases

`--grid` tracks `perfmodel.bench.memory_moe.grid_cases(N, seed)` (default GRID_CASES cases,
seed 0) into catalogs/profiles/data/memory-tracker-moe.csv, `--heldout` the configurations
`heldout_cases()` draws with `random.Random(HELDOUT_SEED)` into memory-tracker-moe-heldout.csv:
FSDPMemTracker under FakeTensorMode with the fake process group, one optimizer step tracked
after the AdamW state exists (`--steps`). Both resume: a rerun tracks only the cases not yet in
the file; each session is recorded in the CSV's .env.json. The comparison with the performance
model is the model's (it reads these files); this script only measures.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from perfmodel.spec.paths import catalog_dir

GRID_DATASET, HELDOUT_DATASET = "memory-tracker-moe.csv", "memory-tracker-moe-heldout.csv"
"""The shipped datasets, in catalogs/profiles/data/."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--grid", action="store_true", help="track the shipped grid")
    what.add_argument("--heldout", action="store_true", help="track the held-out cases")
    parser.add_argument("-o", "--out", type=Path, default=None,
                        help="CSV to append to (default: the shipped dataset)")
    parser.add_argument("--cases", type=int, default=None,
                        help="cases drawn (default: memory_moe.GRID_CASES / HELDOUT_CASES)")
    parser.add_argument("--seed", type=int, default=0, help="grid sampling seed")
    parser.add_argument("--steps", type=int, default=1, help="optimizer steps tracked")
    parser.add_argument("--jobs", type=int, default=1, help="parallel processes")
    parser.add_argument("--limit", type=int, default=None, help="track at most N new cases")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    # lazy: torch, the optional [bench] extra
    from perfmodel.bench.memory_moe import (
        GRID_CASES,
        HELDOUT_CASES,
        HELDOUT_SEED,
        grid_cases,
        heldout_cases,
        run_moe_cases,
    )

    data = catalog_dir() / "profiles" / "data"
    if args.grid:
        n = args.cases or GRID_CASES
        cases = grid_cases(n, seed=args.seed, steps=args.steps)
        out = args.out or data / GRID_DATASET
        draw: dict[str, Any] = {
            "cases": f"perfmodel.bench.memory_moe.grid_cases({n}, seed={args.seed}, "
                     f"steps={args.steps})"}
    else:
        n = args.cases or HELDOUT_CASES
        cases = heldout_cases(n, steps=args.steps)
        out = args.out or data / HELDOUT_DATASET
        draw = {"cases": f"perfmodel.bench.memory_moe.heldout_cases({n}, steps={args.steps})",
                "seed": HELDOUT_SEED}
    counts = run_moe_cases(cases, out, jobs=args.jobs, limit=args.limit, draw=draw)
    logging.getLogger(__name__).info("%s: %d tracked, %d already there", out,
                                     counts["measured"], counts["skipped"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
