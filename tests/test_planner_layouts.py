"""Layouts and checkpointing as planner decisions (issue 25, planner side).

Island tables with layout and checkpointing columns (tp, pp, cp, dp_replicate, virtual_stages,
pp_schedule, sequence_parallel, ac, dp, min_accum, accum_multiple, max_accum, layout): every
backend's frontier equals brute force over every admissible (row, k) of the unreduced table; no
exactly dominated row survives the reduction and none that is needed is removed; bad cells are
InstanceErrors naming file, line, column and value; instances pass `training.parallel` and a list
of checkpointing modes through untouched and restrict node counts with `island_nodes`; every
cluster or option that contributes no row is reported with its reason and fix, and an instance
whose every option is excluded exits 1 naming them.

Expected values come from DESIGN §3 formulas recomputed here from the table rows
(`independent_check`: no planner code) or from the raw brute-force enumeration, never from a
solver run. Random tables are seeded (numpy), parametrised by what they stress.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml

from perfmodel.spec.errors import InfeasibleError, InstanceError
from perfmodel.tables import ClusterRequest
from planner.analysis.pareto import compute_frontier, solve_instance
from planner.analysis.report import plan_record, points_frame
from planner.analysis.scenarios import plan_key, rescore
from planner.model.evaluate import build_problem
from planner.model.instance import Instance, instance_from_mapping, load_instance
from planner.model.island_table import (
    EXCLUDED_ATTR,
    _cluster_request,
    load_island_table,
    table_arguments,
    table_exclusions,
    validate_island_table,
)
from planner.model.problem import Exclusion
from planner.solvers.baselines import BruteForce, heuristic_plans
from planner.solvers.energy_dp import energy_frontier, nondominated_by

ROOT = Path(__file__).resolve().parent.parent
TOKENS, SEQ, PARAMS, INNER = 1e9, 1024, 10**8, 10
LAYOUT_KEY = ["tp", "pp", "cp", "dp_replicate", "virtual_stages", "pp_schedule",
              "sequence_parallel", "dp", "ac", "layout"]
"""The columns of a generated row that, with option and micro_batch, identify it."""


# ---- building instances and tables -----------------------------------------------------------


def instance_dict(clusters: list[dict], batch: int, **limits: Any) -> dict:
    return {
        "name": "layouts",
        "model": "m",
        "parameters": PARAMS,
        "training": {"seq_len": SEQ, "global_batch_seqs": batch, "train_tokens": TOKENS,
                     "inner_steps": INNER, "pseudo_gradient_dtype": "fp32"},
        "clusters": [{"gpu": f"G{c['name']}", "gpus_per_node": 4, "price_usd_per_gpu_hour": 1.0,
                      "wan_gbit_s": 10, "wan_latency_ms": 20, **c} for c in clusters],
        "limits": limits,
    }


def row(cluster: str, nodes: int, gpn: int, m: int, micro: float, fixed: float, *,
        tp: int = 1, pp: int = 1, cp: int = 1, schedule: str = "", ac: str = "full",
        min_accum: int = 1, multiple: int = 1, max_accum: float = float("nan"),
        vstages: int = 1, usd_per_gpu: float = 1.0, memory: float = 10.0,
        split: float = 0.6, sp: bool = False, accum_fits: bool = True) -> dict:
    """One table row; dp = n·g/(tp·pp·cp); the activity split puts `split` of each time on the
    compute stream (energy columns), TDP 700 W."""
    gpus = nodes * gpn
    dp = gpus // (tp * pp * cp)
    return {
        "cluster": cluster, "gpu_type": f"G{cluster}", "nodes": nodes, "gpus_per_node": gpn,
        "micro_batch": m, "microstep_s": micro, "step_fixed_s": fixed,
        "usd_per_hour": round(usd_per_gpu * gpus, 2), "memory_gib": memory, "bound": "compute",
        "memory_accum_gib": memory + 1.0, "accum_fits": accum_fits,
        "compute_fixed_s": fixed * split, "compute_micro_s": micro * split,
        "comm_only_fixed_s": fixed * (1 - split), "comm_only_micro_s": micro * (1 - split),
        "tdp_w": 700.0, "tp": tp, "pp": pp, "cp": cp, "dp_replicate": 1,
        "virtual_stages": vstages, "pp_schedule": schedule, "sequence_parallel": sp, "dp": dp,
        "ac": ac, "min_accum": min_accum, "accum_multiple": multiple, "max_accum": max_accum,
        "layout": f"tp {tp} x pp {pp} x dp {dp}" + (f" ({schedule})" if schedule else ""),
    }


def setup(inst: dict, rows: list[dict], **build: Any):
    """(instance, validated table, problem) of an instance dict and its rows."""
    instance = Instance.model_validate(inst)
    frame = pd.DataFrame(rows, columns=list(row("a", 1, 1, 1, 1.0, 0.0)))  # no rows: an empty table
    table = validate_island_table(frame, "layouts.csv", instance)
    return instance, table, build_problem(instance, table, **build)


SCHEDULES = {
    # name: (tp, pp, schedule, min_accum, accum_multiple, virtual stages)
    "fsdp": (1, 1, "", 1, 1, 1),
    "tp2": (2, 1, "", 1, 1, 1),
    "1f1b": (1, 2, "1f1b", 2, 1, 1),
    "interleaved": (1, 2, "interleaved-1f1b", 2, 2, 2),
    "gpipe": (1, 2, "gpipe", 1, 1, 1),
    "tp2-1f1b": (2, 2, "1f1b", 2, 1, 1),
}
KIND_LAYOUTS = {
    "mixed": tuple(SCHEDULES),
    "k-bounds": ("fsdp", "1f1b", "gpipe", "tp2-1f1b"),
    "accum-multiple": ("fsdp", "interleaved", "tp2"),
    "dp-below-gpus": ("tp2", "tp2-1f1b", "1f1b"),
}
"""What each random-case kind draws layouts from: every schedule; the ones bounding k (1F1B's
k >= pp, GPipe's max_accum); interleaved 1F1B's k multiple of pp; layouts with dp < n·g."""


def random_case(seed: int, kind: str) -> tuple[dict, list[dict]]:
    """A random instance dict and table: 1-3 clusters of 1-2 nodes x 4 GPUs (GPUs per node 2 or
    4), per option 1-3 layouts x 1-2 checkpointing modes x micro-batches 1-2, some rows copies
    of others under another mode made slower and hungrier, or identical (so the reduction has
    work), B 3..16 (odd B: often no plan)."""
    rng = np.random.default_rng(seed)
    clusters, rows = [], []
    for c in range(int(rng.integers(1, 4))):
        name = f"c{c}"
        num_nodes = int(rng.integers(1, 3))
        allowed = [4] if rng.random() < 0.5 else [2, 4]
        usd = float(rng.integers(50, 400)) / 100
        clusters.append({"name": name, "num_nodes": num_nodes, "allowed_gpus_per_node": allowed,
                         "price_usd_per_gpu_hour": usd})
        speed = float(rng.integers(300, 3000)) / 1000
        for nodes in range(1, num_nodes + 1):
            for gpn in allowed:
                if rng.random() < 0.2:
                    continue  # an option without rows: reported as excluded
                gpus = nodes * gpn
                names = [n for n in KIND_LAYOUTS[kind]
                         if gpus % (SCHEDULES[n][0] * SCHEDULES[n][1]) == 0]
                if not names:
                    names = ["fsdp"]
                picked = rng.choice(names, size=min(len(names), int(rng.integers(1, 4))),
                                    replace=False)
                for layout in picked:
                    tp, pp, schedule, low, multiple, vstages = SCHEDULES[str(layout)]
                    top = float(rng.integers(1, 4)) if schedule == "gpipe" else float("nan")
                    modes = ["full", "op-sac"][: int(rng.integers(1, 3))]
                    for ac in modes:
                        for m in sorted({1, int(rng.choice([1, 2]))}):
                            slow = 1.25 if ac == "full" else 1.0
                            micro = round(m * speed * slow / (tp * pp)
                                          * float(rng.integers(80, 120)) / 100, 3)
                            fixed = float(rng.integers(0, 800)) / 1000
                            rows.append(row(name, nodes, gpn, m, micro, fixed, tp=tp, pp=pp,
                                            schedule=schedule, ac=ac, min_accum=low,
                                            multiple=multiple, max_accum=top, vstages=vstages,
                                            usd_per_gpu=usd,
                                            memory=float(rng.integers(10, 70)),
                                            split=float(rng.integers(3, 9)) / 10,
                                            accum_fits=bool(rng.random() > 0.1)))
    for original in [r for r in rows if rng.random() < 0.3]:
        copy = dict(original)  # the same layout under another checkpointing mode: slower, or a tie
        copy["ac"] = {"full": "attn", "op-sac": "none"}[original["ac"]]
        if rng.random() < 0.7:
            factor = float(rng.integers(100, 150)) / 100
            for key in ("microstep_s", "compute_micro_s", "comm_only_micro_s"):
                copy[key] = original[key] * factor
            copy["memory_gib"] = original["memory_gib"] + float(rng.integers(0, 3))
        rows.append(copy)
    limits: dict[str, Any] = {"max_islands": int(rng.integers(1, 4))}
    if rng.random() < 0.25:
        limits["max_gpus"] = int(rng.integers(4, 17))
    batch = int(rng.choice([3, 4, 6, 8, 12, 16]))
    return instance_dict(clusters, batch, **limits), rows


# ---- an independent check of a plan ----------------------------------------------------------


def admissible_ks(r: pd.Series, batch: int) -> set[int]:
    """k the row admits, enumerated from its columns (no planner code)."""
    dp = int(r["nodes"]) * int(r["gpus_per_node"]) // (int(r["tp"]) * int(r["pp"]) * int(r["cp"]))
    out = set()
    for k in range(1, batch + 1):
        if k * int(r["micro_batch"]) * dp > batch or k < int(r["min_accum"]):
            continue
        if k % int(r["accum_multiple"]) or (not bool(r["accum_fits"]) and k > 1):
            continue
        if r["max_accum"] == r["max_accum"] and k > r["max_accum"]:
            continue
        out.add(k)
    return out


def table_row(table: pd.DataFrame, island: Any) -> pd.Series:
    found = table[(table.cluster == island.cluster) & (table.nodes == island.nodes)
                  & (table.gpus_per_node == island.gpus_per_node)
                  & (table.micro_batch == island.micro_batch)]
    named = dict(island.variant)
    for column in LAYOUT_KEY:
        if column in table.columns:
            found = found[found[column].map(_text) == named[column]]
    assert len(found) == 1
    return found.iloc[0]


def _text(value: Any) -> str:
    if isinstance(value, bool | np.bool_):
        return "true" if value else "false"
    if isinstance(value, int | np.integer | float) and float(value).is_integer():
        return str(int(value))
    return str(value)


def independent_check(inst: dict, table: pd.DataFrame, plan: Any) -> None:
    """DESIGN §3 feasibility and (W, C) of a plan from the table rows: Σ k·m·dp = B, k admissible,
    limits, t, W and C."""
    batch = inst["training"]["global_batch_seqs"]
    clusters = {c["name"]: c for c in inst["clusters"]}
    assert 1 <= len(plan.islands) <= inst["limits"].get("max_islands", 10**9)
    used = dict.fromkeys(clusters, 0)
    total = gpus = 0
    times, usd = [], 0.0
    for island in plan.islands:
        r = table_row(table, island)
        assert island.accum_steps in admissible_ks(r, batch)
        dp = island.nodes * island.gpus_per_node // (int(r["tp"]) * int(r["pp"]) * int(r["cp"]))
        assert island.seqs_per_step == island.accum_steps * island.micro_batch * dp
        total += island.seqs_per_step
        t = r["step_fixed_s"] + island.accum_steps * r["microstep_s"]
        assert math.isclose(t, island.step_time_s, rel_tol=1e-12)
        times.append(t)
        usd += r["usd_per_hour"]
        used[island.cluster] += island.nodes
        gpus += island.nodes * island.gpus_per_node
        assert island.layout == r["layout"] and island.ac == r["ac"]
    assert total == batch
    assert all(used[n] <= clusters[n]["num_nodes"] for n in used)
    assert inst["limits"].get("max_gpus") is None or gpus <= inst["limits"]["max_gpus"]
    m = len(plan.islands)
    sigma = 0.0
    if m > 1:
        names = {i.cluster for i in plan.islands}
        bw = min(clusters[n]["wan_gbit_s"] for n in names) * 1e9 / 8
        lat = max(clusters[n]["wan_latency_ms"] for n in names) / 1000
        sigma = 2 * (m - 1) / m * PARAMS * 4 / bw + 2 * (m - 1) * lat
    wall = TOKENS / (batch * SEQ) * (max(times) + sigma / INNER)
    assert math.isclose(wall, plan.wall_time_s, rel_tol=1e-9)
    assert math.isclose(wall / 3600 * usd, plan.cost_usd, rel_tol=1e-9)


def points(plans: Any) -> list[tuple[float, float]]:
    return [(p.wall_time_s, p.cost_usd) for p in plans]


def same(a: list[tuple[float, float]], b: list[tuple[float, float]], rel: float = 1e-12) -> bool:
    return len(a) == len(b) and all(math.isclose(x[0], y[0], rel_tol=rel)
                                    and math.isclose(x[1], y[1], rel_tol=rel)
                                    for x, y in zip(a, b, strict=True))


def assert_every_backend_matches_brute_force(inst: dict, rows: list[dict]) -> list:
    """Brute force over every admissible (row, k) of the unreduced table == the frontier of
    every backend on the reduced one (time-cost; time-energy where the DP applies); every point
    checked independently. Returns the reference frontier."""
    _, table, raw = setup(inst, rows, reduce_rows=False)
    _, _, reduced = setup(inst, rows)
    reference = BruteForce(raw, reduce=False).nondominated()
    solvers = [("cpsat", "highs"), ("milp", "highs"), ("milp", "cbc"), ("brute", "highs")]
    if reduced.max_gpus is None:
        solvers.insert(0, ("dp", "highs"))
    for solver, backend in solvers:
        found = compute_frontier(reduced, solver=solver, milp_backend=backend, threads=1)
        assert found.proven_exact, (solver, found.note)
        assert same(points(found.points), points(reference)), (solver, backend)
        for plan in found.points:
            independent_check(inst, table, plan)
    plans, _ = heuristic_plans(reduced)
    for plan in plans:
        independent_check(inst, table, plan)
        assert any(e.wall_time_s <= plan.wall_time_s and e.cost_usd <= plan.cost_usd
                   for e in reference)
    if reduced.max_gpus is None:
        brute = nondominated_by(BruteForce(raw, reduce=False).plans(), "energy_kwh")
        dp = energy_frontier(reduced, "energy").points
        assert same([(p.wall_time_s, p.energy_kwh) for p in dp],
                    [(p.wall_time_s, p.energy_kwh) for p in brute], rel=1e-9)
    return reference


# ---- brute force == every backend ------------------------------------------------------------


@pytest.mark.parametrize("kind", list(KIND_LAYOUTS))
@pytest.mark.parametrize("seed", range(4))
def test_random_layout_tables_every_backend_equals_brute_force(kind: str, seed: int) -> None:
    inst, rows = random_case(100 * seed + len(kind), kind)
    _, table, raw = setup(inst, rows, reduce_rows=False)
    reference = assert_every_backend_matches_brute_force(inst, rows)
    if not reference:  # an infeasible draw: the planner says why (exit 1), never a wrong plan
        assert not BruteForce(raw, reduce=False).plans()
        with pytest.raises(InfeasibleError):
            solve_instance(Instance.model_validate(inst), table)


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(KIND_LAYOUTS))
@pytest.mark.parametrize("seed", range(4, 16))
def test_more_random_layout_tables(kind: str, seed: int) -> None:
    assert_every_backend_matches_brute_force(*random_case(100 * seed + len(kind), kind))


def test_random_cases_cover_every_situation() -> None:
    """The seeded draws above are not vacuous: they include infeasible draws, rows dropped as
    dominated, dp < n·g islands, frontier plans at k >= 2 with min_accum or accum_multiple above
    1, and multi-point frontiers."""
    seen = {"infeasible": 0, "dropped": 0, "dp<gpus": 0, "k-bound": 0, "multiple": 0, "points": 0}
    for kind in KIND_LAYOUTS:
        for seed in range(4):
            inst, rows = random_case(100 * seed + len(kind), kind)
            _, _, problem = setup(inst, rows)
            seen["dropped"] += problem.rows_dropped
            front = BruteForce(problem, reduce=True).nondominated()
            seen["infeasible"] += not front
            seen["points"] += len(front) > 1
            for plan in front:
                for choice in plan.choices:
                    pair = problem.pairs[choice.pair_index]
                    option = problem.options[pair.option_index]
                    seen["dp<gpus"] += pair.data_parallel < option.num_gpus
                    seen["k-bound"] += pair.min_accum_steps > 1
                    seen["multiple"] += pair.accum_multiple > 1
    assert all(count > 0 for count in seen.values()), seen


# ---- hand-built cases whose answer follows from the formulas ---------------------------------


def steps_w(t: float, batch: int) -> float:
    """W of one island (σ = 0) with step time t."""
    return TOKENS / (batch * SEQ) * t


def test_single_plan_tensor_parallel_island() -> None:
    """One 1x4 island, tp 2 (dp 2), m 1, k fixed to 2 by min_accum = max_accum = 2: the only
    plan carries B = 2·1·2 = 4 sequences in t = fixed + 2·micro."""
    inst = instance_dict([{"name": "a", "num_nodes": 1, "allowed_gpus_per_node": [4]}], 4)
    rows = [row("a", 1, 4, 1, 0.5, 0.1, tp=2, min_accum=2, max_accum=2)]
    _, _, problem = setup(inst, rows)
    reference = assert_every_backend_matches_brute_force(inst, rows)
    assert len(reference) == 1 and len(BruteForce(problem).plans()) == 1
    plan = reference[0]
    assert math.isclose(plan.wall_time_s, steps_w(0.1 + 2 * 0.5, 4), rel_tol=1e-12)
    assert math.isclose(plan.cost_usd, plan.wall_time_s / 3600 * 4.0, rel_tol=1e-12)
    assert plan.islands[0].seqs_per_step == 4 and plan.islands[0].layout == "tp 2 x pp 1 x dp 2"


def test_dp_below_gpus_sets_the_batch_contribution() -> None:
    """On a 1x4 island, plain FSDP (dp 4, b = 4k) cannot make B = 6; tp 2 (dp 2, b = 2k) can,
    at k = 3."""
    inst = instance_dict([{"name": "a", "num_nodes": 1, "allowed_gpus_per_node": [4]}], 6)
    rows = [row("a", 1, 4, 1, 0.2, 0.0), row("a", 1, 4, 1, 0.3, 0.05, tp=2)]
    [plan] = assert_every_backend_matches_brute_force(inst, rows)
    assert plan.islands[0].accum_steps == 3 and plan.islands[0].layout.startswith("tp 2")
    assert math.isclose(plan.wall_time_s, steps_w(0.05 + 3 * 0.3, 6), rel_tol=1e-12)


@pytest.mark.parametrize(("name", "fast", "batch", "expected_t"), [
    # k >= 2 (1F1B, pp 2): B = 1 needs k = 1, so the slow row (t = 1.5)
    ("min_accum binds", {"pp": 2, "schedule": "1f1b", "min_accum": 2}, 1, 1.5),
    # k <= 1 (GPipe holds k micro-batches): B = 2 needs k = 2, so the slow row (t = 3.0)
    ("max_accum binds", {"pp": 2, "schedule": "gpipe", "max_accum": 1}, 2, 3.0),
    # k in {2, 4, ...} (interleaved, pp 2): B = 3 needs k = 3 >= min_accum, not a multiple of 2
    ("accum_multiple binds", {"pp": 2, "schedule": "interleaved-1f1b", "min_accum": 2,
                              "multiple": 2, "vstages": 2}, 3, 4.5),
    # accumulation buffers do not fit: k = 1 only; B = 2 needs k = 2
    ("accum_fits binds", {"tp": 2, "accum_fits": False}, 2, 3.0),
])
def test_k_bounds_bind(name: str, fast: dict, batch: int, expected_t: float) -> None:
    """One 1x2 island, one island: a fast row (micro 1.0) whose schedule bounds k and a slow row
    (micro 1.5, tp 2), both with dp = 1 (pp 2 or tp 2 on 2 GPUs), so b = k = B. The bound rules
    the fast row out: the only plan is the slow row's, t = B·1.5."""
    inst = instance_dict([{"name": "a", "num_nodes": 1, "gpus_per_node": 2,
                           "allowed_gpus_per_node": [2]}], batch, max_islands=1)
    rows = [row("a", 1, 2, 1, 1.0, 0.0, **fast), row("a", 1, 2, 1, 1.5, 0.0, tp=2, ac="op-sac")]
    front = assert_every_backend_matches_brute_force(inst, rows)
    assert len(front) == 1, name
    assert math.isclose(front[0].wall_time_s, steps_w(expected_t, batch), rel_tol=1e-12), name
    assert front[0].islands[0].ac == "op-sac", name


def test_ties_same_time_and_cost_give_one_point() -> None:
    """Two rows of one option with the same b and t (checkpointing full vs attn, identical
    numbers) and two identical clusters: one frontier point, every backend the same."""
    inst = instance_dict([{"name": "a", "num_nodes": 1, "allowed_gpus_per_node": [4]},
                          {"name": "b", "num_nodes": 1, "allowed_gpus_per_node": [4]}], 8,
                         max_islands=2)
    rows = [row("a", 1, 4, 1, 1.0, 0.2, tp=2), row("a", 1, 4, 1, 1.0, 0.2, tp=2, ac="attn"),
            row("b", 1, 4, 1, 1.0, 0.2, tp=2)]
    _, _, problem = setup(inst, rows)
    assert problem.rows_dropped == 1  # of the two identical rows the first is kept
    front = assert_every_backend_matches_brute_force(inst, rows)
    assert len(front) >= 1
    fastest = front[0]
    # two islands of b = 4 (k 2) at t = 0.2 + 2 beat one island of b = 8 at t = 0.2 + 4 in W
    assert len(fastest.islands) == 2
    assert math.isclose(fastest.inner_step_s, 2.2, rel_tol=1e-12)


def test_infeasible_when_every_row_needs_more_than_the_batch() -> None:
    """1F1B with pp 2 needs k >= 2: b >= 2·m·dp = 4 > B = 2 on every row: exit 1 naming the
    option, its reason and the fix."""
    inst = instance_dict([{"name": "a", "num_nodes": 1, "allowed_gpus_per_node": [4]}], 2)
    rows = [row("a", 1, 4, 1, 1.0, 0.0, pp=2, schedule="1f1b", min_accum=2)]
    instance, table, problem = setup(inst, rows)
    assert not problem.options
    assert [e.where for e in problem.excluded] == ["cluster a", "a 1x4"]
    with pytest.raises(InfeasibleError) as err:
        solve_instance(instance, table)
    assert err.value.binding == "no_island_option" and err.value.exit_code == 1
    text = str(err.value)
    assert "a 1x4" in text and "4 sequences" in text and "To fix:" in text
    assert "global_batch_seqs to at least 4" in text


def test_infeasible_batch_granularity_names_it() -> None:
    """Interleaved rows (pp 2 on 4 GPUs: dp 2, k a multiple of 2, b = 4, 8, ...) and plain rows
    (dp 4, b = 4k): B = 6 is no sum of them."""
    inst = instance_dict([{"name": "a", "num_nodes": 1, "allowed_gpus_per_node": [4]}], 6)
    rows = [row("a", 1, 4, 1, 1.0, 0.0),
            row("a", 1, 4, 1, 0.6, 0.0, pp=2, schedule="interleaved-1f1b", min_accum=2,
                multiple=2, vstages=2)]
    instance, table, _ = setup(inst, rows)
    with pytest.raises(InfeasibleError) as err:
        solve_instance(instance, table)
    assert err.value.binding == "global_batch"


# ---- exactly dominated rows ------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RowKey:
    """What `table_row` needs to find a pair's row."""

    cluster: str
    nodes: int
    gpus_per_node: int
    micro_batch: int
    variant: tuple[tuple[str, str], ...]


def _beats(a: pd.Series, b: pd.Series, batch: int) -> bool:
    """Weak dominance of row b by row a, from the columns (independent of the planner)."""
    if admissible_ks(b, batch) - admissible_ks(a, batch):
        return False
    for column in ("step_fixed_s", "microstep_s", "compute_fixed_s", "compute_micro_s",
                   "comm_only_fixed_s", "comm_only_micro_s", "tdp_w", "memory_gib",
                   "memory_accum_gib"):
        if a[column] > b[column]:
            return False
    return True


@pytest.mark.parametrize("kind", list(KIND_LAYOUTS))
@pytest.mark.parametrize("seed", range(4))
def test_no_exactly_dominated_row_survives(kind: str, seed: int) -> None:
    inst, rows = random_case(100 * seed + len(kind), kind)
    _, table, problem = setup(inst, rows)
    batch = inst["training"]["global_batch_seqs"]
    kept = []
    for pair in problem.pairs:
        option = problem.options[pair.option_index]
        kept.append(table_row(table, RowKey(option.cluster, option.nodes, option.gpus_per_node,
                                            pair.micro_batch, pair.variant)))
    for i, a in enumerate(kept):
        for j, b in enumerate(kept):
            same_option = (a.cluster, a.nodes, a.gpus_per_node) == (b.cluster, b.nodes,
                                                                     b.gpus_per_node)
            if i != j and same_option and a.micro_batch * a.dp == b.micro_batch * b.dp:
                assert not _beats(a, b, batch), (dict(a), dict(b))


def test_a_dominated_row_is_dropped_and_a_needed_one_kept() -> None:
    """Row 2 is row 1 slower (same layout, checkpointing attn): dropped. Row 3 is faster per
    micro-step but needs k >= 2 (1F1B): not comparable at k = 1, kept. Row 4 is faster but
    hungrier in energy: kept (the energy frontier may need it)."""
    inst = instance_dict([{"name": "a", "num_nodes": 1, "allowed_gpus_per_node": [4]}], 8)
    base = row("a", 1, 4, 1, 1.0, 0.1, tp=2, pp=2, schedule="gpipe")
    slower = {**base, "ac": "attn", "microstep_s": 1.2, "compute_micro_s": 0.72,
              "comm_only_micro_s": 0.48}
    needs_k2 = row("a", 1, 4, 1, 0.8, 0.1, tp=2, pp=2, schedule="1f1b", min_accum=2)
    hungry = {**row("a", 1, 4, 1, 0.9, 0.1, tp=4), "dp": 1, "tp": 4,
              "compute_micro_s": 0.9, "comm_only_micro_s": 0.0, "layout": "tp 4 x dp 1"}
    rows = [base, slower, needs_k2, hungry]
    _, _, problem = setup(inst, rows)
    assert problem.rows_dropped == 1
    assert sorted((p.ac, p.layout) for p in problem.pairs) == sorted(
        (r["ac"], r["layout"]) for r in (base, needs_k2, hungry))
    assert_every_backend_matches_brute_force(inst, rows)


def test_a_plain_table_plans_exactly_as_before() -> None:
    """The shipped small-two-clusters table with FSDP layout columns added (tp = pp = cp = 1,
    dp = n·g, the instance's checkpointing mode, k unbounded) gives the same menu and frontier
    as the table without them."""
    instance = load_instance(ROOT / "instances" / "small-two-clusters.yaml")
    plain = load_island_table(instance)
    layout = plain.assign(tp=1, pp=1, cp=1, dp=plain.nodes * plain.gpus_per_node, ac="op-sac",
                          min_accum=1, accum_multiple=1, max_accum=float("nan"))
    layout = validate_island_table(layout, "with layout columns", instance)
    before, after = build_problem(instance, plain), build_problem(instance, layout)
    assert [(i.option_index, i.seqs, i.accum_steps, i.step_time_s) for i in before.menu] == [
        (i.option_index, i.seqs, i.accum_steps, i.step_time_s) for i in after.menu]
    assert points(compute_frontier(before).points) == points(compute_frontier(after).points)
    assert all(not p.variant for p in before.pairs) and all(p.variant for p in after.pairs)


# ---- validation ------------------------------------------------------------------------------


@pytest.mark.parametrize(("column", "value", "needle"), [
    ("tp", 0, "between 1"), ("pp", 1.5, "between 1"), ("cp", "x", "not a number"),
    ("dp", "", "not a number"), ("min_accum", -1, "between 1"),
    ("accum_multiple", float("inf"), "not a number"), ("max_accum", 0, "between 1"),
    ("pp_schedule", "zero-bubble", "expected one of"), ("sequence_parallel", "maybe",
                                                         "not a boolean"),
    ("ac", "bogus", "not a checkpointing mode"), ("dp", 3, "is not the island's 4 GPUs"),
    ("dp_replicate", 3, "does not divide"),
])
def test_bad_layout_cells_name_file_line_column_and_value(column: str, value: Any,
                                                          needle: str) -> None:
    inst = instance_dict([{"name": "a", "num_nodes": 1, "allowed_gpus_per_node": [4]}], 8)
    rows = [row("a", 1, 4, 1, 1.0, 0.1), row("a", 1, 4, 2, 1.8, 0.1, tp=2)]
    rows[1][column] = value
    with pytest.raises(InstanceError) as err:
        validate_island_table(pd.DataFrame(rows), "layouts.csv", Instance.model_validate(inst))
    text = str(err.value)
    assert f"layouts.csv, line 3: column {column!r}" in text and needle in text, text
    assert "To fix:" in text and err.value.exit_code == 2


def test_schedule_may_be_empty_only_without_a_pipeline_and_k_must_exist() -> None:
    inst = Instance.model_validate(instance_dict(
        [{"name": "a", "num_nodes": 1, "allowed_gpus_per_node": [4]}], 8))
    ok = [row("a", 1, 4, 1, 1.0, 0.1)]
    assert validate_island_table(pd.DataFrame(ok), "t.csv", inst)["pp_schedule"].tolist() == [""]
    bad = [row("a", 1, 4, 1, 1.0, 0.1, pp=2, schedule="")]
    with pytest.raises(InstanceError, match="empty only where pp is 1"):
        validate_island_table(pd.DataFrame(bad), "t.csv", inst)
    none = [row("a", 1, 4, 1, 1.0, 0.1, min_accum=3, multiple=2, max_accum=3)]
    with pytest.raises(InstanceError, match="admits no accumulation step"):
        validate_island_table(pd.DataFrame(none), "t.csv", inst)


def test_duplicate_layout_rows_are_refused_distinct_layouts_are_not() -> None:
    inst = Instance.model_validate(instance_dict(
        [{"name": "a", "num_nodes": 1, "allowed_gpus_per_node": [4]}], 8))
    rows = [row("a", 1, 4, 1, 1.0, 0.1), row("a", 1, 4, 1, 1.1, 0.1, ac="op-sac"),
            row("a", 1, 4, 1, 0.9, 0.1, tp=2)]
    assert len(validate_island_table(pd.DataFrame(rows), "t.csv", inst)) == 3
    with pytest.raises(InstanceError, match=r"duplicate \(cluster, nodes, gpus_per_node, tp"):
        validate_island_table(pd.DataFrame([*rows, rows[1]]), "t.csv", inst)


# ---- instances: parallel, checkpointing modes, island_nodes ----------------------------------


def _csv_instance(tmp_path: Path, **training: Any) -> dict:
    """small-two-clusters as a mapping with its table copied next to it."""
    doc = yaml.safe_load((ROOT / "instances" / "small-two-clusters.yaml").read_text())
    table = tmp_path / "table.csv"
    table.write_text((ROOT / "instances" / "tables" / "small-two-clusters.csv").read_text())
    doc["islands_table"] = table.name
    doc["training"].update(training)
    return doc


def test_parallel_and_checkpointing_list_pass_through_untouched(tmp_path: Path) -> None:
    parallel = {"tp": 8, "max_pp": 16, "schedules": ["1f1b"], "anything": {"nested": [1, 2]}}
    doc = _csv_instance(tmp_path, parallel=parallel,
                        activation_checkpointing=["selective", "full"])
    instance = instance_from_mapping(doc, tmp_path / "i.yaml")
    assert instance.training.activation_checkpointing == ("op-sac", "full")
    arguments = table_arguments(instance)
    assert arguments == {"ac": ["op-sac", "full"], "parallel": parallel}
    assert arguments["parallel"] is instance.training.parallel  # not parsed, not copied
    single = instance_from_mapping(_csv_instance(tmp_path), tmp_path / "i.yaml")
    assert table_arguments(single) == {"ac": "op-sac"}  # today's arguments, unchanged
    doc = _csv_instance(tmp_path, recipe={"base": "paper"})
    del doc["training"]["activation_checkpointing"]  # the recipe's mode: no explicit ac
    recipe = instance_from_mapping(doc, tmp_path / "i.yaml")
    assert table_arguments(recipe) == {"ac": None, "recipe": {"base": "paper"}}


def test_layout_choices_reach_the_table_builder(tmp_path: Path) -> None:
    """training.parallel and a list of checkpointing modes pass through untouched to
    `perfmodel.tables.island_table_for` (which parses and validates them)."""
    instance = instance_from_mapping(
        _csv_instance(tmp_path, parallel={"tp": 8}, activation_checkpointing=["op-sac", "full"]),
        tmp_path / "i.yaml")
    arguments = table_arguments(instance)
    assert arguments["parallel"] == {"tp": 8} and arguments["ac"] == ["op-sac", "full"]
    one = instance_from_mapping(_csv_instance(tmp_path, activation_checkpointing=["full"]),
                                tmp_path / "i.yaml")
    assert table_arguments(one)["ac"] == ["full"]


@pytest.mark.parametrize(("value", "needle"), [
    ([], "empty list"), (["full", "full"], "listed twice"), (["full", "sometimes"], "sometimes"),
    ([True], "one of none, full, op-sac"),
])
def test_bad_checkpointing_lists_are_instance_errors(tmp_path: Path, value: Any,
                                                     needle: str) -> None:
    with pytest.raises(InstanceError) as err:
        instance_from_mapping(_csv_instance(tmp_path, activation_checkpointing=value),
                              tmp_path / "i.yaml")
    text = str(err.value)
    assert "training.activation_checkpointing" in text and needle in text and "To fix:" in text


def test_a_list_of_modes_needs_an_ac_column_and_rows_in_the_list(tmp_path: Path) -> None:
    doc = _csv_instance(tmp_path, activation_checkpointing=["op-sac", "full"])
    with pytest.raises(InstanceError, match="no 'ac' column"):
        load_island_table(instance_from_mapping(doc, tmp_path / "i.yaml"))
    frame = pd.read_csv(tmp_path / "table.csv").assign(ac="none")
    frame.to_csv(tmp_path / "table.csv", index=False)
    with pytest.raises(InstanceError, match=r"line 2: column 'ac' = 'none'.*allows activation"):
        load_island_table(instance_from_mapping(doc, tmp_path / "i.yaml"))


@pytest.mark.parametrize(("value", "needle"), [
    ([], "empty list"), ([0], "outside 1..num_nodes=2"), ([3], "outside 1..num_nodes=2"),
    ([1, 1], "listed twice"), ([True], "boolean"),
])
def test_bad_island_nodes_are_instance_errors(tmp_path: Path, value: Any, needle: str) -> None:
    doc = _csv_instance(tmp_path)
    doc["clusters"][0]["island_nodes"] = value
    with pytest.raises(InstanceError) as err:
        instance_from_mapping(doc, tmp_path / "i.yaml")
    text = str(err.value)
    assert "island_nodes" in text and needle in text and "To fix:" in text


def test_island_nodes_restrict_options_everywhere(tmp_path: Path) -> None:
    """island_nodes [2] on cluster A: its 1-node rows are no options (not reported either: the
    instance does not offer them), the frontier only uses 2-node A islands, the request to the
    performance model carries the list where it has the field."""
    doc = _csv_instance(tmp_path)
    doc["clusters"][0]["island_nodes"] = [2]
    instance = instance_from_mapping(doc, tmp_path / "i.yaml")
    assert instance.clusters[0].island_node_counts == (2,)
    assert instance.clusters[1].island_node_counts == (1, 2)
    table = load_island_table(instance)
    problem = build_problem(instance, table)
    assert {o.nodes for o in problem.options if o.cluster == "A"} == {2}
    assert not problem.excluded
    front = compute_frontier(problem).points
    assert front and all(i.nodes == 2 for p in front for i in p.islands if i.cluster == "A")
    fields = _cluster_request(instance.clusters[0], 3.59)
    ClusterRequest(**fields)  # a valid request either way
    assert ("island_nodes" in fields) == ("island_nodes" in ClusterRequest.__dataclass_fields__)


# ---- nothing dropped in silence --------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class PerfRecord:
    """What the performance model returns per excluded cluster or option (duck-typed)."""

    cluster: str
    nodes: int | None
    gpus_per_node: int | None
    reason: str
    fix: str


def test_exclusions_merge_the_model_records_missing_rows_and_limits() -> None:
    inst = instance_dict([{"name": "a", "num_nodes": 2, "allowed_gpus_per_node": [2, 4]},
                          {"name": "b", "num_nodes": 1, "allowed_gpus_per_node": [4]}], 8,
                         max_gpus=4)
    rows = [row("a", 1, 4, 1, 1.0, 0.1), row("a", 2, 4, 1, 0.6, 0.1),
            row("a", 1, 2, 4, 1.0, 0.1)]  # a 1x2: b = 4·2 = 8 fits; a 2x4: 8 GPUs > max_gpus
    instance = Instance.model_validate(inst)
    table = validate_island_table(pd.DataFrame(rows), "t.csv", instance)
    table.attrs[EXCLUDED_ATTR] = (
        PerfRecord("a", 2, 2, "micro-batch 1 exceeds 80 GiB by 3.1 GiB", "needs op-sac → full"),
        PerfRecord("b", None, None, "no layout fits", "needs tp ≥ 2"))
    problem = build_problem(instance, table)
    got = [(e.where, e.reason) for e in problem.excluded]
    assert ("a 2x2", "micro-batch 1 exceeds 80 GiB by 3.1 GiB") in got
    assert ("cluster b", "no layout fits") in got
    assert ("a 2x4", "8 GPUs > limits.max_gpus 4") in got
    assert len(got) == 3  # b's option is covered by its cluster record: no second line
    assert all(isinstance(e, Exclusion) and e.fix for e in problem.excluded)
    assert {o.nodes * o.gpus_per_node for o in problem.options} == {2, 4}
    assert table_exclusions(instance, table)[:2] == tuple(
        Exclusion.of(r) for r in table.attrs[EXCLUDED_ATTR])


def test_every_option_excluded_exits_1_naming_them() -> None:
    inst = instance_dict([{"name": "a", "num_nodes": 1, "allowed_gpus_per_node": [4]},
                          {"name": "b", "num_nodes": 1, "allowed_gpus_per_node": [4]}], 8)
    instance = Instance.model_validate(inst)
    table = validate_island_table(pd.DataFrame([row("a", 1, 4, 1, 1.0, 0.1)]).iloc[:0], "t.csv",
                                  instance)
    table.attrs[EXCLUDED_ATTR] = (
        PerfRecord("a", 1, 4, "micro-batch 1 exceeds 80 GiB by 3.1 GiB", "needs op-sac → full"),
        PerfRecord("b", None, None, "no layout of 4 GPUs fits", "needs tp ≥ 2"))
    with pytest.raises(InfeasibleError) as err:
        solve_instance(instance, table)
    text = str(err.value)
    assert err.value.exit_code == 1 and err.value.binding == "no_island_option"
    assert "a 1x4: micro-batch 1 exceeds 80 GiB by 3.1 GiB" in text
    assert "cluster b: no layout of 4 GPUs fits" in text
    assert "needs op-sac → full" in text and "needs tp ≥ 2" in text


def _layout_instance(tmp_path: Path) -> Path:
    """small-two-clusters with tp-2 rows added to cluster A's table (dp = n·g/2) and cluster B's
    1x4 rows removed (an option without rows)."""
    doc = _csv_instance(tmp_path)
    frame = pd.read_csv(tmp_path / "table.csv")
    frame = frame[~((frame.cluster == "B") & (frame.nodes == 1) & (frame.gpus_per_node == 4))]
    plain = frame.assign(tp=1, dp=frame.nodes * frame.gpus_per_node, ac="op-sac",
                         layout="fsdp")
    tp2 = frame[frame.cluster == "A"].assign(tp=2, dp=frame.nodes * frame.gpus_per_node // 2,
                                             ac="op-sac", layout="tp 2")
    tp2 = tp2.assign(microstep_s=tp2.microstep_s * 0.45)  # half the sequences, 10 % faster each
    pd.concat([plain, tp2]).to_csv(tmp_path / "table.csv", index=False)
    path = tmp_path / "layouts.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_plan_shows_layout_ac_and_exclusions(tmp_path: Path, run_cli) -> None:
    import json

    path = _layout_instance(tmp_path)
    code, out, err = run_cli("plan", str(path), "--format", "json")
    assert code == 0, err
    record = json.loads(out)
    assert {"layout", "ac", "tp", "dp"} <= set(record["islands"][0])
    assert record["excluded"] == [{
        "cluster": "B", "nodes": 1, "gpus_per_node": 4,
        "reason": f"the island table {tmp_path.resolve() / 'table.csv'} has no row for it",
        "fix": "add its rows to the table, or leave it out of the instance (island_nodes, "
               "allowed_gpus_per_node, max_nodes_per_island)"}]
    code, out, err = run_cli("plan", str(path))
    assert code == 0, err
    assert "excluded: 1 cluster or island option contributes no row (B 1x4)" in out
    assert ", ac op-sac" in out  # the island groups name layout and checkpointing
    code, out, err = run_cli("plan", str(path), "--wide")
    assert code == 0, err
    assert "excluded" in out and "has no row for it" in out and "ac" in out
    code, out, err = run_cli("islands", str(path))
    assert code == 0 and "excluded" in out and "has no row for it" in out
    code, out, err = run_cli("islands", str(path), "--format", "json")
    assert code == 0 and isinstance(json.loads(out), list)  # the rows, as before
    assert "excluded: B 1x4: the island table" in err and "To fix:" in err


def test_plan_records_and_scenario_keys_carry_the_layout(tmp_path: Path) -> None:
    path = _layout_instance(tmp_path)
    instance = load_instance(path)
    table = load_island_table(instance)
    problem, frontier = solve_instance(instance, table)
    for plan in frontier.points:
        record = plan_record(plan, problem)
        for island, entry in zip(plan.islands, record["islands"], strict=True):
            assert entry["layout"] == island.layout and entry["ac"] == "op-sac"
            assert entry["dp"] == island.seqs_per_step // (island.accum_steps
                                                           * island.micro_batch)
        assert rescore(problem, plan_key(plan)).key == plan.key
    text = points_frame([plan_record(p, problem) for p in frontier.points])["islands"]
    assert text.str.contains("ac op-sac").all()
    used = {i.layout for p in frontier.points for i in p.islands}
    assert "tp 2" in used  # the faster tp-2 rows reach the frontier
