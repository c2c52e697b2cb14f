"""The cross-validation cache (`perfmodel.profiles.cache`): a key holds exactly while its inputs,
its code and its parameters are unchanged; `check` never recomputes and names what changed; the
stored numbers round-trip exactly; the shipped cache holds for the shipped data and code."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from perfmodel.profiles.cache import ResultCache, StaleCacheError, cache_key, code_closure

ROOT = Path(__file__).resolve().parent.parent


def test_code_closure_follows_imports_and_ignores_prose() -> None:
    closure = code_closure(["perfmodel.costs.compute"])
    assert {"perfmodel.costs.compute", "perfmodel.costs.features", "perfmodel.costs.nnls",
            "perfmodel.spec.arch", "perfmodel", "perfmodel.costs"} <= set(closure)
    assert "perfmodel.sim.fsdp" not in closure  # compute never imports the simulator


def test_key_changes_with_input_code_and_params(tmp_path: Path) -> None:
    data = tmp_path / "data.csv"
    data.write_text("a,b\n1,2\n")
    key = cache_key([data], ["perfmodel.costs.nnls"], {"seed": 0})
    assert cache_key([data], ["perfmodel.costs.nnls"], {"seed": 0}) == key
    assert cache_key([data], ["perfmodel.costs.nnls"], {"seed": 1}) != key
    assert cache_key([data], ["perfmodel.costs.compute"], {"seed": 0}) != key
    data.write_text("a,b\n1,3\n")
    changed = cache_key([data], ["perfmodel.costs.nnls"], {"seed": 0})
    assert changed != key
    assert changed.differences(key.as_dict()) == [f"input {data} changed"]


def test_modes(tmp_path: Path) -> None:
    data = tmp_path / "data.csv"
    data.write_text("x\n")
    key = cache_key([data], ["perfmodel.costs.nnls"])
    calls: list[int] = []

    def compute() -> dict[str, object]:
        calls.append(1)
        return {"oof": [0.1, 1 / 3, math.nan], "n": 3}

    folder = tmp_path / "cache"
    with pytest.raises(StaleCacheError, match="no cached result") as err:
        ResultCache(folder=folder, mode="check", refresh_command="run X --refresh").get(
            "cv", key, compute)
    assert err.value.exit_code == 1 and "To fix: run X --refresh" in str(err.value)
    first = ResultCache(folder=folder).get("cv", key, compute)
    again = ResultCache(folder=folder, mode="check").get("cv", key, compute)
    assert len(calls) == 1 and again["oof"][:2] == [0.1, 1 / 3] and math.isnan(again["oof"][2])
    assert first["oof"][:2] == again["oof"][:2]  # fresh and cached results are the same values
    ResultCache(folder=folder, mode="refresh").get("cv", key, compute)
    assert len(calls) == 2
    data.write_text("y\n")
    with pytest.raises(StaleCacheError, match="data.csv changed"):
        ResultCache(folder=folder, mode="check").get(
            "cv", cache_key([data], ["perfmodel.costs.nnls"]), compute)


def test_shipped_cache_holds_for_the_shipped_data_and_code() -> None:
    """Every shipped result is keyed on files and modules that still hash to its key (CI's
    generator --check relies on this; a stale entry names the refresh command there)."""
    folder = ROOT / "catalogs" / "cv-cache"
    entries = sorted(folder.glob("*.json"))
    assert entries, "no shipped cross-validation cache"
    for path in entries:
        stored = json.loads(path.read_text())["key"]
        inputs = [ROOT / name for name in stored["inputs"]]
        entry_modules = list(stored["code"])
        fresh = cache_key(inputs, entry_modules, stored["params"])
        assert fresh.differences(stored) == [], path.name
