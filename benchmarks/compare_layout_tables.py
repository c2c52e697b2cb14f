"""Check that two versions of the code build the same layout island tables and frontiers.

Run: `.venv/bin/python -m benchmarks.compare_layout_tables [--base-rev REV] [INSTANCE ...]`
(default: the two layout-choosing instances of `benchmarks.bench_layout_instances`, against the
commit REV, default `main`). Each side runs in its own interpreter with PYTHONPATH set to its
code (the base side is `git archive REV` unpacked in a temporary folder): it loads the instance,
builds the island table, solves the frontier and dumps (table, exclusions, frontier points).
The two dumps must match: the same rows (row key: option, layout columns, micro-batch), every
numeric column within relative 1e-9, every text column equal, the same exclusion records (reason
and fix), and frontier points of equal wall time and cost (relative 1e-9) with the same islands.
Exit 0 when they match, 1 with the first differences otherwise.

Why: a speed change to the table builder (memoising, pruning) must not change any answer
(issue 25 item 4); this is the check anyone can rerun.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import pickle
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchmarks.bench_layout_instances import INSTANCES

ROOT = Path(__file__).resolve().parent.parent
LOG = logging.getLogger(__name__)
RELATIVE = 1e-9
"""Relative tolerance on every number compared."""
KEY = ("cluster", "nodes", "gpus_per_node", "layout", "ac", "micro_batch")
"""What identifies a row of a layout table (the layout column names its degrees, schedule and
compute dtype)."""


def dump(instance_path: Path, out: Path) -> None:
    """Build the table and the frontier of one instance with the code on sys.path; pickle them."""
    from planner.analysis.pareto import solve_instance
    from planner.model.instance import load_instance
    from planner.model.island_table import EXCLUDED_ATTR, load_island_table

    start = time.perf_counter()
    instance = load_instance(instance_path)
    table = load_island_table(instance)
    table_s = time.perf_counter() - start
    _, frontier = solve_instance(instance, table)
    total_s = time.perf_counter() - start
    points = [{"wall_time_s": p.wall_time_s, "cost_usd": p.cost_usd,
               "islands": [(i.cluster, i.nodes, i.gpus_per_node, i.layout, i.ac, i.micro_batch,
                            i.accum_steps) for i in p.islands]} for p in frontier.points]
    exclusions = [(e.cluster, e.nodes, e.gpus_per_node, e.reason, e.fix)
                  for e in table.attrs.get(EXCLUDED_ATTR, ())]
    payload = {"table": pd.DataFrame(table), "exclusions": exclusions, "points": points,
               "proven_exact": frontier.proven_exact, "table_s": table_s, "total_s": total_s}
    out.write_bytes(pickle.dumps(payload))


def _side(code: Path, instance: Path, out: Path) -> dict[str, Any]:
    """Run `dump` in a fresh interpreter whose `perfmodel` and `planner` are those of `code`."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    script = ("import runpy, sys; from pathlib import Path; "
              f"runpy.run_path({str(Path(__file__).resolve())!r})['dump']"
              f"(Path({str(instance)!r}), Path({str(out)!r})); "
              "import planner; print(planner.__file__, file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", script], check=True, env=env, cwd=code,
                          capture_output=True, text=True)
    LOG.info("  built with %s", done.stderr.strip().splitlines()[-1])
    loaded: dict[str, Any] = pickle.loads(out.read_bytes())
    return loaded


def _close(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b or abs(a - b) <= RELATIVE * max(abs(a), abs(b))


def compare(base: dict[str, Any], mine: dict[str, Any]) -> list[str]:
    """The differences between two dumps (empty: the same answer)."""
    problems: list[str] = []
    a, b = base["table"], mine["table"]
    if list(a.columns) != list(b.columns):
        problems.append(f"columns differ: {list(a.columns)} vs {list(b.columns)}")
        return problems
    key = [c for c in KEY if c in a.columns]
    a_keys, b_keys = a[key].astype(str).agg("|".join, axis=1), b[key].astype(str).agg(
        "|".join, axis=1)
    if a_keys.duplicated().any() or b_keys.duplicated().any():
        problems.append("a row key is not unique; compared in table order instead")
        a_index, b_index = a.reset_index(drop=True), b.reset_index(drop=True)
    else:
        only_a, only_b = set(a_keys) - set(b_keys), set(b_keys) - set(a_keys)
        if only_a or only_b:
            problems.append(f"rows only in base: {sorted(only_a)[:5]} ({len(only_a)}); "
                            f"only in new: {sorted(only_b)[:5]} ({len(only_b)})")
            return problems
        a_index = a.set_axis(a_keys.to_numpy()).sort_index()
        b_index = b.set_axis(b_keys.to_numpy()).sort_index()
    if len(a_index) != len(b_index):
        problems.append(f"{len(a_index)} rows vs {len(b_index)}")
        return problems
    worst = 0.0
    for column in a.columns:
        x, y = a_index[column].to_numpy(), b_index[column].to_numpy()
        numeric = (pd.api.types.is_numeric_dtype(a[column])
                   and not pd.api.types.is_bool_dtype(a[column]))
        if numeric:
            xs, ys = x.astype(float), y.astype(float)
            bad = [i for i in range(len(xs)) if not _close(xs[i], ys[i])]
            both = ~(np.isnan(xs) | np.isnan(ys))
            scale = np.maximum(np.abs(xs[both]), np.abs(ys[both]))
            diff = np.abs(xs[both] - ys[both])
            if diff.size:
                worst = max(worst, float(np.max(np.where(scale > 0, diff / np.where(
                    scale > 0, scale, 1.0), 0.0))))
        else:
            bad = [i for i in range(len(x)) if str(x[i]) != str(y[i])]
        if bad:
            i = bad[0]
            problems.append(f"column {column}: {len(bad)} row(s) differ, first "
                            f"{a_index.index[i]}: {x[i]!r} vs {y[i]!r}")
    if base["exclusions"] != mine["exclusions"]:
        problems.append(f"exclusions differ: {base['exclusions']} vs {mine['exclusions']}")
    pa, pb = base["points"], mine["points"]
    if len(pa) != len(pb):
        problems.append(f"frontier: {len(pa)} points vs {len(pb)}")
    else:
        for i, (p, q) in enumerate(zip(pa, pb, strict=True)):
            if not (_close(p["wall_time_s"], q["wall_time_s"])
                    and _close(p["cost_usd"], q["cost_usd"]) and p["islands"] == q["islands"]):
                problems.append(f"frontier point {i}: {p} vs {q}")
    if base["proven_exact"] != mine["proven_exact"]:
        problems.append(f"proven_exact {base['proven_exact']} vs {mine['proven_exact']}")
    LOG.info("largest relative difference over the numeric columns: %.3g", worst)
    return problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("instances", nargs="*", default=list(INSTANCES),
                        help="instance files (names under instances/ or paths)")
    parser.add_argument("--base-rev", default="main", help="git revision to compare against")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    failed = False
    with tempfile.TemporaryDirectory(prefix="compare-layout-") as tmp:
        base_code = Path(tmp) / "base"
        base_code.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.base_rev],
                                 check=True, capture_output=True).stdout
        with tarfile.open(fileobj=BytesIO(archive)) as tar:
            tar.extractall(base_code, filter="data")
        for name in args.instances:
            path = Path(name) if Path(name).exists() else ROOT / "instances" / name
            base = _side(base_code, path, Path(tmp) / "base.pkl")
            mine = _side(ROOT, path, Path(tmp) / "mine.pkl")
            problems = compare(base, mine)
            LOG.info("%s: %d rows, %d frontier points, %d exclusions; base table %.1f s "
                     "(total %.1f s), new table %.1f s (total %.1f s): %s", path.name,
                     len(mine["table"]), len(mine["points"]), len(mine["exclusions"]),
                     base["table_s"], base["total_s"], mine["table_s"], mine["total_s"],
                     "SAME" if not problems else "DIFFERENT")
            for line in problems[:20]:
                LOG.info("  %s", line)
            failed = failed or bool(problems)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
