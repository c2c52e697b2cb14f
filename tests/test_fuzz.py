"""Fuzz suite: seeded random mistakes in every shipped input and in every CLI flag.

The contract (DESIGN, issue 12): no command ever ends in a Python traceback or an "internal
error"; a user mistake exits 2 with a "To fix:" line naming the file (or flag) at fault; an
infeasible plan exits 1 naming its binding limit; anything accepted exits 0.

* Flags: the click command tree is walked (so flags added later are covered without listing
  them here) and every typed option gets values its type must refuse (NaN, inf, 8.5, a
  misspelt choice, a figure path with a bad extension, a directory as output, no value).
* Files: every shipped instance, island table, design space, profile and the test configs get
  random single mutations (a leaf replaced by NaN, a boolean, a negative, a string, a list, a
  key deleted, renamed or added) and are run through the command that reads them.

Runs in-process through click's CliRunner; seeds are fixed so a failure reproduces by its id.
"""

from __future__ import annotations

import copy
import json
import math
import random
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from click.testing import CliRunner

from perfmodel.spec.paths import catalog_dir
from planner.cli import cli
from planner.cli.common import FiniteFloat, OutputPath, SuggestingChoice

ROOT = Path(__file__).resolve().parent.parent
LAYOUT_TABLE_INSTANCES = ("llama-405b-h100.yaml", "llama-70b-multicloud.yaml")
"""Shipped instances whose layout tables take 25-90 s to build: fuzzed through
tests/data/instances/small-layouts.yaml, the same schema on a table that builds in seconds."""
INSTANCES = sorted([p for p in (ROOT / "instances").glob("*.yaml")
                    if p.name not in LAYOUT_TABLE_INSTANCES]
                   + [ROOT / "tests" / "data" / "instances" / "small-layouts.yaml"])
TABLES = sorted((ROOT / "instances" / "tables").glob("*.csv"))
SPACES = sorted((catalog_dir() / "spaces").glob("*.yaml"))
PROFILES = [catalog_dir() / "profiles" / "cpu-x86-2core.yaml",
            catalog_dir() / "profiles" / "H100-SXM5-80GB-prior.yaml"]
CONFIGS = [
    Path(__file__).parent / "data" / "configs" / n for n in ("llama32_1b.json", "gemma_2b.json")
]
COMPUTE_DATA = Path(__file__).parent / "data" / "perf" / "compute_small.csv"
MUTATIONS_PER_FILE = 10


def invoke(*args: str) -> click.testing.Result:
    """One in-process CLI run with the contract checked."""
    result = CliRunner().invoke(cli, list(args), catch_exceptions=True)
    err, out = result.stderr, result.stdout
    context = (
        f"shardmeter {' '.join(args)}\nexit {result.exit_code}\n"
        f"stderr: {err}\nstdout: {out[-2000:]}"
    )
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"exception escaped the CLI: {result.exception!r}\n{context}")
    assert "Traceback" not in err + out, context
    assert "internal error" not in err, context
    assert result.exit_code in (0, 1, 2), context
    if result.exit_code == 2:
        assert "To fix:" in err, context
    if result.exit_code == 1:
        assert "binding limit: " in err and "To fix:" in err, context
    return result


# ---- the command tree ------------------------------------------------------------------------

def walk(
    group: click.Group = cli, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    """Every leaf command with its path (sub-groups included)."""
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None, name
        if isinstance(command, click.Group):
            yield from walk(command, (*path, name))
        else:
            yield (*path, name), command


COMMANDS = list(walk())


def _bad_values(param: click.Option, tmp: Path) -> list[str]:
    """Values the option's (hardened) type must refuse."""
    kind = param.type
    if isinstance(kind, FiniteFloat):
        return ["nan", "inf", "-inf", "1e999", "abc"]
    if isinstance(kind, click.types.IntParamType):
        return ["8.5", "abc", "nan"]
    if isinstance(kind, SuggestingChoice):
        first = str(kind.choices[0])
        return [first[:-1] + "~", "no-such-choice"]
    if isinstance(kind, OutputPath):
        return [str(tmp / "figure.txt")] if kind.figure else [str(tmp)]
    if isinstance(kind, click.Path) and not kind.dir_okay:
        return [str(tmp)]
    return []


def _typed_options(command: click.Command) -> list[click.Option]:
    return [p for p in command.params if isinstance(p, click.Option) and not p.is_flag
            and p.nargs == 1 and p.name != "help"]


def test_every_command_is_walked() -> None:
    names = {" ".join(path) for path, _ in COMMANDS}
    assert {"predict", "plan", "bench compute", "fit compute", "catalog models"} <= names
    assert all(isinstance(c.params, list) for _, c in COMMANDS)


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_help_and_unknown_flags(path: tuple[str, ...], command: click.Command) -> None:
    assert invoke(*path, "--help").exit_code == 0
    result = invoke(*path, "--no-such-flag-xyz")
    assert result.exit_code == 2 and "--no-such-flag-xyz" in result.stderr


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_bad_flag_values_are_usage_errors(path: tuple[str, ...], command: click.Command,
                                          tmp_path: Path) -> None:
    checked = 0
    for option in _typed_options(command):
        flag = max(option.opts, key=len)
        for value in _bad_values(option, tmp_path):
            result = invoke(*path, flag, value)
            assert result.exit_code == 2, (flag, value, result.stderr)
            assert any(o in result.stderr for o in option.opts), (flag, result.stderr)
            checked += 1
        if not getattr(option, "_flag_needs_value", False):  # an option whose value may be left out
            result = invoke(*path, flag)  # the value left out
            assert result.exit_code == 2 and flag in result.stderr, (flag, result.stderr)
    assert checked or not [o for o in _typed_options(command) if _bad_values(o, tmp_path)]


# ---- flags with odd but well-typed values (the command bodies run) -----------------------------

BASE_ARGS: dict[str, list[str]] = {
    "predict": ["tiny-llama", "--gpu", "H100-SXM5-80GB", "--seq-len", "128", "--format", "json"],
    "simulate": ["tiny-llama", "--gpu", "H100-SXM5-80GB", "--seq-len", "128", "--format", "json"],
    "sweep": [
        "tiny-llama", "--gpu", "H100-SXM5-80GB", "--seq-len", "128", "--micro-batches", "1,2",
        "--format", "json",
    ],
    "streaming": ["tiny-llama", "--gpu", "H100-SXM5-80GB", "--seq-len", "128", "--format", "json"],
    "memory": ["tiny-llama", "--gpu", "H100-SXM5-80GB", "--seq-len", "128", "--format", "json"],
    "plan": [str(ROOT / "instances" / "small-two-clusters.yaml"), "--format", "json"],
    "pareto": [str(ROOT / "instances" / "small-fsdp.yaml"), "--format", "json"],
    "islands": [str(ROOT / "instances" / "small-fsdp.yaml"), "--format", "json"],
    "validate": [
        str(catalog_dir() / "profiles" / "cpu-x86-2core.yaml"),
        str(Path(__file__).parent / "data" / "perf" / "compute_small.csv"),
        "--format",
        "json",
    ],
    "catalog prices": ["--format", "json"],
}
"""A valid invocation per command whose body is cheap; one flag at a time is then changed."""
ODD_INTS = ("0", "-1", "1", "3", "100000")
ODD_FLOATS = ("0", "-1.5", "1e-9", "1e9")
SKIP_VALUES = {"--steps": ("100000",), "--sync-every": ("100000",), "--max-sync-every": ("100000",),
               "--max-delay-steps": ("100000",), "--delay": ("100000",), "--threads": ("100000",)}
"""Values that are valid but only slow (long simulations), not mistakes."""
ODD_SAMPLES = 3


def _odd_cases() -> list[tuple[str, str, str]]:
    rng = random.Random(12)
    cases = []
    for path, command in COMMANDS:
        name = " ".join(path)
        if name not in BASE_ARGS:
            continue
        for option in _typed_options(command):
            flag = max(option.opts, key=len)
            if isinstance(option.type, click.types.IntParamType):
                values = ODD_INTS
            elif isinstance(option.type, FiniteFloat):
                values = ODD_FLOATS
            elif isinstance(option.type, SuggestingChoice):
                values = tuple(str(c) for c in option.type.choices)
            else:
                continue
            values = [v for v in values if v not in SKIP_VALUES.get(flag, ())]
            cases += [(name, flag, v) for v in rng.sample(values, min(ODD_SAMPLES, len(values)))]
    return cases


@pytest.mark.parametrize(("name", "flag", "value"), _odd_cases())
def test_odd_flag_values_keep_the_contract(name: str, flag: str, value: str) -> None:
    invoke(*name.split(), *BASE_ARGS[name], flag, value)


# ---- file mutations --------------------------------------------------------------------------

BAD_LEAVES: list[Any] = [
    None, True, False, -1, 0, 0.5, 1e30, math.nan, math.inf, -math.inf, "abc", "", [], {}, [1, 2],
    "2026-13-45",
]


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _paths(value, (*prefix, i))


def mutate(doc: Any, rng: random.Random) -> tuple[Any, str]:
    """One random mistake in a parsed YAML/JSON document; returns it and a description."""
    doc = copy.deepcopy(doc)
    path = rng.choice([p for p in _paths(doc) if p])
    parent = doc
    for part in path[:-1]:
        parent = parent[part]
    key = path[-1]
    action = rng.choice(["replace", "replace", "replace", "delete", "rename", "add"])
    if action == "delete" and isinstance(parent, dict):
        del parent[key]
    elif action == "rename" and isinstance(parent, dict) and len(str(key)) > 2:
        parent[str(key)[:-1]] = parent.pop(key)
    elif action == "add" and isinstance(parent, dict):
        parent["unknown_key_x"] = 1
    else:
        action = "replace"
        parent[key] = rng.choice(BAD_LEAVES)
    return doc, f"{action} {'.'.join(map(str, path))}"


def _cases(files: list[Path], salt: int) -> list[tuple[Path, int]]:
    return [(f, salt * 1000 + i) for f in files for i in range(MUTATIONS_PER_FILE)]


def _ids(cases: list[tuple[Path, int]]) -> list[str]:
    return [f"{f.stem}-{seed}" for f, seed in cases]


def _assert_names_file(result: click.testing.Result, *names: str) -> None:
    if result.exit_code == 2:
        assert any(n in result.stderr for n in names), (names, result.stderr)


INSTANCE_CASES = _cases(INSTANCES, 1)


@pytest.mark.parametrize(("source", "seed"), INSTANCE_CASES, ids=_ids(INSTANCE_CASES))
def test_mutated_instances(source: Path, seed: int, tmp_path: Path) -> None:
    doc = yaml.safe_load(source.read_text())
    if isinstance(doc.get("islands_table"), str):
        table = tmp_path / Path(doc["islands_table"]).name
        shutil.copy(source.parent / doc["islands_table"], table)
        doc["islands_table"] = table.name
    mutated, what = mutate(doc, random.Random(seed))
    path = tmp_path / source.name
    path.write_text(yaml.safe_dump(mutated, sort_keys=False))
    result = invoke("islands", str(path), "--format", "json")
    _assert_names_file(result, str(path), str(tmp_path))
    if result.exit_code == 0 and "limits" in doc:
        invoke("plan", str(path), "--format", "json", "--time-limit-s", "20")


LIMIT_CASES = [("budget-usd", "1"), ("deadline-hours", "0.001"), ("budget-usd", "1e-6")]


@pytest.mark.parametrize(("flag", "value"), LIMIT_CASES)
def test_infeasible_limits_exit_1_naming_the_limit(flag: str, value: str) -> None:
    result = invoke("plan", str(ROOT / "instances" / "small-two-clusters.yaml"), f"--{flag}", value)
    assert result.exit_code == 1
    assert f"binding limit: {flag.replace('-', '_')}" in result.stderr


TABLE_BAD_CELLS = ["nan", "inf", "-1", "0", "", "abc", "1e400", "true", "1.5", "H100"]


@pytest.mark.parametrize("seed", range(2 * MUTATIONS_PER_FILE))
def test_mutated_island_tables(seed: int, tmp_path: Path) -> None:
    rng = random.Random(2000 + seed)
    source = rng.choice(
        [p for p in INSTANCES if yaml.safe_load(p.read_text()).get("islands_table")]
    )
    doc = yaml.safe_load(source.read_text())
    table = tmp_path / "table.csv"
    lines = (source.parent / doc["islands_table"]).read_text().splitlines()
    action = rng.choice(
        ["cell", "cell", "cell", "drop-column", "duplicate-row", "empty", "garbage"]
    )
    if action == "cell":
        row = rng.randrange(1, len(lines))
        cells = lines[row].split(",")
        cells[rng.randrange(len(cells))] = rng.choice(TABLE_BAD_CELLS)
        lines[row] = ",".join(cells)
    elif action == "drop-column":
        column = rng.randrange(len(lines[0].split(",")))
        lines = [",".join(c for i, c in enumerate(li.split(",")) if i != column) for li in lines]
    elif action == "duplicate-row":
        lines.append(lines[rng.randrange(1, len(lines))])
    elif action == "empty":
        lines = lines[:1]
    else:
        lines.insert(rng.randrange(1, len(lines)), "#,@,\x00,,")
    table.write_text("\n".join(lines) + "\n")
    doc["islands_table"] = table.name
    path = tmp_path / "instance.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    result = invoke("islands", str(path), "--format", "json")
    _assert_names_file(result, str(table))
    if action != "cell":
        assert result.exit_code == 2, (action, result.stdout)


SPACE_CASES = _cases(SPACES, 3)


@pytest.mark.parametrize(("source", "seed"), SPACE_CASES, ids=_ids(SPACE_CASES))
def test_mutated_space_files(source: Path, seed: int, tmp_path: Path) -> None:
    mutated, _ = mutate(yaml.safe_load(source.read_text()), random.Random(seed))
    path = tmp_path / source.name
    path.write_text(yaml.safe_dump(mutated, sort_keys=False))
    if "shapes" in yaml.safe_load(source.read_text()):  # an FSDP space: load it as bench fsdp does
        from perfmodel.bench.fsdp import load_cases
        from perfmodel.spec.errors import UserInputError

        try:
            cases = load_cases(path)
        except UserInputError as err:
            assert str(path) in str(err) and "To fix:" in str(err)
        else:
            assert all(c.micro_batch >= 1 and c.grad_accum >= 1 and c.seq_len >= 1 for c in cases)
        return
    result = invoke("bench", "compute", "--space", str(path), "--dry-run", "-n", "2", "-o",
                    str(tmp_path / "out.csv"))
    _assert_names_file(result, str(path))


PROFILE_CASES = _cases(PROFILES, 4)


@pytest.mark.parametrize(("source", "seed"), PROFILE_CASES, ids=_ids(PROFILE_CASES))
def test_mutated_profiles(source: Path, seed: int, tmp_path: Path) -> None:
    mutated, _ = mutate(yaml.safe_load(source.read_text()), random.Random(seed))
    path = tmp_path / source.name
    path.write_text(yaml.safe_dump(mutated, sort_keys=False))
    result = invoke("validate", str(path), str(COMPUTE_DATA), "--format", "json")
    _assert_names_file(result, str(path))


CONFIG_CASES = _cases(CONFIGS, 5)


@pytest.mark.parametrize(("source", "seed"), CONFIG_CASES, ids=_ids(CONFIG_CASES))
def test_mutated_model_configs(source: Path, seed: int, tmp_path: Path) -> None:
    mutated, _ = mutate(json.loads(source.read_text()), random.Random(seed))
    path = tmp_path / source.name
    path.write_text(json.dumps(mutated, allow_nan=True))
    result = invoke("memory", str(path), "--gpu", "H100-SXM5-80GB", "--seq-len", "128", "--format",
                    "json")
    _assert_names_file(result, str(path), path.name)


@pytest.mark.parametrize("seed", range(MUTATIONS_PER_FILE))
def test_mutated_benchmark_datasets(seed: int, tmp_path: Path) -> None:
    rng = random.Random(6000 + seed)
    lines = COMPUTE_DATA.read_text().splitlines()
    row = rng.randrange(1, len(lines))
    cells = lines[row].split(",")
    cells[rng.randrange(len(cells))] = rng.choice(TABLE_BAD_CELLS)
    lines[row] = ",".join(cells)
    path = tmp_path / "compute.csv"
    path.write_text("\n".join(lines) + "\n")
    result = invoke("validate", str(PROFILES[0]), str(path), "--format", "json")
    _assert_names_file(result, str(path))
