"""Plans under failures (issue 28): the expected-value frontier is exact, and nothing changes
without the failure model.

* brute force (every plan of small instances, `reduce=False`, scored by the same evaluator) gives
  exactly the points of `planner.solvers.expected` on randomised failure rates, restarts,
  checkpoint modes, spot alternatives, egress, islands, H, budgets and deadlines;
* without the model a plan's goodput is 1 and its expected figures are its own; alternatives that
  only add dearer tiers leave the failure-free frontier unchanged;
* the CLI: --failures on pareto/plan, the keys reports carry, the solvers that refuse.
"""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from perfmodel.spec.errors import UserInputError
from planner.analysis.pareto import solve_instance
from planner.model.evaluate import build_problem, evaluate, nondominated
from planner.model.instance import instance_from_mapping, load_instance
from planner.model.island_table import load_island_table
from planner.solvers.baselines import BruteForce
from planner.solvers.dp import dp_frontier
from planner.solvers.expected import expected_frontier
from planner.solvers.registry import resolve_solver

ROOT = Path(__file__).resolve().parent.parent
TWO = ROOT / "instances" / "small-two-clusters.yaml"
FSDP = ROOT / "instances" / "small-fsdp.yaml"
MULTI = ROOT / "instances" / "multi-cloud.yaml"


def _random_instance(seed: int, tmp_path: Path) -> Any:
    """small-two-clusters with random failure settings, spot alternatives, egress and limits (a
    third cluster, a copy of B, on some seeds)."""
    rng = random.Random(seed)
    doc = yaml.safe_load(TWO.read_text())
    doc["failures"] = {"failures_per_gpu_hour": rng.choice([0.0, 0.001, 0.01, 0.05]),
                       "restart_s": rng.choice([0, 60, 600, 3600]),
                       "checkpoint_mode": rng.choice(["sync", "async"]),
                       "checkpoint_write_gbit_s_per_node": rng.choice([0.2, 1, 10])}
    for cluster in doc["clusters"]:
        if rng.random() < 0.7:
            cluster["alternatives"] = [{"tier": "spot",
                                        "price_usd_per_gpu_hour": rng.uniform(0.3, 3.0),
                                        "preemptions_per_node_hour": rng.choice([0.01, 0.1, 0.5]),
                                        "spot_capacity_wait_s": rng.choice([0, 600, 7200])}]
        cluster["egress_usd_per_gb"] = rng.choice([0.0, 0.05, 0.12])
        if rng.random() < 0.3:
            cluster["failures_per_gpu_hour"] = rng.choice([0.0, 0.02])
    doc["limits"]["max_islands"] = rng.choice([2, 3])
    if rng.random() < 0.4:
        table = pd.read_csv(TWO.parent / doc["islands_table"])
        extra = table[table["cluster"] == "B"].assign(cluster="C")
        pd.concat([table, extra]).to_csv(tmp_path / "three.csv", index=False)
        third = copy.deepcopy(doc["clusters"][1])
        third.update(name="C", egress_usd_per_gb=rng.choice([0.0, 0.2]),
                     wan_gbit_s=rng.choice([1, 25]))
        third.pop("alternatives", None)
        doc["clusters"].append(third)
        doc["islands_table"] = str(tmp_path / "three.csv")
    doc["training"]["inner_steps"] = rng.choice([10, 100, 1000])
    if rng.random() < 0.3:
        doc["limits"]["deadline_hours"] = rng.uniform(2.5, 6.0)
    if rng.random() < 0.3:
        doc["limits"]["budget_usd"] = rng.uniform(60.0, 250.0)
    instance = instance_from_mapping(doc, TWO)
    return build_problem(instance, load_island_table(instance))


def _brute_front(problem: Any) -> list[tuple[float, float]]:
    plans = [p for p in BruteForce(problem, reduce=False).plans()
             if (problem.deadline_s is None or p.wall_time_s <= problem.deadline_s)
             and (problem.budget_usd is None or p.cost_usd <= problem.budget_usd)]
    return [(p.wall_time_s, p.cost_usd) for p in nondominated(plans)]


@pytest.mark.parametrize("seed", [1, 4, 6, 10, 11, 17])
def test_expected_frontier_equals_brute_force(seed: int, tmp_path: Path) -> None:
    problem = _random_instance(seed, tmp_path)
    found = expected_frontier(problem)
    assert found.proven_exact
    assert [(p.wall_time_s, p.cost_usd) for p in found.points] == _brute_front(problem)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(20, 40))
def test_expected_frontier_equals_brute_force_more_seeds(seed: int, tmp_path: Path) -> None:
    problem = _random_instance(seed, tmp_path)
    assert [(p.wall_time_s, p.cost_usd) for p in expected_frontier(problem).points] == \
        _brute_front(problem)


def test_fsdp_under_failures_is_exact_and_checkpoints_whole_steps() -> None:
    doc = yaml.safe_load(FSDP.read_text())
    doc["failures"] = {"failures_per_gpu_hour": 0.02, "restart_s": 900}
    instance = instance_from_mapping(doc, FSDP)
    problem = build_problem(instance, load_island_table(instance))
    found = expected_frontier(problem)
    assert [(p.wall_time_s, p.cost_usd) for p in found.points] == _brute_front(problem)
    for plan in found.points:
        assert plan.goodput < 1.0
        assert plan.checkpoint_interval_s is not None
        steps = plan.checkpoint_interval_s / plan.inner_step_s
        assert steps == pytest.approx(round(steps)) and round(steps) >= 1


def test_without_failures_goodput_is_one_and_expected_figures_are_todays() -> None:
    instance = load_instance(TWO)
    table = load_island_table(instance)
    problem, frontier = solve_instance(instance, table)
    assert problem.risk is None
    for plan in frontier.points:
        assert plan.goodput == 1.0 and plan.egress_usd == 0.0
        assert plan.failure_free_wall_time_s is None
    # a disabled section is no model at all
    doc = yaml.safe_load(TWO.read_text())
    doc["failures"] = {"enabled": False}
    off = instance_from_mapping(doc, TWO)
    assert [p.key for p in solve_instance(off, table)[1].points] == \
        [p.key for p in frontier.points]


def test_dearer_alternatives_leave_the_failure_free_frontier_unchanged() -> None:
    instance = load_instance(MULTI)
    table = load_island_table(instance)
    with_alternatives = dp_frontier(build_problem(instance, table)).points
    doc = yaml.safe_load(MULTI.read_text())
    for cluster in doc["clusters"]:
        cluster.pop("alternatives", None)
    plain = instance_from_mapping(doc, MULTI)
    without = dp_frontier(build_problem(plain, load_island_table(plain))).points
    assert [p.key for p in with_alternatives] == [p.key for p in without]
    assert all(i.tier == "spot" for p in with_alternatives for i in p.islands
               if i.cluster.endswith("-spot"))


def test_multi_cloud_under_failures_prices_egress_and_is_exact() -> None:
    instance = load_instance(MULTI).with_failures()
    problem, frontier = solve_instance(instance, load_island_table(instance))
    assert frontier.proven_exact and frontier.solver == "dp"
    assert any(p.egress_usd > 0 for p in frontier.points)  # cross-cloud syncs pay egress
    assert any(p.egress_usd == 0 and len(p.islands) > 1 for p in frontier.points)
    for plan in frontier.points:
        again = evaluate(problem, plan.choices)
        assert again.key == plan.key
        assert plan.failure_free_wall_time_s is not None
        assert plan.wall_time_s >= plan.failure_free_wall_time_s
        assert plan.cost_usd >= plan.failure_free_cost_usd


def test_frequent_preemptions_make_on_demand_islands_worth_their_price() -> None:
    doc = yaml.safe_load(MULTI.read_text())
    for cluster in doc["clusters"]:
        if cluster["name"] in ("aws-h200-spot", "gcp-a100-spot"):
            cluster["preemptions_per_node_hour"] = 1.0  # a spot node lost every hour
    instance = instance_from_mapping(doc, MULTI).with_failures()
    _, frontier = solve_instance(instance, load_island_table(instance))
    tiers = {(i.cluster, i.tier) for p in frontier.points for i in p.islands}
    assert ("aws-h200-spot", "on-demand") in tiers or ("gcp-a100-spot", "on-demand") in tiers


def test_solvers_that_cannot_optimise_expected_values_refuse() -> None:
    instance = load_instance(TWO).with_failures()
    problem = build_problem(instance, load_island_table(instance))
    for solver in ("cpsat", "milp"):
        with pytest.raises(UserInputError, match="expected values"):
            resolve_solver(problem, solver)
    assert resolve_solver(problem, "auto").name == "dp"
    assert resolve_solver(problem, "brute").name == "brute"


def test_pareto_and_plan_with_failures_through_the_cli(run_cli) -> None:
    result = run_cli("pareto", str(TWO), "--failures", "--format", "json")
    assert result.code == 0, result.err
    records = json.loads(result.out)["frontier"]
    for key in ("goodput", "expected_wall_time_s", "expected_cost_usd", "failure_free_wall_time_s",
                "egress_usd", "checkpoint_interval_s", "wall_time_s", "cost_usd", "islands"):
        assert key in records[0]
    assert all(r["goodput"] < 1 for r in records)
    assert all("tier" in i and "participation" in i for r in records for i in r["islands"])
    plan = run_cli("plan", str(TWO), "--failures", "--objective", "cost", "--format", "json")
    record = json.loads(plan.out)
    assert record["failures"] is True and record["failure_assumptions"]
    assert record["expected_cost_usd"] == min(r["expected_cost_usd"] for r in records)
    plain = json.loads(run_cli("pareto", str(TWO), "--format", "json").out)["frontier"]
    assert all(r["goodput"] == 1 and r["expected_wall_time_s"] == r["wall_time_s"]
               and r["expected_cost_usd"] == r["cost_usd"] for r in plain)
    refused = run_cli("pareto", str(TWO), "--failures", "--solver", "cpsat")
    assert refused.code == 2 and "To fix:" in refused.err
    energy = run_cli("plan", str(TWO), "--failures", "--objective", "co2")
    assert energy.code == 2 and "To fix:" in energy.err


def test_vary_failure_rates_and_checkpoint_bandwidth(run_cli) -> None:
    result = run_cli("pareto", str(TWO), "--vary", "failures.failures_per_gpu_hour=0.001,0.05",
                     "--vary", "failures.checkpoint_write_gbit_s_per_node=1,100",
                     "--format", "json")
    assert result.code == 0, result.err
    payload = json.loads(result.out)
    assert len(payload["summary"]) == 4
    slow = [r for r in payload["summary"] if "0.05" in r["scenario"]]
    fast = [r for r in payload["summary"] if "0.001" in r["scenario"]]
    assert min(r["fastest_h"] for r in slow) > min(r["fastest_h"] for r in fast)


def test_alternative_without_a_price_list_is_a_user_error(tmp_path: Path) -> None:
    doc = yaml.safe_load(TWO.read_text())
    doc["clusters"][0]["alternatives"] = [{"tier": "spot"}]
    with pytest.raises(UserInputError, match="alternatives"):
        instance_from_mapping(doc, TWO)
    doc["clusters"][0]["alternatives"] = [{"tier": "on-demand", "price_usd_per_gpu_hour": 5.0}]
    with pytest.raises(UserInputError, match="twice"):
        instance_from_mapping(doc, TWO)


def test_deadline_and_budget_act_on_expected_values(run_cli) -> None:
    records = json.loads(run_cli("pareto", str(TWO), "--failures", "--format",
                                 "json").out)["frontier"]
    fastest_h = min(r["expected_wall_time_s"] for r in records) / 3600
    cheapest = min(r["expected_cost_usd"] for r in records)
    late = run_cli("plan", str(TWO), "--failures", "--deadline-hours", str(fastest_h * 0.999))
    assert late.code == 1 and "deadline" in late.err and "To fix:" in late.err
    poor = run_cli("plan", str(TWO), "--failures", "--objective", "cost", "--budget-usd",
                   str(cheapest * 0.999))
    assert poor.code == 1 and "budget" in poor.err
    ok = run_cli("plan", str(TWO), "--failures", "--objective", "cost", "--deadline-hours",
                 str(fastest_h * 1.001), "--format", "json")
    assert json.loads(ok.out)["expected_wall_time_s"] <= fastest_h * 1.001 * 3600
