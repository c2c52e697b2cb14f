"""The FSDP-side parameters of a measured CPU profile, fitted on its FSDP2 end-to-end steps.

Two EFFECTIVE parameters the compute and collective benchmarks cannot see, because they only
exist inside an FSDP2 step. Each is named after a physical effect, but fitted end to end on step
times it also absorbs every error of the step model on these rows (the compute and collective
coefficients, the schedule), so its value moves when those change: the CPU contention factor
moved between two refits on the same FSDP2 steps when only the compute data had changed
(docs/VALIDATION.md part (a) lists every recorded value, read from git):

* `overlap_slowdown`: compute runs this many times slower while a collective is in flight
  (gloo's threads and the kernel's TCP copies take the same two cores as the ranks);
* `fsdp_copy_s_per_byte`: FSDP2's copies around each collective (all-gather copy-in and
  copy-out, reduce-scatter chunk-cat), memory traffic into fresh buffers on the CPU.

Both are found by a grid search minimising the step MAPE of `compare_fsdp` (the simulator run
like with like on the dataset's rows). Because the rows are also the ground truth, the figure to
judge the fit by is the grouped cross-validated one: each model shape's rows predicted with the
pair fitted on the other shapes (`cv_mape_pct`). A pair on the edge of the grid is flagged
(`OverlapFit.at_bound`): the search wanted a value beyond it.

Claim: a held-out shape's cross-validated step predictions do not depend on its measured steps.
Why: the simulator's predictions of a row depend on the profile and the grid pair only, and the
pair for a held-out shape is chosen on the other shapes' errors alone (`cv_predicted_s`).
Checked by: tests/test_leakage.py (perturbing one shape's measured step times leaves its
out-of-fold predictions identical).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from perfmodel.profiles.bounds import BoundFlag, bound_flags
from perfmodel.profiles.cache import ResultCache, cache_key
from perfmodel.profiles.fsdp_compare import compare_fsdp
from perfmodel.profiles.profile import HardwareProfile

OVERLAP_GRID = (*(round(1.0 + 0.25 * i, 2) for i in range(13)), 5.0, 6.0, 8.0, 12.0, 16.0)
"""overlap_slowdown candidates: 1.00, 1.25, ..., 4.00, then up to 16 (compute all but stopped
while a collective runs: no overlap at all)."""

COPY_GRID = tuple(round(0.25e-9 * i, 14) for i in range(17))
"""fsdp_copy_s_per_byte candidates: 0, 0.25, ..., 4 ns per byte (0.25 GB/s at the top)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class OverlapFit:
    """Effective FSDP-side parameters fitted on measured FSDP steps (grid search, grouped CV)."""

    overlap_slowdown: float
    """Effective factor of the pair minimising the step MAPE over all rows."""
    fsdp_copy_s_per_byte: float
    """Effective copy cost of that pair."""
    grid: tuple[tuple[float, float], ...]
    """Candidate (overlap_slowdown, fsdp_copy_s_per_byte) pairs."""
    errors_pct: np.ndarray
    """(len(grid), rows) signed step errors, percent."""
    groups: tuple[str, ...]
    """Model shape of each row (the CV groups)."""
    predicted_s: np.ndarray | None = None
    """(len(grid), rows) simulated step times, seconds (None from a cache written before they
    were kept)."""

    def at_bound(self) -> list[BoundFlag]:
        """The fitted pair's values on (or within 1 % of) an edge of the grid."""
        slowdowns = [s for s, _ in self.grid]
        copies = [c for _, c in self.grid]
        return bound_flags("overlap", {"overlap_slowdown": self.overlap_slowdown,
                                       "fsdp_copy_s_per_byte": self.fsdp_copy_s_per_byte},
                           {"overlap_slowdown": (min(slowdowns), max(slowdowns)),
                            "fsdp_copy_s_per_byte": (min(copies), max(copies))})

    @property
    def best(self) -> tuple[float, float]:
        return self.overlap_slowdown, self.fsdp_copy_s_per_byte

    def mape_pct(self, pair: tuple[float, float]) -> float:
        return float(np.abs(self.errors_pct[self.grid.index(pair)]).mean())

    def cv_picks(self) -> np.ndarray:
        """For each row, the grid index of the pair fitted on the other shapes' rows."""
        ape = np.abs(self.errors_pct)
        groups = np.asarray(self.groups)
        out = np.empty(ape.shape[1], dtype=int)
        for group in dict.fromkeys(self.groups):
            held = groups == group
            out[held] = int(np.argmin(ape[:, ~held].mean(axis=1)))
        return out

    def cv_errors_pct(self) -> np.ndarray:
        """Signed error of each row predicted with the pair fitted on the other shapes' rows."""
        picked: np.ndarray = self.errors_pct[self.cv_picks(), np.arange(self.errors_pct.shape[1])]
        return picked

    def cv_predicted_s(self) -> np.ndarray:
        """Simulated step time of each row with the pair fitted on the other shapes' rows."""
        if self.predicted_s is None:
            raise ValueError("this fit kept no simulated step times (a cache from before them)")
        picked: np.ndarray = self.predicted_s[self.cv_picks(),
                                              np.arange(self.predicted_s.shape[1])]
        return picked

    def cv_mape_pct(self) -> float:
        """Step MAPE with each shape held out of the fit."""
        return float(np.abs(self.cv_errors_pct()).mean())


def fit_overlap_slowdown(profile: HardwareProfile, data: str | Path, *,
                         overlap_grid: Sequence[float] = OVERLAP_GRID,
                         copy_grid: Sequence[float] = COPY_GRID,
                         cache: ResultCache | None = None) -> OverlapFit:
    """The (overlap_slowdown, fsdp_copy_s_per_byte) pair that makes the simulated FSDP steps
    (`compare_fsdp`, like with like) closest to the measured ones of `data` (a `shardmeter bench
    fsdp` CSV). The grid's error matrix comes from `cache` when its key holds (the dataset, this
    code, the profile's compute and comm coefficients and the grids)."""
    grid = tuple((float(s), float(c)) for s in overlap_grid for c in copy_grid)

    def errors() -> dict[str, Any]:
        rows: list[list[float]] = []
        predicted: list[list[float]] = []
        groups: list[str] = []
        for slowdown, copy in grid:
            result = compare_fsdp(data, replace(profile, overlap_slowdown=slowdown,
                                                fsdp_copy_s_per_byte=copy))
            rows.append([float(r["step_error_pct"]) for r in result])
            predicted.append([float(r["predicted_step_s"]) for r in result])
            groups = [str(r["model"]) for r in result]
        return {"errors_pct": rows, "groups": groups, "predicted_s": predicted}

    if cache is None:
        found = errors()
    else:
        coefficients = {k: v for k, v in profile.to_dict().items()
                        if k in ("hardware", "backend", "compute", "comm", "recompute_factor")}
        key = cache_key([data], [__name__], {"profile": coefficients, "grid": list(grid)})
        found = cache.get("overlap-fit", key, errors)
    matrix = np.array(found["errors_pct"], dtype=float)
    best = grid[int(np.argmin(np.abs(matrix).mean(axis=1)))]
    predicted = found.get("predicted_s")
    return OverlapFit(overlap_slowdown=best[0], fsdp_copy_s_per_byte=best[1], grid=grid,
                      errors_pct=matrix, groups=tuple(found["groups"]),
                      predicted_s=None if predicted is None else np.array(predicted, dtype=float))
