"""`shardmeter init` (planner.model.starter): the starter instance it writes is valid (the instance
model loads it), plans (a real solve on its performance-model island table), and an existing file
is kept unless --force (exit 2 with a fix)."""

from __future__ import annotations

import json
from pathlib import Path

from planner.analysis.pareto import solve_instance
from planner.model.instance import load_instance
from planner.model.island_table import load_island_table
from planner.model.starter import starter_instance


def test_init_writes_a_valid_instance_that_plans(run_cli, tmp_path: Path) -> None:
    path = tmp_path / "sub" / "mine.yaml"
    result = run_cli("init", str(path))
    assert result.code == 0, result.err
    assert path.read_text() == starter_instance(str(path))
    assert str(path) in result.out
    instance = load_instance(path)
    assert {c.price is not None for c in instance.clusters} == {True}  # list prices
    problem, frontier = solve_instance(instance, load_island_table(instance))
    assert frontier.points and frontier.proven_exact
    assert problem.options
    answer = run_cli("plan", str(path), "--objective", "cost", "--format", "json")
    assert answer.code == 0, answer.err
    assert json.loads(answer.out)["cost_usd"] > 0


def test_every_setting_line_of_the_starter_is_commented() -> None:
    lines = [line for line in starter_instance("x.yaml").splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    bare = [line for line in lines if "#" not in line and not line.strip().startswith("-")
            and not line.rstrip().endswith(":")]
    assert len(bare) <= len(lines) // 3, bare  # most settings say what they are in place


def test_init_refuses_to_overwrite_without_force(run_cli, tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text("mine\n")
    result = run_cli("init", str(path))
    assert result.code == 2 and "To fix:" in result.err and "--force" in result.err
    assert path.read_text() == "mine\n"
    assert run_cli("init", str(path), "--force").code == 0
    assert path.read_text() == starter_instance(str(path))
    folder = run_cli("init", str(tmp_path))
    assert folder.code == 2 and "is a folder" in folder.err
