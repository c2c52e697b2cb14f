"""The typed planner API (`planner.api`): the CLI prints what it returns, its requests validate
their values and infeasibility names the binding limit (the
planner's doors into the performance model: tests/test_architecture.py)."""

from __future__ import annotations

import ast
import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pytest

from perfmodel.spec.errors import InfeasibleError, UserInputError
from planner import api

ROOT = Path(__file__).resolve().parent.parent
TWO = ROOT / "instances" / "small-two-clusters.yaml"
FSDP = ROOT / "instances" / "small-fsdp.yaml"
TIMINGS = {"solve_time_s"}
"""Fields that differ between two solves of the same instance."""


def _jsonable(value: Any) -> Any:
    """What `emit_json` prints, read back (NaN/inf become null)."""
    from perfmodel.formatting import json_ready

    return json.loads(json.dumps(json_ready(value)))


def _drop_timings(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_timings(v) for k, v in value.items() if k not in TIMINGS}
    if isinstance(value, list):
        return [_drop_timings(v) for v in value]
    return value


@pytest.mark.parametrize("instance", [TWO, FSDP], ids=lambda p: p.stem)
def test_frontier_equals_the_cli_json(instance: Path, run_cli) -> None:
    result = api.frontier(api.FrontierRequest(instance_paths=(instance,)))
    assert isinstance(result, api.FrontierResult)
    code, out, err = run_cli("pareto", str(instance), "--format", "json")
    assert code == 0, err
    printed = json.loads(out)["frontier"]
    assert len(printed) == len(result.records) == len(result.solved.frontier.points) >= 1
    assert _drop_timings(printed) == _drop_timings(_jsonable(result.records))
    walls = [p.wall_time_s for p in result.solved.frontier.points]
    assert walls == sorted(walls) and result.meta["proven_exact"] is True


def test_query_equals_the_cli_json(run_cli) -> None:
    request = api.QueryRequest(instance_paths=(TWO,), min_throughput_fraction=0.99)
    answer = api.query(request)
    assert isinstance(answer, api.PlanAnswer)
    code, out, err = run_cli("plan", str(TWO), "--min-throughput-fraction", "0.99", "--format",
                             "json")
    assert code == 0, err
    printed = json.loads(out)
    assert printed.pop("schema_version") == 1 and printed.pop("profiles")
    assert _drop_timings(printed) == _drop_timings(_jsonable(answer.record))
    assert answer.record["query"] == "cheapest with tokens/s >= 0.99 x best"
    best = max(p.tokens_per_s for p in answer.solved.frontier.points)
    assert answer.plan.tokens_per_s >= 0.99 * best


def test_scenario_study_equals_the_cli_json(run_cli) -> None:
    vary = ("clusters.A.wan_gbit_s=1,10",)
    study = api.frontier(api.FrontierRequest(instance_paths=(TWO,), vary=vary))
    assert not isinstance(study, api.FrontierResult)
    code, out, err = run_cli("pareto", str(TWO), "--vary", vary[0], "--format", "json")
    assert code == 0, err
    printed = json.loads(out)
    assert printed.pop("schema_version") == 1
    assert _drop_timings(printed) == _drop_timings(_jsonable(study.payload))
    assert [s.scenarios for s in study.sections] == [("clusters.A.wan_gbit_s=1",
                                                      "clusters.A.wan_gbit_s=10")]


def test_solve_with_an_infeasible_budget_names_the_binding_limit() -> None:
    request = api.SolveRequest(instance_path=TWO, options=api.SolveOptions(budget_usd=1.0))
    with pytest.raises(InfeasibleError) as caught:
        api.solve(request)
    assert caught.value.binding == "budget_usd" and caught.value.exit_code == 1
    assert "budget" in caught.value.message and caught.value.hint


def test_solve_with_an_infeasible_energy_cap_names_it() -> None:
    request = api.SolveRequest(instance_path=TWO, metric="energy", max_energy_kwh=0.001)
    with pytest.raises(InfeasibleError) as caught:
        api.solve(request)
    assert caught.value.binding == "max_energy_kwh"


def test_solve_energy_frontier_is_nondominated_in_time_and_energy() -> None:
    solved = api.solve(api.SolveRequest(instance_path=TWO, metric="energy"))
    points = [(p.wall_time_s, p.energy_kwh) for p in solved.frontier.points]
    assert points == sorted(points) and len(points) >= 2
    assert all(a[1] > b[1] for a, b in zip(points, points[1:], strict=False))


def test_islands_writes_the_table(tmp_path: Path) -> None:
    out = tmp_path / "table.json"
    said: list[str] = []
    result = api.islands(api.IslandsRequest(instance_path=TWO, output_path=out), notify=said.append)
    assert result.written == out and said == [f"wrote {len(result.table)} rows (JSON) to {out}"]
    assert len(json.loads(out.read_text())) == len(result.table) > 0


@pytest.mark.parametrize(("make", "needle"), [
    (lambda: api.SolveOptions(solver="gurobi"), "solver"),
    (lambda: api.SolveOptions(milp_backend="glpk"), "milp_backend"),
    (lambda: api.SolveOptions(threads=0), "threads"),
    (lambda: api.SolveOptions(threads=True), "threads"),
    (lambda: api.SolveOptions(time_limit_s=-1.0), "time_limit_s"),
    (lambda: api.SolveOptions(budget_usd=math.nan), "budget_usd"),
    (lambda: api.SolveOptions(deadline_hours=math.inf), "deadline_hours"),
    (lambda: api.SolveRequest(instance_path=TWO, metric="money"), "metric"),
    (lambda: api.SolveRequest(instance_path=TWO, max_co2_kg=5.0), "max_co2_kg"),
    (lambda: api.SolveRequest(instance_path=TWO, metric="co2", max_co2_kg=0.0), "max_co2_kg"),
    (lambda: api.FrontierRequest(instance_paths=()), "instance_paths"),
    (lambda: api.FrontierRequest(instance_paths=(TWO,), objectives="cost,time"), "objectives"),
    (lambda: api.FrontierRequest(instance_paths=(TWO,), max_energy_kwh=-2.0), "max_energy_kwh"),
    (lambda: api.QueryRequest(instance_paths=(TWO,), objective="speed"), "objective"),
    (lambda: api.QueryRequest(instance_paths=(TWO,), min_throughput_fraction=1.5),
     "min_throughput_fraction"),
    (lambda: api.QueryRequest(instance_paths=(TWO,), min_throughput_fraction=0.0),
     "min_throughput_fraction"),
])
def test_requests_reject_bad_values(make: Any, needle: str) -> None:
    with pytest.raises(UserInputError, match=needle) as caught:
        make()
    assert isinstance(caught.value, ValueError) and caught.value.hint


def test_requests_are_frozen_keyword_only_and_documented() -> None:
    options = api.SolveOptions()
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.solver = "milp"  # type: ignore[misc]
    with pytest.raises(TypeError):
        api.SolveOptions("milp")  # type: ignore[misc]
    import inspect

    for cls in (api.SolveOptions, api.SolveRequest, api.FrontierRequest, api.QueryRequest,
                api.IslandsRequest, api.Solved, api.FrontierResult, api.PlanAnswer):
        assert cls.__dataclass_params__.frozen  # type: ignore[attr-defined]
        for f in dataclasses.fields(cls):
            assert f.kw_only, (cls.__name__, f.name)
        source = inspect.getsource(inspect.getmodule(cls))  # type: ignore[arg-type]
        tree = next(n for n in ast.walk(ast.parse(source))
                    if isinstance(n, ast.ClassDef) and n.name == cls.__name__)
        body = tree.body
        for i, node in enumerate(body):
            if isinstance(node, ast.AnnAssign):
                doc = body[i + 1] if i + 1 < len(body) else None
                assert isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant), (
                    f"{cls.__name__}.{ast.unparse(node.target)} has no docstring")


def test_energy_query_refuses_scenarios() -> None:
    request = api.QueryRequest(instance_paths=(TWO, FSDP), objective="energy")
    with pytest.raises(UserInputError, match="one instance without --vary"):
        api.query(request)
