"""Fitted values at the edge of their allowed range, flagged instead of reported as physics.

Claim: a fitted value at or within `AT_BOUND_FRACTION` (1 %) of a bound is flagged, and the flag
travels with the profile (`provenance_detail.at_bound`) and into docs/VALIDATION.md.
Why: a least-squares fit or a grid search that ends on a bound wanted a value outside the range
the bound encodes (a contention slowdown above 1.5, a factor past the grid's last point): the
value is whatever the bound allows, not a measurement, and the coefficient is absorbing error the
model puts elsewhere. Such values must not be read as physical (nor copied silently into the
priors of other GPUs). "Within 1 %" is measured relative to the bound's magnitude; for a bound of
zero, relative to the width of the range (or, with no upper end, only exactly zero counts).
Checked by: tests/test_bounds.py (a value on, just inside and well inside each kind of bound; the
calibrated, measured and scaled-prior profiles carry the record).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

AT_BOUND_FRACTION = 0.01
"""A value this close to a bound (relative, see the module docstring) is flagged."""

AT_BOUND_NOTE = ("at or within 1 % of the bound of its fit: the fit wanted a value beyond it, so "
                 "the value is effective (it absorbs model error), not a measured property")
"""What a flag means, written beside every flagged value."""


@dataclass(frozen=True, kw_only=True, slots=True)
class BoundFlag:
    """One fitted value at (or within 1 % of) a bound of its fit."""

    fit: str
    """Which fit produced it: calibration, compute, comm or overlap (or 'calibration of NAME'
    for the parameters a scaled prior copies)."""
    parameter: str
    """The parameter's name (dotted for a coefficient: `backward.tied_grad`)."""
    value: float
    """The fitted value."""
    bound: float
    """The bound it sits at."""
    side: str
    """'lower' or 'upper'."""

    def record(self) -> dict[str, Any]:
        """The YAML / JSON form (`provenance_detail.at_bound` entries)."""
        return {"fit": self.fit, "parameter": self.parameter, "value": float(self.value),
                "bound": float(self.bound), "side": self.side, "note": AT_BOUND_NOTE}


def near_bound(value: float, low: float, high: float,
               fraction: float = AT_BOUND_FRACTION) -> tuple[str, float] | None:
    """('lower' | 'upper', bound) when `value` is at or within `fraction` of `low` or `high`
    (relative to the bound's magnitude; a zero bound: to the range's width when finite, else
    exactly zero), else None. An infinite bound is never reached."""
    if not math.isfinite(value):
        return None
    width = high - low

    def close(bound: float) -> bool:
        if not math.isfinite(bound):
            return False
        scale = abs(bound) if bound != 0 else (width if math.isfinite(width) else 0.0)
        return abs(value - bound) <= fraction * scale

    if close(low):
        return "lower", low
    if close(high):
        return "upper", high
    return None


def bound_flags(fit: str, values: Mapping[str, float],
                bounds: Mapping[str, tuple[float, float]]) -> list[BoundFlag]:
    """The flags of `values` (name -> fitted value) against `bounds` (name -> (low, high));
    names without bounds are not checked."""
    out = []
    for name, value in values.items():
        if name not in bounds:
            continue
        found = near_bound(float(value), *bounds[name])
        if found is not None:
            out.append(BoundFlag(fit=fit, parameter=name, value=float(value), bound=found[1],
                                 side=found[0]))
    return out


def flag_records(flags: Iterable[BoundFlag]) -> list[dict[str, Any]]:
    """The YAML records of `flags`."""
    return [f.record() for f in flags]


def flag_text(flag: Mapping[str, Any] | BoundFlag | None) -> str:
    """A short label for tables: 'at upper bound 1.5' ('' for no flag)."""
    if flag is None:
        return ""
    data = flag.record() if isinstance(flag, BoundFlag) else flag
    return f"at {data['side']} bound {data['bound']:g}"
