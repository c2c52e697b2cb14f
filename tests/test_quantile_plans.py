"""Plans that hold with a probability (`--quantile`, planner.model.uncertainty).

The error model: one uniform U drives every residual group, an island's step time is its
predicted one times F_g⁻¹(U) of its group. These tests sample that model (Monte Carlo) and compute
its exact distribution, independently of the scaled-table shortcut the planner uses, and compare
them with what `plan`/`pareto --quantile` report.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from perfmodel.spec.errors import ConfigError, InstanceError, UserInputError
from perfmodel.uncertainty.conformal import quantile_function
from planner import api
from planner.model import uncertainty
from planner.model.evaluate import cost_usd, wall_time_s
from planner.model.instance import load_instance
from planner.model.island_table import load_island_table
from planner.model.problem import Plan, Problem
from planner.model.uncertainty import (
    ErrorModel,
    cluster_groups,
    plan_at_quantile,
)
from planner.solvers.baselines import BruteForce

ROOT = Path(__file__).resolve().parent.parent
TWO = ROOT / "instances" / "small-two-clusters.yaml"
GROUP_OF_CLUSTER = {"A": "prior", "B": "calibrated"}
"""The residual group of each cluster's rows in the test table (H200 a prior, A100 calibrated)."""
MODEL = ErrorModel.from_ratios({
    "prior": np.linspace(0.85, 1.60, 19),        # wide and skewed slow: datasheet priors
    "calibrated": np.linspace(0.95, 1.07, 19),   # narrow: calibrated profiles
})
SAMPLES = 20_000


@pytest.fixture(scope="module")
def instance_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """small-two-clusters with a provenance column: cluster A prior, cluster B calibrated."""
    folder = tmp_path_factory.mktemp("quantile")
    (folder / "tables").mkdir()
    table = pd.read_csv(ROOT / "instances" / "tables" / "small-two-clusters.csv")
    table["provenance"] = table["cluster"].map(GROUP_OF_CLUSTER)
    table.to_csv(folder / "tables" / "small-two-clusters.csv", index=False)
    shutil.copy(TWO, folder / "small-two-clusters.yaml")
    return folder / "small-two-clusters.yaml"


def _options(quantile: float | None, model: ErrorModel | None = MODEL,
             **caps: Any) -> api.SolveOptions:
    return api.SolveOptions(quantile=quantile, error_model=model if quantile else None, **caps)


def _point_problem(path: Path) -> tuple[Problem, pd.DataFrame]:
    from planner.model.evaluate import build_problem

    instance = load_instance(path)
    table = load_island_table(instance)
    return build_problem(instance, table), table


def _point_steps(plan: Plan, table: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
    """Each island's *predicted* step time (the unscaled table row) and residual group."""
    rows = _rows(table)
    steps, groups = [], []
    for island in plan.islands:
        fixed_s, micro_s = rows[(island.cluster, island.nodes, island.gpus_per_node,
                                 island.micro_batch)]
        steps.append(fixed_s + island.accum_steps * micro_s)
        groups.append(GROUP_OF_CLUSTER[island.cluster])
    return np.array(steps), groups


_ROWS: dict[int, dict[tuple[str, int, int, int], tuple[float, float]]] = {}


def _rows(table: pd.DataFrame) -> dict[tuple[str, int, int, int], tuple[float, float]]:
    """(cluster, nodes, gpus_per_node, micro_batch) -> (step_fixed_s, microstep_s): one row each
    in this plain FSDP table."""
    if id(table) not in _ROWS:
        keys = list(zip(table.cluster, table.nodes, table.gpus_per_node, table.micro_batch,
                        strict=True))
        assert len(set(keys)) == len(keys)
        _ROWS[id(table)] = {(str(c), int(n), int(g), int(m)): (float(f), float(t))
                            for (c, n, g, m), f, t in zip(keys, table.step_fixed_s,
                                                          table.microstep_s, strict=True)}
    return _ROWS[id(table)]


def _walls_and_costs(problem: Problem, plan: Plan, table: pd.DataFrame,
                     uniforms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """W(U) and C(U) of the plan under the model, for each U (the plan's σ is not scaled)."""
    steps, groups = _point_steps(plan, table)
    scaled = np.stack([MODEL.sample(g, uniforms) * t for g, t in zip(groups, steps, strict=True)])
    taus = scaled.max(axis=0).tolist()
    walls = np.array([wall_time_s(problem, tau, plan.sync_s) for tau in taus])
    costs = np.array([cost_usd(w, plan.price_units) for w in walls.tolist()])
    return walls, costs


def _exact_quantile(values: np.ndarray, masses: np.ndarray, level: float) -> float:
    """The level-quantile (smallest x with P(X <= x) >= level) of a discrete distribution."""
    order = np.argsort(values, kind="stable")
    cumulative = np.cumsum(masses[order])
    return float(values[order][np.searchsorted(cumulative, level - 1e-12)])


def test_the_model_reads_the_one_conformal_quantile_and_refuses_open_ends() -> None:
    """F_g⁻¹ is `perfmodel.uncertainty.conformal`'s: rank ⌊(n+1)u⌋ below the median (0 below rank
    1), ⌈(n+1)u⌉ from it (+∞ above rank n); a level that lands on an open end is refused with
    the levels n ratios certify, from either side."""
    ratios = [1.3, 0.9, 1.1, 1.0]  # sorted: 0.9, 1.0, 1.1, 1.3; n + 1 = 5
    levels = np.array([0.1, 0.2, 0.21, 0.39, 0.4, 0.6, 0.8, 0.81])
    expected = [0.0, 0.9, 0.9, 0.9, 1.0, 1.1, 1.3, math.inf]
    assert quantile_function(ratios, levels).tolist() == expected
    model = ErrorModel.from_ratios({"prior": ratios})
    assert model.sample("prior", levels).tolist() == expected
    assert [model.multiplier("prior", u) for u in (0.2, 0.4, 0.6, 0.8)] == [0.9, 1.0, 1.1, 1.3]
    with pytest.raises(ConfigError, match="too few") as high:
        model.multiplier("prior", 0.9)
    assert "lower --quantile to 0.8" in high.value.hint
    with pytest.raises(ConfigError, match="too few") as low:
        model.multiplier("prior", 0.1)
    assert "raise --quantile to 0.2" in low.value.hint


@pytest.mark.parametrize("quantile", [0.9, 0.75])
def test_quantile_frontier_agrees_with_monte_carlo_of_the_model(instance_path: Path,
                                                               quantile: float) -> None:
    """Every point of the Q-frontier: its reported time and cost are Q-quantiles of the sampled
    W(U), C(U): P(W <= W_Q) >= Q and P(W < W_Q) <= Q, within 4 binomial standard errors."""
    problem, table = _point_problem(instance_path)
    result = api.frontier(api.FrontierRequest(instance_paths=(instance_path,),
                                              options=_options(quantile)))
    assert isinstance(result, api.FrontierResult)
    points = result.solved.frontier.points
    assert any(len({i.cluster for i in p.islands}) == 2 for p in points)  # mixed groups
    uniforms = np.random.default_rng(27).uniform(size=SAMPLES)
    tolerance = 4 * math.sqrt(quantile * (1 - quantile) / SAMPLES)
    for point in points:
        walls, costs = _walls_and_costs(problem, point, table, uniforms)
        for sampled, reported in ((walls, point.wall_time_s), (costs, point.cost_usd)):
            close = np.isclose(sampled, reported, rtol=1e-9)
            below = float(np.mean((sampled <= reported) | close))
            strictly = float(np.mean((sampled < reported) & ~close))
            assert below >= quantile - tolerance, (point.islands, below)
            assert strictly <= quantile + tolerance, (point.islands, strictly)
    assert result.records[0]["quantile"] == quantile
    assert "comonotone" in result.records[0]["error_model"]


def test_quantile_plan_meets_its_deadline_at_the_quantile(instance_path: Path) -> None:
    """`plan --objective cost --deadline-hours H --quantile 0.9`: the Monte Carlo share of runs
    within H is at least 0.9 (minus sampling error); the point plan's share is lower."""
    problem, table = _point_problem(instance_path)
    fastest = api.query(api.QueryRequest(instance_paths=(instance_path,), objective="time",
                                         options=_options(0.9)))
    assert isinstance(fastest, api.PlanAnswer)
    deadline_h = 1.05 * fastest.plan.wall_time_s / 3600
    asked = api.query(api.QueryRequest(instance_paths=(instance_path,), objective="cost",
                                       options=_options(0.9, deadline_hours=deadline_h)))
    cheap = api.query(api.QueryRequest(instance_paths=(instance_path,), objective="cost",
                                       options=_options(None, deadline_hours=deadline_h)))
    assert isinstance(asked, api.PlanAnswer) and isinstance(cheap, api.PlanAnswer)
    assert asked.record["query"] == "cheapest within deadline (Q0.9 time and cost)"
    assert asked.plan.wall_time_s <= deadline_h * 3600
    uniforms = np.random.default_rng(4).uniform(size=SAMPLES)
    tolerance = 4 * math.sqrt(0.9 * 0.1 / SAMPLES)
    walls, _ = _walls_and_costs(problem, asked.plan, table, uniforms)
    assert np.mean(walls <= deadline_h * 3600 * (1 + 1e-9)) >= 0.9 - tolerance
    point_walls, _ = _walls_and_costs(problem, cheap.plan, table, uniforms)
    assert np.mean(point_walls <= deadline_h * 3600) < 0.9 - tolerance
    assert asked.plan.cost_usd > cheap.plan.cost_usd  # holding with 90 % costs more


def test_quantile_frontier_is_exact_against_brute_force(instance_path: Path) -> None:
    """The frontier of the scaled table equals the non-dominated set of every feasible plan's
    exact Q-quantiles, each computed from the whole distribution of U (no monotonicity used)."""
    quantile = 0.9
    problem, table = _point_problem(instance_path)
    n = {g: len(r) for g, r in MODEL.ratios.items()}
    edges = np.unique(np.concatenate([np.arange(k + 2) / (k + 1) for k in n.values()]))
    mids, masses = (edges[1:] + edges[:-1]) / 2, np.diff(edges)
    quantiles = []
    for plan in BruteForce(problem).plans():
        walls, costs = _walls_and_costs(problem, plan, table, mids)
        quantiles.append((_exact_quantile(walls, masses, quantile),
                          _exact_quantile(costs, masses, quantile)))
    assert len(quantiles) > 50
    expected: list[tuple[float, float]] = []
    for wall, cost in sorted(quantiles):
        if not expected or cost < expected[-1][1] * (1 - 1e-12):
            expected.append((wall, cost))
    for solver in ("dp", "cpsat"):
        found = api.frontier(api.FrontierRequest(
            instance_paths=(instance_path,), options=_options(quantile, solver=solver)))
        assert isinstance(found, api.FrontierResult)
        got = [(p.wall_time_s, p.cost_usd) for p in found.solved.frontier.points]
        assert len(got) == len(expected), solver
        np.testing.assert_allclose(np.array(got), np.array(expected), rtol=1e-9)


def test_median_of_symmetric_ratios_is_the_point_plan(instance_path: Path) -> None:
    symmetric = 1 + np.array([-0.2, -0.1, -0.05, -0.02, 0.0, 0.02, 0.05, 0.1, 0.2])
    model = ErrorModel.from_ratios({"prior": symmetric, "calibrated": symmetric[::-1]})
    for objective in ("time", "cost"):
        point = api.query(api.QueryRequest(instance_paths=(instance_path,), objective=objective))
        median = api.query(api.QueryRequest(instance_paths=(instance_path,), objective=objective,
                                            options=_options(0.5, model)))
        assert isinstance(point, api.PlanAnswer) and isinstance(median, api.PlanAnswer)
        assert median.plan.islands == point.plan.islands
        assert median.plan.wall_time_s == pytest.approx(point.plan.wall_time_s, rel=1e-12)
        assert median.record["quantile"] == 0.5


@pytest.mark.parametrize("value", ["0", "1", "nan", "1.5", "-0.1"])
def test_bad_quantile_exits_2_with_a_fix(value: str, run_cli) -> None:
    for command in ("plan", "pareto"):
        code, _, err = run_cli(command, str(TWO), "--quantile", value)
        assert code == 2, err
        assert "quantile" in err and "To fix:" in err


def test_quantile_request_refusals(instance_path: Path) -> None:
    with pytest.raises(UserInputError, match="failures"):
        api.SolveOptions(quantile=0.9, failures=True)
    with pytest.raises(UserInputError, match="error_model without quantile"):
        api.SolveOptions(error_model=MODEL)
    with pytest.raises(UserInputError, match="scenario"):
        api.frontier(api.FrontierRequest(instance_paths=(TWO,), vary=("training.inner_steps=50",),
                                         options=_options(0.9)))
    with pytest.raises(UserInputError, match="checked for time and cost only"):
        api.query(api.QueryRequest(instance_paths=(instance_path,), objective="energy",
                                   options=_options(0.9)))
    with pytest.raises(InstanceError, match="provenance") as caught:  # table without the column
        api.frontier(api.FrontierRequest(instance_paths=(TWO,), options=_options(0.9)))
    assert "add a provenance column" in (caught.value.hint or "")


def _residuals(path: Path, rows: list[str]) -> Path:
    path.write_text("group,quantity,case,source,predicted,measured,role\n" + "\n".join(rows)
                    + "\n", encoding="utf-8")
    return path


def test_default_model_reads_the_residuals_file(instance_path: Path, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                run_cli) -> None:
    rows = [f"{g},step_time_s,c{i},test,1.0,{r!r},calibration"
            for g, ratios in MODEL.ratios.items() for i, r in enumerate(ratios)]
    rows += ["prior,step_time_s,h1,test,1.0,9.0,holdout",          # holdout: not in the model
             "memory,peak_memory_bytes,m1,test,100,120,calibration"]  # not a time group
    path = _residuals(tmp_path / "residuals.csv", rows)
    monkeypatch.setattr(uncertainty, "residuals_path", lambda: path)
    read = ErrorModel.from_residuals()
    assert {g: np.round(r, 6).tolist() for g, r in read.ratios.items()} == \
        {g: np.round(r, 6).tolist() for g, r in MODEL.ratios.items()}
    code, out, err = run_cli("pareto", str(instance_path), "--quantile", "0.9", "--format",
                             "json")
    assert code == 0, err
    records = json.loads(out)["frontier"]
    expected = api.frontier(api.FrontierRequest(instance_paths=(instance_path,),
                                                options=_options(0.9)))
    assert isinstance(expected, api.FrontierResult)
    assert [r["wall_time_s"] for r in records] == pytest.approx(
        [p.wall_time_s for p in expected.solved.frontier.points], rel=1e-9)
    assert all(r["quantile"] == 0.9 and str(path) in r["error_model"] for r in records)
    code, out, err = run_cli("plan", str(instance_path), "--quantile", "0.9")
    assert code == 0, err
    assert "quantile" in out and "comonotone" in out


def test_missing_or_malformed_residuals_exit_2(instance_path: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch, run_cli) -> None:
    missing = tmp_path / "absent.csv"
    monkeypatch.setattr(uncertainty, "residuals_path", lambda: missing)
    code, _, err = run_cli("plan", str(instance_path), "--quantile", "0.9")
    assert code == 2 and "residuals file is missing" in err and "make_residuals" in err
    bad = _residuals(tmp_path / "bad.csv", ["prior,step_time_s,a,test,1.0,1.1,calibration",
                                            "prior,step_time_s,b,test,1.0,nan,calibration"])
    monkeypatch.setattr(uncertainty, "residuals_path", lambda: bad)
    code, _, err = run_cli("pareto", str(instance_path), "--quantile", "0.9")
    assert code == 2 and "line 3" in err and "'measured'" in err and "To fix:" in err


def test_plan_at_quantile_is_the_model_at_u_equal_q(instance_path: Path) -> None:
    """The point plan's Q-time and Q-cost (`plan_at_quantile`, used by docs/CASE_STUDY.md) are
    W(U = Q) and C(U = Q) of the sampled model."""
    problem, table = _point_problem(instance_path)
    groups = cluster_groups(table)
    assert groups == GROUP_OF_CLUSTER
    found = api.frontier(api.FrontierRequest(instance_paths=(instance_path,)))
    assert isinstance(found, api.FrontierResult)
    for plan in found.solved.frontier.points:
        walls, costs = _walls_and_costs(problem, plan, table, np.array([0.9]))
        wall_s, cost = plan_at_quantile(problem, plan, groups, MODEL, 0.9)
        assert (wall_s, cost) == pytest.approx((walls[0], costs[0]), rel=1e-12)
        assert wall_s > plan.wall_time_s  # both groups' P90 multipliers exceed 1


def test_a_built_island_table_keeps_each_rows_provenance() -> None:
    """The performance model's table says which profile predicted each row (its residual
    group); the validated table keeps that column."""
    from perfmodel.facts import PROVENANCES

    table = api.islands(api.IslandsRequest(
        instance_path=ROOT / "instances" / "paper-case-study.yaml")).table
    assert len(table) > 0 and set(table["provenance"]) <= set(PROVENANCES)
    assert set(cluster_groups(table)) == {"A", "B"}


def test_independent_errors_never_do_better_than_the_reported_quantile(
        instance_path: Path) -> None:
    """The stated limit of the model (Fréchet): with the groups' errors independent instead of
    comonotone, a plan meets its reported Q-time with probability at most Q (sampling error
    aside), so the comonotone Q-time is the optimistic one for plans mixing groups."""
    quantile = 0.9
    problem, table = _point_problem(instance_path)
    found = api.frontier(api.FrontierRequest(instance_paths=(instance_path,),
                                             options=_options(quantile)))
    assert isinstance(found, api.FrontierResult)
    rng = np.random.default_rng(11)
    draws = {g: rng.uniform(size=SAMPLES) for g in MODEL.ratios}
    tolerance = 4 * math.sqrt(quantile * (1 - quantile) / SAMPLES)
    shares = []
    for point in found.solved.frontier.points:
        steps, groups = _point_steps(point, table)
        scaled = np.stack([MODEL.sample(g, draws[g]) * t
                           for g, t in zip(groups, steps, strict=True)])
        walls = np.array([wall_time_s(problem, tau, point.sync_s)
                          for tau in scaled.max(axis=0).tolist()])
        share = float(np.mean(walls <= point.wall_time_s * (1 + 1e-9)))
        assert share <= quantile + tolerance
        shares.append((len(set(groups)), share))
    mixed = [share for groups, share in shares if groups == 2]
    assert mixed and min(mixed) < quantile - tolerance  # independence does change the answer
