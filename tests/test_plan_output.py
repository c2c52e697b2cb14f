"""Issue 29, planner outputs: plans say what to rent where (island groups with provider, tier,
price list and region), how far to trust them (each GPU's profile provenance), near-duplicate
frontier points are marked without dropping any, and plan/pareto JSON validate against their
shipped schemas (planner/schemas/plan.schema.json, pareto.schema.json).

Real solves of the shipped instances (no mocks): small-two-clusters (a fixed island table) and
paper-case-study (tables built by the performance model)."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import jsonschema
import pandas as pd
import pytest

from planner import api
from planner.analysis import report
from planner.requests import DEFAULT_MIN_GAIN

ROOT = Path(__file__).resolve().parent.parent
TWO = ROOT / "instances" / "small-two-clusters.yaml"
CASE = ROOT / "instances" / "paper-case-study.yaml"
SCHEMAS = ROOT / "planner" / "schemas"


def _validator(name: str) -> jsonschema.Draft202012Validator:
    schema = json.loads((SCHEMAS / f"{name}.schema.json").read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _errors(name: str, document: object) -> list[str]:
    return [f"{list(e.path)}: {e.message}" for e in _validator(name).iter_errors(document)]


@pytest.fixture(scope="module")
def case_study() -> api.Solved:
    return api.solve(api.SolveRequest(instance_path=CASE))


# ---- JSON: versioned objects that validate against their schemas --------------------------------

PLAN_RUNS = {
    "time": ["plan", str(TWO)],
    "cost-fraction": ["plan", str(TWO), "--objective", "cost", "--min-throughput-fraction",
                      "0.9"],
    "co2": ["plan", str(TWO), "--objective", "co2"],
    "failures": ["plan", str(TWO), "--failures"],
}
PARETO_RUNS = {
    "cost": ["pareto", str(TWO)],
    "co2": ["pareto", str(TWO), "--objectives", "time,co2"],
    "failures": ["pareto", str(TWO), "--failures"],
}


@pytest.mark.parametrize("case", sorted(PLAN_RUNS))
def test_plan_json_matches_its_schema(run_cli, case: str) -> None:
    result = run_cli(*PLAN_RUNS[case], "--format", "json")
    assert result.code == 0, result.err
    document = json.loads(result.out)
    assert _errors("plan", document) == []
    assert document["schema_version"] == 1


@pytest.mark.parametrize("case", sorted(PARETO_RUNS))
def test_pareto_json_is_a_versioned_object(run_cli, case: str) -> None:
    result = run_cli(*PARETO_RUNS[case], "--format", "json")
    assert result.code == 0, result.err
    document = json.loads(result.out)
    assert _errors("pareto", document) == []
    assert document["schema_version"] == 1 and document["frontier"]
    # the former bare list of points is refused by the schema: it can fail
    assert _errors("pareto", document["frontier"])
    broken = {**document, "frontier": [{k: v for k, v in p.items() if k != "island_groups"}
                                       for p in document["frontier"]]}
    assert _errors("pareto", broken)


def test_case_study_json_states_provenance_and_groups(run_cli) -> None:
    """Tables built by the performance model name each GPU's profile and its provenance."""
    document = json.loads(run_cli("pareto", str(CASE), "--format", "json").out)
    assert _errors("pareto", document) == []
    gpus = {i["gpu_type"] for p in document["frontier"] for i in p["islands"]}
    assert {p["gpu_type"] for p in document["profiles"]} == gpus
    assert all(p["provenance"] in ("measured", "calibrated", "prior") for p in
               document["profiles"])
    group = document["frontier"][0]["island_groups"][0]
    assert group["provider"] == "RunPod" and group["tier"] == "community"
    assert group["price_list"] == "RunPod 2026-09-25" and group["region"] == "us-state/texas"


# ---- island groups ----------------------------------------------------------------------------

def test_island_groups_sum_to_the_plan(case_study: api.Solved) -> None:
    for record in report.frontier_records(case_study.frontier, case_study.problem):
        groups = record["island_groups"]
        assert sum(g["count"] for g in groups) == record["num_islands"]
        assert sum(g["count"] * g["nodes"] * g["gpus_per_node"] for g in groups) == \
            record["num_gpus"]
        assert math.isclose(sum(g["cost_usd"] for g in groups), record["cost_usd"],
                            rel_tol=1e-9)
        assert math.isclose(sum(g["tokens_per_s"] for g in groups), record["tokens_per_s"],
                            rel_tol=1e-9)
        for group in groups:
            assert f"{group['count']} × ({group['nodes']} node" in group["description"]
            assert group["gpu_type"] in group["description"]  # the variant, not 'H200'
            assert "@ RunPod community" in group["description"]


def test_csv_has_one_row_per_island_group(run_cli, tmp_path: Path) -> None:
    document = json.loads(run_cli("pareto", str(CASE), "--format", "json").out)
    expected = sum(len(p["island_groups"]) for p in document["frontier"])
    out = tmp_path / "frontier.csv"
    printed = run_cli("pareto", str(CASE), "--format", "csv", "-o", str(out))
    assert printed.code == 0, printed.err
    for frame in (pd.read_csv(io.StringIO(printed.out)), pd.read_csv(out)):
        assert len(frame) == expected
        for column in ("point", "count", "cluster", "gpu_type", "provider", "tier", "price_list",
                       "region", "group_usd_per_hour"):
            assert column in frame.columns, column
    plan = pd.read_csv(io.StringIO(run_cli("plan", str(CASE), "--format", "csv").out))
    record = json.loads(run_cli("plan", str(CASE), "--format", "json").out)
    assert len(plan) == len(record["island_groups"])
    assert set(plan["provider"]) == {"RunPod"}


# ---- near-duplicate points and the per-hour figure -----------------------------------------------

def _check_marks(points: list, min_gain: float) -> list[bool]:
    """The marks `near_duplicates` gives, checked against the definition pair by pair."""
    marks = report.near_duplicates(points, min_gain)
    ordered = sorted(points, key=lambda p: p.wall_time_s)
    expected = [False] * len(ordered)
    for i in range(len(ordered) - 1):
        fast, slow = ordered[i], ordered[i + 1]
        if slow.wall_time_s - fast.wall_time_s < min_gain * slow.wall_time_s:
            expected[i] = True
        if fast.cost_usd - slow.cost_usd < min_gain * fast.cost_usd:
            expected[i + 1] = True
    assert marks == expected
    return marks


def test_near_duplicates_are_marked_not_dropped(case_study: api.Solved) -> None:
    points = list(case_study.frontier.points)
    records = report.frontier_records(case_study.frontier, case_study.problem)
    assert len(records) == len(points)  # exactness: every point stays
    marks = _check_marks(points, DEFAULT_MIN_GAIN)
    assert [r["near_duplicate"] for r in records] == marks
    ordered = sorted(points, key=lambda p: p.wall_time_s)
    close = [i for i in range(len(ordered) - 1)
             if ordered[i + 1].wall_time_s - ordered[i].wall_time_s
             < DEFAULT_MIN_GAIN * ordered[i + 1].wall_time_s]
    assert close, "the case study has two points within 0.1 % of wall time"
    assert all(marks[i] for i in close)
    assert not any(_check_marks(points, 0.0))  # exact frontier: no ties at min_gain 0


def test_usd_per_hour_saved_uses_a_point_that_saves_time(case_study: api.Solved) -> None:
    points = sorted(case_study.frontier.points, key=lambda p: p.wall_time_s)
    adjacent = report.marginal_costs(points, 0.0)
    for i, value in enumerate(adjacent):  # min_gain 0: the adjacent quotient
        if i == 0:
            assert value is None
            continue
        faster, plan = points[i - 1], points[i]
        assert value == pytest.approx((faster.cost_usd - plan.cost_usd) * 3600
                                      / (plan.wall_time_s - faster.wall_time_s))
    gain = DEFAULT_MIN_GAIN
    sensible = report.marginal_costs(points, gain)
    for i, value in enumerate(sensible):
        plan = points[i]
        saving = [p for p in points[:i] if plan.wall_time_s - p.wall_time_s
                  >= gain * plan.wall_time_s]
        if not saving:
            assert value is None
            continue
        reference = saving[-1]  # the slowest faster point that saves min_gain of W
        assert value == pytest.approx((reference.cost_usd - plan.cost_usd) * 3600
                                      / (plan.wall_time_s - reference.wall_time_s))
    # the point seconds behind its faster neighbour no longer divides by those seconds
    finite = [v for v in sensible if v is not None]
    assert max(finite) < max(v for v in adjacent if v is not None)


def test_min_gain_flag_is_checked(run_cli) -> None:
    refused = run_cli("pareto", str(TWO), "--min-gain", "1.5")
    assert refused.code == 2 and "--min-gain" in refused.err
    with pytest.raises(Exception, match="min-gain"):
        api.FrontierRequest(instance_paths=(TWO,), min_gain=float("nan"))
    marked = json.loads(run_cli("pareto", str(CASE), "--min-gain", "0", "--format",
                                "json").out)
    assert marked["min_gain"] == 0 and not any(p["near_duplicate"] for p in marked["frontier"])


# ---- the terminal: provenance, solver internals only with -v, --wide ---------------------------

def test_plan_states_provenance_and_warns_once_on_priors(run_cli, case_study) -> None:
    out = run_cli("plan", str(CASE)).out
    profiles = report.gpu_profiles(case_study.instance,
                                   [o.gpu_type for o in case_study.problem.options])
    line = next(line for line in out.splitlines() if line.startswith("profiles:"))
    for profile in profiles:
        assert f"{profile['gpu_type']} {profile['provenance']}" in line
    warnings = [line for line in out.splitlines() if line.startswith("warning:")]
    priors = [p for p in profiles if p["provenance"] == "prior"]
    assert len(warnings) == (1 if priors else 0)
    fixed = run_cli("plan", str(TWO)).out
    assert "island table" in fixed and "warning:" not in fixed


def test_solver_internals_only_with_verbose(run_cli) -> None:
    plain = run_cli("pareto", str(TWO)).out
    assert "num_solves" not in plain and "price_resolution" not in plain
    verbose = run_cli("pareto", str(TWO), "-v").out
    assert "num_solves" in verbose and "price_resolution_usd_per_hour" in verbose
    assert "num_solves" in run_cli("-v", "plan", str(TWO)).out
    wide = run_cli("pareto", str(TWO), "--wide").out
    assert "islands per point" in wide and "num_solves" in wide
