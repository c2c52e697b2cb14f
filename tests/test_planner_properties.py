"""Property tests: DP == CP-SAT == MILP (HiGHS and CBC) == brute-force non-dominated set.

Small random instances (1-3 clusters, few options and micro-batches, B <= 12, <= 3 islands) use
the raw brute-force enumeration (every (option, m, k) island, no reductions) as the reference;
larger ones (3-4 clusters, B up to 64, up to 4 islands) the reduced enumeration. Some clusters
state an inter-node fabric (same-cluster syncs use it), some rows cannot accumulate
(`accum_fits` false: k = 1 only), some clusters cap islands at one node. Every frontier plan is
re-checked against DESIGN §3 by `independent_check`, which recomputes W and C from the instance
dict and the table rows without planner code.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from planner.analysis.pareto import compute_frontier, epsilon_frontier
from planner.model.evaluate import build_problem
from planner.model.instance import Instance
from planner.model.island_table import TABLE_COLUMNS, validate_island_table
from planner.solvers.baselines import BruteForce, TooManyPlans, heuristic_plans
from planner.solvers.cpsat import CpSatSubsolver
from planner.solvers.oracle import StaircaseOracle

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
LARGE = settings(max_examples=25, deadline=None, derandomize=True,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                        HealthCheck.filter_too_much])
BYTES = {"fp32": 4, "bf16": 2, "int8": 1, "fp4": 0.5}


@st.composite
def planner_cases(draw: st.DrawFn) -> tuple[dict, pd.DataFrame]:
    """An instance dict and its island table."""
    clusters, rows = [], []
    for c in range(3 - draw(st.integers(0, 2))):
        gpn = draw(st.sampled_from([2, 4]))
        allowed = sorted(
            draw(
                st.sets(st.sampled_from([g for g in (1, 2, 4) if g <= gpn]), min_size=1, max_size=2)
            )
        )
        price = draw(st.integers(50, 400)) / 100
        num_nodes = 3 - draw(st.integers(0, 2))
        clusters.append(
            {
                "name": f"c{c}",
                "gpu": f"G{c}",
                "num_nodes": num_nodes,
                "gpus_per_node": gpn,
                "allowed_gpus_per_node": allowed,
                "price_usd_per_gpu_hour": price,
                "wan_gbit_s": draw(st.sampled_from([1, 5, 10, 25])),
                "wan_latency_ms": draw(st.sampled_from([0, 10, 50, 200])),
                **_extras(draw),
            }
        )
        for n in range(1, num_nodes + 1):
            # gpn may be a disallowed row: it must be ignored
            for g in sorted(set(allowed) | {gpn}):
                if draw(st.integers(0, 3)) == 3:  # most options present (the minimal example: all)
                    continue
                markup = draw(st.integers(16, 24)) / 20  # per-option price variation
                for m in sorted({1} | draw(st.sets(st.sampled_from([2, 4]), max_size=1))):
                    rows.append(
                        {
                            "cluster": f"c{c}",
                            "gpu_type": f"G{c}",
                            "nodes": n,
                            "gpus_per_node": g,
                            "micro_batch": m,
                            "microstep_s": m * draw(st.integers(300, 3000)) / 1000,
                            "step_fixed_s": draw(st.integers(0, 800)) / 1000,
                            "usd_per_hour": round(price * n * g * markup, 2),
                            "memory_gib": 10.0,
                            "bound": "compute",
                            "accum_fits": draw(st.integers(0, 4)) > 0,
                        }
                    )
    limits = {"max_islands": 3 - draw(st.integers(0, 2)),
              "max_gpus": None if draw(st.integers(0, 3)) else draw(st.integers(2, 16))}
    instance = {
        "name": "random",
        "model": "m",
        "parameters": draw(st.sampled_from([10**6, 10**8, 10**9])),
        "training": {
            "seq_len": draw(st.sampled_from([512, 4096])),
            "global_batch_seqs": draw(st.sampled_from([8, 4, 6, 12, 10, 9])),
            "train_tokens": 1e9,
            "strategy": "diloco",
            "inner_steps": draw(st.sampled_from([1, 10, 100])),
            "pseudo_gradient_dtype": draw(st.sampled_from(["fp32", "bf16", "int8", "fp4"])),
        },
        "clusters": clusters,
        "limits": limits,
    }
    return instance, pd.DataFrame(rows, columns=[*TABLE_COLUMNS, "accum_fits"])


def _extras(draw: st.DrawFn) -> dict:
    """Optional cluster fields: a stated fabric, a one-node island cap."""
    out = {}
    if draw(st.integers(0, 2)) == 0:
        out.update(
            fabric_gbit_s=draw(st.sampled_from([2, 50, 400])),
            fabric_latency_ms=draw(st.sampled_from([0, 1, 20])),
        )
    if draw(st.integers(0, 3)) == 0:
        out["max_nodes_per_island"] = 1
    return out


@st.composite
def larger_cases(draw: st.DrawFn) -> tuple[dict, pd.DataFrame]:
    """3-4 clusters, B in 16..64, up to 4 islands, larger islands (GPUs per node 4/8)."""
    clusters, rows = [], []
    batch = draw(st.sampled_from([16, 24, 32, 48, 64]))
    for c in range(draw(st.integers(3, 4))):
        price = draw(st.integers(50, 400)) / 100
        num_nodes = draw(st.integers(1, 2))
        clusters.append(
            {
                "name": f"c{c}",
                "gpu": f"G{c}",
                "num_nodes": num_nodes,
                "gpus_per_node": 8,
                "allowed_gpus_per_node": [4, 8],
                "price_usd_per_gpu_hour": price,
                "wan_gbit_s": draw(st.sampled_from([1, 5, 10, 25])),
                "wan_latency_ms": draw(st.sampled_from([0, 10, 50, 200])),
                **_extras(draw),
            }
        )
        speed = draw(st.integers(300, 3000)) / 1000
        for n in range(1, num_nodes + 1):
            for g in (4, 8):
                if draw(st.integers(0, 2)) == 2:
                    continue
                for m in (1, 2, 4):
                    if m * n * g > batch or (m == 4 and draw(st.booleans())):
                        continue
                    rows.append(
                        {
                            "cluster": f"c{c}",
                            "gpu_type": f"G{c}",
                            "nodes": n,
                            "gpus_per_node": g,
                            "micro_batch": m,
                            "microstep_s": round(m * speed * draw(st.integers(90, 110)) / 100, 3),
                            "step_fixed_s": draw(st.integers(0, 800)) / 1000,
                            "usd_per_hour": round(price * n * g, 2),
                            "memory_gib": 10.0,
                            "bound": "compute",
                            "accum_fits": draw(st.integers(0, 5)) > 0,
                        }
                    )
    instance = {
        "name": "random-large",
        "model": "m",
        "parameters": draw(st.sampled_from([10**8, 10**9])),
        "training": {
            "seq_len": 4096,
            "global_batch_seqs": batch,
            "train_tokens": 1e10,
            "strategy": "diloco",
            "inner_steps": draw(st.sampled_from([10, 100])),
            "pseudo_gradient_dtype": draw(st.sampled_from(["fp32", "bf16", "fp4"])),
        },
        "clusters": clusters,
        "limits": {"max_islands": draw(st.integers(2, 4))},
    }
    return instance, pd.DataFrame(rows, columns=[*TABLE_COLUMNS, "accum_fits"])


def independent_check(inst: dict, table: pd.DataFrame, plan) -> None:
    """DESIGN §3 feasibility and (W, C) of a plan, recomputed from scratch."""
    tr, lim = inst["training"], inst["limits"]
    clusters = {c["name"]: c for c in inst["clusters"]}
    assert 1 <= len(plan.islands) <= lim["max_islands"]
    nodes = {name: 0 for name in clusters}
    batch = gpus = 0
    times, usd = [], 0.0
    for island in plan.islands:
        c = clusters[island.cluster]
        assert island.gpus_per_node in c["allowed_gpus_per_node"] and island.accum_steps >= 1
        row = table[
            (table.cluster == island.cluster)
            & (table.nodes == island.nodes)
            & (table.gpus_per_node == island.gpus_per_node)
            & (table.micro_batch == island.micro_batch)
        ]
        assert len(row) == 1
        row = row.iloc[0]
        assert island.accum_steps == 1 or bool(row.get("accum_fits", True))
        assert c.get("max_nodes_per_island") is None or island.nodes <= c["max_nodes_per_island"]
        t = row.step_fixed_s + island.accum_steps * row.microstep_s
        assert math.isclose(t, island.step_time_s, rel_tol=1e-12)
        times.append(t)
        usd += row.usd_per_hour
        nodes[island.cluster] += island.nodes
        gpus += island.nodes * island.gpus_per_node
        batch += island.accum_steps * island.micro_batch * island.nodes * island.gpus_per_node
    assert batch == tr["global_batch_seqs"]
    assert all(nodes[n] <= clusters[n]["num_nodes"] for n in nodes)
    assert lim.get("max_gpus") is None or gpus <= lim["max_gpus"]
    used = [clusters[i.cluster] for i in plan.islands]
    m = len(plan.islands)
    sigma = 0.0
    if m > 1:
        bw = min(c["wan_gbit_s"] for c in used) * 1e9 / 8
        lat = max(c["wan_latency_ms"] for c in used) / 1000
        if len({c["name"] for c in used}) == 1 and "fabric_gbit_s" in used[0]:  # one cluster
            bw, lat = used[0]["fabric_gbit_s"] * 1e9 / 8, used[0]["fabric_latency_ms"] / 1000
        dtype = tr["pseudo_gradient_dtype"]  # int8/fp4 also send one fp32 scale per 128 values
        payload = inst["parameters"] * BYTES[dtype] + (
            math.ceil(inst["parameters"] / 128) * 4 if dtype in ("int8", "fp4") else 0)
        sigma = 2 * (m - 1) / m * payload / bw + 2 * (m - 1) * lat
    wall = (
        tr["train_tokens"]
        / (tr["global_batch_seqs"] * tr["seq_len"])
        * (max(times) + sigma / tr["inner_steps"])
    )
    assert math.isclose(wall, plan.wall_time_s, rel_tol=1e-9)
    assert math.isclose(wall / 3600 * usd, plan.cost_usd, rel_tol=1e-9)


def points(plans) -> list[tuple[float, float]]:
    return [(p.wall_time_s, p.cost_usd) for p in plans]


def same_points(a, b) -> bool:
    return len(a) == len(b) and all(
        math.isclose(x[0], y[0], rel_tol=1e-12) and math.isclose(x[1], y[1], rel_tol=1e-12)
        for x, y in zip(a, b, strict=True)
    )


def setup(case):
    inst_dict, table = case
    instance = Instance.model_validate(inst_dict)
    table = validate_island_table(table, "generated", instance)
    return inst_dict, table, build_problem(instance, table)


@pytest.mark.slow
@SETTINGS
@given(planner_cases())
def test_cpsat_milp_brute_frontiers_agree(case) -> None:
    inst, table, problem = setup(case)
    reference = BruteForce(problem, reduce=False).nondominated()
    cpsat = compute_frontier(problem, solver="cpsat", threads=1)
    assert cpsat.proven_exact
    assert same_points(points(cpsat.points), points(reference))
    for backend in ("highs", "cbc"):
        milp = compute_frontier(problem, solver="milp", milp_backend=backend, threads=1)
        assert milp.proven_exact or milp.note  # an unproven MILP frontier says why
        assert same_points(points(milp.points), points(reference)), backend
        for plan in milp.points:
            independent_check(inst, table, plan)
    if problem.max_gpus is None:  # the DP's domain; `auto` falls back to CP-SAT otherwise
        dp = compute_frontier(problem, solver="dp")
        assert dp.proven_exact and same_points(points(dp.points), points(reference))
        for plan in dp.points:
            independent_check(inst, table, plan)
    for plan in cpsat.points:
        independent_check(inst, table, plan)
    for a in cpsat.points:
        assert not any(b is not a and b.wall_time_s <= a.wall_time_s and b.cost_usd <= a.cost_usd
                       for b in cpsat.points)


@LARGE
@given(larger_cases())
def test_dp_cpsat_brute_agree_on_3_to_4_clusters(case) -> None:
    inst, table, problem = setup(case)
    try:
        reference = BruteForce(problem, reduce=True, max_plans=300_000).nondominated()
    except TooManyPlans:
        assume(False)
    dp = compute_frontier(problem, solver="dp")
    assert dp.proven_exact and same_points(points(dp.points), points(reference))
    cpsat = compute_frontier(problem, solver="cpsat", threads=1)
    assert cpsat.proven_exact and same_points(points(cpsat.points), points(reference))
    for plan in dp.points:
        independent_check(inst, table, plan)


@SETTINGS
@given(planner_cases())
def test_brute_epsilon_loop_and_reduction_match_direct_filter(case) -> None:
    _, _, problem = setup(case)
    direct = points(BruteForce(problem, reduce=False).nondominated())
    assert same_points(points(epsilon_frontier(problem, BruteForce(problem, reduce=False))), direct)
    assert same_points(points(epsilon_frontier(problem, BruteForce(problem, reduce=True))), direct)


@SETTINGS
@given(planner_cases())
def test_heuristic_plans_are_feasible_and_never_beat_the_frontier(case) -> None:
    inst, table, problem = setup(case)
    exact = BruteForce(problem, reduce=False).nondominated()
    plans, _ = heuristic_plans(problem)
    for plan in plans:
        independent_check(inst, table, plan)
        assert any(e.wall_time_s <= plan.wall_time_s and e.cost_usd <= plan.cost_usd for e in exact)


def test_time_limit_marks_frontier_unproven() -> None:
    inst = {
        "name": "t",
        "model": "m",
        "parameters": 10**6,
        "training": {
            "seq_len": 512,
            "global_batch_seqs": 4,
            "train_tokens": 1e9,
            "inner_steps": 10,
        },
        "clusters": [
            {
                "name": "a", "gpu": "G", "num_nodes": 2, "gpus_per_node": 2,
                "price_usd_per_gpu_hour": 1.0, "wan_gbit_s": 10, "wan_latency_ms": 10,
            }
        ],
    }
    table = pd.DataFrame(
        [
            {
                "cluster": "a", "gpu_type": "G", "nodes": 1, "gpus_per_node": 2, "micro_batch": 1,
                "microstep_s": 1.0, "step_fixed_s": 0.1, "usd_per_hour": 2.0, "memory_gib": 1.0,
                "bound": "compute",
            }
        ]
    )
    problem = build_problem(Instance.model_validate(inst), table)
    oracle = StaircaseOracle(problem, CpSatSubsolver(problem), time_limit_s=1e-9)
    assert epsilon_frontier(problem, oracle) == []
    assert not oracle.proven_exact
    frontier = compute_frontier(problem, solver="cpsat", time_limit_s=1e-9)
    assert not frontier.proven_exact
