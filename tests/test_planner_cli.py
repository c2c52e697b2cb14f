"""End-to-end CLI runs on the shipped small instances (`instances/small-*.yaml`)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parent.parent
SMALL = sorted((ROOT / "instances").glob("small-*.yaml"))
TWO = ROOT / "instances" / "small-two-clusters.yaml"


def test_every_shipped_instance_loads() -> None:
    """The small instances the tests below run are the ones shipped, and every file in
    instances/ validates (a broken shipped instance fails here, not in a user's hands)."""
    from planner.model.instance import load_instance

    assert [p.stem for p in SMALL] == ["small-fsdp", "small-two-clusters"]
    for path in sorted((ROOT / "instances").glob("*.yaml")):
        instance = load_instance(path)
        assert instance.clusters, path


@pytest.mark.parametrize("instance", SMALL, ids=lambda p: p.stem)
def test_pareto_json_has_required_keys(instance: Path, run_cli) -> None:
    code, out, err = run_cli("pareto", str(instance), "--format", "json")
    assert code == 0, err
    document = json.loads(out)
    assert document["schema_version"] == 1
    points = document["frontier"]
    assert isinstance(points, list) and points
    for point in points:
        assert {"wall_time_s", "cost_usd", "tokens_per_s", "islands", "proven_exact"} <= set(point)
        assert point["proven_exact"] is True
        for island in point["islands"]:
            assert (
                {"cluster", "nodes", "gpus_per_node", "micro_batch", "accum_steps"}
                <= set(island)
            )
    walls = [p["wall_time_s"] for p in points]
    costs = [p["cost_usd"] for p in points]
    assert walls == sorted(walls) and costs == sorted(costs, reverse=True)


def test_pareto_writes_csv_and_both_plots(tmp_path: Path, run_cli) -> None:
    csv, png = tmp_path / "frontier.csv", tmp_path / "frontier.png"
    code, out, err = run_cli("pareto", str(TWO), "-o", str(csv), "--plot", str(png))
    assert code == 0, err
    assert "Pareto frontier" in out
    second = tmp_path / "frontier_throughput.png"
    for path in (png, second):
        assert path.stat().st_size > 1000 and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    frame = pd.read_csv(csv)
    assert (
        {"wall_time_s", "cost_usd", "tokens_per_s", "cluster", "provider"} <= set(frame.columns)
        and len(frame) >= 1
    )


@pytest.mark.parametrize("solver", ["milp", "brute", "heuristic"])
def test_pareto_other_solvers_csv(solver: str, run_cli) -> None:
    code, out, err = run_cli("pareto", str(TWO), "--solver", solver, "--format", "csv")
    assert code == 0, err
    assert out.splitlines()[0].startswith("point,wall_time_h")


def test_exact_solvers_agree_through_cli(run_cli) -> None:
    fronts = {}
    for solver in ("cpsat", "milp", "brute"):
        code, out, err = run_cli("pareto", str(TWO), "--solver", solver, "--format", "json")
        assert code == 0, err
        fronts[solver] = [(p["wall_time_s"], p["cost_usd"])
                          for p in json.loads(out)["frontier"]]
    assert fronts["cpsat"] == fronts["milp"] == fronts["brute"]


@pytest.mark.parametrize(
    ("args", "key"),
    [
        (["--objective", "time"], "fastest"),
        (["--objective", "cost"], "cheapest"),
        (["--min-throughput-fraction", "0.9"], "cheapest with tokens/s"),
    ],
)
def test_plan_queries(args: list[str], key: str, run_cli) -> None:
    code, out, err = run_cli("plan", str(TWO), *args, "--format", "json")
    assert code == 0, err
    record = json.loads(out)
    assert record["query"].startswith(key)
    assert {"wall_time_s", "cost_usd", "tokens_per_s", "islands"} <= set(record)
    if "min-throughput" in args[0]:
        assert record["saving_pct_vs_fastest"] >= 0
        assert record["tokens_per_s"] >= 0.9 * record["fastest_tokens_per_s"]


def test_plan_fsdp_is_one_island(run_cli) -> None:
    code, out, err = run_cli(
        "plan", str(ROOT / "instances" / "small-fsdp.yaml"), "--format", "json"
    )
    assert code == 0, err
    record = json.loads(out)
    assert record["num_islands"] == 1 and record["sync_s"] == 0


def test_budget_too_small_exits_1(run_cli) -> None:
    code, _, err = run_cli("plan", str(TWO), "--budget-usd", "1")
    assert code == 1
    assert "budget" in err and "cheapest plan" in err and "To fix:" in err


def test_islands_copies_the_validated_table(tmp_path: Path, run_cli) -> None:
    out_csv = tmp_path / "islands.csv"
    code, _, err = run_cli("islands", str(TWO), "-o", str(out_csv))
    assert code == 0, err
    written = pd.read_csv(out_csv)
    original = pd.read_csv(ROOT / "instances" / "tables" / "small-two-clusters.csv")
    pd.testing.assert_frame_equal(written, original, check_dtype=False)


def test_islands_view_is_a_table_per_cluster_within_80_columns(run_cli, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """`islands` without -o prints, per cluster, its GPU, one price per GPU-hour (when every row
    has the same) and its rows in the compact view, each a table line within 80 columns;
    --wide keeps every column of the table, and -o refuses --wide (the file has them all)."""
    monkeypatch.setenv("COLUMNS", "80")
    table = pd.read_csv(ROOT / "instances" / "tables" / "small-two-clusters.csv")
    code, out, err = run_cli("islands", str(TWO))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"island table: {len(table)} rows over {table['cluster'].nunique()} clusters"
    assert max(len(line) for line in lines) <= 80
    for cluster, rows in table.groupby("cluster"):
        rate = rows["usd_per_hour"] / (rows["nodes"] * rows["gpus_per_node"])
        heading = next(line for line in lines if line.startswith(f"{cluster}: "))
        assert rows["gpu_type"].iloc[0] in heading and f"{len(rows)} row" in heading
        assert ("/GPU-h" in heading) == (rate.round(9).nunique() == 1)
    body = [line for line in lines if line[:1].isdigit()]
    assert len(body) == len(table)  # one table line per row, not one line per cell
    code, wide, err = run_cli("islands", str(TWO), "--wide")
    assert code == 0, err
    assert "microstep_s" in wide and "usd_per_hour" in wide  # every column, by its name
    code, _, err = run_cli("islands", str(TWO), "-o", "x.csv", "--wide")
    assert code == 2 and "--wide" in err


def test_a_table_too_wide_to_fold_prints_records(capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """`emit_table` of more columns than 80 columns can hold (each at its longest word) prints
    one 'header  value' line per cell instead of folding every column to a character."""
    from planner.cli.common import emit_table

    monkeypatch.setenv("COLUMNS", "80")
    frame = pd.DataFrame([{f"column_{i:02d}": f"value-{i}" for i in range(12)}] * 2)
    emit_table(frame, title="wide")
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "wide" and out[1].split() == ["column_00", "value-0"]
    assert max(len(line) for line in out) <= 80 and out.count("") == 1  # two records
    emit_table(frame.iloc[:, :3], title="narrow")  # fits: rich's own table
    assert "┃" in capsys.readouterr().out


def test_long_headers_fold_but_values_stay_whole(capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A table whose headers, not values, overflow 80 columns stays a table within 80 columns:
    headers fold, every value stands whole on one line."""
    from planner.cli.common import emit_table

    monkeypatch.setenv("COLUMNS", "80")
    values = {f"a_rather_long_header_{i}": f"{i + 1}.234" for i in range(7)}
    values["model"] = "Mistral-7B-v0.1"
    emit_table(pd.DataFrame([values]), title="t")
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) <= 80
    row = next(line for line in lines if "Mistral-7B-v0.1" in line)
    assert all(v in row for v in values.values())
