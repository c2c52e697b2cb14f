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


def test_calibrated_and_planner_parts_are_current(make_validation) -> None:
    assert make_validation.main(["--check", "--part", "calibrated", "--part", "planner"]) == 0


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
