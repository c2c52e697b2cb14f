"""Regression tests of issue 12's reproducers: no traceback, no silent wrong answer, clear messages.

Each test runs the real CLI in-process (`run_cli`) on the real shipped files or small copies of
them with one thing broken, and checks the error contract: user mistakes exit 2 naming the
file/field/value with a "To fix:" line, infeasible plans exit 1, nothing prints a traceback.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from perfmodel.spec.errors import ProfileError, UserInputError
from perfmodel.spec.paths import catalog_dir

ROOT = Path(__file__).resolve().parent.parent
INSTANCES = ROOT / "instances"
TWO = INSTANCES / "small-two-clusters.yaml"
FSDP = INSTANCES / "small-fsdp.yaml"
DATA = Path(__file__).parent / "data"
PREDICT = ["predict", "tiny-llama", "--gpu", "H100-SXM5-80GB", "--seq-len", "128"]


def user_error(result: Any, *needles: str) -> str:
    """Assert the user-error contract; return stderr."""
    assert result.code == 2, (result.code, result.out, result.err)
    assert "Traceback" not in result.err and "internal error" not in result.err, result.err
    assert "To fix:" in result.err, result.err
    for needle in needles:
        assert needle in result.err, (needle, result.err)
    return result.err


def copy_instance(tmp_path: Path, source: Path = TWO) -> tuple[Path, dict[str, Any], Path | None]:
    """A copy of a shipped instance (and its island table) that a test may edit."""
    doc = yaml.safe_load(source.read_text())
    table = None
    if doc.get("islands_table"):
        table = tmp_path / "table.csv"
        shutil.copy(source.parent / doc["islands_table"], table)
        doc["islands_table"] = table.name
    return tmp_path / "instance.yaml", doc, table


def write_instance(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


# ---- tracebacks that were ---------------------------------------------------------------------

@pytest.mark.parametrize("argv", [
    ["simulate", "tiny-llama", "--gpu", "H100-SXM5-80GB", "--seq-len", "128", "--plot"],
    ["sweep", "tiny-llama", "--gpu", "H100-SXM5-80GB", "--seq-len", "128", "--plot"],
    ["streaming", "--example", "B", "--plot"],
    ["pareto", str(TWO), "--plot"],
])
def test_plot_with_unsupported_extension_lists_supported(
    run_cli, tmp_path: Path, argv: list[str]
) -> None:
    err = user_error(run_cli(*argv, str(tmp_path / "figure.txt")), "'txt'", "png", "svg", "--plot")
    assert not (tmp_path / "figure.txt").exists() and "supported" in err


def test_outputs_into_missing_folders_are_created(run_cli, tmp_path: Path) -> None:
    table = tmp_path / "new" / "dir" / "islands.csv"
    assert run_cli("islands", str(FSDP), "-o", str(table)).code == 0 and table.is_file()
    plot = tmp_path / "other" / "frontier.png"
    result = run_cli("pareto", str(FSDP), "--plot", str(plot), "--format", "json")
    assert result.code == 0, result.err
    assert plot.is_file() and (plot.parent / "frontier_throughput.png").is_file()


def test_output_that_is_a_directory_is_refused(run_cli, tmp_path: Path) -> None:
    user_error(run_cli("islands", str(FSDP), "-o", str(tmp_path)), "directory")


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "NaN"])
def test_non_finite_floats_are_usage_errors(run_cli, value: str) -> None:
    user_error(run_cli("streaming", "--example", "B", "--wan-gbit-s", value), "--wan-gbit-s",
               "finite")
    user_error(run_cli(*PREDICT, "--strategy", "diloco", "--wan-gbit-s", value), "--wan-gbit-s")
    user_error(run_cli("plan", str(TWO), "--budget-usd", value), "--budget-usd")


def test_space_that_is_a_directory(run_cli, tmp_path: Path) -> None:
    user_error(run_cli("bench", "compute", "--space", str(tmp_path), "-o", str(tmp_path / "o.csv"),
                       "--dry-run"), str(tmp_path), "directory")


def _no_torchrun(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if a benchmark launches torchrun (everything must be checked before)."""
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"torchrun was launched: {args}")

    monkeypatch.setattr(subprocess, "run", refuse)


@pytest.mark.torch
@pytest.mark.parametrize(("flags", "needle"), [
    (["--min-mib", "10", "--max-mib", "1"], "10.0-1.0 MiB"),
    (["--min-mib", "-1"], "-1.0"),
    (["--points", "0"], "0 points"),
    (["--dtype", "int3"], "int3"),
    (["--nproc", "0"], "--nproc"),
    (["--threads", "0"], "--threads"),
    (["--ops", "all_gathr"], "all_gathr"),
])
def test_bench_comm_validates_before_torchrun(
    run_cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flags: list[str], needle: str
) -> None:
    pytest.importorskip("torch")
    _no_torchrun(monkeypatch)
    user_error(run_cli("bench", "comm", "-o", str(tmp_path / "comm.csv"), *flags), needle)


@pytest.mark.torch
def test_bench_comm_refuses_a_csv_of_another_benchmark(run_cli, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    _no_torchrun(monkeypatch)
    other = tmp_path / "compute.csv"
    shutil.copy(DATA / "perf" / "compute_small.csv", other)
    user_error(run_cli("bench", "comm", "-o", str(other)), str(other), "header")


FSDP_SPACE = """seq_len: 16
micro_batches: [1]
grad_accum: [1]
shapes:
  - {model: tiny-llama, name: t}
"""


@pytest.mark.torch
@pytest.mark.parametrize(("edit", "needle"), [
    (("micro_batches: [1]", "micro_batches: [0]"), "micro_batches"),
    (("micro_batches: [1]", "micro_batches: [true]"), "micro_batches"),
    (("grad_accum: [1]", "grad_accum: []"), "grad_accum"),
    (("shapes:\n  - {model: tiny-llama, name: t}", "shapes: []"), "'shapes' is empty"),
    (("seq_len: 16", "seq_len: 16\nseqlen: 32"), "unknown key 'seqlen'"),
    (("name: t}", "name: t, hiden_size: 8}"), "hiden_size"),
])
def test_bench_fsdp_validates_the_space_before_torchrun(run_cli, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        edit: tuple[str, str], needle: str) -> None:
    pytest.importorskip("torch")
    _no_torchrun(monkeypatch)
    space = tmp_path / "space.yaml"
    assert edit[0] in FSDP_SPACE
    space.write_text(FSDP_SPACE.replace(*edit))
    user_error(run_cli("bench", "fsdp", "--space", str(space), "-o", str(tmp_path / "f.csv")),
               str(space), needle)


@pytest.mark.torch
def test_bench_fsdp_refuses_a_csv_of_another_benchmark(run_cli, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    _no_torchrun(monkeypatch)
    space, other = tmp_path / "space.yaml", tmp_path / "comm.csv"
    space.write_text(FSDP_SPACE)
    shutil.copy(DATA / "perf" / "comm_small.csv", other)
    user_error(
        run_cli("bench", "fsdp", "--space", str(space), "-o", str(other)), str(other), "header"
    )


# ---- wrong answers that were ------------------------------------------------------------------

@pytest.mark.parametrize("price", [0.5, 100])  # 0 is refused by the schema (issue 30)
def test_instance_price_contradicting_the_table_is_refused(
    run_cli, tmp_path: Path, price: float
) -> None:
    path, doc, table = copy_instance(tmp_path)
    doc["clusters"][0]["price_usd_per_gpu_hour"] = price
    err = user_error(run_cli("plan", str(write_instance(path, doc))), str(table), "usd_per_hour")
    assert "line 2" in err


def test_table_prices_the_islands_when_the_instance_gives_no_price(run_cli, tmp_path: Path) -> None:
    shipped = json.loads(run_cli("plan", str(TWO), "--format", "json").out)
    path, doc, _ = copy_instance(tmp_path)
    for cluster in doc["clusters"]:
        del cluster["price_usd_per_gpu_hour"]
    result = run_cli("plan", str(write_instance(path, doc)), "--format", "json")
    assert result.code == 0, result.err
    assert json.loads(result.out)["cost_usd"] == pytest.approx(shipped["cost_usd"], rel=1e-12)


@pytest.mark.parametrize(("column", "value", "needle"), [
    ("gpu_type", "A100-SXM4-80GB", "has gpu 'H200-SXM-141GB'"),
    ("nodes", "3", "only 2 nodes"),
    ("memory_gib", "150", "141"),
    ("gpus_per_node", "16", "8 GPUs per node"),
])
def test_table_rows_are_checked_against_their_cluster(
    run_cli, tmp_path: Path, column: str, value: str, needle: str
) -> None:
    path, doc, table = copy_instance(tmp_path)
    assert table is not None
    lines = table.read_text().splitlines()
    header = lines[0].split(",")
    cells = lines[1].split(",")
    cells[header.index(column)] = value
    if column in ("nodes", "gpus_per_node"):  # keep the row's price consistent with its size
        nodes, gpn = int(cells[header.index("nodes")]), int(cells[header.index("gpus_per_node")])
        cells[header.index("usd_per_hour")] = f"{3.59 * nodes * gpn:.2f}"
    lines[1] = ",".join(cells)
    table.write_text("\n".join(lines) + "\n")
    user_error(
        run_cli("islands", str(write_instance(path, doc))), str(table), "line 2", column, needle
    )


@pytest.mark.parametrize(("where", "key", "value"), [
    ("training", "seq_len", True),
    ("training", "global_batch_seqs", False),
    ("cluster", "price_usd_per_gpu_hour", True),
    ("cluster", "wan_latency_ms", True),
    ("cluster", "allowed_gpus_per_node", [True]),
    ("cluster", "num_nodes", float("nan")),
    ("cluster", "wan_gbit_s", float("inf")),
])
def test_booleans_and_non_finite_numbers_in_instances(run_cli, tmp_path: Path, where: str, key: str,
                                                      value: Any) -> None:
    path, doc, _ = copy_instance(tmp_path)
    target = doc["training"] if where == "training" else doc["clusters"][0]
    target[key] = value
    user_error(run_cli("islands", str(write_instance(path, doc))), str(path), key)


def test_gpus_per_node_above_the_node_type(run_cli, tmp_path: Path) -> None:
    path, doc, _ = copy_instance(tmp_path)
    doc["clusters"][1]["gpus_per_node"] = 16
    user_error(run_cli("plan", str(write_instance(path, doc))), str(path),
               "clusters[1].gpus_per_node", "at most 8")


@pytest.mark.parametrize(("field", "value", "needle"), [
    ("model", "abc", "'abc'"),
    ("gpu", "H201", "did you mean"),
])
def test_unknown_names_in_instances_name_the_file(run_cli, tmp_path: Path, field: str, value: str,
                                                  needle: str) -> None:
    path, doc, _ = copy_instance(tmp_path)
    if field == "model":
        doc["model"] = value
    else:
        doc["clusters"][0]["gpu"] = value
    user_error(run_cli("islands", str(write_instance(path, doc))), str(path), field, needle)


def test_malformed_as_of_names_the_file(run_cli, tmp_path: Path) -> None:
    doc = yaml.safe_load((INSTANCES / "multi-cloud.yaml").read_text())
    doc["clusters"][0]["price"]["as_of"] = "2026-13-45"
    path = write_instance(tmp_path / "mc.yaml", doc)
    user_error(run_cli("islands", str(path)), str(path), "as_of", "2026-13-45")


def test_cluster_deleted_while_the_table_uses_it(run_cli, tmp_path: Path) -> None:
    path, doc, table = copy_instance(tmp_path)
    doc["clusters"] = doc["clusters"][:1]
    user_error(run_cli("islands", str(write_instance(path, doc))), str(table), str(path.resolve()),
               "'B'")


def test_empty_island_table_exits_2_naming_the_file(run_cli, tmp_path: Path) -> None:
    path, doc, table = copy_instance(tmp_path)
    assert table is not None
    table.write_text(table.read_text().splitlines()[0] + "\n")
    user_error(run_cli("plan", str(write_instance(path, doc))), str(table), "no rows")


def test_island_table_path_that_is_a_directory(run_cli, tmp_path: Path) -> None:
    path, doc, _ = copy_instance(tmp_path)
    (tmp_path / "tables").mkdir()
    doc["islands_table"] = "tables"
    user_error(run_cli("islands", str(write_instance(path, doc))), "is a directory")


def test_profile_with_empty_forward_coefficients(tmp_path: Path) -> None:
    from perfmodel.profiles.profile import load_profile

    doc = yaml.safe_load((catalog_dir() / "profiles" / "cpu-x86-2core.yaml").read_text())
    doc["compute"]["forward"]["coefficients_s"] = {}
    path = tmp_path / "empty.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ProfileError, match="compute.forward: no positive coefficient"):
        load_profile(str(path))


def test_profile_with_boolean_coefficient(tmp_path: Path) -> None:
    from perfmodel.profiles.profile import load_profile

    doc = yaml.safe_load((catalog_dir() / "profiles" / "cpu-x86-2core.yaml").read_text())
    name = next(iter(doc["compute"]["forward"]["coefficients_s"]))
    doc["compute"]["forward"]["coefficients_s"][name] = True
    path = tmp_path / "bool.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ProfileError, match="coefficients_s"):
        load_profile(str(path))


def test_fit_negative_tolerance(run_cli, tmp_path: Path) -> None:
    user_error(
        run_cli(
            "fit", "compute", str(DATA / "perf" / "compute_small.csv"), "-o",
            str(tmp_path / "p.yaml"), "--hardware", "CPU-x86-2core", "--tolerance", "-1",
        ),
        "--tolerance",
    )


SPACE = (catalog_dir() / "spaces" / "cpu.yaml").read_text()


@pytest.mark.parametrize(("edit", "needle"), [
    (("name: cpu", "name: cpu\nmax_micro_batchs: 8"), "unknown key 'max_micro_batchs'"),
    (("num_key_value_heads: {min: 1, max: 8}", "num_key_value_heads: {min: 1, max: 32}"),
     "num_key_value_heads.max"),
    (("seq_len: [64, 128, 256]", "seq_len: [true]"), "seq_len"),
    (("num_hidden_layers: {min: 1, max: 4}", "num_hidden_layers: {min: true, max: 4}"),
     "num_hidden_layers.min"),
    (("memory_gib: 6", "memory_gib: .nan"), "limits.memory_gib"),
    (("max_micro_batch: 16", "max_micro_batch: 0"), "max_micro_batch"),
])
def test_space_file_mistakes(run_cli, tmp_path: Path, edit: tuple[str, str], needle: str) -> None:
    assert edit[0] in SPACE
    space = tmp_path / "space.yaml"
    space.write_text(SPACE.replace(*edit))
    user_error(run_cli("bench", "compute", "--space", str(space), "-o", str(tmp_path / "o.csv"),
                       "--dry-run", "-n", "2"), str(space), needle)


def test_unproven_frontier_says_so_on_the_terminal(run_cli) -> None:
    result = run_cli("pareto", str(TWO), "--solver", "milp", "--time-limit-s", "0.001",
                     "--format", "json")
    assert result.code == 0, result.err
    assert json.loads(result.out)["frontier"][0]["proven_exact"] is False
    assert "not proving the result exact" in result.err or "before proving" in result.err


def test_every_solver_has_a_default_time_limit() -> None:
    from planner.cli.plan_cmd import DEFAULT_TIME_LIMIT_S, pareto, plan

    for command in (pareto, plan):
        option = next(p for p in command.params if p.name == "time_limit_s")
        assert option.default == DEFAULT_TIME_LIMIT_S and DEFAULT_TIME_LIMIT_S > 0


# ---- messages and polish ----------------------------------------------------------------------

@pytest.mark.parametrize(("argv", "needles"), [
    (["memory", "tiny-llama", "--gpu", "H100-SXM5-80GB", "--seq-len", "8.5"],
     ["--seq-len", "'8.5'", "integer"]),
    (["memory", "tiny-llama", "--gpu", "H100-SXM5-80GB", "--seq-len", "128", "--ac", "selectiv"],
     ["did you mean 'selective'", "none, full, op-sac, attn, layer:N"]),
    (["plan", str(TWO), "--budget-usd", "-5"], ["--budget-usd", "x>0"]),
    (["memory", "tiny-llama", "--seq-len", "128"], ["--gpu"]),
    (["memroy"], ["did you mean 'memory'"]),
    (["plan", str(TWO), "--budget"], ["--budget"]),
])
def test_click_usage_errors_follow_the_contract(
    run_cli, argv: list[str], needles: list[str]
) -> None:
    user_error(run_cli(*argv), *needles)


def test_unexpected_error_is_one_clean_message(run_cli, monkeypatch: pytest.MonkeyPatch) -> None:
    import planner.cli.catalog_cmd as catalog_cmd

    def broken() -> None:
        raise KeyError("boom")

    monkeypatch.setattr(catalog_cmd.cat, "load_models", broken)
    result = run_cli("catalog", "models")
    assert result.code == 1 and "Traceback" not in result.err
    assert "internal error (KeyError" in result.err and "To fix: report a bug" in result.err
    monkeypatch.setenv("SHARDMETER_DEBUG", "1")
    assert "Traceback" in run_cli("catalog", "models").err


def test_unknown_provider_hint_names_a_real_command(tmp_path: Path) -> None:
    from perfmodel.spec.catalog import price_usd_per_gpu_hour
    from perfmodel.spec.errors import CatalogError

    with pytest.raises(CatalogError) as info:
        price_usd_per_gpu_hour("RunPot", "H100-SXM5-80GB", "on-demand")
    assert "`shardmeter catalog prices`" in str(info.value)
    assert "price providers" not in str(info.value)


def test_readme_fit_command_works_as_written(run_cli, tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    line = next(li for li in readme.splitlines() if li.startswith("shardmeter fit compute "))
    fit_part, validate_part = (part.split()[1:] for part in line.split("&&"))
    data = tmp_path / "compute.csv"
    shutil.copy(DATA / "perf" / "compute_small.csv", data)
    swap = {"compute.csv": str(data), "my-profile.yaml": str(tmp_path / "my-profile.yaml")}
    result = run_cli(*[swap.get(a, a) for a in fit_part])
    assert result.code == 0, result.err
    written = yaml.safe_load((tmp_path / "my-profile.yaml").read_text())
    assert written["backend"] == "gloo"  # a CPU device: the default backend is gloo, not nccl
    assert run_cli(*[swap.get(a, a) for a in validate_part]).code == 0


def test_islands_json_output(run_cli, tmp_path: Path) -> None:
    out = tmp_path / "islands.json"
    assert run_cli("islands", str(FSDP), "-o", str(out)).code == 0
    rows = json.loads(out.read_text())
    shipped = json.loads(run_cli("islands", str(FSDP), "--format", "json").out)
    assert rows == shipped and rows[0]["cluster"] == "A"


def test_tables_use_human_formats_and_keep_names_whole(run_cli) -> None:
    table = run_cli("plan", str(TWO)).out
    record = json.loads(run_cli("plan", str(TWO), "--format", "json").out)
    assert f"${record['cost_usd']:,.0f}" in table
    from perfmodel.numbers import format_number

    assert f"{format_number(record['tokens_per_s'])} tok/s" in table and "e+0" not in table
    assert isinstance(record["cost_usd"], float) and record["cost_usd"] != round(record["cost_usd"])
    models = run_cli("catalog", "models").out
    for name in ("Llama-3.1-8B", "Llama-3.1-70B", "Llama-3.1-405B"):
        assert name in models


def test_human_formatters() -> None:
    from planner.cli.common import human_cell, human_count, human_usd

    assert human_usd(17830.6) == "$17,831" and human_usd(3.594) == "$3.59"
    assert human_count(477_123.0, "tok/s") == "477k tok/s" and human_count(1.25e6) == "1.25M"
    assert human_cell("tokens_per_s", 477_123.0) == "477k tok/s"
    assert human_cell("cost_usd", 17830.6) == "$17,831"
    assert human_cell("step_time_s", float("nan")) == "-"


def test_long_accumulation_is_closed_form_and_exact() -> None:
    from perfmodel.api.workload import SIMULATED_ACCUM_MAX, extended_step
    from perfmodel.profiles.profile import default_profile
    from perfmodel.sim.fsdp import simulate_step, step_costs
    from perfmodel.spec.catalog import get_gpu, get_model
    from perfmodel.spec.hardware import IslandSpec

    gpu, model = get_gpu("H100-SXM5-80GB"), get_model("tiny-llama")
    island = IslandSpec(gpu=gpu, num_nodes=1, gpus_per_node=8, intra_link=gpu.intra_node_link,
                        inter_link=gpu.inter_node_link, nics_per_node=gpu.nics_per_node)
    costs = step_costs(
        model, default_profile(gpu.name), island, seq_len=128, micro_batch=1, ac="none"
    )
    k = 3 * SIMULATED_ACCUM_MAX
    full = simulate_step(costs, accum_steps=k)
    fast = extended_step(simulate_step(costs, accum_steps=SIMULATED_ACCUM_MAX - 1),
                         simulate_step(costs, accum_steps=SIMULATED_ACCUM_MAX), k)
    assert fast.accum_steps == k
    for field in (
        "step_time_s", "compute_busy_s", "comm_busy_s", "exposed_comm_s", "compute_idle_s",
    ):
        assert getattr(fast, field) == pytest.approx(
            getattr(full, field), rel=1e-9, abs=1e-12
        ), field


def test_library_callers_still_get_value_errors() -> None:
    assert issubclass(UserInputError, ValueError)


def test_readme_format_claim_is_true() -> None:
    import click

    from planner.cli import cli

    readme = " ".join((ROOT / "README.md").read_text().split())
    start = readme.index("Every command that prints results (") + len(
        "Every command that prints results ("
    )
    claimed = [name.strip() for name in readme[start:readme.index(")", start)].split(",")]
    assert len(claimed) >= 10
    ctx = click.Context(cli)
    for name in claimed:
        command: click.Command | None = cli
        for part in name.split():
            command = command.get_command(ctx, part)  # type: ignore[union-attr]
        leaves = [command.get_command(ctx, n) for n in command.list_commands(ctx)] \
            if isinstance(command, click.Group) else [command]
        for leaf in leaves:
            assert any(p.name == "fmt" for p in leaf.params), (name, leaf.name)
