"""The contention (overlap slowdown) of a measured CPU profile, fitted on its FSDP2 end-to-end
steps: the factor that makes the simulated steps closest to the measured ones."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True, kw_only=True, slots=True)
class OverlapFit:
    """overlap_slowdown fitted on measured FSDP steps (grid search, exact leave-one-out)."""

    overlap_slowdown: float
    """Factor minimising the step MAPE over all rows."""
    grid: tuple[float, ...]
    """Candidate factors."""
    errors_pct: np.ndarray
    """(len(grid), rows) signed step errors, percent."""

    def mape_pct(self, factor: float) -> float:
        return float(np.abs(self.errors_pct[self.grid.index(factor)]).mean())

    def loo_mape_pct(self) -> float:
        """Each row predicted with the factor fitted on the other rows."""
        ape = np.abs(self.errors_pct)
        n = ape.shape[1]
        picks = [int(np.argmin((ape.sum(axis=1) - ape[:, i]) / (n - 1))) for i in range(n)]
        return float(np.mean([ape[k, i] for i, k in enumerate(picks)]))


OVERLAP_GRID = tuple(round(1.0 + 0.05 * i, 2) for i in range(61))
"""1.00, 1.05, ..., 4.00."""


def fit_overlap_slowdown(profile: Any, data: str | Path, *,
                         grid: Sequence[float] = OVERLAP_GRID) -> OverlapFit:
    """The contention factor that makes the simulated FSDP steps (`compare_fsdp`, like with like)
    closest to the measured ones of `data` (a `shardmeter bench fsdp` CSV)."""
    import tempfile

    from perfmodel.bench.fsdp import compare_fsdp
    from perfmodel.profile import save_profile

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for factor in grid:
            path = Path(tmp) / f"overlap-{factor}.yaml"
            save_profile(replace(profile, overlap_slowdown=float(factor)), path)
            rows.append([r["step_error_pct"] for r in compare_fsdp(data, str(path))])
    errors = np.array(rows, dtype=float)
    best = tuple(grid)[int(np.argmin(np.abs(errors).mean(axis=1)))]
    return OverlapFit(overlap_slowdown=float(best), grid=tuple(float(g) for g in grid),
                      errors_pct=errors)
