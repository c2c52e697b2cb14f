"""Case table for the planner: hand-built instances whose answers follow from DESIGN §3 formulas.

Expected values are computed in the tests from the inputs (formulas or the raw brute-force plan
list), never typed in from a solver run.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from perfmodel.spec.errors import InfeasibleError
from planner.analysis.pareto import (
    cheapest_at_throughput,
    cheapest_within_deadline,
    fastest_within_budget,
    solve_instance,
)
from planner.model.evaluate import build_problem
from planner.model.instance import Instance, load_instance
from planner.model.island_table import TABLE_COLUMNS, load_island_table, validate_island_table
from planner.solvers.baselines import BruteForce

ROOT = Path(__file__).resolve().parent.parent
TOKENS, SEQ = 1e9, 1024


def row(cluster: str, nodes: int, gpn: int, m: int, micro: float, fixed: float, usd: float) -> dict:
    return {
        "cluster": cluster, "gpu_type": "G", "nodes": nodes, "gpus_per_node": gpn, "micro_batch": m,
        "microstep_s": micro, "step_fixed_s": fixed, "usd_per_hour": usd, "memory_gib": 1.0,
        "bound": "compute",
    }


def case(
    rows: list[dict], batch: int, *, clusters: list[dict] | None = None, **limits
) -> tuple[Instance, pd.DataFrame]:
    clusters = clusters or [
        {"name": "a", "num_nodes": 2, "gpus_per_node": 4, "allowed_gpus_per_node": [1, 2, 4]}
    ]
    spec = {
        "name": "case",
        "model": "m",
        "parameters": 10**8,
        "training": {
            "seq_len": SEQ,
            "global_batch_seqs": batch,
            "train_tokens": TOKENS,
            "inner_steps": 10,
        },
        "clusters": [
            {"gpu": "G", "price_usd_per_gpu_hour": 1.0, "wan_gbit_s": 10, "wan_latency_ms": 10, **c}
            for c in clusters
        ],
        "limits": limits,
    }
    instance = Instance.model_validate(spec)
    return instance, validate_island_table(
        pd.DataFrame(rows, columns=list(TABLE_COLUMNS)), "case", instance
    )


def steps(batch: int) -> float:
    return TOKENS / (batch * SEQ)


# ---- frontiers with a known answer --------------------------------------------------------------

SINGLE = case([row("a", 1, 1, 1, 1.5, 0.25, 2.0)], 2, max_islands=1)
SAME_W = case(
    [row("cheap", 1, 1, 1, 1.0, 0.0, 1.0), row("dear", 1, 1, 1, 1.0, 0.0, 2.0)],
    1,
    max_islands=1,
    clusters=[
        {"name": "cheap", "num_nodes": 1, "gpus_per_node": 1},
        {"name": "dear", "num_nodes": 1, "gpus_per_node": 1},
    ],
)
SAME_C = case(
    [row("a", 1, 1, 1, 1.0, 0.0, 1.0), row("a", 1, 2, 1, 1.0, 0.0, 2.0)], 2, max_islands=1
)


@pytest.mark.parametrize("solver", ["cpsat", "milp", "brute"])
@pytest.mark.parametrize(
    ("name", "instance_table", "expected"),
    [
        # one island of 1 GPU, k = 2: W = D/(B·S)·(0.25 + 2·1.5), C = W/3600·2
        (
            "single feasible plan",
            SINGLE,
            {"wall": steps(2) * (0.25 + 2 * 1.5), "usd_per_hour": 2.0, "cluster": "a", "gpus": 1},
        ),
        # two clusters, same time, different price: only the cheaper point survives
        (
            "tie: same W, different C",
            SAME_W,
            {"wall": steps(1) * 1.0, "usd_per_hour": 1.0, "cluster": "cheap", "gpus": 1},
        ),
        # 1 GPU k=2 (t=2, $1/h) vs 2 GPUs k=1 (t=1, $2/h): same cost, the faster one survives
        (
            "tie: same C, different W",
            SAME_C,
            {"wall": steps(2) * 1.0, "usd_per_hour": 2.0, "cluster": "a", "gpus": 2},
        ),
    ],
)
def test_known_single_point_frontiers(
    name: str, instance_table, expected: dict, solver: str
) -> None:
    instance, table = instance_table
    _, frontier = solve_instance(instance, table, solver=solver)
    assert len(frontier.points) == 1, name
    plan = frontier.points[0]
    assert math.isclose(plan.wall_time_s, expected["wall"], rel_tol=1e-12)
    assert math.isclose(
        plan.cost_usd, expected["wall"] / 3600 * expected["usd_per_hour"], rel_tol=1e-12
    )
    assert plan.islands[0].cluster == expected["cluster"] and plan.num_gpus == expected["gpus"]


# ---- infeasible instances and the binding limit -------------------------------------------------

# granularities 4 (1x4, m=1) and 6 (1x2, m=3): B = 10 needs one island of each, on two nodes
TWO_ISLANDS = [row("a", 1, 4, 1, 1.0, 0.1, 4.0), row("a", 1, 2, 3, 3.0, 0.1, 2.0)]


@pytest.mark.parametrize(
    ("name", "rows", "batch", "kwargs", "binding"),
    [
        ("model fits no island", [], 4, {}, "no_island_option"),
        ("B not a sum of granularities", [row("a", 1, 4, 1, 1.0, 0.1, 4.0)], 6, {}, "global_batch"),
        ("island count", TWO_ISLANDS, 10, {"max_islands": 1}, "max_islands"),
        ("nodes", TWO_ISLANDS, 10,
         {"max_islands": 2, "clusters": [{"name": "a", "num_nodes": 1, "gpus_per_node": 4,
                                          "allowed_gpus_per_node": [2, 4]}]}, "num_nodes"),
        ("GPU cap", TWO_ISLANDS, 10, {"max_islands": 2, "max_gpus": 5}, "max_gpus"),
    ],
)
def test_infeasible_names_binding_limit(
    name: str, rows: list[dict], batch: int, kwargs: dict, binding: str
) -> None:
    instance, table = case(rows, batch, **kwargs)
    with pytest.raises(InfeasibleError) as err:
        solve_instance(instance, table)
    assert err.value.binding == binding, name
    assert err.value.exit_code == 1 and "To fix:" in str(err.value)


def _small() -> tuple[Instance, pd.DataFrame]:
    instance = load_instance(ROOT / "instances" / "small-two-clusters.yaml")
    return instance, load_island_table(instance)


def test_budget_below_cheapest_names_cheapest_cost() -> None:
    instance, table = _small()
    cheapest = min(p.cost_usd for p in BruteForce(build_problem(instance, table)).plans())
    with pytest.raises(InfeasibleError) as err:
        solve_instance(instance, table, budget_usd=cheapest * 0.9)
    assert err.value.binding == "budget_usd"
    assert f"{cheapest:.6g}" in str(err.value)


def test_deadline_below_fastest_names_fastest_time() -> None:
    instance, table = _small()
    fastest = min(p.wall_time_s for p in BruteForce(build_problem(instance, table)).plans())
    with pytest.raises(InfeasibleError) as err:
        solve_instance(instance, table, deadline_hours=fastest / 3600 * 0.9)
    assert err.value.binding == "deadline_hours"
    assert f"{fastest / 3600:.6g}" in str(err.value)


# ---- queries ------------------------------------------------------------------------------------


def test_budget_and_deadline_queries_match_enumeration() -> None:
    instance, table = _small()
    plans = BruteForce(build_problem(instance, table)).plans()
    _, frontier = solve_instance(instance, table)
    costs = sorted(p.cost_usd for p in frontier.points)
    walls = sorted(p.wall_time_s for p in frontier.points)
    budget = (costs[0] + costs[1]) / 2
    deadline_s = (walls[0] + walls[1]) / 2
    expected_fast = min(
        (p for p in plans if p.cost_usd <= budget), key=lambda p: (p.wall_time_s, p.cost_usd)
    )
    expected_cheap = min(
        (p for p in plans if p.wall_time_s <= deadline_s), key=lambda p: (p.cost_usd, p.wall_time_s)
    )
    assert fastest_within_budget(frontier.points, budget).key == expected_fast.key
    assert cheapest_within_deadline(frontier.points, deadline_s).key == expected_cheap.key
    _, boxed = solve_instance(instance, table, budget_usd=budget)
    assert min(boxed.points, key=lambda p: p.wall_time_s).key == expected_fast.key
    assert all(p.cost_usd <= budget for p in boxed.points)
    _, boxed = solve_instance(instance, table, deadline_hours=deadline_s / 3600, first_only=True)
    assert [p.key for p in boxed.points] == [expected_cheap.key]


@pytest.mark.parametrize("fraction", [0.99, 0.8, 0.5])
def test_min_throughput_fraction_matches_enumeration(fraction: float) -> None:
    instance, table = _small()
    plans = BruteForce(build_problem(instance, table)).plans()
    _, frontier = solve_instance(instance, table)
    best = min(plans, key=lambda p: (p.wall_time_s, p.cost_usd))
    ok = [p for p in plans if p.tokens_per_s >= fraction * best.tokens_per_s]
    expected = min(ok, key=lambda p: (p.cost_usd, p.wall_time_s))
    chosen, saving = cheapest_at_throughput(frontier.points, fraction)
    assert chosen.key == expected.key
    assert math.isclose(
        saving, 100 * (best.cost_usd - expected.cost_usd) / best.cost_usd, rel_tol=1e-12
    )
