"""Hostile inputs at the performance model's boundaries (issue 30): config.json files, recipe YAML
files, the flags of predict / simulate / streaming / memory, full or missing outputs, and the
size of messages.

Each case is what a careless or adversarial user would type; `hostile.run` holds every run to the
contract (no traceback, no internal error, exit 2 with "To fix:", under 60 s), and each test
checks the answer itself: refused naming the file, field and value, or accepted with numbers
that say what the input says. Ids start with the case's kind (see tests/hostile.py).
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import sys
from pathlib import Path

import pytest
from hostile import CONFIGS, INSTANCES, ROOT, accepted, case_ids, refused, run

from perfmodel.spec.errors import UserInputError
from perfmodel.spec.inputs import LIMITS, MAX_MESSAGE_CHARS
from planner.cli import report_error

MEMORY = ("--gpu", "H100-SXM5-80GB", "--seq-len", "128", "--format", "json")
PREDICT = ("predict", "tiny-llama", "--gpu", "H100-SXM5-80GB", "--seq-len", "128", "--format",
           "json")
STREAM = ("streaming", "tiny-llama", "--gpu", "H100-SXM5-80GB", "--seq-len", "128",
          "--fragments", "2", "--format", "json")
BASE_CONFIG = json.loads((CONFIGS / "llama32_1b.json").read_text())
BIG = "1" + "0" * 399
"""A 400-digit integer."""
ALIAS_BOMB = ("a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
              "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c]\n"
              "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e]\n"
              "g: [*f, *f, *f, *f, *f, *f, *f, *f, *f]\n")
"""About 300 bytes expanding to ~10^7 nodes (a "billion laughs")."""


def _config(tmp_path: Path, **changes: object) -> Path:
    """A copy of a real config.json with fields changed (a str value starting with '@' is raw
    JSON text: a 400-digit integer, NaN)."""
    data = dict(BASE_CONFIG)
    raw: dict[str, str] = {}
    for key, value in changes.items():
        if isinstance(value, str) and value.startswith("@"):
            data[key] = f"__RAW_{key}__"
            raw[key] = value[1:]
        else:
            data[key] = value
    text = json.dumps(data)
    for key, value in raw.items():
        text = text.replace(f'"__RAW_{key}__"', value)
    path = tmp_path / "config.json"
    path.write_text(text)
    return path


# ---- config.json ---------------------------------------------------------------------------

CONFIG_CASES = [
    ("types", "tie-string-false", {"tie_word_embeddings": "false"}, ["tie_word_embeddings",
                                                                     "not a boolean"]),
    ("types", "tie-string-true", {"tie_word_embeddings": "true"}, ["tie_word_embeddings"]),
    ("types", "tie-int", {"tie_word_embeddings": 0}, ["tie_word_embeddings", "true or false"]),
    ("types", "attention-bias-yes", {"attention_bias": "yes"}, ["attention_bias"]),
    ("types", "mlp-bias-1", {"mlp_bias": 1}, ["mlp_bias"]),
    ("types", "hidden-400-digits", {"hidden_size": "@" + BIG}, ["400-digit integer"]),
    ("types", "layers-400-digits", {"num_hidden_layers": "@-" + BIG}, ["400-digit integer"]),
    ("types", "hidden-1e300", {"hidden_size": 1e300}, ["hidden_size", "1e+300"]),
    ("types", "vocab-nan", {"vocab_size": "@NaN"}, ["NaN"]),
    ("types", "heads-infinity", {"num_attention_heads": "@Infinity"}, ["Infinity"]),
    ("types", "hidden-float", {"hidden_size": 2048.0}, ["hidden_size", "2048.0"]),
    ("types", "heads-string", {"num_attention_heads": "32"}, ["num_attention_heads", "'32'"]),
    ("work", "ten-million-layers", {"num_hidden_layers": 10**7}, ["num_hidden_layers",
                                                                  "10000000", "1,024"]),
    ("work", "huge-vocab", {"vocab_size": 2**40}, ["vocab_size", "16,777,216"]),
    ("work", "huge-intermediate", {"intermediate_size": 2**40}, ["intermediate_size"]),
    ("work", "huge-head-dim", {"head_dim": 2**40}, ["head_dim"]),
]


@pytest.mark.parametrize(("kind", "name", "changes", "needles"), CONFIG_CASES,
                         ids=case_ids(CONFIG_CASES))
def test_config_json(tmp_path: Path, kind: str, name: str, changes: dict[str, object],
                     needles: list[str]) -> None:
    path = _config(tmp_path, **changes)
    refused(run("memory", path, *MEMORY), str(path), *needles)


def test_types_config_booleans_read_as_written(tmp_path: Path) -> None:
    """One rule: JSON true/false are read as they say; null (or no key) is false."""
    sharded = {}
    for value in (True, False, None):
        folder = tmp_path / str(value)
        folder.mkdir()
        record = json.loads(accepted(run("memory", _config(folder, tie_word_embeddings=value),
                                         *MEMORY)))
        sharded[value] = record["breakdown_gib"]["sharded_params"]
    # an untied LM head is a second vocab x hidden matrix: more sharded parameters
    assert sharded[False] > sharded[True]
    assert sharded[None] == sharded[False]


@pytest.mark.parametrize(("kind", "name", "content", "needle"), [
    ("environment", "latin1-bytes", "{\"model_type\": \"llama\", \"name\": \"caf\xe9\"}", "UTF-8"),
    ("environment", "empty-file", "", "not valid JSON"),
    ("environment", "deep-nesting", "[" * 100_000 + "]" * 100_000, "nests too deeply"),
    ("types", "json-list", "[1, 2]", "expected a JSON object"),
], ids=lambda v: v if isinstance(v, str) and len(v) < 30 else "")
def test_config_file_content(tmp_path: Path, kind: str, name: str, content: str,
                             needle: str) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(content.encode("latin-1"))
    refused(run("memory", path, *MEMORY), str(path), needle)


def test_environment_config_directory_without_config(tmp_path: Path) -> None:
    refused(run("memory", tmp_path, *MEMORY), str(tmp_path), "not found")


# ---- recipe files --------------------------------------------------------------------------

RECIPE_CASES = [
    ("types", "duplicate-key", "ac: none\nloss: fused\nac: full\n",
     ["duplicate key 'ac'", "lines 1 and 3"]),
    ("types", "bool-as-string", "reshard_blocks_after_forward: 'false'\n",
     ["reshard_blocks_after_forward"]),
    ("types", "int-400-digits", f"loss_chunks: {BIG}\n", ["loss_chunks", "400-digit"]),
    ("types", "float-for-int", "prefetch_depth: 1.5\n", ["prefetch_depth"]),
    ("types", "not-a-mapping", "- ac\n- none\n", ["recipe must be a mapping"]),
    ("messages", "unknown-base", "base: torchtitn\n", ["field 'base'", "torchtitn",
                                                         "did you mean 'torchtitan'"]),
    ("messages", "base-list", "base: [paper]\n", ["field 'base'"]),
    ("messages", "outer-not-mapping", "outer: 3\n", ["field 'outer'"]),
    ("messages", "alias-bomb", ALIAS_BOMB, ["expands to more than"]),
]


@pytest.mark.parametrize(("kind", "name", "text", "needles"), RECIPE_CASES,
                         ids=case_ids(RECIPE_CASES))
def test_recipe_file(tmp_path: Path, kind: str, name: str, text: str,
                     needles: list[str]) -> None:
    path = tmp_path / "recipe.yaml"
    path.write_text(text)
    err = refused(run(*PREDICT, "--recipe", path), str(path), *needles)
    assert len(err) < MAX_MESSAGE_CHARS + 2000


def test_environment_recipe_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "recipe.yaml"
    path.write_bytes(b"ac: n\xf6ne\n")
    refused(run(*PREDICT, "--recipe", path), str(path), "not UTF-8", "line 1")


@pytest.mark.parametrize("what", ["directory", "missing-yaml", "missing-path"])
def test_messages_recipe_paths_are_not_recipe_names(tmp_path: Path, what: str) -> None:
    """A folder or a missing path is reported as such, never as an "unknown recipe"."""
    target = {"directory": tmp_path, "missing-yaml": tmp_path / "nope.yaml",
              "missing-path": tmp_path / "nope"}[what]
    err = refused(run(*PREDICT, "--recipe", target), str(target))
    assert "unknown recipe" not in err
    assert ("directory" if what == "directory" else "not found") in err


def test_consistency_prefetch_depth_costs_memory(tmp_path: Path) -> None:
    """A deeper prefetch holds more all-gathered blocks: the memory model counts them (a depth of
    a million once sped the step while memory ignored it)."""
    peaks = []
    for depth in (1, 1_000_000):
        path = tmp_path / f"d{depth}.yaml"
        path.write_text(f"prefetch_depth: {depth}\n")
        record = json.loads(accepted(run("predict", "Llama-3.2-1B", "--gpu", "H100-SXM5-80GB",
                                         "--seq-len", "2048", "--recipe", path, "--format",
                                         "json")))
        peaks.append(record["peak_gib"])
    assert peaks[1] > peaks[0]


def test_messages_recipe_fragments_are_not_blamed_on_a_flag(tmp_path: Path) -> None:
    path = tmp_path / "recipe.yaml"
    path.write_text("outer: {num_fragments: 40}\n")
    err = refused(run("streaming", "tiny-llama", "--gpu", "H100-SXM5-80GB", "--seq-len", "128",
                      "--recipe", path), "outer.num_fragments", "40", "2 layers")
    assert "--fragments 40" not in err
    err = refused(run("streaming", "tiny-llama", "--gpu", "H100-SXM5-80GB", "--seq-len", "128"),
                  "default --fragments")
    assert "--fragments 3:" not in err


# ---- flags -----------------------------------------------------------------------------------

FLAG_CASES = [
    # Streaming: --step-time-s acts only with --bandwidth-for-utilisation, and in range there
    *[("consistency", f"step-time-{v}-without-bandwidth", (*STREAM, "--step-time-s", v),
       ["--step-time-s", "no effect"]) for v in ("0", "-1", "1e-300", "5")],
    ("types", "step-time-1e300-without-bandwidth", (*STREAM, "--step-time-s", "1e300"),
     ["--step-time-s", "1e+15"]),
    *[("types", f"step-time-{v}", ("streaming", "tiny-llama", "--fragments", "2",
                                   "--bandwidth-for-utilisation", "--step-time-s", v),
       ["--step-time-s"]) for v in ("0", "-1", "1e-300", "1e300", "1e-7", "2e6")],
    ("consistency", "utilisation-without-bandwidth", (*STREAM, "--utilisation", "0.5"),
     ["--utilisation", "no effect"]),
    ("consistency", "steps-with-bandwidth", ("streaming", "tiny-llama", "--fragments", "2",
                                             "--bandwidth-for-utilisation", "--step-time-s", "1",
                                             "--steps", "10"), ["--steps", "no effect"]),
    ("consistency", "wan-with-example", ("streaming", "--example", "B", "--wan-gbit-s", "3"),
     ["--wan-gbit-s", "--example"]),
    ("consistency", "fragments-with-example", ("streaming", "--example", "A", "--fragments", "4"),
     ["--fragments"]),
    ("consistency", "single-island-bandwidth", ("streaming", "tiny-llama", "--fragments", "2",
                                                "--bandwidth-for-utilisation", "--step-time-s",
                                                "1", "--islands", "1"),
     ["--islands 1", "exchanges nothing"]),
    ("consistency", "wan-with-same-cluster", (*STREAM, "--islands-same-cluster", "--wan-gbit-s",
                                              "1"), ["--wan-gbit-s", "--islands-same-cluster"]),
    # predict / simulate: outer flags a strategy does not read
    ("consistency", "fsdp-wan", (*PREDICT, "--wan-gbit-s", "1"), ["--wan-gbit-s", "fsdp"]),
    ("consistency", "fsdp-inner-steps", (*PREDICT, "--inner-steps", "50"), ["--inner-steps"]),
    ("consistency", "fsdp-dtype", (*PREDICT, "--pseudo-gradient-dtype", "fp4"),
     ["--pseudo-gradient-dtype"]),
    ("consistency", "diloco-fragments", (*PREDICT, "--strategy", "diloco", "--fragments", "2"),
     ["--fragments", "diloco"]),
    ("consistency", "simulate-fsdp-steps", ("simulate", "tiny-llama", "--gpu", "H100-SXM5-80GB",
                                            "--seq-len", "128", "--steps", "5"),
     ["--steps", "fsdp"]),
    # bounded work
    ("work", "simulate-1e8-steps", ("simulate", "tiny-llama", "--gpu", "H100-SXM5-80GB",
                                    "--seq-len", "128", "--strategy", "diloco", "--steps",
                                    "100000000"), ["--steps", "100,000"]),
    ("work", "simulate-steps-times-islands", ("simulate", "tiny-llama", "--gpu", "H100-SXM5-80GB",
                                              "--seq-len", "128", "--strategy", "diloco",
                                              "--islands", "1000", "--steps", "1000"),
     ["islands", "100,000"]),
    ("work", "streaming-1e8-steps", (*STREAM, "--steps", "100000000"), ["--steps", "100,000"]),
    ("work", "streaming-delay-1e9", (*STREAM, "--delay", "1000000000"), ["--delay",
                                                                         "100,000"]),
    ("work", "streaming-sync-1e12", (*STREAM, "--sync-every", "1000000000000"),
     ["--sync-every"]),
    ("work", "streaming-sync-simulated", (*STREAM, "--sync-every", "500000"),
     ["simulated steps", "100,000"]),
    ("work", "streaming-max-delay", (*STREAM, "--max-delay-steps", "10000000"),
     ["--max-delay-steps"]),
    ("work", "tuner-worst-case", ("streaming", "Llama-3.1-405B", "--gpu", "H100-SXM5-80GB",
                                  "--seq-len", "128", "--sync-every", "50000"), ["tuner"]),
    ("work", "bandwidth-bisection", ("streaming", "tiny-llama", "--fragments", "2",
                                     "--bandwidth-for-utilisation", "--step-time-s", "1",
                                     "--sync-every", "60000"), ["bandwidth search"]),
    ("work", "predict-streaming-steady-state", (*PREDICT, "--strategy", "streaming-diloco",
                                                "--fragments", "2", "--inner-steps", "900000"),
     ["3H+τ+1"]),
    ("work", "predict-islands", (*PREDICT, "--strategy", "diloco", "--islands", "100000"),
     ["--islands", "1,024"]),
    ("work", "memory-nodes", ("memory", "tiny-llama", *MEMORY, "--nodes", "1000000"),
     ["--nodes", "16,384"]),
    ("work", "predict-seq-len", ("predict", "tiny-llama", "--gpu", "H100-SXM5-80GB",
                                 "--seq-len", "100000000"), ["--seq-len", "16,777,216"]),
    ("work", "predict-accum", (*PREDICT, "--accum", "1000000000"), ["--accum"]),
    ("work", "sweep-range-1e8", ("sweep", "tiny-llama", "--gpu", "H100-SXM5-80GB", "--seq-len",
                                 "128", "--micro-batches", "1-100000000"),
     ["--micro-batches", "1,048,576"]),
    ("work", "sweep-range-300", ("sweep", "tiny-llama", "--gpu", "H100-SXM5-80GB", "--seq-len",
                                 "128", "--micro-batches", "1-300"), ["300 values", "256"]),
    ("work", "sweep-list-1000", ("sweep", "tiny-llama", "--gpu", "H100-SXM5-80GB", "--seq-len",
                                 "128", "--nodes", ",".join(["1"] * 1000)), ["1,000 values"]),
    ("messages", "sweep-range-shape", ("sweep", "tiny-llama", "--gpu", "H100-SXM5-80GB",
                                       "--seq-len", "128", "--micro-batches", "1-2-3"),
     ["LOW-HIGH"]),
    ("types", "int-flag-400-digits", (*PREDICT, "--micro-batch", BIG), ["--micro-batch",
                                                                         "400-character"]),
    ("types", "float-flag-1e300", ("plan", INSTANCES / "small-fsdp.yaml", "--budget-usd",
                                   "1e300"), ["--budget-usd"]),
    ("types", "wan-1e-300", (*PREDICT, "--strategy", "diloco", "--wan-gbit-s", "1e-300"),
     ["--wan-gbit-s", "1e-06"]),
    ("types", "latency-1e9", (*PREDICT, "--strategy", "diloco", "--wan-latency-ms", "1e9"),
     ["--wan-latency-ms"]),
]


@pytest.mark.parametrize(("kind", "name", "argv", "needles"), FLAG_CASES,
                         ids=case_ids(FLAG_CASES))
def test_flags(kind: str, name: str, argv: tuple[str, ...], needles: list[str]) -> None:
    refused(run(*argv), *needles)


@pytest.mark.parametrize("target", ["1e-9", "0.999999"])
def test_consistency_bandwidth_floor_is_not_an_answer(target: str) -> None:
    """A target reached at the bisection's floor has no number (the smallest bandwidth lies
    below the floor), and says so."""
    out = accepted(run("streaming", "tiny-llama", "--fragments", "2", "--step-time-s", "1",
                       "--bandwidth-for-utilisation", "--utilisation", target, "--format",
                       "json"))
    (row,) = json.loads(out)["rows"]
    if row["gbit_s"] is None:
        assert row["note"], row
    else:
        assert row["gbit_s"] > 1e3 * 8 / 1e9 and row["reached_utilisation"] >= float(target)


def test_consistency_bandwidth_tiny_target_is_below_the_floor() -> None:
    out = accepted(run("streaming", "tiny-llama", "--fragments", "2", "--step-time-s", "1",
                       "--bandwidth-for-utilisation", "--utilisation", "1e-9", "--format",
                       "json"))
    (row,) = json.loads(out)["rows"]
    assert row["gbit_s"] is None and "search floor" in row["note"]


# ---- the environment: full devices, unwritable places ---------------------------------------

FULL = Path("/dev/full")
needs_dev_full = pytest.mark.skipif(not FULL.exists(), reason="no /dev/full on this system")


@needs_dev_full
@pytest.mark.parametrize(("name", "argv", "needle"), [
    ("islands-o", ("islands", INSTANCES / "small-fsdp.yaml", "-o", FULL), "--output /dev/full"),
    ("pareto-o", ("pareto", INSTANCES / "small-fsdp.yaml", "-o", FULL, "--format", "json"),
     "--output /dev/full"),
    ("simulate-trace", ("simulate", "tiny-llama", "--gpu", "H100-SXM5-80GB", "--seq-len", "128",
                        "--trace", FULL), "--trace /dev/full"),
    ("streaming-trace", (*STREAM, "--trace", FULL), "--trace /dev/full"),
])
def test_environment_full_device(name: str, argv: tuple[str, ...], needle: str) -> None:
    refused(run(*argv), "No space left on device", needle)


@needs_dev_full
@pytest.mark.parametrize("argv", [
    ("catalog", "models"),
    ("islands", str(INSTANCES / "small-fsdp.yaml"), "--format", "json"),
    ("predict", "tiny-llama", "--gpu", "H100-SXM5-80GB", "--seq-len", "128"),
])
def test_environment_full_standard_output(argv: tuple[str, ...], monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """stdout on a full device: exit 2 naming standard output (run in-process on a real
    /dev/full file object, as a shell redirection would give)."""
    from planner.cli import main

    with FULL.open("w") as full:
        monkeypatch.setattr(sys, "stdout", full)
        with pytest.raises(SystemExit) as info:
            main(list(argv))
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "standard output" in err and "To fix:" in err and "Traceback" not in err


@pytest.mark.parametrize("argv", [
    ("islands", str(INSTANCES / "small-fsdp.yaml"), "-o"),
    ("simulate", "tiny-llama", "--gpu", "H100-SXM5-80GB", "--seq-len", "128", "--trace"),
])
def test_environment_output_under_a_file(tmp_path: Path, argv: tuple[str, ...]) -> None:
    """An output whose folder cannot exist (its parent is a file): exit 2 naming it."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    target = blocker / "out.csv" if "-o" in argv else blocker / "trace.json"
    refused(run(*argv, target), str(target))


def test_environment_missing_folders_are_created(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "t.csv"
    accepted(run("islands", INSTANCES / "small-fsdp.yaml", "-o", target))
    assert target.is_file()


# ---- messages --------------------------------------------------------------------------------

def test_messages_are_capped() -> None:
    err = UserInputError("x" * 1_000_000, hint="y" * 50_000)
    buffer = io.StringIO()
    with contextlib.redirect_stderr(buffer):
        assert report_error(err) == 2
    text = buffer.getvalue()
    assert len(text) < MAX_MESSAGE_CHARS + 1500 and "more characters left out" in text


def test_limits_are_the_readme_table() -> None:
    """The README's Limits section lists every limit with its maximum (one table, one home)."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Limits"):]
    section = section[: section.index("\n## ", 4)] if "\n## " in section[4:] else section
    for key, limit in LIMITS.items():
        line = next((li for li in section.splitlines() if li.startswith(f"| `{key}` |")), None)
        assert line is not None, key
        number = re.sub(r"[,\s]", "", line.split("|")[2])
        assert float(number) == pytest.approx(limit.maximum), (key, line)


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero on this system")
@pytest.mark.parametrize("argv", [
    (*PREDICT, "--recipe", "/dev/zero"),
    ("islands", "/dev/zero"),
    ("bench", "compute", "--space", "/dev/zero", "-o", "OUT", "--dry-run"),
], ids=["environment-recipe-dev-zero", "environment-instance-dev-zero",
        "environment-space-dev-zero"])
def test_environment_endless_input_is_refused(tmp_path: Path, argv: tuple[str, ...]) -> None:
    """A file that never ends (a device, a pipe) is read to the 64 MiB limit, not into memory."""
    argv = tuple(str(tmp_path / "o.csv") if a == "OUT" else a for a in argv)
    refused(run(*argv), "/dev/zero", "limit")
