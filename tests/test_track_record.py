"""Each residual group's track record (perfmodel.uncertainty.track_record): the sides a miss fell
on, the entries part (d) scores, the shipped file's round trip and the line a band is printed
with."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from perfmodel.spec.errors import DatasetError
from perfmodel.uncertainty import coverage as coverage_module
from perfmodel.uncertainty.contract import COLUMNS
from perfmodel.uncertainty.track_record import (
    CROSS_CONFORMAL,
    HELD_OUT,
    PUBLISHED,
    TRACK_RECORD_JSON,
    TrackEntry,
    misses_clause,
    read_track_record,
    shipped_track_record,
    track_record_line,
    track_record_text,
)

ROOT = Path(__file__).resolve().parent.parent


def _entry(quantity: str, *, below: int = 1, above: int = 2, inside: int = 7,
           scored: str = HELD_OUT, group: str = "g") -> TrackEntry:
    return TrackEntry(group=group, scored=scored, quantity=quantity, sources=("s",),
                      cases=below + above + inside, inside=inside, below=below, above=above)


def test_a_miss_is_named_by_the_side_the_truth_fell_on() -> None:
    """A time ratio measured / predicted below its band is a faster truth; a throughput below
    its band a slower one; a memory peak below its band a smaller one."""
    assert _entry("step_time_s").outside_words() == {"faster": 1, "slower": 2}
    assert _entry("collective_time_s").outside_words() == {"faster": 1, "slower": 2}
    assert _entry("tokens_per_s_per_gpu").outside_words() == {"faster": 2, "slower": 1}
    assert _entry("peak_memory_bytes").outside_words() == {"smaller": 1, "larger": 2}


def test_an_entry_counts_every_case_once() -> None:
    with pytest.raises(ValueError, match="To fix"):
        TrackEntry(group="g", scored=HELD_OUT, quantity="step_time_s", sources=(), cases=5,
                   inside=3, below=1, above=0)
    with pytest.raises(ValueError, match="scored"):
        _entry("step_time_s", scored="guessed")


def test_entries_are_the_coverage_tables_all_rows_with_sides(tmp_path: Path) -> None:
    """One entry per group as `coverage` scores it (split on holdout rows, cross-conformal
    without), then the published runs as `printed_coverage` scores them."""
    path = tmp_path / "r.csv"
    lines = [",".join(COLUMNS)]
    lines += [f"prior,step_time_s,c{i},src,1.0,{1 + i / 100},calibration" for i in range(19)]
    # band 1.01..1.17 (see test_uncertainty): 8 inside, 2 slower (ratio 2.0), 3 faster (0.5)
    lines += [f"prior,step_time_s,h{i},held,1.0,{x},holdout"
              for i, x in enumerate([1.05] * 8 + [2.0] * 2 + [0.5] * 3)]
    lines += [f"memory,peak_memory_bytes,m{i},s,1.0,{1 + i / 100},calibration"
              for i in range(20)]
    path.write_text("\n".join(lines) + "\n")
    printed = [coverage_module.PrintedCase(group="prior", source=src, case=f"p{i}",
                                           measured=x, lower=90.0, upper=110.0, point=100.0,
                                           widened=False)
               for i, (src, x) in enumerate([("a", 100.0), ("a", 80.0), ("b", 120.0),
                                             ("b", 130.0)])]
    entries = coverage_module.track_entries(path, printed, level=0.8)
    by_kind = {(e.group, e.scored): e for e in entries}
    held = by_kind[("prior", HELD_OUT)]
    assert (held.cases, held.inside, held.below, held.above) == (13, 8, 3, 2)
    assert held.outside_words() == {"faster": 3, "slower": 2}
    rows = {(r.group, r.source): r for r in coverage_module.coverage(path)}
    assert held.covered == pytest.approx(rows[("prior", "held")].covered)
    crossed = by_kind[("memory", CROSS_CONFORMAL)]
    assert crossed.cases == 20 and crossed.covered == pytest.approx(rows[("memory", "s")].covered)
    published = by_kind[("prior", PUBLISHED)]
    assert (published.inside, published.below, published.above) == (1, 1, 2)
    assert published.outside_words() == {"faster": 2, "slower": 1}
    assert published.sources == ("a", "b")


def test_the_file_round_trips_and_a_missing_file_invents_nothing(tmp_path: Path) -> None:
    entries = [_entry("step_time_s", group="calibrated"),
               _entry("tokens_per_s_per_gpu", group="calibrated", scored=PUBLISHED),
               _entry("peak_memory_bytes", group="memory", scored=CROSS_CONFORMAL)]
    path = tmp_path / "track.json"
    path.write_text(track_record_text(entries, level=0.8))
    assert json.loads(path.read_text())["level"] == 0.8
    read = read_track_record(path)
    assert read == {"calibrated": tuple(entries[:2]), "memory": (entries[2],)}
    assert read_track_record(tmp_path / "absent.json") == {}
    for bad in ("{", '{"groups": {"g": [{"cases": 1}]}}', '{"groups": {"g": [{"group": "g", '
                '"scored": "held-out", "quantity": "q", "sources": [], "cases": 2, "inside": 1, '
                '"below": 0, "above": 0}]}}', "[]"):
        broken = tmp_path / "broken.json"
        broken.write_text(bad)
        read_track_record.cache_clear()
        with pytest.raises(DatasetError, match="not a track record") as err:
            read_track_record(broken)
        assert "make_validation" in (err.value.hint or "")


def test_the_line_names_each_groups_share_cases_and_sides() -> None:
    record = {"calibrated": (_entry("step_time_s", inside=7, below=0, above=1),
                             _entry("tokens_per_s_per_gpu", scored=PUBLISHED, inside=29,
                                    below=14, above=33))}
    line = track_record_line(["calibrated", "memory"], record)
    assert line is not None
    # most cases first: 29 of 76 = 38 %, the published runs faster (above) 33, slower 14
    assert "calibrated band held for 38 % of 76 published GPU runs (33 faster, 14 slower" in line
    assert "88 % of 8 held-out cases (1 slower than the band)" in line
    assert "memory band has no record on held-out data" in line
    assert track_record_line([], record) is None
    clause = misses_clause("calibrated", record)
    assert clause == ("on 76 published GPU runs, 47 such estimates fell outside their 80 % band "
                      "(33 faster, 14 slower)")
    assert misses_clause("memory", record) is None


def test_a_prior_warning_says_how_far_priors_missed(run_cli: Callable[..., Any]) -> None:
    """A plan on datasheet priors warns with the prior group's shipped record."""
    prior = max(shipped_track_record()["prior"], key=lambda e: e.cases)
    out = " ".join(run_cli("pareto", str(ROOT / "instances" / "paper-case-study.yaml")).out.split())
    assert "are datasheet priors: times are estimates; on" in out
    assert f"{prior.cases - prior.inside} such estimates fell outside their 80 % band" in out


def test_the_shipped_file_is_what_the_line_reads(run_cli: Callable[..., Any],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The shipped record has every group that forms a band; `predict` prints its line."""
    shipped = shipped_track_record()
    assert (ROOT / "catalogs" / TRACK_RECORD_JSON).is_file()
    assert {"measured", "calibrated", "prior", "memory"} <= set(shipped)
    calibrated = max(shipped["calibrated"], key=lambda e: e.cases)
    monkeypatch.setenv("COLUMNS", "80")
    result = run_cli("predict", "Llama-3-8B", "--gpu", "H100-SXM5-80GB", "--nodes", "1",
                     "--gpus-per-node", "8", "--seq-len", "2048", "--micro-batch", "1",
                     "--accum", "1")
    assert result.code == 0, result.err
    text = " ".join(result.out.split())
    assert "track record: calibrated band held for" in text
    assert f"{100 * calibrated.covered:.0f} % of {calibrated.cases}" in text
    assert max(len(line) for line in result.out.splitlines()) <= 80
