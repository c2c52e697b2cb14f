"""Shipped profiles name their datasets by sha256: the files in the repository must match.

A profile's provenance (``provenance_detail.dataset`` / ``.datasets``) records the path, sha256
and row count of every dataset it was fitted from. If a dataset is edited without refitting, the
profile's coefficients no longer come from the file it cites; these tests catch that. The hash is
recomputed here with hashlib (not through perfmodel.profiles.profile) so a bug in the writer cannot
hide behind the same bug in the check.
"""

from __future__ import annotations

import csv
import hashlib
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
PROFILES = sorted((ROOT / "catalogs" / "profiles").glob("*.yaml"))
FITTED_KINDS = ("measured", "calibrated")
"""Provenance kinds fitted from data; they must cite at least one dataset."""


def _datasets(profile: Path) -> list[dict[str, Any]]:
    detail = (yaml.safe_load(profile.read_text()) or {}).get("provenance_detail") or {}
    entries = list(detail.get("datasets") or [])
    if "dataset" in detail:
        entries.append(detail["dataset"])
    return entries


def _kind(profile: Path) -> str | None:
    return ((yaml.safe_load(profile.read_text()) or {}).get("provenance_detail") or {}).get("kind")


def _mismatches(entries: list[dict[str, Any]], root: Path) -> list[str]:
    """Human-readable problems: missing file, sha256 or row count differing from the record."""
    problems = []
    for entry in entries:
        path = root / entry["path"]
        if not path.is_file():
            problems.append(f"{entry['path']}: missing")
            continue
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest != entry["sha256"]:
            problems.append(f"{entry['path']}: sha256 {digest} != recorded {entry['sha256']}")
        if "rows" in entry:
            with path.open(newline="") as fh:
                rows = sum(1 for _ in csv.DictReader(fh))
            if rows != entry["rows"]:
                problems.append(f"{entry['path']}: {rows} data rows != recorded {entry['rows']}")
    return problems


CITED = [(p, e) for p in PROFILES for e in _datasets(p)]


def test_fitted_profiles_cite_datasets() -> None:
    """Guards the hash test against passing vacuously (no profile cites anything)."""
    fitted = [p for p in PROFILES if _kind(p) in FITTED_KINDS]
    assert fitted, "no measured or calibrated profile found"
    for profile in fitted:
        assert _datasets(profile), f"{profile.name}: fitted profile names no dataset"
    assert any(p.name == "cpu-x86-2core.yaml" for p, _ in CITED)


@pytest.mark.parametrize(("profile", "entry"), CITED,
                         ids=[f"{p.stem}:{Path(e['path']).name}" for p, e in CITED])
def test_dataset_matches_recorded_hash(profile: Path, entry: dict[str, Any]) -> None:
    assert _mismatches([entry], ROOT) == [], (
        f"{profile.name} was fitted from a different {entry['path']}: refit the profile "
        "(python -m scripts.make_validation / make_calibrated_profiles.py) or restore the file")


def test_one_changed_byte_is_caught(tmp_path: Path) -> None:
    """The check itself detects a single flipped byte (and otherwise accepts the copy)."""
    _, entry = next((p, e) for p, e in CITED if p.name == "cpu-x86-2core.yaml")
    copy = tmp_path / entry["path"]
    copy.parent.mkdir(parents=True)
    shutil.copyfile(ROOT / entry["path"], copy)
    assert _mismatches([entry], tmp_path) == []
    data = bytearray(copy.read_bytes())
    middle = len(data) // 2
    data[middle] = ord("7") if data[middle] != ord("7") else ord("8")
    copy.write_bytes(bytes(data))
    problems = _mismatches([entry], tmp_path)
    assert any("sha256" in problem for problem in problems), problems
