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
