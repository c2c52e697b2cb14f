"""Property fuzzers (hypothesis) for config.json files, recipe YAML files and island-table CSVs,
beside the instance fuzzer of tests/test_fuzz.py (issue 30).

Each example is run through the real CLI under the contract of tests/hostile.py (no traceback, no
internal error, exit 2 with "To fix:", under 60 s) and, when accepted, checked against what the
file says: an accepted answer may not contradict its input (a "false" read as true, a negative
second turned into energy, a NaN kept as a number). Examples are bounded and derandomized, so
CI is fast and a failure reproduces.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from hostile import CONFIGS, INSTANCES, run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfmodel.spec.hf_config import load_hf_config
from perfmodel.spec.inputs import LIMITS
from perfmodel.spec.recipe import DEFAULT_RECIPE, OuterRecipe
from planner.cli.recipe_opts import load_recipe

FUZZ = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])
"""Bounded, reproducible examples (the hostile suite must stay well under two minutes)."""

ODD_TEXT = ["false", "true", "0", "1", "", " ", "1e300", "-1", "NaN", "nan", "inf", "yes",
            "1" + "0" * 399, "\u00e9", "null", "8.5"]
SCALARS = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-(10**25), max_value=10**25),
    st.sampled_from([0, 1, 2, 3, 4, 8, 64, 128, 2**20, 2**31, 10**7]),
    st.floats(allow_nan=True, allow_infinity=True, width=64),
    st.sampled_from(ODD_TEXT), st.text(max_size=6),
)
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=5)


# ---- config.json ------------------------------------------------------------------------------

CONFIG_SOURCES = sorted(p for p in CONFIGS.glob("*.json")
                        if p.name in ("llama32_1b.json", "gemma_2b.json", "phi15.json",
                                      "qwen25_7b.json"))
INT_KEYS = {"hidden_size": "hidden_size", "num_hidden_layers": "num_layers",
            "num_attention_heads": "num_heads", "intermediate_size": "intermediate_size",
            "vocab_size": "vocab_size", "num_key_value_heads": "num_kv_heads",
            "head_dim": "head_dim"}
BOOL_KEYS = ("tie_word_embeddings", "attention_bias", "mlp_bias")


@FUZZ
@given(source=st.sampled_from(CONFIG_SOURCES), key=st.sampled_from([*INT_KEYS, *BOOL_KEYS,
                                                                    "model_type", "extra_x"]),
       value=VALUES, delete=st.booleans())
def test_fuzz_config_json(tmp_path_factory: pytest.TempPathFactory, source: Path, key: str,
                          value: Any, delete: bool) -> None:
    config = json.loads(source.read_text())
    if delete:
        config.pop(key, None)
    else:
        config[key] = value
    path = tmp_path_factory.mktemp("cfg") / "config.json"
    path.write_text(json.dumps(config, allow_nan=True))
    result = run("memory", path, "--gpu", "H100-SXM5-80GB", "--seq-len", "128", "--format",
                 "json")
    if result.code == 2:
        assert str(path) in result.err
        return
    assert result.code == 0
    spec = load_hf_config(path)  # accepted: what was read is what the file says
    for hf_key, field in INT_KEYS.items():
        if config.get(hf_key) is not None and not (hf_key == "head_dim" and config[hf_key] == 0):
            written = config[hf_key]
            assert isinstance(written, int) and not isinstance(written, bool), (hf_key, written)
            assert getattr(spec, field) == written
    for flag in BOOL_KEYS:
        written = config.get(flag)
        assert written is None or isinstance(written, bool), (flag, written)
    if isinstance(config.get("tie_word_embeddings"), bool):
        assert spec.tie_word_embeddings is config["tie_word_embeddings"]
    record = json.loads(result.out)
    assert math.isfinite(record["peak_gib"]) and record["peak_gib"] > 0


# ---- recipe YAML --------------------------------------------------------------------------------

RECIPE_KEYS = ["base", "param_dtype", "reduce_dtype", "ac", "accum_mode", "attention", "loss",
               "loss_chunks", "prefetch_depth", "reshard_blocks_after_forward",
               "reshard_root_after_forward", "optimizer", "name", "outer", "unknown_field"]
GOOD = {"base": ["torchtitan", "paper"], "param_dtype": ["bf16", "fp32"],
        "ac": ["none", "selective", "full"], "accum_mode": ["no_sync", "reduce_scatter"],
        "attention": ["sdpa", "eager"], "loss": ["unfused", "chunked", "fused"],
        "loss_chunks": [1, 4], "prefetch_depth": [0, 1, 2, 64],
        "reshard_blocks_after_forward": [True, False], "outer": [{"inner_steps": 50}]}


@FUZZ
@given(entries=st.dictionaries(st.sampled_from(RECIPE_KEYS),
                               st.one_of(VALUES, st.sampled_from(
                                   [v for vs in GOOD.values() for v in vs])), max_size=4),
       duplicate=st.booleans())
def test_fuzz_recipe_yaml(tmp_path_factory: pytest.TempPathFactory, entries: dict[str, Any],
                          duplicate: bool) -> None:
    text = yaml.safe_dump(entries, sort_keys=False) if entries else "{}\n"
    if duplicate and entries:
        first = next(iter(entries))
        text += yaml.safe_dump({first: entries[first]})
    path = tmp_path_factory.mktemp("recipe") / "recipe.yaml"
    path.write_text(text)
    result = run("predict", "tiny-llama", "--gpu", "H100-SXM5-80GB", "--seq-len", "128",
                 "--recipe", path, "--format", "json")
    if result.code == 2:
        assert str(path) in result.err or "TrainingRecipe" in result.err, result.err
        return
    assert result.code == 0 and not (duplicate and entries)
    recipe = load_recipe(str(path))
    for key, value in entries.items():
        if key in ("base", "name", "outer"):
            continue
        got = getattr(recipe, key)
        assert type(got) is type(getattr(DEFAULT_RECIPE, key)) and got == value, (key, value)
    outer = entries.get("outer") or {}
    for key, value in outer.items():
        assert getattr(recipe.outer, key) == value and type(value) is type(
            getattr(OuterRecipe(), key)), (key, value)
    record = json.loads(result.out)
    assert math.isfinite(record["step_time_s"]) and record["step_time_s"] > 0


# ---- island-table CSVs --------------------------------------------------------------------------

TWO = INSTANCES / "small-two-clusters.yaml"
ENERGY = ",compute_fixed_s,compute_micro_s,comm_only_fixed_s,comm_only_micro_s,tdp_w"
CELLS = st.one_of(st.sampled_from(ODD_TEXT + ["-0.5", "1e-300", "0.0", "700", "true", "A", "B",
                                              "Llama-3-8B", "8192", "torchtitan", "compute"]),
                  st.floats(allow_nan=True, allow_infinity=True, width=64).map(repr),
                  st.integers(min_value=-(10**20), max_value=10**20).map(str))
NUMERIC = ("nodes", "gpus_per_node", "micro_batch", "microstep_s", "step_fixed_s", "usd_per_hour",
           "memory_gib", "compute_fixed_s", "compute_micro_s", "comm_only_fixed_s",
           "comm_only_micro_s")


@FUZZ
@given(edits=st.lists(st.tuples(st.integers(min_value=1, max_value=12),
                                st.integers(min_value=0, max_value=17), CELLS),
                      min_size=1, max_size=3),
       energy=st.booleans())
def test_fuzz_island_table_csv(tmp_path_factory: pytest.TempPathFactory,
                               edits: list[tuple[int, int, str]], energy: bool) -> None:
    folder = tmp_path_factory.mktemp("table")
    doc = yaml.safe_load(TWO.read_text())
    lines = (TWO.parent / doc["islands_table"]).read_text().splitlines()
    if energy:
        lines = [lines[0] + ENERGY] + [f"{li},0.2,1.0,0.1,0.1,700" for li in lines[1:]]
    width = len(lines[0].split(","))
    for row, column, cell in edits:
        row = min(row, len(lines) - 1)
        cells = lines[row].split(",")
        cells[column % width] = cell.replace(",", ";").replace("\n", " ")
        lines[row] = ",".join(cells)
    table = folder / "table.csv"
    table.write_text("\n".join(lines) + "\n")
    doc["islands_table"] = table.name
    path = folder / "instance.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    result = run("islands", path, "--format", "json")
    if result.code == 2:
        assert str(table) in result.err or str(path) in result.err, result.err
        return
    assert result.code == 0
    for record in json.loads(result.out):  # accepted: every number is a number it may be
        for column in NUMERIC:
            if column in record:
                value = record[column]
                assert isinstance(value, int | float) and math.isfinite(value) and value >= 0, (
                    column, value)
        assert record["microstep_s"] <= LIMITS["step_time_s"].maximum
        assert (record["model"], record["seq_len"], record["recipe"]) == (
            "Llama-3-8B", 8192, "torchtitan")
    plan = run("plan", path, "--format", "json")
    if plan.code == 0:
        answer = json.loads(plan.out)
        assert math.isfinite(answer["cost_usd"]) and answer["cost_usd"] > 0
        assert math.isfinite(answer["wall_time_s"]) and answer["wall_time_s"] > 0
        if "energy_kwh" in answer:
            assert answer["energy_kwh"] >= 0 and answer["co2_kg"] >= 0
