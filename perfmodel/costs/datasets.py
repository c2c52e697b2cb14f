"""Benchmark datasets and how fits are scored: strict CSV reading (every problem a DatasetError
naming file, line and column) and the MAPE every accuracy figure reports, in percent."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from perfmodel.spec.errors import DatasetError


def mape_pct(y_true: ArrayLike, y_pred: ArrayLike) -> float:
    """Mean absolute percentage error, in percent."""
    y_true, y_pred = np.asarray(y_true, float), np.asarray(y_pred, float)
    if y_true.size == 0:
        return float("nan")
    return float(np.mean(np.abs(y_pred - y_true) / y_true) * 100.0)


def _fail(path: str, line: int, column: str, value: Any, problem: str, fix: str) -> DatasetError:
    return DatasetError(f"{path}, line {line} (data row {line - 1}): column {column!r} = "
                        f"{value!r}: {problem}", hint=fix)


def read_dataset_csv(path: str, required: Sequence[str], *, positive_int: Iterable[str] = (),
                     positive_float: Iterable[str] = (),
                     choices: Mapping[str, Sequence[str]] | None = None) -> pd.DataFrame:
    """Read and validate a benchmark CSV; problems raise DatasetError naming file, line, column."""

    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, skipinitialspace=True)
    except FileNotFoundError as err:
        raise DatasetError(f"{path}: file not found",
                           hint="give the path of a benchmark CSV.") from err
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
        raise DatasetError(
            f"{path}: not a readable CSV ({err})",
            hint="write the dataset as comma-separated values with a header row.") from err
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise DatasetError(f"{path}: missing column(s) {', '.join(missing)}",
                           hint=f"the header must contain: {', '.join(required)}.")
    if frame.empty:
        raise DatasetError(f"{path}: no data rows", hint="add measurements below the header.")
    for col in positive_int:
        frame[col] = numeric_column(frame, col, path, integer=True)
    for col in positive_float:
        frame[col] = numeric_column(frame, col, path, integer=False)
    for col, allowed in (choices or {}).items():
        frame[col] = frame[col].str.strip()
        reject_first(frame, col, ~frame[col].isin(allowed), path,
                     f"must be one of {', '.join(allowed)}",
                f"use one of {', '.join(allowed)} in column {col!r}.")
    return frame


def reject_first(frame: pd.DataFrame, col: str, bad: Any, path: str, problem: str,
                 fix: str) -> None:
    """Raise DatasetError at the first row where `bad` is true."""
    bad = np.asarray(bad, dtype=bool)
    if bad.any():
        i = int(np.argmax(bad))
        raise _fail(path, i + 2, col, frame[col].iloc[i], problem, fix)


def numeric_column(frame: pd.DataFrame, col: str, path: str, *, integer: bool) -> pd.Series:
    """Column `col` as positive numbers (integers if `integer`); DatasetError naming the line."""

    values = pd.to_numeric(frame[col].str.strip(), errors="coerce")
    kind = "a positive integer" if integer else "a positive number"
    bad = values.isna() | ~np.isfinite(values) | (values <= 0)
    if integer:
        bad |= values.notna() & (values != values.round())
    reject_first(frame, col, bad, path, f"must be {kind}",
            f"fix column {col!r} of that line in {path}, or drop the row.")
    return values.astype(int) if integer else values.astype(float)


# ---- repeated measurements of one configuration ----------------------------------------------

REPEAT_STATISTIC = "median"
"""How repeats of one configuration enter a fit: their median, each configuration once."""


def configurations(frame: pd.DataFrame, key: Sequence[str],
                   value: str = "time_s") -> tuple[pd.DataFrame, np.ndarray]:
    """One row per configuration (the rows equal on the `key` columns present in `frame`), and for
    every row of `frame` the position of its configuration.

    Claim: a fit on the returned frame weighs every configuration once, whatever its number of
    repeats, and a dataset without repeats comes back unchanged (the very same frame).
    Why: a configuration's row is its first row with `value` replaced by the median of its
    repeats (a `repeats` column counts them), in order of first appearance. The median, not the
    mean, because benchmark noise has a heavy upper tail (a repeat that shared the machine); each
    configuration once, not weighted by its repeats, because the fits' error is model error
    across configurations, which a configuration measured more often does not reduce, and
    because folds of configurations keep every repeat of one on the same side of a
    cross-validation split (repeats straddling it would leak).
    Checked by: tests/test_repeats.py.
    """
    columns = [c for c in key if c in frame.columns]
    ids = frame.groupby(columns, sort=False, dropna=False).ngroup().to_numpy()
    if len(np.unique(ids)) == len(frame):
        return frame, np.arange(len(frame))
    grouped = frame[value].groupby(ids)
    first = frame.groupby(ids, sort=True).head(1)
    out = first.assign(**{value: grouped.median().to_numpy(),
                          "repeats": grouped.size().to_numpy()}).reset_index(drop=True)
    out.attrs = dict(frame.attrs)
    return out, ids


def repeat_spread(frame: pd.DataFrame, key: Sequence[str], value: str = "time_s",
                  *, limit: int = 500) -> dict[str, Any]:
    """The spread of repeated measurements per configuration (JSON values, for a profile's
    provenance): counts, the median over configurations of the relative standard deviation, and
    for each repeated configuration (at most `limit`, in order of first appearance) its key,
    repeats `n`, `median_s`, `min_s`, `max_s` and `std_s` (sample standard deviation)."""
    columns = [c for c in key if c in frame.columns]
    groups = frame.groupby(columns, sort=False, dropna=False)
    stats = groups[value].agg(["size", "median", "min", "max", "std"]).reset_index()
    repeated = stats[stats["size"] > 1]
    rel_std = (repeated["std"] / repeated["median"] * 100.0).to_numpy()
    records = []
    for row in repeated.head(limit).to_dict("records"):
        entry = {c: _plain(row[c]) for c in columns}
        entry.update({"n": int(row["size"]), "median_s": float(row["median"]),
                      "min_s": float(row["min"]), "max_s": float(row["max"]),
                      "std_s": float(row["std"])})
        records.append(entry)
    return {"rows": int(len(frame)), "configurations": int(len(stats)),
            "repeated_configurations": int(len(repeated)), "statistic": REPEAT_STATISTIC,
            "key": columns,
            "median_rel_std_pct": float(np.median(rel_std)) if len(rel_std) else None,
            "max_rel_std_pct": float(np.max(rel_std)) if len(rel_std) else None,
            "by_configuration": records,
            **({"by_configuration_truncated_at": limit} if len(repeated) > limit else {})}


def _plain(value: Any) -> Any:
    """A pandas / numpy scalar as a plain Python value (YAML-safe)."""
    return value.item() if isinstance(value, np.generic) else value
