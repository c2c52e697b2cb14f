"""Numbers for people: one formatter for terminal tables, plots and generated docs (4
significant digits, thousands separators, the unit in the text). JSON and CSV keep full
precision; these are for reading.

These live beside `perfmodel.formatting` (Markdown tables, JSON values), not in it, because the
cross-validation cache keys (`perfmodel.profiles.cache.code_closure`) cover the code of
`perfmodel.formatting`: a change there would invalidate `catalogs/cv-cache/overlap-fit.json`.
"""

from __future__ import annotations

import math

SIGNIFICANT_DIGITS = 4
"""Significant digits of a formatted measure (3-4: enough to compare, few enough to read)."""


def format_number(value: float, *, digits: int = SIGNIFICANT_DIGITS) -> str:
    """`value` to `digits` significant digits with thousands separators and no exponent below
    1e15: 48.75, 6,666, 592,200, 0.01814; integers (counts) stay exact: 8,030,261,248.
    NaN and infinities are '-' (no such measure)."""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if not math.isfinite(value):
        return "-"
    if value == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(value)))
    if magnitude >= 15 or magnitude < -4:
        return f"{value:.{digits - 1}e}"
    decimals = digits - 1 - magnitude
    if decimals <= 0:
        return f"{round(value, decimals):,.0f}"
    text = f"{value:,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def format_percent(fraction: float, *, digits: int = 3) -> str:
    """A fraction as a percentage to `digits` significant digits: 0.377802 -> '37.8 %'."""
    if not math.isfinite(fraction):
        return "-"
    return f"{format_number(fraction * 100, digits=digits)} %"


def format_usd(value: float) -> str:
    """Dollars: $17,831, $3.59, $0.0042, $0.0000010 (cents where they matter, no exponent)."""
    if not math.isfinite(value):
        return "-"
    if abs(value) >= 100:
        return f"${value:,.0f}"
    if abs(value) >= 1 or value == 0:
        return f"${value:,.2f}"
    decimals = 1 - math.floor(math.log10(abs(value)))  # two significant digits
    return f"${value:.{decimals}f}"


def format_duration(seconds: float) -> str:
    """A duration in the unit a person reads it in: 420 µs, 18.14 ms, 1.269 s, 12.5 min,
    48.75 h, 3.2 days (4 significant digits)."""
    if not math.isfinite(seconds):
        return "-"
    magnitude = abs(seconds)
    if magnitude == 0:
        return "0 s"
    for limit, scale, unit in ((1e-3, 1e-6, "µs"), (1.0, 1e-3, "ms"), (120.0, 1.0, "s"),
                               (7200.0, 60.0, "min"), (172800.0, 3600.0, "h")):
        if magnitude < limit:
            return f"{format_number(seconds / scale)} {unit}"
    return f"{format_number(seconds / 86400.0)} days"


def format_rate(value: float, unit: str) -> str:
    """A rate with its unit: format_rate(6454.49, 'tok/s') -> '6,454 tok/s'."""
    return f"{format_number(value)} {unit}"
