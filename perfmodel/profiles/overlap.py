"""The FSDP-side parameters of a measured CPU profile, fitted on its FSDP2 end-to-end steps.

Two physical parameters the compute and collective benchmarks cannot see, because they only
exist inside an FSDP2 step:

* `overlap_slowdown`: compute runs this many times slower while a collective is in flight
  (gloo's threads and the kernel's TCP copies take the same two cores as the ranks);
* `fsdp_copy_s_per_byte`: FSDP2's copies around each collective (all-gather copy-in and
  copy-out, reduce-scatter chunk-cat), memory traffic into fresh buffers on the CPU.

Both are found by a grid search minimising the step MAPE of `compare_fsdp` (the simulator run
like with like on the dataset's rows). Because the rows are also the ground truth, the figure to
judge the fit by is the grouped cross-validated one: each model shape's rows predicted with the
pair fitted on the other shapes (`cv_mape_pct`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

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
    """FSDP-side parameters fitted on measured FSDP steps (grid search, grouped CV)."""

    overlap_slowdown: float
    """Factor of the pair minimising the step MAPE over all rows."""
    fsdp_copy_s_per_byte: float
    """Copy cost of that pair."""
    grid: tuple[tuple[float, float], ...]
    """Candidate (overlap_slowdown, fsdp_copy_s_per_byte) pairs."""
    errors_pct: np.ndarray
    """(len(grid), rows) signed step errors, percent."""
    groups: tuple[str, ...]
    """Model shape of each row (the CV groups)."""

    @property
    def best(self) -> tuple[float, float]:
        return self.overlap_slowdown, self.fsdp_copy_s_per_byte

    def mape_pct(self, pair: tuple[float, float]) -> float:
        return float(np.abs(self.errors_pct[self.grid.index(pair)]).mean())

    def cv_errors_pct(self) -> np.ndarray:
        """Signed error of each row predicted with the pair fitted on the other shapes' rows."""
        ape = np.abs(self.errors_pct)
        groups = np.asarray(self.groups)
        out = np.empty(ape.shape[1])
        for group in dict.fromkeys(self.groups):
            held = groups == group
            pick = int(np.argmin(ape[:, ~held].mean(axis=1)))
            out[held] = self.errors_pct[pick, held]
        return out

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
        groups: list[str] = []
        for slowdown, copy in grid:
            result = compare_fsdp(data, replace(profile, overlap_slowdown=slowdown,
                                                fsdp_copy_s_per_byte=copy))
            rows.append([float(r["step_error_pct"]) for r in result])
            groups = [str(r["model"]) for r in result]
        return {"errors_pct": rows, "groups": groups}

    if cache is None:
        found = errors()
    else:
        coefficients = {k: v for k, v in profile.to_dict().items()
                        if k in ("hardware", "backend", "compute", "comm", "recompute_factor")}
        key = cache_key([data], [__name__], {"profile": coefficients, "grid": list(grid)})
        found = cache.get("overlap-fit", key, errors)
    matrix = np.array(found["errors_pct"], dtype=float)
    best = grid[int(np.argmin(np.abs(matrix).mean(axis=1)))]
    return OverlapFit(overlap_slowdown=best[0], fsdp_copy_s_per_byte=best[1], grid=grid,
                      errors_pct=matrix, groups=tuple(found["groups"]))
