"""The contract of catalogs/uncertainty/residuals.csv: its columns, residual groups, quantities and
row roles, in one light module that the residual generator (`perfmodel.uncertainty.residuals`)
writes by and the planner's error model (`planner.model.uncertainty`, through `perfmodel.facts`)
reads by, without importing the generator's fitting code.
"""

from __future__ import annotations

from perfmodel.profiles.profile import PROVENANCES

COLUMNS = ("group", "quantity", "case", "source", "predicted", "measured", "role")
"""The columns of catalogs/uncertainty/residuals.csv, in order."""
GROUPS = (*PROVENANCES, "memory", "memory-moe", "collectives")
"""Every residual group: the profile provenances (step times), the memory model's two groups
(dense, mixture-of-experts peaks) and the collectives."""
QUANTITIES = ("step_time_s", "peak_memory_bytes", "collective_time_s")
ROLES = ("calibration", "holdout", "in-sample")
"""calibration: forms the intervals; holdout: only scores them; in-sample: rows the model was
designed against (never a quantile, never scored; they only widen the covered ranges)."""
