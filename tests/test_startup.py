"""Fast answers (issue 29 item 6): start-up of the light commands and infeasible queries.

The wall times themselves are measured by benchmarks/bench_startup.py (machine-dependent, so not
tests); these tests hold what made them slow: the fitting libraries imported by every command,
the strict parse of every shipped profile on each `default_profile` call, and infeasible plans
searched with caps no plan meets, then explained with CP-SAT where the DP applies.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from perfmodel.profiles import profile as profile_mod
from perfmodel.profiles.profile import default_profile, load_profile
from perfmodel.spec.errors import InfeasibleError, ProfileError
from perfmodel.spec.paths import REPO_ROOT
from planner.analysis import pareto
from planner.analysis.pareto import compute_frontier, solve_instance
from planner.model.evaluate import build_problem
from planner.model.instance import Instance, load_instance
from planner.model.island_table import load_island_table
from planner.model.problem import Problem
from planner.solvers.dp import plan_lower_bounds

HEAVY = ("pandas", "scipy", "sklearn", "matplotlib", "ortools", "torch")
"""Libraries a single prediction does not need (only fits, sweeps, plots and solvers do)."""


def test_predict_imports_no_fitting_library() -> None:
    # a fresh process, as a user runs it: the command's output and the modules it loaded
    probe = ("import sys\nfrom planner.cli import main\n"
             "sys.argv = ['shardmeter', 'predict', 'Llama-3-8B', '--gpu', 'H100-SXM5-80GB',"
             " '--seq-len', '8192']\n"
             "try:\n    main()\nexcept SystemExit as e:\n    code = e.code\n"
             f"print('LOADED', sorted(m for m in {HEAVY!r} if m in sys.modules),"
             " file=sys.stderr)\n")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "COLUMNS": "80"}
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, check=False, timeout=60)
    assert "Llama-3-8B on 8 x H100-SXM5-80GB" in done.stdout, done.stderr
    assert "LOADED []" in done.stderr, done.stderr


def test_declared_prefilter_picks_as_a_full_parse(
        tmp_catalogs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the pick over pre-filtered files equals the pick when every file is parsed strictly (the
    # behaviour before the pre-filter: `_declared` answering None for every file)
    gpus = sorted({load_profile(str(f)).hardware
                   for f in (tmp_catalogs / "profiles").glob("*.yaml")})
    filtered = {gpu: default_profile(gpu).name for gpu in gpus}
    monkeypatch.setattr(profile_mod, "_declared", lambda path, mtime_ns: None)
    assert filtered == {gpu: default_profile(gpu).name for gpu in gpus}
    assert filtered["H100-SXM5-80GB"] == "H100-SXM5-80GB-calibrated"


def test_prefilter_skips_other_gpus_and_still_reports_broken_files(tmp_catalogs: Path) -> None:
    folder = tmp_catalogs / "profiles"
    # invalid for its schema but declaring another GPU: skipped without a strict parse
    doc = yaml.safe_load((folder / "L40S-prior.yaml").read_text())
    doc["comm"][0]["bandwidth_bytes_per_s"] = -1
    (folder / "l40s-broken.yaml").write_text(yaml.safe_dump(doc))
    assert default_profile("H100-SXM5-80GB").name == "H100-SXM5-80GB-calibrated"
    # the same file for the GPU asked for is parsed and its error named
    with pytest.raises(ProfileError, match=r"comm\.0\.bandwidth_bytes_per_s"):
        default_profile("L40S")
    (folder / "l40s-broken.yaml").unlink()
    # a broken file of the GPU asked for but of a less trusted provenance than another: skipped
    doc = yaml.safe_load((folder / "H100-SXM5-80GB-prior.yaml").read_text())
    doc["comm"][0]["bandwidth_bytes_per_s"] = -1
    (folder / "h100-broken-prior.yaml").write_text(yaml.safe_dump(doc))
    assert default_profile("H100-SXM5-80GB").name == "H100-SXM5-80GB-calibrated"
    (folder / "h100-broken-prior.yaml").unlink()
    # a duplicate `hardware` key cannot be read cheaply: the strict parse reports it
    text = (folder / "B200-prior.yaml").read_text()
    (folder / "zz-dup.yaml").write_text(text + "hardware: L40S\n")
    with pytest.raises(ProfileError, match="duplicate key 'hardware'"):
        default_profile("H100-SXM5-80GB")


def test_declared_scalars_do_not_expand_aliases(tmp_path: Path) -> None:
    # an alias bomb is composed as shared nodes, never expanded; its hardware is still read
    bomb = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    bomb += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 12)]
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(["hardware: L40S", "provenance: prior", *bomb]) + "\n")
    assert profile_mod._declared(str(path), path.stat().st_mtime_ns) == ("l40s", "prior")
    path.write_text("{hardware: [1, 2], provenance: prior}\n")
    assert profile_mod._declared(str(path), path.stat().st_mtime_ns) is None


# ---- infeasible queries: bound before searching ------------------------------------------

def _problem(name: str) -> tuple[Instance, pd.DataFrame, Problem]:
    instance = load_instance(REPO_ROOT / "instances" / f"{name}.yaml")
    table = load_island_table(instance)
    return instance, table, build_problem(instance, table)


@pytest.mark.parametrize("name", ["small-two-clusters", "small-fsdp"])
def test_plan_lower_bounds_hold_on_shipped_instances(name: str) -> None:
    _, _, problem = _problem(name)
    wall_s, cost = plan_lower_bounds(problem)
    points = compute_frontier(problem).points
    assert 0 < wall_s <= min(p.wall_time_s for p in points)
    assert 0 < cost <= min(p.cost_usd for p in points)


def test_impossible_caps_are_refused_without_a_capped_search(
        monkeypatch: pytest.MonkeyPatch) -> None:
    instance, table, problem = _problem("small-two-clusters")
    wall_s, cost = plan_lower_bounds(problem)
    fastest_s = min(p.wall_time_s for p in compute_frontier(problem).points)
    searched: list[tuple[float | None, float | None]] = []
    feasibility_solves: list[Problem] = []
    real_frontier, real_feasible = pareto.compute_frontier, pareto.batch_feasible

    def frontier(problem: Problem, **kw: Any) -> Any:
        searched.append((problem.deadline_s, problem.budget_usd))
        return real_frontier(problem, **kw)

    def feasible(problem: Problem, *args: Any) -> Any:
        feasibility_solves.append(problem)
        return real_feasible(problem, *args)

    monkeypatch.setattr(pareto, "compute_frontier", frontier)
    monkeypatch.setattr(pareto, "batch_feasible", feasible)
    with pytest.raises(InfeasibleError, match="deadline") as err:
        solve_instance(instance, table, deadline_hours=0.5 * wall_s / 3600)
    # one search, uncapped (the explanation's), and its fastest plan is the fix
    assert searched == [(None, None)] and not feasibility_solves
    assert f"allow at least {fastest_s / 3600:.6g} hours" in str(err.value)
    searched.clear()
    with pytest.raises(InfeasibleError, match="budget"):
        solve_instance(instance, table, budget_usd=0.5 * cost)
    assert searched == [(None, None)] and not feasibility_solves
    # a cap above the bound is searched as before, then explained the same way
    searched.clear()
    with pytest.raises(InfeasibleError, match="deadline"):
        solve_instance(instance, table, deadline_hours=0.5 * (wall_s + fastest_s) / 3600)
    assert searched[0][0] is not None and searched[1:] == [(None, None)]
