"""Hostile inputs at the planner's boundaries (issue 30): instance YAML oddities, island-table CSVs
that do not describe the run they serve, objectives that dropped a floor, and scenario sweeps of
unbounded size or time.

Runs the real CLI in-process under the contract of tests/hostile.py; ids start with the kind.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from hostile import CONFIGS, INSTANCES, accepted, case_ids, refused, run

TWO = INSTANCES / "small-two-clusters.yaml"
FSDP = INSTANCES / "small-fsdp.yaml"
BIG = int("1" + "0" * 399)


def _copy(tmp_path: Path, source: Path = TWO) -> tuple[Path, dict[str, Any], Path | None]:
    """A copy of a shipped instance (and its table) to edit: (yaml path, mapping, table)."""
    doc = yaml.safe_load(source.read_text())
    table = None
    if doc.get("islands_table"):
        table = tmp_path / "table.csv"
        shutil.copy(source.parent / doc["islands_table"], table)
        doc["islands_table"] = table.name
    return tmp_path / "instance.yaml", doc, table


def _write(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


# ---- instance files ---------------------------------------------------------------------------

def _set(doc: dict[str, Any], dotted: str, value: Any) -> None:
    node: Any = doc
    parts = dotted.split(".")
    for part in parts[:-1]:
        node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
    last = parts[-1]
    if last.isdigit():
        node[int(last)] = value
    else:
        node[last] = value


INSTANCE_CASES = [
    ("types", "nodes-400-digits", "clusters.0.num_nodes", BIG, ["clusters[0].num_nodes",
                                                                 "400-digit"]),
    ("types", "price-1e300", "clusters.0.price_usd_per_gpu_hour", 1e300,
     ["clusters[0].price_usd_per_gpu_hour", "10,000"]),
    ("types", "wan-1e-300", "clusters.0.wan_gbit_s", 1e-300, ["clusters[0].wan_gbit_s"]),
    ("types", "latency-1e9", "clusters.0.wan_latency_ms", 1e9, ["clusters[0].wan_latency_ms"]),
    ("types", "pue-1e6", "clusters.0.pue", 1e6, ["clusters[0].pue"]),
    ("types", "tokens-1e300", "training.train_tokens", 1e300, ["training.train_tokens"]),
    ("types", "per-instance-size-string", "clusters.0.price",
     {"provider": "RunPod", "per_instance_size": "false"}, ["per_instance_size",
                                                            "not a boolean"]),
    ("messages", "price-zero", "clusters.0.price_usd_per_gpu_hour", 0,
     ["clusters[0].price_usd_per_gpu_hour", "greater than 0"]),
    ("messages", "blank-cluster-name", "clusters.0.name", "   ", ["clusters[0].name", "blank"]),
    ("messages", "blank-gpu", "clusters.0.gpu", " ", ["clusters[0].gpu", "blank"]),
    ("consistency", "tokens-below-one-batch", "training.train_tokens", 1000.0,
     ["training.train_tokens", "shorter than one step", "524,288"]),
    ("consistency", "recipe-outer-inner-steps", "training.recipe", {"outer": {"inner_steps": 7}},
     ["training.recipe.outer.inner_steps", "contradicts training.inner_steps = 100"]),
    ("consistency", "recipe-outer-dtype", "training.recipe",
     {"outer": {"pseudo_gradient_dtype": "fp32"}}, ["pseudo_gradient_dtype", "contradicts"]),
    ("work", "batch-1e15", "training.global_batch_seqs", 10**15,
     ["training.global_batch_seqs", "1,048,576"]),
    ("work", "nodes-2000", "clusters.0.num_nodes", 2000, ["clusters[0].num_nodes", "1,024"]),
    ("work", "islands-1e9", "limits.max_islands", 10**9, ["limits.max_islands"]),
    ("work", "inner-steps-1e12", "training.inner_steps", 10**12, ["training.inner_steps"]),
]


@pytest.mark.parametrize(("kind", "name", "field", "value", "needles"), INSTANCE_CASES,
                         ids=case_ids(INSTANCE_CASES))
def test_instance_fields(tmp_path: Path, kind: str, name: str, field: str, value: Any,
                         needles: list[str]) -> None:
    path, doc, _ = _copy(tmp_path)
    _set(doc, field, value)
    refused(run("plan", _write(path, doc), "--format", "json"), str(path), *needles)


def test_consistency_recipe_outer_inner_steps_that_agree_are_accepted(tmp_path: Path) -> None:
    path, doc, _ = _copy(tmp_path, INSTANCES / "paper-case-study.yaml")
    doc["training"]["recipe"] = {"outer": {"inner_steps": 100}}
    doc["model"], doc["training"]["seq_len"] = "tiny-llama", 128
    accepted(run("plan", _write(path, doc), "--format", "json"))


def test_work_a_thousand_clusters(tmp_path: Path) -> None:
    path, doc, _ = _copy(tmp_path, INSTANCES / "paper-case-study.yaml")
    doc["clusters"] = [dict(doc["clusters"][0], name=f"c{i}") for i in range(1000)]
    refused(run("islands", _write(path, doc)), str(path), "clusters", "at most 64")


def test_work_batch_menu_guard(tmp_path: Path) -> None:
    """A large batch on a one-GPU island of a tiny model: the planner's menu is bounded before
    it is built (a batch of 1e15 once ran on without end)."""
    path, doc, _ = _copy(tmp_path, INSTANCES / "paper-case-study.yaml")
    doc["model"], doc["training"]["seq_len"] = "tiny-llama", 128
    doc["training"]["global_batch_seqs"] = 2**20
    doc["training"]["train_tokens"] = 1e12
    doc["clusters"] = [dict(doc["clusters"][0], num_nodes=1, gpus_per_node=1,
                            allowed_gpus_per_node=[1])]
    refused(run("plan", _write(path, doc), "--format", "json"), "menu", "20,000,000",
            "global_batch_seqs")


def test_work_table_rows_guard(tmp_path: Path) -> None:
    path, doc, _ = _copy(tmp_path, INSTANCES / "paper-case-study.yaml")
    doc["model"], doc["training"]["seq_len"] = "tiny-llama", 128
    doc["training"]["global_batch_seqs"] = 2**20
    doc["training"]["train_tokens"] = 1e12
    refused(run("islands", _write(path, doc)), "more than 200,000 rows", "num_nodes")


def test_work_table_rows_stay_bounded(tmp_path: Path) -> None:
    """A tiny model on the largest clusters: many micro-batches fit, but the table keeps only those
    a plan can use (m·n·g <= B) and stays small."""
    path, doc, _ = _copy(tmp_path, INSTANCES / "paper-case-study.yaml")
    doc["model"], doc["training"]["seq_len"] = "tiny-llama", 128
    for cluster in doc["clusters"]:
        cluster["num_nodes"] = 1024
    result = run("islands", _write(path, doc), "--format", "json")
    rows = json.loads(accepted(result))
    batch = doc["training"]["global_batch_seqs"]
    assert rows and all(r["micro_batch"] * r["nodes"] * r["gpus_per_node"] <= batch for r in rows)


@pytest.mark.parametrize(("kind", "name", "text", "needles"), [
    ("types", "duplicate-num-nodes", "REPLACE", ["duplicate key 'num_nodes'"]),
    ("messages", "alias-bomb", "name: &a [x, x, x, x, x, x, x, x, x, x]\n"
     "b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
     "d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\ne: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\n"
     "f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\nmodel: [*f, *f, *f, *f, *f, *f]\n",
     ["expands to more than"]),
    ("types", "integer-of-5000-digits", "name: x\nmodel: " + "9" * 5000 + "\n", ["digits"]),
    ("types", "top-level-list", "- name: x\n", ["top level must be a mapping"]),
], ids=lambda v: v if isinstance(v, str) and len(v) < 40 else "")
def test_instance_yaml_text(tmp_path: Path, kind: str, name: str, text: str,
                            needles: list[str]) -> None:
    path = tmp_path / "instance.yaml"
    if text == "REPLACE":  # a cluster's num_nodes written twice: 2, then 200 (the plan changed)
        source = TWO.read_text().replace("islands_table: tables/", f"islands_table: {INSTANCES}/"
                                         "tables/")
        text = source.replace("    num_nodes: 2\n", "    num_nodes: 2\n    num_nodes: 200\n", 1)
    path.write_text(text)
    err = refused(run("plan", path, "--format", "json"), str(path), *needles)
    if name == "duplicate-num-nodes":
        assert "lines 18 and 19" in err or "lines" in err


def test_environment_instance_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "instance.yaml"
    path.write_bytes(TWO.read_bytes().replace(b"name: A", b"name: \xc0A"))
    refused(run("islands", path), str(path), "not UTF-8")


@pytest.mark.parametrize("what", ["directory", "missing"])
def test_environment_instance_path(tmp_path: Path, what: str) -> None:
    target = tmp_path if what == "directory" else tmp_path / "nope.yaml"
    refused(run("islands", target), str(target), "directory" if what == "directory"
            else "not found")


def test_consistency_model_path_relative_to_the_instance(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """`model: cfg.json` resolves next to the YAML everywhere (it was validated there but loaded
    from the working directory)."""
    folder = tmp_path / "study"
    folder.mkdir()
    shutil.copy(CONFIGS / "llama32_1b.json", folder / "cfg.json")
    path, doc, _ = _copy(folder, INSTANCES / "paper-case-study.yaml")
    doc["model"], doc["training"]["seq_len"] = "cfg.json", 1024
    _write(path, doc)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    relative = json.loads(accepted(run("plan", path, "--format", "json")))
    doc["model"] = str(folder / "cfg.json")
    absolute = json.loads(accepted(run("plan", _write(folder / "abs.yaml", doc), "--format",
                                       "json")))
    assert relative["cost_usd"] == absolute["cost_usd"]
    assert relative["wall_time_s"] == absolute["wall_time_s"]


# ---- fixed island tables ------------------------------------------------------------------------

def _edit_table(table: Path, column: str, value: str, row: int = 1) -> None:
    lines = table.read_text().splitlines()
    header = lines[0].split(",")
    if column not in header:
        header.append(column)
        lines = [",".join(header)] + [f"{li}," for li in lines[1:]]
    cells = lines[row].split(",")
    cells[header.index(column)] = value
    lines[row] = ",".join(cells)
    table.write_text("\n".join(lines) + "\n")


TABLE_CASES = [
    ("types", "microstep-1e300", "microstep_s", "1e300", ["microstep_s", "above"]),
    ("types", "fixed-1e300", "step_fixed_s", "1e300", ["step_fixed_s"]),
    ("types", "memory-accum-nan", "memory_accum_gib", "nan", ["memory_accum_gib"]),
    ("types", "memory-accum-negative", "memory_accum_gib", "-3", ["memory_accum_gib"]),
    ("types", "accum-fits-maybe", "accum_fits", "maybe", ["accum_fits", "line 2"]),
    ("types", "energy-negative", "compute_fixed_s", "-0.5", ["compute_fixed_s", "negative"]),
    ("types", "tdp-negative", "tdp_w", "-700", ["tdp_w"]),
    ("types", "usd-per-hour-1e300", "usd_per_hour", "1e300", ["usd_per_hour"]),
    ("consistency", "model-70b", "model", "Llama-3.1-70B", ["column 'model'", "Llama-3-8B"]),
    ("consistency", "seq-len-1024", "seq_len", "1024", ["column 'seq_len'", "8192"]),
    ("consistency", "recipe-paper", "recipe", "ac=none", ["column 'recipe'", "torchtitan"]),
]


@pytest.mark.parametrize(("kind", "name", "column", "value", "needles"), TABLE_CASES,
                         ids=case_ids(TABLE_CASES))
def test_island_table_cells(tmp_path: Path, kind: str, name: str, column: str, value: str,
                            needles: list[str]) -> None:
    path, doc, table = _copy(tmp_path)
    assert table is not None
    if column in ("compute_fixed_s", "tdp_w"):  # energy columns: give every row a valid split
        lines = table.read_text().splitlines()
        head = lines[0] + (",compute_fixed_s,compute_micro_s,comm_only_fixed_s,"
                           "comm_only_micro_s,tdp_w")
        table.write_text("\n".join([head] + [f"{li},0.1,0.5,0.1,0.1,700" for li in lines[1:]])
                         + "\n")
    _edit_table(table, column, value)
    refused(run("islands", _write(path, doc)), str(table), *needles)


def test_consistency_table_without_identity_is_refused_with_the_values(tmp_path: Path) -> None:
    path, doc, table = _copy(tmp_path)
    assert table is not None
    lines = table.read_text().splitlines()
    table.write_text("\n".join(",".join(li.split(",")[:10]) for li in lines) + "\n")
    refused(run("plan", _write(path, doc)), str(table), "model=Llama-3-8B", "seq_len=8192",
            "recipe=torchtitan")


@pytest.mark.parametrize(("field", "value", "needle"), [
    ("seq_len", 1024, "seq_len"),
    ("model", "Llama-3.1-70B", "model"),
    ("activation_checkpointing", "none", "recipe"),
])
def test_consistency_instance_changed_under_a_fixed_table(tmp_path: Path, field: str, value: Any,
                                                          needle: str) -> None:
    """The instance trains something else than its table describes: refused (a 70B run was once
    planned on an 8B table, a 8192-token run on a 1024-token one: 8x wrong)."""
    path, doc, table = _copy(tmp_path)
    if field == "model":
        doc["model"] = value
        doc["parameters"] = 70_553_706_496
    else:
        doc["training"][field] = value
    refused(run("plan", _write(path, doc)), str(table), f"column '{needle}'")


@pytest.mark.parametrize(("vary", "needle"), [
    ("training.seq_len=8192,1024", "seq_len"),
    ("model=llama-3-8b,Llama-3.1-70B", "model"),
    ("training.activation_checkpointing=selective,full", "recipe"),
])
def test_consistency_vary_under_a_fixed_table(vary: str, needle: str) -> None:
    err = refused(run("pareto", TWO, "--vary", vary, "--format", "json"), f"column '{needle}'")
    assert "scenario" in err


# ---- objectives: floors and caps hold under each -------------------------------------------------

@pytest.mark.parametrize("metric", ["co2", "energy"])
def test_consistency_throughput_floor_under_energy_objectives(metric: str) -> None:
    """--min-throughput-fraction acts under --objective co2|energy: the least-metric frontier
    plan at or above the floor (checked against every point of the exact frontier)."""
    field = {"co2": "co2_kg", "energy": "energy_kwh"}[metric]
    fraction = 0.6
    plan = json.loads(accepted(run("plan", TWO, "--objective", metric,
                                   "--min-throughput-fraction", str(fraction), "--format",
                                   "json")))
    points = json.loads(accepted(run("pareto", TWO, "--objectives", f"time,{metric}", "--format",
                                     "json")))["frontier"]
    best = max(p["tokens_per_s"] for p in points)
    admitted = [p for p in points if p["tokens_per_s"] >= fraction * best]
    assert plan["tokens_per_s"] >= fraction * best
    assert plan[field] == pytest.approx(min(p[field] for p in admitted), rel=1e-9)
    unfloored = json.loads(accepted(run("plan", TWO, "--objective", metric, "--format", "json")))
    assert unfloored[field] <= plan[field]


def test_consistency_floor_with_a_cap_and_another_objective_is_refused() -> None:
    refused(run("plan", TWO, "--max-co2-kg", "1e6", "--min-throughput-fraction", "0.9"),
            "--min-throughput-fraction", "third objective")


# ---- scenario sweeps ---------------------------------------------------------------------------

def test_work_scenario_grid_is_bounded() -> None:
    values = ",".join(str(v) for v in range(1, 51))
    refused(run("pareto", TWO, "--vary", f"clusters.A.wan_gbit_s={values}", "--vary",
                "clusters.B.wan_gbit_s=" + values, "--time-limit-s", "5"), "scenarios", "256")


def test_work_time_limit_bounds_the_whole_sweep(tmp_path: Path) -> None:
    """--time-limit-s bounds the study, not each solve: 200 scenarios of the case study (each
    builds its table and solves) under 0.3 s return in seconds, and say which scenarios were not
    solved (a grid of thousands once ran on although --time-limit-s 5 was given)."""
    path, doc, _ = _copy(tmp_path, INSTANCES / "paper-case-study.yaml")
    _write(path, doc)
    values = ",".join(str(v) for v in range(1, 201))
    start = time.monotonic()
    result = run("pareto", path, "--vary", f"clusters.A.wan_gbit_s={values}", "--time-limit-s",
                 "0.3", "--format", "json")
    elapsed = time.monotonic() - start
    payload = json.loads(accepted(result))
    skipped = [r for r in payload["summary"] if r.get("proven_exact") is False]
    assert skipped and "not solved" in json.dumps(payload["summary"])
    assert "NOT proven exact" in result.err
    assert elapsed < 40, elapsed


def test_types_vary_value_of_5000_digits() -> None:
    refused(run("pareto", TWO, "--vary", "limits.max_islands=" + "9" * 5000), "--vary", "digits")


@pytest.mark.parametrize(("name", "argv", "needles"), [
    ("objective-time-with-floor", ("plan", TWO, "--objective", "time",
                                   "--min-throughput-fraction", "0.9"), ["--objective"]),
    ("milp-backend-without-milp", ("pareto", TWO, "--milp-backend", "cbc"), ["--milp-backend"]),
    ("format-with-output", ("islands", TWO, "-o", "OUT", "--format", "json"), ["--format"]),
    ("plot-of-an-energy-frontier", ("pareto", TWO, "--objectives", "time,co2", "--plot",
                                    "OUT.png"), ["--plot", "time-vs-co2"]),
], ids=lambda v: f"consistency-{v}" if isinstance(v, str) else "")
def test_consistency_flags_without_effect_are_refused(tmp_path: Path, name: str,
                                                      argv: tuple[Any, ...],
                                                      needles: list[str]) -> None:
    argv = tuple(str(tmp_path / a) if isinstance(a, str) and a.startswith("OUT") else a
                 for a in argv)
    refused(run(*argv), *needles)
    assert not list(tmp_path.iterdir())  # nothing was written
