"""docs/VALIDATION.md is the generator's output: parts (b) and (c) checked here (part (a) refits
the CPU regressions for minutes; CI runs `python -m scripts.make_validation --check` for all
three)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def make_validation():
    from scripts import make_validation as module

    return module


def test_doc_has_three_generated_parts(make_validation) -> None:
    text = (ROOT / "docs" / "VALIDATION.md").read_text()
    for name in make_validation.PARTS:
        assert make_validation._section(text, name), name


def test_check_fails_on_a_stale_part(make_validation, tmp_path: Path) -> None:
    doc = tmp_path / "VALIDATION.md"
    shutil.copy(ROOT / "docs" / "VALIDATION.md", doc)
    doc.write_text(doc.read_text().replace("calibrated CV MAPE", "calibrated CV MAPE (edited)", 1))
    assert make_validation.main(["--check", "--part", "calibrated", "--out", str(doc)]) == 1


def test_calibrated_part_names_prior_and_calibrated_errors(make_validation) -> None:
    body = make_validation._section((ROOT / "docs" / "VALIDATION.md").read_text(), "calibrated")
    assert "prior MAPE %" in body and "calibrated CV MAPE %" in body
    for gpu in ("A100-SXM4-40GB", "A100-SXM4-80GB", "H100-SXM5-80GB"):
        assert f"| {gpu} | full |" in body and f"| {gpu} | none |" in body


def _history_or_skip(make_validation):
    from scripts import git_history

    history = git_history.recorded(make_validation.PROFILE, make_validation._overlap_record)
    if not history:
        pytest.skip("no git history in this checkout")
    return history


def test_contention_factor_history_is_read_from_git(make_validation) -> None:
    """The CPU contention factor's earlier fits (issue 22: 12.0, then 8.0 on the same FSDP2 steps)
    come from the commits that recorded them, not from typed figures."""
    history = _history_or_skip(make_validation)
    by_commit = {r.short: r.value for r in history}
    assert by_commit["52c2105"][0] == 12.0 and by_commit["638ecad"][0] == 8.0
    assert by_commit["52c2105"][3] == by_commit["638ecad"][3]  # the same FSDP2 steps
    assert by_commit["52c2105"][4] != by_commit["638ecad"][4]  # other compute data
    text = make_validation.contention_history()
    assert "| 52c2105 |" in text and "12.00" in text and "max/min" in text


def test_caveat_reads_the_errors_before_the_aligned_feature(make_validation) -> None:
    _history_or_skip(make_validation)
    assert make_validation.before_aligned_errors() == {
        "Llama-3.2-1B": 20.12, "Phi-1.5": 24.70, "Gemma-2B": 24.37, "Yi-6B": 26.52}
    assert "20.12-26.52 %" in make_validation.notes_text()


def test_collection_text_reads_its_figures(make_validation) -> None:
    import pandas as pd

    models = pd.read_csv(ROOT / make_validation.COMPUTE, usecols=["model"])["model"].unique()
    text = make_validation.collected_text()
    sobol = sum(m.startswith("sobol-") for m in models)
    aligned = sum(m.startswith("aligned-") for m in models)
    assert f"({sobol} scrambled-Sobol shapes in the data" in text
    assert f"({aligned} more Sobol shapes" in text
