"""Planner benchmark: frontier time of the default solver (the exact DP) and CP-SAT vs brute force,
scaling, heuristic gap.

Run: .venv/bin/python -m benchmarks.bench_planner [--quick] [--budget-s 600] [--case-limit-s 120]
Writes its section of docs/PERFORMANCE.md (the command, date, machine and every measured figure).

Synthetic island tables (`synthetic_instance`): `clusters` clusters with seeded random GPU speed
(seconds of compute per sequence per GPU, uniform 1-4 s), price per GPU-hour (uniform 1-4 USD),
WAN uplink (uniform 5-25 Gbit/s) and latency (uniform 20-100 ms). Options are (nodes, GPUs per
node) with GPUs per node in {1, 2, 4, 8} and nodes 1..N per cluster, N chosen so the table has the
requested number of options. Micro-batches {1, 2, 4} (those with
m·4 GB <= 40 GB + 80 GB·(n·g−1)/(n·g) fit, i.e. bigger islands fit bigger micro-batches);
microstep_s = max(m·speed, all-gather time of 16 GB over the island's slowest link (300 GB/s in a
node, 50 GB/s across)) + 20 ms, step_fixed_s = 0.3 s + reduce-scatter tail; usd_per_hour =
n·g·price. Everything is drawn from `numpy.random.default_rng(seed)`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from perfmodel.formatting import markdown_table
from planner.analysis.pareto import cheapest_at_throughput, compute_frontier, epsilon_frontier
from planner.model.evaluate import build_problem, nondominated
from planner.model.instance import Instance, load_instance
from planner.model.island_table import load_island_table
from planner.model.problem import Problem
from planner.solvers.baselines import DEFAULT_MAX_PLANS, BruteForce, TooManyPlans, heuristic_plans

ROOT = Path(__file__).resolve().parent.parent


GPUS_PER_NODE = (1, 2, 4, 8)
RAW_SKIP_PLANS = 100_000
"""Raw brute force is not attempted when the reduced enumeration has more plans than this."""


def synthetic_instance(num_options: int, max_islands: int, *, clusters: int = 4, batch: int = 256,
                       seed: int = 0) -> tuple[Instance, pd.DataFrame]:
    """A seeded random instance with about `num_options` island options (see module docstring)."""
    rng = np.random.default_rng(seed)
    per_cluster = math.ceil(num_options / clusters)
    nodes = math.ceil(per_cluster / len(GPUS_PER_NODE))
    rows, specs = [], []
    count = 0
    for c in range(clusters):
        speed, price = rng.uniform(1, 4), round(float(rng.uniform(1, 4)), 2)
        specs.append({"name": f"C{c}", "gpu": f"G{c}", "num_nodes": nodes, "gpus_per_node": 8,
                      "allowed_gpus_per_node": list(GPUS_PER_NODE), "price_usd_per_gpu_hour": price,
                      "wan_gbit_s": round(float(rng.uniform(5, 25)), 1),
                      "wan_latency_ms": round(float(rng.uniform(20, 100)), 1)})
        for n in range(1, nodes + 1):
            for g in GPUS_PER_NODE:
                if count >= num_options or (c + 1) * per_cluster <= count:
                    break
                count += 1
                gpus = n * g
                bw = 300e9 if n == 1 else 50e9
                gather = 2 * 16e9 * (gpus - 1) / gpus / bw
                for m in (1, 2, 4):
                    if m * 4 > 40 + 80 * (gpus - 1) / gpus:
                        continue
                    rows.append(
                        {
                            "cluster": f"C{c}",
                            "gpu_type": f"G{c}",
                            "nodes": n,
                            "gpus_per_node": g,
                            "micro_batch": m,
                            "microstep_s": round(max(m * speed, gather) + 0.02, 4),
                            "step_fixed_s": round(0.3 + gather / 2, 4),
                            "usd_per_hour": round(price * gpus, 4),
                            "memory_gib": 40.0,
                            "bound": "compute",
                        }
                    )
    instance = Instance.model_validate({
        "name": f"synthetic-{num_options}x{max_islands}-s{seed}", "model": "llama-3-8b",
        "training": {"seq_len": 8192, "global_batch_seqs": batch, "train_tokens": 1e11,
                     "strategy": "diloco", "inner_steps": 100},
        "clusters": specs, "limits": {"max_islands": max_islands}, "parameters": 8_030_261_248})
    return instance, pd.DataFrame(rows)


def paper_like_instance() -> tuple[Instance, pd.DataFrame]:
    """Two clusters shaped like the paper's case study (10x8 H200 at $3.59, 10x8 A100 at $1.19,
    up to 10 islands, B = 256 sequences of 8192 tokens, DiLoCo H = 100). The island table is
    synthetic (same rules as `synthetic_instance`, 1.2 s / 3.7 s of compute per sequence), not a
    performance-model prediction."""
    rows = []
    for cluster, gpu, speed, price, memory in (
        ("A", "H200", 1.2, 3.59, 141),
        ("B", "A100", 3.7, 1.19, 80),
    ):
        for n in range(1, 11):
            for g in GPUS_PER_NODE:
                gpus = n * g
                bw = 300e9 if n == 1 else 50e9
                gather = 2 * 16e9 * (gpus - 1) / gpus / bw
                for m in (1, 2, 4):
                    if m * 18 + 128 / gpus + 20 > memory:
                        continue
                    rows.append(
                        {
                            "cluster": cluster,
                            "gpu_type": gpu,
                            "nodes": n,
                            "gpus_per_node": g,
                            "micro_batch": m,
                            "microstep_s": round(max(m * speed, gather) * 1.05 + 0.02, 4),
                            "step_fixed_s": round(0.3 + gather / 2 + 0.05 * n, 4),
                            "usd_per_hour": round(price * gpus, 4),
                            "memory_gib": 40.0,
                            "bound": "compute",
                        }
                    )
    clusters = [
        {
            "name": c, "gpu": g, "num_nodes": 10, "gpus_per_node": 8,
            "allowed_gpus_per_node": list(GPUS_PER_NODE), "price_usd_per_gpu_hour": p,
            "wan_gbit_s": 10, "wan_latency_ms": 50,
        }
        for c, g, p in (("A", "H200", 3.59), ("B", "A100", 1.19))
    ]
    instance = Instance.model_validate(
        {
            "name": "paper-like",
            "model": "llama-3-8b",
            "training": {
                "seq_len": 8192, "global_batch_seqs": 256, "train_tokens": 1e11,
                "strategy": "diloco", "inner_steps": 100,
            },
            "clusters": clusters,
            "limits": {"max_islands": 10},
            "parameters": 8_030_261_248,
        }
    )
    return instance, pd.DataFrame(rows)


def timed(func: Callable[[], object], repeats: int) -> tuple[float, object]:
    """Median wall seconds over `repeats` runs, and the last result."""
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = func()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def keys(points) -> list[tuple[float, float]]:
    return [(p.wall_time_s, p.cost_usd) for p in points]


def brute_run(problem: Problem, reduce: bool) -> tuple[list, int]:
    """Brute-force frontier (enumeration included) and the number of plans enumerated."""
    oracle = BruteForce(problem, reduce=reduce)
    return epsilon_frontier(problem, oracle), len(oracle.plans())


def versus_brute(cases, repeats: int, limit_s: float, log) -> list[dict]:
    """CP-SAT vs brute force (reduced, then raw enumeration) on instances brute force can finish.

    Raw enumeration is skipped when the reduced one already has more than RAW_SKIP_PLANS plans.
    """
    rows = []
    for label, problem in cases:
        row = {
            "instance": label,
            "options": len(problem.options),
            "max_islands": problem.max_islands,
            "B": problem.global_batch_seqs,
        }
        t_dp, front = timed(lambda p=problem: compute_frontier(p), repeats)
        t_cp, cp_front = timed(
            lambda p=problem: compute_frontier(p, solver="cpsat", threads=1), repeats
        )
        row.update(
            {
                "default_s": t_dp,
                "solver": front.solver,
                "cpsat_s": t_cp,
                "points": len(front.points),
                "cpsat_solves": cp_front.num_solves,
                "cpsat_identical": keys(cp_front.points) == keys(front.points),
            }
        )
        for reduce, name in ((True, "reduced"), (False, "raw")):
            if not reduce and (row.get("plans_reduced") or 0) > RAW_SKIP_PLANS:
                continue
            start = time.perf_counter()
            try:
                plans, count = brute_run(problem, reduce)
            except TooManyPlans:
                continue
            elapsed = time.perf_counter() - start
            if elapsed < limit_s / 4 and repeats > 1:
                elapsed, (plans, count) = timed(
                    lambda p=problem, r=reduce: brute_run(p, r), repeats
                )
            row.update({f"brute_{name}_s": elapsed, f"plans_{name}": count})
            row["identical"] = row.get("identical", True) and keys(plans) == keys(front.points)
        row["brute_s_measured"] = row.get("brute_raw_s") or row.get("brute_reduced_s")
        log(f"  {label}: {row}")
        rows.append(row)
    return rows


def scaling(
    options_grid, islands_grid, batch: int, case_limit_s: float, budget_s: float, log
) -> list[dict]:
    """CP-SAT frontier time over a grid; a row stops growing once a case hits the limit."""
    rows, start = [], time.perf_counter()
    for islands in islands_grid:
        stopped = False
        for options in options_grid:
            row = {"max_islands": islands, "options": options}
            left = budget_s - (time.perf_counter() - start)
            if stopped or left < 30:
                row["status"] = (
                    "not run ("
                    + ("smaller case hit the limit" if stopped else "benchmark budget spent")
                    + ")"
                )
                rows.append(row)
                continue
            instance, table = synthetic_instance(options, islands, batch=batch)
            problem = build_problem(instance, table)
            t0 = time.perf_counter()
            front = compute_frontier(problem, time_limit_s=min(case_limit_s, left))
            row.update(
                {
                    "time_s": time.perf_counter() - t0,
                    "points": len(front.points),
                    "solver": front.solver,
                    "island_cap": problem.max_islands,
                    "clusters_x_nodes": f"4x{problem.clusters[0].num_nodes}",
                    "menu_items": len(problem.menu),
                    "status": "exact" if front.proven_exact else "time limit",
                }
            )
            stopped = not front.proven_exact
            log(f"  {row}")
            rows.append(row)
    return rows


def heuristic_gap(problem: Problem, exact) -> dict:
    """How far the paper's heuristic is from the exact frontier."""
    t0 = time.perf_counter()
    plans, truncated = heuristic_plans(problem)
    elapsed = time.perf_counter() - t0
    front = nondominated(plans)
    on_exact = sum(1 for p in front if any(p.key == e.key for e in exact))
    gaps = []
    for e in exact:
        ok = [p for p in front if p.wall_time_s <= e.wall_time_s]
        gaps.append(100 * (min(p.cost_usd for p in ok) / e.cost_usd - 1) if ok else math.inf)
    finite = [g for g in gaps if math.isfinite(g)]
    exact_pick, exact_saving = cheapest_at_throughput(exact, 0.99)
    heur_pick, heur_saving = cheapest_at_throughput(front, 0.99) if front else (None, float("nan"))
    return {
        "time_s": elapsed,
        "points": len(front),
        "on_exact": on_exact,
        "exact_points": len(exact),
        "unmatched": len(gaps) - len(finite),
        "max_gap_pct": max(finite) if finite else float("nan"),
        "median_gap_pct": statistics.median(finite) if finite else float("nan"),
        "exact_99_saving_pct": exact_saving,
        "heuristic_99_saving_pct": heur_saving,
        "truncated": truncated,
    }


def fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return "inf" if math.isinf(value) else f"{value:.3g}"
    return str(value)


# The columns of the report's tables, in order.
VERSUS_COLUMNS = [
    "instance", "options", "max_islands", "B", "plans_raw", "plans_reduced", "points", "solver",
    "default_s", "cpsat_s", "cpsat_solves", "brute_reduced_s", "brute_raw_s",
    "speedup_vs_reduced", "speedup_vs_raw", "cpsat_vs_default", "identical", "cpsat_identical",
]
GAP_COLUMNS = [
    "instance", "exact_points", "points", "on_exact", "unmatched", "median_gap_pct", "max_gap_pct",
    "exact_99_saving_pct", "heuristic_99_saving_pct", "time_s", "truncated",
]
SCALE_COLUMNS = [
    "max_islands", "island_cap", "options", "clusters_x_nodes", "menu_items", "points", "solver",
    "time_s", "status",
]


def table(rows: list[dict], columns: list[str]) -> str:
    return markdown_table(columns, ([fmt(r.get(c)) for c in columns] for r in rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small grid (smoke test)")
    parser.add_argument(
        "--budget-s", type=float, default=600.0, help="seconds for the scaling grid"
    )
    parser.add_argument(
        "--case-limit-s", type=float, default=150.0, help="time limit per scaling case"
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "PERFORMANCE.md")
    args = parser.parse_args()
    log = print  # this is a script, not library code
    command = (
        "`.venv/bin/python -m benchmarks.bench_planner"
        + "".join(f" {a}" for a in sys.argv[1:])
        + "`"
    )
    small = load_instance(ROOT / "instances" / "small-two-clusters.yaml")
    brute_cases = [("small-two-clusters.yaml", build_problem(small, load_island_table(small)))]
    sizes = (
        [(16, 3, 16), (16, 4, 32)]
        if args.quick
        else [(16, 3, 16), (16, 4, 32), (24, 4, 32), (32, 4, 40)]
    )
    for options, islands, batch in sizes:
        instance, frame = synthetic_instance(options, islands, batch=batch)
        brute_cases.append(
            (f"synthetic {options} opt, {islands} isl, B={batch}", build_problem(instance, frame))
        )
    log("CP-SAT vs brute force")
    vs = versus_brute(brute_cases, args.repeats, 300.0, log)
    log("paper-like instance")
    paper = build_problem(*paper_like_instance())
    reps = 1 if args.quick else args.repeats
    t_paper, paper_front = timed(lambda: compute_frontier(paper), reps)
    t_paper_cp, paper_cp = timed(lambda: compute_frontier(paper, solver="cpsat", threads=1), 1)
    log(f"  default {t_paper:.2f} s, cpsat {t_paper_cp:.2f} s, {len(paper_front.points)} points")
    gap_rows = [{"instance": label, **heuristic_gap(problem, compute_frontier(problem).points)}
                for label, problem in brute_cases[:1] + [("paper-like", paper)]]
    log("scaling")
    options_grid = [10, 30] if args.quick else [10, 100, 1000]
    islands_grid = [2, 4] if args.quick else [2, 8, 32]
    scale = scaling(options_grid, islands_grid, 256, args.case_limit_s, args.budget_s, log)
    write_report(
        args.output, command, vs, (t_paper, paper_front, t_paper_cp, paper_cp), gap_rows, scale,
        args,
    )
    log(f"wrote {args.output}")


def options_grid_text(args) -> str:
    return "10/30" if args.quick else "10/100/1000"


def islands_grid_text(args) -> str:
    return "2/4" if args.quick else "2/8/32"


def load_note() -> str:
    """The machine's load average when the report is written (other work shares the CPUs)."""
    try:
        one, five, _ = os.getloadavg()
    except OSError:
        return "load average unavailable"
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min) at the end of the run"


def write_report(path: Path, command: str, vs, paper, gap_rows, scale, args) -> None:
    import ortools

    for row in vs:
        base = row.get("brute_reduced_s")
        row["speedup_vs_reduced"] = base / row["default_s"] if base else None
        raw = row.get("brute_raw_s")
        row["speedup_vs_raw"] = raw / row["default_s"] if raw else None
        row["cpsat_vs_default"] = row["cpsat_s"] / row["default_s"]
    largest = max(
        (r for r in vs if r.get("brute_s_measured")),
        key=lambda r: r["brute_s_measured"],
        default=None,
    )
    t_paper, front, t_paper_cp, cp_front = paper
    exact_1000x8 = [
        r for r in scale if r.get("options") == 1000 and r.get("max_islands") == 8 and "time_s" in r
    ]
    verdicts = []
    if largest is not None:
        speedup = largest["brute_s_measured"] / largest["default_s"]
        verdicts.append(
            f"- Largest instance brute force finishes ({largest['instance']}): default solver "
            f"{speedup:.0f}x faster than brute force in the same run, identical frontier: "
            f"{largest['identical']} (target >= 100x: "
            f"{'met' if speedup >= 100 and largest['identical'] else 'not met'})."
        )
    for r in exact_1000x8:
        ok = r["status"] == "exact" and r["time_s"] <= 60
        verdicts.append(f"- 8 islands x 1000 options: {r['time_s']:.1f} s, {r['status']} "
                        f"(target: proven exact within 60 s: {'met' if ok else 'not met'}).")
    paper_runs = 1 if args.quick else args.repeats
    same_points = keys(cp_front.points) == keys(front.points)
    # A backslash at the end of a line below joins it to the next one in the text.
    text = f"""## Planner (`planner/`): measured speed

Produced by {command} on {dt.date.today().isoformat()}; machine: {os.cpu_count()} CPUs (nproc),
Python {platform.python_version()}, OR-Tools {ortools.__version__}; {load_note()}. "default" is
`compute_frontier` with no solver named (`--solver auto`): the exact DP of `planner/solvers/dp.py`
wherever the problem has no GPU cap (all instances below), CP-SAT otherwise. CP-SAT runs with one
worker here so that its column stays comparable between runs. Times are wall-clock seconds:
default and CP-SAT in the first table are the median of {args.repeats} runs, brute force likewise
(one run when it takes over a minute), the scaling grid one run per case. The CPUs are shared with
other work, so absolute times are noisy; compare ratios measured in the same run.

{chr(10).join(verdicts)}

### Exact frontier: default (DP) and CP-SAT vs brute force

Brute force enumerates every plan and filters the non-dominated ones; "raw" enumerates every
(option, micro-batch, k) island, "reduced" only the fastest (m, k) per (option, k·m) (an exact
reduction, see `planner/solvers/baselines.py`). `identical` compares the default solver's (W, C)
points with brute force bit for bit, `cpsat_identical` CP-SAT's with the default's.

{table(vs, VERSUS_COLUMNS)}

`-` in a brute-force column: not run (raw enumeration is skipped once the reduced one exceeds
{RAW_SKIP_PLANS:,} plans; either is abandoned past {DEFAULT_MAX_PLANS:,} plans).

### Paper-like case (2 clusters x 10 nodes x 8 GPUs, up to 10 islands, B = 256)

Default solver ({front.solver}): {t_paper:.2f} s (median of {paper_runs}), \
{len(front.points)} points,
proven exact: {front.proven_exact}. CP-SAT (one run): {t_paper_cp:.1f} s, \
{cp_front.num_solves} solver steps,
proven exact: {cp_front.proven_exact}, identical points: {same_points}.
Brute force does not finish on this size.

### The paper's heuristic vs the exact frontier

`gap` = cost of the cheapest heuristic plan at least as fast as an exact frontier point, relative
to that point; `unmatched` = exact points no heuristic plan is as fast as. The last two columns
are the paper's query "cheapest plan within 99% of the best throughput", saving vs the fastest
plan, from each frontier.

{table(gap_rows, GAP_COLUMNS)}

### Default-solver frontier time vs options and max_islands

Synthetic tables from `synthetic_instance` in the script (seed 0, 4 clusters, GPUs per node
1/2/4/8, micro-batches 1/2/4; see the module docstring for the generator), B = 256 sequences,
one run per case, time limit {args.case_limit_s:.0f} s per case and \
{args.budget_s:.0f} s for the whole
grid (options {options_grid_text(args)} x max_islands {islands_grid_text(args)}). A case that hits
its limit reports `time limit` (its frontier is then not proven exact) and larger cases of that
row are not run. `island_cap` is the effective island limit (max_islands, bounded by the
clusters' nodes and the batch); `menu_items` the (option, sequences-per-GPU) choices.

{table(scale, SCALE_COLUMNS)}
"""
    from benchmarks._perfdoc import DOC, replace_block

    if path.resolve() == DOC:
        replace_block("bench_planner", text)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


if __name__ == "__main__":
    main()
