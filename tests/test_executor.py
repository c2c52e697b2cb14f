"""One executor for scenario sweeps and Monte Carlo grids (`planner.executor`, issue 27 item 7).

The same sweep and the same Monte Carlo grid give identical results serially, in joblib's local
process pool and on a real `dask.distributed.LocalCluster` (in-process workers reached over TCP,
so the `dask://HOST:PORT` path, the scheduler and the task transport are the real ones); bad specs,
a missing dask, an unreachable scheduler and a scheduler without workers exit 2 with a fix.
"""

from __future__ import annotations

import ast
import json
import logging
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from perfmodel.spec.errors import InfeasibleError, UserInputError
from planner import executor as ex
from planner.analysis.scenarios import parse_vary, scenarios_of, solve_all
from planner.executor import Executor, ExecutorError, parse_executor, run_tasks

distributed = pytest.importorskip("distributed")  # the [dask] extra (in [dev]: CI runs these)

ROOT = Path(__file__).resolve().parent.parent
TWO = ROOT / "instances" / "small-two-clusters.yaml"
VARY = "clusters.A.wan_gbit_s=1,10,100"


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A LocalCluster of two single-thread workers in this process, listening on TCP; yields its
    `dask://127.0.0.1:PORT` spec."""
    for name in ("distributed", "tornado"):
        logging.getLogger(name).setLevel(logging.ERROR)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  protocol="tcp", host="127.0.0.1",
                                  dashboard_address=":0") as local:
        yield "dask://" + local.scheduler_address.removeprefix("tcp://")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ---- parsing ------------------------------------------------------------------------------------


def test_specs_parse_and_print_back() -> None:
    assert parse_executor(None) == Executor(kind="local")
    assert parse_executor("serial").spec == "serial"
    assert parse_executor(" local:3 ") == Executor(kind="local", processes=3)
    spec = parse_executor("dask://10.0.0.5:8786")
    assert spec.address == "tcp://10.0.0.5:8786" and spec.spec == "dask://10.0.0.5:8786"
    assert parse_executor("dask://[::1]:8786").address == "tcp://[::1]:8786"
    assert spec.parallel(1) and not parse_executor("serial").parallel(8)
    assert not parse_executor("local:4").parallel(1)  # one task runs here, not in a pool


@pytest.mark.parametrize(("text", "said", "fix"), [
    ("locl", "not one of serial, local", "did you mean 'local'"),
    ("local:0", "process count '0'", "local:N with N >= 1"),
    ("local:two", "process count 'two'", "local:N with N >= 1"),
    ("dask://scheduler", "not one of", "dask://HOST:PORT"),
    ("dask://scheduler:99999", "port 99999", "8786"),
    ("tcp://scheduler:8786", "not one of", "dask://HOST:PORT"),
])
def test_bad_spec_names_the_value_and_the_fix(text: str, said: str, fix: str) -> None:
    with pytest.raises(ExecutorError) as caught:
        parse_executor(text)
    assert said in caught.value.message and repr(text) in caught.value.message
    assert fix in (caught.value.hint or "")
    assert caught.value.exit_code == 2


def test_cli_refuses_a_bad_spec_and_a_single_solve(run_cli) -> None:
    result = run_cli("pareto", str(TWO), "--vary", VARY, "--executor", "dask:/x:1")
    assert result.code == 2 and "--executor = 'dask:/x:1'" in result.err
    assert "To fix:" in result.err and "Traceback" not in result.err
    result = run_cli("plan", str(TWO), "--executor", "local")
    assert result.code == 2 and "one solve" in result.err
    assert "To fix: drop --executor" in result.err


# ---- the same results on every executor ----------------------------------------------------------


def _failing(value: int) -> int:
    if value == 2:
        raise InfeasibleError(f"task {value} has no plan", binding="limits.budget_usd",
                              hint="raise the budget.")
    if value == 3:
        raise UserInputError(f"task {value} is malformed", hint="fix it.")
    return value * value


@pytest.mark.parametrize("spec", ["serial", "local:2", "dask"])
def test_results_in_task_order_and_errors_keep_their_class(spec: str, request) -> None:
    """Results come back in task order; the first failed task's error (in task order) is raised
    again with its class, fields and exit code, though it does not pickle as it is."""
    spec = request.getfixturevalue("cluster") if spec == "dask" else spec
    assert run_tasks(_failing, [(v,) for v in (5, 1, 4, 0)], spec) == [25, 1, 16, 0]
    with pytest.raises(InfeasibleError) as caught:
        run_tasks(_failing, [(1,), (2,), (3,)], spec)
    err = caught.value
    assert (err.message, err.binding, err.hint, err.exit_code) == (
        "task 2 has no plan", "limits.budget_usd", "raise the budget.", 1)
    assert str(err) == "task 2 has no plan\nTo fix: raise the budget."
    with pytest.raises(UserInputError, match="task 3 is malformed"):
        run_tasks(_failing, [(1,), (3,), (2,)], spec)
    assert run_tasks(_failing, [], spec) == []


def _frontiers(results: list[Any]) -> list[Any]:
    """What a sweep answers: per scenario its name, error and frontier (islands, W, C)."""
    return [(r.instance_path, r.scenario.name, r.error,
             [(p.islands, p.wall_time_s, p.cost_usd) for p in r.points]) for r in results]


def test_scenario_sweep_is_identical_on_every_executor(cluster: str) -> None:
    scenarios = scenarios_of([parse_vary(VARY), parse_vary("limits.max_islands=1,2")])
    serial = _frontiers(solve_all([str(TWO)], scenarios, {"solver": "dp"}, executor="serial"))
    assert len(serial) == 6 and all(points for *_, points in serial)
    assert len({str(points) for *_, points in serial}) > 1  # the scenarios differ
    for spec in ("local:2", cluster):
        got = _frontiers(solve_all([str(TWO)], scenarios, {"solver": "dp"}, executor=spec))
        assert got == serial, spec


def _without_timings(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_timings(v) for k, v in value.items() if k != "solve_time_s"}
    if isinstance(value, list):
        return [_without_timings(v) for v in value]
    return value


def test_cli_study_on_a_dask_cluster_equals_the_local_one(run_cli, cluster: str) -> None:
    """`plan --vary ... --executor dask://HOST:PORT --format json`: the same document (but the
    solve times) as the default local pool."""
    args = ("plan", str(TWO), "--vary", VARY, "--objective", "cost", "--format", "json")
    local = run_cli(*args)
    remote = run_cli(*args, "--executor", cluster)
    assert local.code == 0 and remote.code == 0, remote.err
    assert _without_timings(json.loads(remote.out)) == _without_timings(json.loads(local.out))


def test_monte_carlo_grid_is_identical_on_every_executor(cluster: str) -> None:
    """The failure simulation's grid of docs/RELIABILITY.md (`scripts.make_reliability.mc_row`,
    each point with its own seed), on its two quickest points: the same rows everywhere."""
    from scripts.make_reliability import MC_GRID, mc_row

    grid = sorted(MC_GRID, key=lambda g: g[1])[1:]  # MTBF 6 h and 24 h: ~0.3 s together
    serial = run_tasks(mc_row, grid, "serial")
    assert len(serial) == 2 and all(float(row[4]) > float(row[0]) for row in serial)
    assert run_tasks(mc_row, grid, "local:2") == serial
    assert run_tasks(mc_row, grid, cluster) == serial


# ---- a cluster that cannot run -------------------------------------------------------------------


def test_unreachable_scheduler_exits_2_with_the_address_in_bounded_time(
        run_cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ex, "CONNECT_TIMEOUT_S", 1.0)
    spec = f"dask://127.0.0.1:{_free_port()}"
    start = time.monotonic()
    result = run_cli("pareto", str(TWO), "--vary", VARY, "--executor", spec)
    assert time.monotonic() - start < 8
    assert result.code == 2 and "Traceback" not in result.err
    assert f"cannot reach the dask scheduler at tcp://{spec.removeprefix('dask://')}" in result.err
    assert "To fix: start it there (`dask scheduler --port" in result.err


def test_scheduler_without_workers_is_refused_in_bounded_time() -> None:
    with distributed.LocalCluster(n_workers=0, processes=False, protocol="tcp",
                                  host="127.0.0.1", dashboard_address=":0") as empty:
        spec = parse_executor("dask://" + empty.scheduler_address.removeprefix("tcp://"))
        start = time.monotonic()
        with pytest.raises(ExecutorError, match="has no worker") as caught:
            ex.connect(spec, timeout_s=0.5)
        assert time.monotonic() - start < 5
        assert "dask worker tcp://127.0.0.1" in (caught.value.hint or "")


def test_missing_dask_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)  # as if not installed
    with pytest.raises(ExecutorError) as caught:
        run_tasks(abs, [(-1,)], "dask://127.0.0.1:8786")
    assert "needs dask.distributed, which is not installed" in caught.value.message
    assert (caught.value.hint or "").startswith("pip install 'shardmeter[dask]'")
    assert run_tasks(abs, [(-2,), (3,)], "serial") == [2, 3]  # everything else still runs


def _top_level_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in tree.body:  # module level only: an import inside a function is lazy
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def test_no_library_module_imports_dask_at_import_time(tmp_path: Path) -> None:
    """The light planner imports without the [dask] extra: no module of perfmodel or planner
    imports dask or distributed at module level (planner.executor imports it when asked)."""
    files = sorted((ROOT / "perfmodel").rglob("*.py")) + sorted((ROOT / "planner").rglob("*.py"))
    assert len(files) > 50
    eager = [str(f.relative_to(ROOT)) for f in files
             if _top_level_imports(f) & {"dask", "distributed"}]
    assert eager == []
    probe = tmp_path / "probe.py"  # the scan sees eager imports and skips lazy ones
    probe.write_text("import dask.array\nfrom os import path\ndef f():\n    import distributed\n")
    assert _top_level_imports(probe) == {"dask", "os"}


def test_generators_refuse_a_bad_spec_with_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m scripts.make_case_study --executor ...` (and make_reliability) check the spec
    before any work: argparse's exit 2 with the message and its fix, no traceback."""
    import argparse

    built: list[str] = []
    parser = argparse.ArgumentParser(prog="make_x")
    with pytest.raises(SystemExit) as caught:
        ex.run_or_exit(parser, built.append, "local:-1")
    assert caught.value.code == 2 and built == []
    err = capsys.readouterr().err
    assert "make_x: error: --executor = 'local:-1'" in err and "To fix: write local:N" in err
    assert ex.run_or_exit(parser, lambda spec: spec, None) == "local"
