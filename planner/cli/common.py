"""Shared CLI helpers: output formats (table/json/csv) and common options."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import Any

import click
import pandas as pd

FORMATS = ("table", "json", "csv")


def format_option(default: str = "table") -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The `--format table|json|csv` option every command takes."""
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(FORMATS),
        default=default,
        show_default=True,
        help="Output format.",
    )


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def emit_json(payload: Any) -> None:
    """Write JSON to stdout (NaN/inf become null)."""
    click.echo(json.dumps(_jsonable(payload), indent=2))


def emit_records(
    records: Sequence[dict[str, Any]] | pd.DataFrame,
    fmt: str,
    *,
    title: str | None = None,
    float_digits: int = 4,
) -> None:
    """Write a list of records as a rich table, JSON list, or CSV."""
    frame = records if isinstance(records, pd.DataFrame) else pd.DataFrame(list(records))
    if fmt == "json":
        emit_json(frame.to_dict(orient="records"))
    elif fmt == "csv":
        click.echo(frame.to_csv(index=False), nl=False)
    else:
        emit_table(frame, title=title, float_digits=float_digits)


def _cell(value: Any, float_digits: int) -> str:
    if isinstance(value, float):
        if not math.isfinite(value):
            return "-"
        return f"{value:.{float_digits}g}"
    return str(value)


def emit_table(frame: pd.DataFrame, *, title: str | None = None, float_digits: int = 4) -> None:
    """Print a DataFrame as a rich terminal table."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, show_lines=False)
    for column in frame.columns:
        table.add_column(str(column))
    for row in frame.itertuples(index=False):
        table.add_row(*(_cell(v, float_digits) for v in row))
    Console(width=200).print(table)


def emit_mapping(payload: dict[str, Any], fmt: str, *, title: str | None = None) -> None:
    """Write one record: JSON object, one-row CSV, or a two-column key/value table."""
    if fmt == "json":
        emit_json(payload)
    elif fmt == "csv":
        flat = {k: v for k, v in payload.items() if not isinstance(v, dict | list)}
        click.echo(pd.DataFrame([flat]).to_csv(index=False), nl=False)
    else:
        rows = [
            {"field": k, "value": _cell(v, 6) if not isinstance(v, dict | list) else json.dumps(_jsonable(v))}
            for k, v in payload.items()
        ]
        emit_table(pd.DataFrame(rows), title=title)
