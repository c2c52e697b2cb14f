"""Issue 29, prediction commands: answers first at 80 columns, provenance on the page, and a
configuration that does not fit exits 1 with a computed fix that, applied, fits.

Every command runs in process through `planner.cli.main` (the `run_cli` fixture) with
COLUMNS=80, as a user's terminal would set it."""

from __future__ import annotations

import json
import re

import pytest
from rich.cells import cell_len

from perfmodel.numbers import (
    format_duration,
    format_number,
    format_percent,
    format_rate,
    format_usd,
)
from perfmodel.spec.catalog import get_gpu

MAX_LINES = 45
WIDTH = 80

FITTING = {
    "predict": ["predict", "Llama-3-8B", "--gpu", "H100-SXM5-80GB", "--seq-len", "8192"],
    "predict-pp": ["predict", "Llama-3.2-1B", "--gpu", "A100-SXM4-80GB", "--seq-len", "2048",
                   "--pp", "2", "--accum", "4"],
    "predict-diloco": ["predict", "Llama-3.2-1B", "--gpu", "H200-SXM-141GB", "--seq-len", "2048",
                       "--strategy", "diloco"],
    "memory": ["memory", "Llama-3-8B", "--gpu", "H100-SXM5-80GB", "--seq-len", "8192"],
    "simulate": ["simulate", "Llama-3.2-1B", "--gpu", "A100-PCIe-80GB", "--seq-len", "1024"],
    "simulate-streaming": ["simulate", "Llama-3.2-1B", "--gpu", "A100-PCIe-80GB", "--seq-len",
                           "1024", "--strategy", "streaming-diloco"],
    "catalog-models": ["catalog", "models"],
    "catalog-gpus": ["catalog", "gpus"],
    "catalog-prices": ["catalog", "prices"],
    "catalog-links": ["catalog", "links"],
    "layout": ["layout", "Llama-3.2-1B", "--gpu", "H100-SXM5-80GB", "--nodes", "2", "--seq-len",
               "2048", "--global-batch", "64", "--max-pp", "2"],
    "sweep": ["sweep", "Llama-3-8B", "--gpu", "H100-SXM5-80GB", "--seq-len", "8192"],
    "streaming": ["streaming", "--example", "all"],
}
"""Commands whose answer-first view is checked, and a word the answer (first 3 lines) holds."""
ANSWER_WORDS = {
    "predict": ("per step", "tok/s/GPU", "MFU", "— fits"),
    "predict-pp": ("per step", "— fits"),
    "predict-diloco": ("per step", "2 islands", "— fits"),
    "memory": ("peak", "— fits", "largest micro-batch"),
    "simulate": ("per step", "bound"),
    "simulate-streaming": ("inner steps", "blocked"),
    "catalog-models": ("catalog models",),
    "catalog-gpus": ("catalog GPUs",),
    "catalog-prices": ("prices", "cheapest"),
    "catalog-links": ("catalog links",),
    "layout": ("best:", "tok/s/GPU", "MFU"),
    "sweep": ("best fitting micro-batch", "tok/s/GPU", "-bound"),
    "streaming": ("A: F 3, τ 2, H 6", "never blocked", "tuner —"),
}


@pytest.fixture
def cli80(run_cli, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    return run_cli


def _fits_the_terminal(text: str) -> list[str]:
    lines = text.rstrip("\n").split("\n")
    wide = [line for line in lines if cell_len(line) > WIDTH]
    assert not wide, wide
    assert len(lines) <= MAX_LINES, (len(lines), text)
    return lines


@pytest.mark.parametrize("name", list(FITTING))
def test_answer_first_at_80_columns(cli80, name: str) -> None:
    result = cli80(*FITTING[name])
    assert result.code == 0, result.err
    lines = _fits_the_terminal(result.out)
    head = " ".join(line.strip() for line in lines[:3])
    for word in ANSWER_WORDS[name]:
        assert word in head, (word, lines[:3])
    assert "Traceback" not in result.err


@pytest.mark.parametrize("name", ["predict", "simulate"])
def test_provenance_on_the_page(cli80, name: str) -> None:
    """The profile and its provenance are stated; a GPU resting on priors gets one warning."""
    calibrated = cli80(*FITTING["predict"]).out
    assert "profile H100-SXM5-80GB-calibrated (calibrated)" in calibrated
    assert "warning" not in calibrated
    args = (FITTING[name] if name == "simulate" else
            ["predict", "Llama-3.2-1B", "--gpu", "A100-PCIe-80GB", "--seq-len", "1024"])
    prior = cli80(*args).out
    assert "(prior)" in prior
    warnings = [line for line in prior.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "prior" in warnings[0]


def test_memory_states_the_profile(cli80) -> None:
    out = cli80(*FITTING["memory"]).out
    assert "GPU profile H100-SXM5-80GB-calibrated (calibrated)" in out
    record = json.loads(cli80(*FITTING["memory"], "--format", "json").out)
    assert record["provenance"] == "calibrated" and record["schema_version"] == 2


def test_wide_shows_every_field(cli80, monkeypatch: pytest.MonkeyPatch) -> None:
    record = json.loads(cli80(*FITTING["predict"], "--format", "json").out)
    assert record.pop("schema_version") == 3
    wide = cli80(*FITTING["predict"], "--wide").out
    assert all(key in wide for key in record), [k for k in record if k not in wide]
    memory = json.loads(cli80(*FITTING["memory"], "--format", "json").out)
    wide_memory = cli80(*FITTING["memory"], "--wide").out
    assert all(part in wide_memory for part in memory["breakdown_gib"])
    assert f"{memory['peak_gib']:.2f} GiB fits" in wide_memory
    sim = json.loads(cli80(*FITTING["simulate"], "--format", "json").out)
    wide_sim = cli80(*FITTING["simulate"], "--wide").out
    assert all(key in wide_sim for key in sim)
    monkeypatch.setenv("COLUMNS", "1000")  # --wide folds cells at 80 columns, as before
    assert "source" in cli80("catalog", "gpus", "--wide").out
    prices = cli80("catalog", "prices", "--wide").out
    assert "usd_per_gpu_hour" in prices and "offer" in prices


@pytest.mark.parametrize("name", ["predict", "predict-pp", "memory"])
def test_interval_table_fits_the_terminal(cli80, name: str) -> None:
    """Issue 27: the headline figures' p10 / p50 / p90 beside the point, at 80 columns."""
    lines = _fits_the_terminal(cli80(*FITTING[name]).out)
    header = next(i for i, line in enumerate(lines) if line.split()[:1] == ["figure"])
    assert lines[header].split() == ["figure", "point", "p10", "p50", "p90"]
    assert any("80 % band from the" in line for line in lines[:header])
    assert any(line.split()[:2] in (["step", "(s)"], ["peak", "GiB"])
               for line in lines[header + 2:])


def test_json_keeps_its_keys(cli80) -> None:
    """JSON gains schema_version only: the keys users read stay."""
    record = json.loads(cli80(*FITTING["predict"], "--format", "json").out)
    for key in ("step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "mfu", "bound",
                "peak_gib", "usable_memory_gib", "fits", "max_micro_batch", "profile",
                "provenance", "compute_provenance", "recipe", "layout"):
        assert key in record, key


# ---- does not fit: exit 1 with the computed fix ------------------------------------------------

_FIX = re.compile(r"To fix: pass (.+?) \(")


def _apply(args: list[str], flags: list[str]) -> list[str]:
    """`args` with each `--flag value` of `flags` set (replaced, or appended)."""
    out = list(args)
    for flag, value in zip(flags[::2], flags[1::2], strict=True):
        if flag in out:
            out[out.index(flag) + 1] = value
        else:
            out += [flag, value]
    return out


@pytest.mark.parametrize(
    ("args", "kind"),
    [
        (["predict", "Llama-3-8B", "--gpu", "A100-SXM4-40GB", "--seq-len", "8192"], "--ac"),
        (["predict", "Llama-3-8B", "--gpu", "A100-PCIe-80GB", "--seq-len", "8192",
          "--micro-batch", "64"], "--micro-batch"),
        (["memory", "Llama-3.1-70B", "--gpu", "H100-SXM5-80GB", "--seq-len", "4096",
          "--ac", "full"], "--nodes"),
        (["memory", "Llama-3.1-70B", "--gpu", "H100-SXM5-80GB", "--nodes", "2", "--seq-len",
          "4096"], "--tp"),
        (["predict", "Llama-3.1-70B", "--gpu", "H100-SXM5-80GB", "--seq-len", "8192"],
         "--nodes"),
    ],
)
def test_does_not_fit_exits_1_with_a_fix_that_fits(cli80, args: list[str], kind: str) -> None:
    refused = cli80(*args)
    assert refused.code == 1, (refused.out, refused.err)
    assert "Traceback" not in refused.err and "To fix:" in refused.err
    assert "does NOT fit" in refused.out  # the answer line, first
    _fits_the_terminal(refused.out)
    assert "binding limit: GPU memory" in refused.err
    found = _FIX.search(refused.err)
    assert found, refused.err
    flags = found.group(1).split()
    assert flags[0] == kind, flags
    fixed = cli80(*_apply(args, flags), "--format", "json")
    assert fixed.code == 0, fixed.err
    record = json.loads(fixed.out)
    assert record["fits"] is True and record["peak_gib"] <= record["usable_memory_gib"]
    allowed = cli80(*args, "--allow-oom")
    assert allowed.code == 0 and "does NOT fit" in allowed.out
    _fits_the_terminal(allowed.out)


def test_does_not_fit_names_the_worst_pipeline_rank(cli80) -> None:
    refused = cli80("memory", "Llama-3.1-70B", "--gpu", "H100-SXM5-80GB", "--seq-len", "8192",
                    "--pp", "4", "--accum", "8")
    assert refused.code == 1 and "pipeline rank" in refused.err and "To fix:" in refused.err


def test_no_fix_found_says_what_was_tried(cli80) -> None:
    """405B at 8192 tokens on single-GPU 40 GB A100 nodes: its states alone (16 B per parameter)
    need more GPUs than 64x the nodes hold, so no change tried fits; the message says so (no
    invented fix) and still exits 1."""
    refused = cli80("predict", "Llama-3.1-405B", "--gpu", "A100-SXM4-40GB", "--nodes", "1",
                    "--gpus-per-node", "1",
                    "--seq-len", "8192", "--format", "json")
    assert refused.code == 1 and refused.out == ""
    assert "no change tried fits" in refused.err and "--allow-oom" in refused.err


def test_bigger_gpu_fix_is_a_catalog_gpu_with_more_memory(cli80) -> None:
    args = ["memory", "Llama-3-8B", "--gpu", "A100-SXM4-40GB", "--seq-len", "8192",
            "--micro-batch", "4"]
    refused = cli80(*args)
    gpu = re.search(r"--gpu (\S+) \(gpu: peak", refused.err)
    assert refused.code == 1 and gpu, refused.err
    bigger = get_gpu(gpu.group(1))
    assert bigger.usable_memory_bytes > get_gpu("A100-SXM4-40GB").usable_memory_bytes
    fixed = json.loads(cli80(*_apply(args, ["--gpu", bigger.name]), "--format", "json").out)
    assert fixed["fits"] is True


# ---- one number formatter ----------------------------------------------------------------------

def test_number_formatter() -> None:
    assert format_number(48.7501) == "48.75"
    assert format_number(6665.71) == "6,666"
    assert format_number(592229.0) == "592,200"
    assert format_number(8_030_261_248) == "8,030,261,248"  # counts stay exact
    assert format_number(0.450975) == "0.451"
    assert format_percent(0.450975) == "45.1 %"
    assert format_usd(1e-6) == "$0.0000010" and format_usd(17831.2) == "$17,831"
    assert format_usd(3.589) == "$3.59"
    assert format_duration(0.018143) == "18.14 ms"
    assert format_duration(48.7501 * 3600) == "2.031 days"
    assert format_duration(5 * 3600) == "5 h"
    assert format_rate(6454.49, "tok/s") == "6,454 tok/s"
    assert format_number(float("nan")) == "-"


def test_a_table_too_wide_becomes_records(capsys: pytest.CaptureFixture[str]) -> None:
    from planner.cli.common import emit_compact

    rows = [{f"column {i}": f"value number {i}" for i in range(8)} for _ in range(2)]
    emit_compact(rows, width=60)
    lines = capsys.readouterr().out.rstrip("\n").split("\n")
    assert all(cell_len(line) <= 60 for line in lines)
    assert lines[0].startswith("column 0") and "value number 0" in lines[0]
    assert "" in lines  # a blank line between the two records
    emit_compact(rows[:1] and [{"a": "1", "b": "2"}], width=60)
    table = capsys.readouterr().out.split("\n")
    assert table[0].split() == ["a", "b"]


def test_help_does_not_import_pandas_or_the_model() -> None:
    """`shardmeter --help` stays fast (issue 29: <= 0.5 s, benchmarks/bench_startup.py): it
    imports neither pandas nor the performance model's API."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys\nfrom planner.cli import main\ntry:\n    main(['--help'])\n"
            "except SystemExit:\n    pass\n"
            "print(sorted(m for m in ('pandas', 'perfmodel.api', 'sklearn') if m in sys.modules))")
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True,
                          check=True, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout


def test_simulate_names_the_files_it_wrote(cli80, tmp_path) -> None:
    trace = tmp_path / "a-rather-long-folder-name-for-the-trace" / "step.json"
    result = cli80(*FITTING["simulate"], "--trace", str(trace))
    assert result.code == 0 and f"wrote {trace}" in result.out and trace.exists()


# ---- planner commands (issue 29: pareto, plan, pareto --vary) ------------------------------------

CASE_STUDY = "instances/paper-case-study.yaml"
PLANNER = {
    "pareto": ["pareto", CASE_STUDY],
    "plan": ["plan", CASE_STUDY],
    "pareto-vary": ["pareto", CASE_STUDY, "--vary", "clusters.A.wan_gbit_s=1,10,100"],
    "plan-vary": ["plan", CASE_STUDY, "--vary", "training.inner_steps=100,500"],
}
"""The README's planner commands, rendered at 80 columns."""
PLANNER_ANSWER = {
    "pareto": ("fastest:", "cheapest:"),
    "plan": ("plan (fastest)",),
    "pareto-vary": ("robust choice",),
    "plan-vary": ("robust choice",),
}
"""What the first 10 lines say (the first line starts with the first of them)."""


@pytest.mark.parametrize("name", list(PLANNER))
def test_planner_answer_first_at_80_columns(cli80, name: str) -> None:
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    args = [str(root / a) if a.endswith(".yaml") else a for a in PLANNER[name]]
    result = cli80(*args)
    assert result.code == 0, result.err
    lines = _fits_the_terminal(result.out)
    words = PLANNER_ANSWER[name]
    assert lines[0].startswith(words[0]), lines[:3]
    head = "\n".join(lines[:10])
    for word in words:
        assert word in head, (word, lines[:10])
    if name == "pareto":  # what to rent where, and for how long and how much
        fastest = next(i for i, line in enumerate(lines) if line.startswith("fastest:"))
        cheapest = next(i for i, line in enumerate(lines) if line.startswith("cheapest:"))
        assert fastest < cheapest < 10
        assert "H200-SXM-141GB) @ RunPod community" in " ".join(x.strip() for x in lines[:10])
        assert "$" in lines[fastest] and ("days" in lines[fastest] or " h" in lines[fastest])
    if name == "plan-vary":  # one summary row per scenario, long plan labels named by number
        assert re.search(r"^s0 +plan 0", result.out, re.MULTILINE), result.out
        assert re.search(r"^s1 +plan ", result.out, re.MULTILINE), result.out
    assert "num_solves" not in result.out and "price_resolution" not in result.out


def test_fit_answers_first_at_80_columns(cli80, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`fit comm` on the shipped CPU dataset: the answer (what was fitted, where, the worst CV
    error) first, then the fit at 80 columns; --wide the former table."""
    from pathlib import Path

    data = Path(__file__).resolve().parent.parent / "catalogs/profiles/data/cpu-comm.csv"
    # a short output path: a path is one word, which a line of 80 columns must hold unbroken
    # (pytest-xdist's temporary folders alone are longer than 60 characters)
    monkeypatch.chdir(tmp_path)
    out = Path("cpu.yaml")
    result = cli80("fit", "comm", str(data), "-o", str(out), "--hardware", "cpu")
    assert result.code == 0, result.err
    lines = _fits_the_terminal(result.out)
    head = " ".join(line.strip() for line in lines[:3])
    assert head.startswith("fitted comm") and "worst CV MAPE" in head and str(out) in head
    assert "latency" in result.out and "GB/s" in result.out
    monkeypatch.setenv("COLUMNS", "1000")  # --wide folds cells at 80 columns, as before
    wide = cli80("fit", "comm", str(data), "-o", str(out), "--hardware", "cpu", "--wide")
    assert wide.code == 0 and "cv_mape_pct" in wide.out
