"""Each residual group's track record: how often its 80 % band held on data that formed none of
it, shipped as catalogs/uncertainty/track-record.json and stated beside every printed band.

Claim: the line a band is printed with (`track_record_line`) gives, for each of its residual
groups, the share of held-out cases its band covered, how many, and on which side the misses
fell, exactly as docs/VALIDATION.md part (d) scores them — the same rows, read from the file
that part writes (`python -m scripts.make_validation --part intervals`; `--check` fails when the
file is stale, so the line cannot drift from the doc).
Why: a band is a claim about the future; its record on held-out data is what a planner needs to
weigh it. A band that held for 38 % of published runs on other software stacks, most of them
faster than it, says "this stack under-predicts a tuned one" in a way the band alone cannot, and
the line says it where the band is read rather than in a document few open. It reports, it never
adjusts: no figure here feeds a band (tuning a band to its holdout would spend the holdout).
The scoring sets, per entry (`scored`):
* `HELD_OUT` — the group's holdout rows against its split-conformal band (residuals.csv);
* `CROSS_CONFORMAL` — a group without holdout rows (memory), each row against the band the other
  folds form;
* `PUBLISHED` — published GPU runs no fit reads, against the band `predict` prints for each
  (widening included; docs/VALIDATION.md part (e)).
The misses are counted by which side of the band the truth fell on, in words of the figure a
user reads: a step time or throughput outside is `faster` / `slower` than the band, a memory peak
`smaller` / `larger`.
Checked by: tests/test_track_record.py (a time ratio below the band is a faster truth, a
throughput below it a slower one; the line names each group's cases and share from the file; a
missing file or group says so instead of inventing a record) and
tests/test_generated_current.py (the shipped file is what part (d) computes).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from perfmodel.spec.errors import DatasetError
from perfmodel.spec.inputs import read_text
from perfmodel.spec.paths import catalog_dir

TRACK_RECORD_JSON = "uncertainty/track-record.json"
"""In the catalog folder; written by python -m scripts.make_validation --part intervals."""
HELD_OUT, CROSS_CONFORMAL, PUBLISHED = "held-out", "cross-conformal", "published"
SCORED_WORDS = {HELD_OUT: "held-out cases", CROSS_CONFORMAL: "cross-conformal cases",
                PUBLISHED: "published GPU runs"}
"""How the line names each scoring set."""
MEMORY_QUANTITIES = ("peak_memory_bytes",)
RATE_QUANTITIES = ("tokens_per_s_per_gpu",)
"""A rate's truth below its band is slower (a time's below its band is faster)."""
DOC = "docs/VALIDATION.md part (d)"


@dataclass(frozen=True, kw_only=True, slots=True)
class TrackEntry:
    """One scoring set of one residual group."""

    group: str
    """Residual group (`interval_group` of a record)."""
    scored: str
    """HELD_OUT, CROSS_CONFORMAL or PUBLISHED (module docstring)."""
    quantity: str
    """The quantity scored: step_time_s, collective_time_s, peak_memory_bytes or
    tokens_per_s_per_gpu (published runs)."""
    sources: tuple[str, ...]
    """Where the scored cases come from (files or published source ids)."""
    cases: int
    """Cases scored."""
    inside: int
    """Cases whose truth lay inside the band (ends included)."""
    below: int
    """Cases whose truth lay below the band's low end, in `quantity`."""
    above: int
    """Cases whose truth lay above the band's high end, in `quantity`."""

    def __post_init__(self) -> None:
        if self.scored not in SCORED_WORDS:
            raise ValueError(f"track record of {self.group}: scored {self.scored!r} is not one "
                             f"of {', '.join(SCORED_WORDS)}. To fix: name how the cases were "
                             "scored.")
        if min(self.cases, self.inside, self.below, self.above) < 0 or (
                self.inside + self.below + self.above != self.cases):
            raise ValueError(f"track record of {self.group}: inside {self.inside} + below "
                             f"{self.below} + above {self.above} != cases {self.cases}. To fix: "
                             "count every case once.")

    @property
    def covered(self) -> float:
        """Share of cases inside the band (NaN without cases)."""
        return self.inside / self.cases if self.cases else float("nan")

    def outside_words(self) -> dict[str, int]:
        """The misses by side, named as a user reads the figure (module docstring)."""
        if self.quantity in MEMORY_QUANTITIES:
            return {"smaller": self.below, "larger": self.above}
        if self.quantity in RATE_QUANTITIES:
            return {"faster": self.above, "slower": self.below}
        return {"faster": self.below, "slower": self.above}


def entry_from_positions(*, group: str, scored: str, quantity: str, sources: Iterable[str],
                         positions: Sequence[int]) -> TrackEntry:
    """A TrackEntry from each case's position against its band (-1 below, 0 inside, +1
    above)."""
    return TrackEntry(group=group, scored=scored, quantity=quantity,
                      sources=tuple(sorted(set(sources))), cases=len(positions),
                      inside=sum(p == 0 for p in positions),
                      below=sum(p < 0 for p in positions), above=sum(p > 0 for p in positions))


def track_record_text(entries: Iterable[TrackEntry], *, level: float) -> str:
    """The JSON the generator writes (stable key order, one entry list per group)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for entry in entries:
        row = asdict(entry)
        row["sources"] = list(entry.sources)
        row["outside"] = entry.outside_words()
        groups.setdefault(entry.group, []).append(row)
    document = {
        "about": "How often each residual group's band held on held-out data (module "
                 "perfmodel.uncertainty.track_record). Written by python -m "
                 "scripts.make_validation --part intervals; reported, never fitted.",
        "level": level,
        "groups": groups,
    }
    return json.dumps(document, indent=1, sort_keys=True) + "\n"


@lru_cache(maxsize=4)
def read_track_record(path: Path) -> dict[str, tuple[TrackEntry, ...]]:
    """Group -> its entries, read from `path` ({} when the file is absent: no record is
    invented; DatasetError naming the file when it is not a track record)."""
    if not path.is_file():
        return {}
    fix = "regenerate it: python -m scripts.make_validation --part intervals."
    text = read_text(path, what="track record", error=DatasetError, hint=fix)
    try:
        document = json.loads(text)
        return {str(group): tuple(_entry(row) for row in rows)
                for group, rows in document["groups"].items()}
    except (ValueError, TypeError, KeyError, AttributeError) as err:
        # a hand-edited or truncated catalog file: name it, never a traceback
        raise DatasetError(f"{path}: not a track record ({type(err).__name__}: {err})",
                           hint=fix) from None


def _entry(row: Mapping[str, Any]) -> TrackEntry:
    return TrackEntry(group=str(row["group"]), scored=str(row["scored"]),
                      quantity=str(row["quantity"]),
                      sources=tuple(str(s) for s in row["sources"]), cases=int(row["cases"]),
                      inside=int(row["inside"]), below=int(row["below"]),
                      above=int(row["above"]))


def shipped_track_record() -> Mapping[str, tuple[TrackEntry, ...]]:
    """The catalog's track record (`read_track_record`)."""
    return read_track_record(catalog_dir() / TRACK_RECORD_JSON)


def _entry_words(entry: TrackEntry) -> str:
    misses = ", ".join(f"{n} {word}" for word, n in entry.outside_words().items() if n)
    return (f"{100 * entry.covered:.0f} % of {entry.cases} {SCORED_WORDS[entry.scored]}"
            + (f" ({misses} than the band)" if misses else ""))


def track_record_line(groups: Iterable[str],
                      record: Mapping[str, tuple[TrackEntry, ...]] | None = None) -> str | None:
    """One sentence for a band formed from `groups`: per group, its entries with the most cases
    first (None when no group is named)."""
    known = shipped_track_record() if record is None else record
    parts = []
    for group in dict.fromkeys(groups):
        entries = sorted(known.get(group, ()), key=lambda e: -e.cases)
        words = ", ".join(_entry_words(e) for e in entries if e.cases)
        parts.append(f"{group} band held for {words}" if words
                     else f"{group} band has no record on held-out data")
    if not parts:
        return None
    return (f"track record: {'; '.join(parts)}. An 80 % band should hold for 70-90 % "
            f"({DOC}).")


def misses_clause(group: str,
                  record: Mapping[str, tuple[TrackEntry, ...]] | None = None) -> str | None:
    """'on N held-out cases, K such estimates fell outside their 80 % band (K slower, 0
    faster)', from the group's largest scoring set: for a warning that names the group without
    printing its band (None without a record)."""
    known = shipped_track_record() if record is None else record
    entries = [e for e in known.get(group, ()) if e.cases]
    if not entries:
        return None
    largest = max(entries, key=lambda e: e.cases)
    sides = ", ".join(f"{n} {word}" for word, n in sorted(largest.outside_words().items(),
                                                           key=lambda item: -item[1]))
    return (f"on {largest.cases} {SCORED_WORDS[largest.scored]}, "
            f"{largest.cases - largest.inside} such estimates fell outside their 80 % band "
            f"({sides})")
