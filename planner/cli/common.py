"""Shared CLI helpers: output formats (table/json/csv), strict parameter types, human formats.

`harden_command` walks a click command (and its sub-commands) and swaps every parameter type for
a stricter one, so each flag that any engineer adds is covered without listing it here:
floats reject NaN/inf, choices say "did you mean", output paths get their folder created and
figure paths must have an extension matplotlib can write.
"""

from __future__ import annotations

import importlib.util
import io
import json
import logging
import math
import os
import re
import sys
import textwrap
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table

from perfmodel.formatting import json_ready
from perfmodel.numbers import (
    format_duration,
    format_number,
    format_percent,
    format_rate,
    format_usd,
)
from perfmodel.spec.errors import ShardMeterError, UserInputError, did_you_mean
from perfmodel.spec.inputs import LIMITS
from perfmodel.spec.recipe import AC_MODES, canonical_ac
from perfmodel.uncertainty.track_record import misses_clause, track_record_line

if TYPE_CHECKING:
    import pandas as pd

FORMATS = ("table", "json", "csv")
OUTPUT_PARAM_NAMES = frozenset({"output", "out", "plot", "plot_path", "trace_path", "timeline_path",
                                "timelines", "trace", "html"})
"""Parameter names that are files the command writes (their folder is created)."""
FIGURE_WORDS = ("plot", "timeline", "figure")
"""A written path whose parameter name contains one of these is a matplotlib figure."""
_WIDE_CONSOLE = 1000
"""Table width when stdout is not a terminal: wide enough that no cell is cut short."""
DEFAULT_COLUMNS = 80
"""Width of the answer-first views when stdout is not a terminal and COLUMNS is unset."""
SCHEMA_VERSION = 2
"""`schema_version` of the JSON that `memory` and `layout` print (raised when a key changes
meaning or goes; new keys do not raise it). 2 (issue 27): every figure gains `*_p10`, `*_p50`,
`*_p90`, the record `p_fits`, `interval_group`, `interval_widened`, and `max_micro_batch` is the
largest micro-batch that fits with `fit_probability` when `--fit-probability` is given. Their
JSON Schemas are planner/schemas/*.schema.json (`shardmeter schema NAME`, checked against real
outputs by tests/test_schemas.py)."""
PREDICT_SCHEMA_VERSION = 3
"""`schema_version` of `predict`'s JSON: 2 since its per-link `link_<name>_provenance` keys became
one `link_provenance` list (issue 29), 3 with the interval keys and `max_micro_batch` at a fit
probability (issue 27; also `memory_interval_*`) (CHANGELOG.md)."""


def format_option(default: str = "table") -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The `--format table|json|csv` option of every listing, prediction and planning command."""
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(FORMATS),
        default=default,
        show_default=True,
        help="Output format.",
    )


# ---- strict parameter types ------------------------------------------------------------------


class FiniteFloat(click.ParamType):  # type: ignore[type-arg]  # click < 8.2 is not generic
    """A float (or FloatRange) parameter that rejects NaN and ±inf."""

    def __init__(self, inner: click.ParamType[Any]) -> None:
        self.inner = inner
        self.name = inner.name

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, bool):
            self.fail(f"{value!r} is a boolean, not a number", param, ctx)
        if isinstance(value, str) and not math.isfinite(_loose_float(value)):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        number = self.inner.convert(value, param, ctx)
        if isinstance(number, float) and not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        limit = LIMITS["flag_float"]
        if isinstance(number, int | float) and abs(number) > limit.maximum:
            self.fail(f"{value!r} is larger in magnitude than {limit.maximum:g} ({limit.reason})",
                      param, ctx)
        return number

    def get_metavar(self, param: click.Parameter, ctx: click.Context) -> str | None:
        return self.inner.get_metavar(param, ctx)

    def to_info_dict(self) -> click.types.ParamTypeInfoDict:
        return self.inner.to_info_dict()

    def __repr__(self) -> str:
        return f"FiniteFloat({self.inner!r})"


def _loose_float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return 0.0  # not a number at all: the inner type reports it


class BoundedInt(click.types.IntParamType):
    """An integer (or IntRange) parameter of sensible size (perfmodel.spec.inputs.LIMITS
    'flag_int'): a 400-digit integer is a usage error, not an overflow deep inside a model. Still
    an IntParamType (the fuzzers pick their bad values by type)."""

    def __init__(self, inner: click.types.IntParamType) -> None:
        self.inner = inner
        self.name = inner.name

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        limit = LIMITS["flag_int"]
        if isinstance(value, str) and len(value.strip().lstrip("+-")) > 30:
            self.fail(f"a {len(value.strip().lstrip('+-'))}-character value is not an integer of "
                      f"sensible size (at most {limit.maximum:.0f})", param, ctx)
        number = self.inner.convert(value, param, ctx)
        if isinstance(number, int) and abs(number) > limit.maximum:
            self.fail(f"{number} is larger in magnitude than {limit.maximum:.0f} ({limit.reason})",
                      param, ctx)
        return number

    def get_metavar(self, param: click.Parameter, ctx: click.Context) -> str | None:
        return self.inner.get_metavar(param, ctx)

    def to_info_dict(self) -> click.types.ParamTypeInfoDict:
        return self.inner.to_info_dict()

    def __repr__(self) -> str:
        return f"BoundedInt({self.inner!r})"


class SuggestingChoice(click.Choice[str]):
    """click.Choice whose error adds the closest choices ("did you mean ...?")."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter:
            names = [str(c) for c in self.choices]
            self.fail(f"{value!r} is not one of {', '.join(map(repr, names))}; "
                      f"{did_you_mean(str(value), names)}", param, ctx)


class OutputPath(click.ParamType[Any]):
    """A path the command writes: not a directory, its folder created, figures by extension.

    Every converted path is remembered in `written_paths` for the running command, so an OSError
    without a file name (a full device behind a buffered write) can still name the file."""

    written_paths: list[str] = []  # noqa: RUF012 - one list per process, reset per command

    def __init__(self, inner: click.ParamType[Any], *, figure: bool) -> None:
        self.inner = inner
        self.name = inner.name
        self.figure = figure

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        result = self.inner.convert(value, param, ctx)
        path = Path(os.fsdecode(result))
        if path.is_dir():
            self.fail(f"{str(path)!r} is a directory; give a file name inside it", param, ctx)
        if self.figure:
            suffix = path.suffix.lower().lstrip(".")
            supported = figure_formats()
            if suffix not in supported:
                self.fail(f"{str(path)!r}: cannot write a figure with extension "
                          f"{suffix or '(none)'!r}; supported: {', '.join(supported)}",
                          param, ctx)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            self.fail(f"cannot create the folder of {str(path)!r}: {err.strerror}", param, ctx)
        flag = max(param.opts, key=len) if isinstance(param, click.Option) else "OUTPUT"
        OutputPath.written_paths.append(f"{flag} {path}")
        return result

    def get_metavar(self, param: click.Parameter, ctx: click.Context) -> str | None:
        return self.inner.get_metavar(param, ctx)

    def to_info_dict(self) -> click.types.ParamTypeInfoDict:
        return self.inner.to_info_dict()


def figure_formats() -> list[str]:
    """File extensions matplotlib can save figures as (png, pdf, svg, ...)."""
    # lazy: matplotlib loads only when a figure is drawn
    from matplotlib.backend_bases import FigureCanvasBase

    return sorted(FigureCanvasBase.get_supported_filetypes())


def _strict_type(param: click.Parameter) -> click.ParamType[Any]:
    kind = param.type
    if isinstance(kind, FiniteFloat | SuggestingChoice | OutputPath | BoundedInt):
        return kind
    if isinstance(kind, click.types.FloatParamType):
        return FiniteFloat(kind)
    if isinstance(kind, click.types.IntParamType):
        return BoundedInt(kind)
    if isinstance(kind, click.Choice):
        return SuggestingChoice(kind.choices, case_sensitive=kind.case_sensitive)
    name = param.name or ""
    if isinstance(kind, click.Path | click.types.StringParamType) and name in OUTPUT_PARAM_NAMES \
            and isinstance(param, click.Option):
        return OutputPath(kind, figure=any(w in name for w in FIGURE_WORDS))
    return kind


def harden_command(command: click.Command) -> click.Command:
    """Give every parameter of `command` (and of its sub-commands) its strict type, once."""
    if getattr(command, "_shardmeter_hardened", False):
        return command
    for param in command.params:
        if param.nargs == 1 and not getattr(param, "is_flag", False):
            param.type = _strict_type(param)
    if isinstance(command, click.Group) and type(command).get_command is click.Group.get_command:
        for sub in command.commands.values():
            harden_command(sub)
    command._shardmeter_hardened = True  # type: ignore[attr-defined]
    return command


# ---- flags without effect ---------------------------------------------------------------------


def given_flags(*names: str) -> list[str]:
    """The options among `names` (parameter names) set on the command line (or environment) of
    the running command, as their longest flag spelling."""
    ctx = click.get_current_context()
    sources = (click.core.ParameterSource.COMMANDLINE, click.core.ParameterSource.ENVIRONMENT)
    return [max(p.opts, key=len) for p in ctx.command.params
            if p.name in names and isinstance(p, click.Option)
            and ctx.get_parameter_source(p.name) in sources]


def refuse_unused(names: Sequence[str], *, why: str, fix: str) -> None:
    """Every flag acts or is refused: a UserInputError when one of `names` was given although it
    has no effect (`why`: in which case)."""
    given = given_flags(*names)
    if given:
        raise UserInputError(f"{', '.join(given)} {'has' if len(given) == 1 else 'have'} no "
                             f"effect {why}", hint=fix)


# ---- human number formats (table output only; JSON/CSV keep full precision) -------------------


def human_usd(value: float) -> str:
    """Dollars for people: $17,831, $3.59, $0.0042 (perfmodel.numbers.format_usd)."""
    return format_usd(value)


def human_count(value: float, unit: str = "") -> str:
    """A large quantity with an SI prefix: 477k, 1.25M, 3.2G (with a unit: '477k tok/s')."""
    magnitude = abs(value)
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if magnitude >= scale:
            scaled = value / scale
            text = f"{scaled:.3g}" if abs(scaled) < 100 else f"{scaled:.0f}"
            return f"{text}{prefix}" + (f" {unit}" if unit else "")
    return f"{value:.3g}" + (f" {unit}" if unit else "")


def human_cell(column: str, value: Any, float_digits: int = 4) -> str:
    """One table cell; money and token rates in human units, other floats to `float_digits`."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        if hasattr(value, "item") and callable(value.item):  # numpy scalars
            return human_cell(column, value.item(), float_digits)
        return "-" if value is None else str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return "-"
    name = column.lower()
    if "usd" in name or name.startswith("cost") or name.endswith("_cost"):
        return human_usd(float(value))
    if "tokens_per_s" in name or name.endswith("tok_s"):
        return human_count(float(value), "tok/s")
    if isinstance(value, int):
        return f"{value:,}" if abs(value) >= 1_000_000 else str(value)
    if 1e4 <= abs(value) < 1e15:
        return f"{value:,.0f}"
    return f"{value:.{float_digits}g}"


# ---- output -----------------------------------------------------------------------------------


def emit_json(payload: Any) -> None:
    """Write JSON to stdout (NaN/inf become null)."""
    click.echo(json.dumps(json_ready(payload), indent=2))


def emit_records(
    records: Sequence[dict[str, Any]] | pd.DataFrame,
    fmt: str,
    *,
    title: str | None = None,
    float_digits: int = 4,
) -> None:
    """Write a list of records as a rich table, JSON list, or CSV."""
    import pandas as pd  # lazy: pandas costs about 0.25 s at startup; only listings need it

    frame = records if isinstance(records, pd.DataFrame) else pd.DataFrame(list(records))
    if fmt == "json":
        emit_json(frame.to_dict(orient="records"))
    elif fmt == "csv":
        click.echo(frame.to_csv(index=False), nl=False)
    else:
        emit_table(frame, title=title, float_digits=float_digits)


def _console() -> Any:
    """A rich console as wide as the terminal; unlimited when stdout is a pipe or file."""

    if sys.stdout.isatty():
        return Console()
    columns = os.environ.get("COLUMNS", "")
    return Console(width=int(columns) if columns.isdigit() and int(columns) > 0 else _WIDE_CONSOLE)


def emit_table(frame: pd.DataFrame, *, title: str | None = None, float_digits: int = 4) -> None:
    """Print a DataFrame as a rich terminal table: a header may fold, a value is never cut
    inside a word (each column at least as wide as its values' longest word: a number cut in
    two reads as noise). When even that is wider than the console, print as `emit_compact`
    does: one 'header  value' line per cell, rows apart (rich would otherwise fold every column
    to a character or two)."""
    columns = [str(c) for c in frame.columns]
    cells = [[human_cell(c, v, float_digits) for c, v in zip(columns, row, strict=True)]
             for row in frame.itertuples(index=False)]
    widest = [max((cell_len(word) for r in cells for word in r[i].split()), default=1)
              for i in range(len(columns))]
    console = _console()
    # rich's padding and rule take 3 cells a column, and the closing rule one
    if 1 + sum(3 + w for w in widest) > console.width:
        _emit_records_view([dict(zip(columns, row, strict=True)) for row in cells],
                           width=console.width, title=title)
        return
    table = Table(title=title, show_lines=False)
    for column, width in zip(columns, _column_widths(columns, cells, widest, console.width),
                             strict=True):
        table.add_column(column, overflow="fold", width=width)
    for row in cells:
        table.add_row(*row)
    console.print(table)


def _column_widths(columns: Sequence[str], cells: Sequence[Sequence[str]], widest: list[int],
                   console_width: int) -> list[int]:
    """Each column's width: its values' longest word, then the room left given to the columns
    nearest to showing their whole header and values on one line first (the most columns
    unfolded). Set explicitly: rich's own shrinking cuts values before it folds headers."""
    widths = list(widest)
    wanted = [max([cell_len(column)] + [cell_len(r[i]) for r in cells])
              for i, column in enumerate(columns)]
    room = console_width - (1 + sum(3 + w for w in widths))
    for i in sorted(range(len(columns)), key=lambda i: wanted[i] - widths[i]):
        grow = min(room, wanted[i] - widths[i])
        if grow > 0:
            widths[i] += grow
            room -= grow
    return widths


def emit_mapping(payload: dict[str, Any], fmt: str, *, title: str | None = None) -> None:
    """Write one record: JSON object, one-row CSV (a list of strings as one '; '-joined cell,
    other lists and mappings left out), or a two-column key/value table."""
    if fmt == "json":
        emit_json(payload)
    elif fmt == "csv":
        flat = {k: "; ".join(v) if isinstance(v, list) and all(isinstance(x, str) for x in v)
                else v for k, v in payload.items()}  # a list of words: one cell ("" if empty)
        flat = {k: v for k, v in flat.items() if not isinstance(v, dict | list)}
        import pandas as pd  # lazy: pandas costs about 0.25 s at startup; only CSV needs it here

        click.echo(pd.DataFrame([flat]).to_csv(index=False), nl=False)
    else:
        rows = [
            {"field": k, "value": human_cell(k, v, 6) if not isinstance(v, dict | list)
             else json.dumps(json_ready(v))}
            for k, v in payload.items()
        ]
        import pandas as pd  # lazy: pandas costs about 0.25 s at startup; the full table needs it

        emit_table(pd.DataFrame(rows), title=title)


# ---- answer-first views (80 columns by default) -------------------------------------------------


def wide_option() -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`--wide`: the table format shows every field (the full table) instead of the answer and
    the columns that matter."""
    return click.option("--wide", is_flag=True, default=False,
                        help="Table format: every field, not just the answer and the columns "
                             "that matter.")


def interval_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """`--interval L` (add `*_lo`/`*_hi` at level L beside the default p10/p90) and
    `--fit-probability P` (`max_micro_batch` at probability P)."""
    func = click.option("--fit-probability", type=float, default=None,
                        help="Make max_micro_batch the largest micro-batch that fits with this "
                             "probability (from the memory model's residuals), e.g. 0.95.")(func)
    return click.option("--interval", "interval_level", type=float, default=None,
                        help="Add *_lo/*_hi bounds and interval_level at this two-sided level "
                             "(e.g. 0.9) beside the p10/p90 every figure carries.")(func)


INTERVAL_FIGURES = (("step_time_s", "step (s)", 1.0), ("tokens_per_s_per_gpu", "tok/s/GPU", 1.0),
                    ("mfu", "MFU %", 100.0), ("peak_gib", "peak GiB", 1.0),
                    ("wall_time_s", "wall time (s)", 1.0), ("cost_usd", "cost ($)", 1.0))
"""Headline figures of the p10 / p50 / p90 table: key, header, scale."""


def emit_interval_table(record: Mapping[str, Any]) -> None:
    """The headline figures' point and p10 / p50 / p90, the residual groups they come from, why
    a band was widened and P(fits)."""
    rows = [{"figure": header, "point": format_number(record[key] * scale),
             **{q: format_number(record[f"{key}_{q}"] * scale) for q in ("p10", "p50", "p90")}}
            for key, header, scale in INTERVAL_FIGURES if f"{key}_p10" in record]
    if not rows:
        return
    groups = [record[k] for k in ("interval_group", "memory_interval_group") if k in record]
    fits = (f"; P(fits) {format_number(100 * record['p_fits'], digits=3)} %"
            if "p_fits" in record else "")
    echo_wrapped(f"80 % band from the {' and '.join(groups)} residuals{fits}")
    widened = [*record.get("interval_widened", []), *record.get("memory_interval_widened", [])]
    if widened:
        echo_wrapped("widened: " + "; ".join(widened))
    track = track_record_line(groups)
    if track:  # how far the band has held before: the reader weighs it with this
        echo_wrapped(track)
    emit_compact(rows, width=terminal_width())


def allow_oom_option() -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`--allow-oom`: print a configuration that does not fit the GPU anyway (exit 0)."""
    return click.option("--allow-oom", is_flag=True, default=False,
                        help="Print the result even when the peak exceeds the GPU's usable "
                             "memory (else: exit 1 with the smallest fix that fits).")


def echo_does_not_fit(answer: str, fmt: str) -> None:
    """Before a DoesNotFitError (stderr): the answer line of what does not fit, on stdout for
    the table format (JSON and CSV stay machine-readable: nothing on stdout)."""
    if fmt == "table":
        echo_wrapped(answer)


def terminal_width() -> int:
    """Columns of the answer-first views: COLUMNS when set, else the terminal's, else
    DEFAULT_COLUMNS (a pipe or a file)."""
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    if sys.stdout.isatty():
        return int(Console().width)
    return DEFAULT_COLUMNS


def wrap_phrases(text: str, *, width: int, indent: str = "  ") -> list[str]:
    """`text` as lines of at most `width` columns (continuation lines indented), broken between
    words but never between a number and the word after it ('6,454 tok/s', '37.8 %')."""
    glued = re.sub(r"(?<=\d) (?=\S)", "\x00", text)  # a number keeps its unit
    lines = textwrap.wrap(glued, width=width, subsequent_indent=indent, break_on_hyphens=False,
                          break_long_words=True)
    return [line.replace("\x00", " ") for line in lines] or [""]


def echo_wrapped(text: str, *, width: int | None = None, indent: str = "  ") -> None:
    """Print `text` wrapped at the terminal width (`wrap_phrases`)."""
    for line in wrap_phrases(text, width=width or terminal_width(), indent=indent):
        click.echo(line)


def _render(renderable: Any) -> list[str]:
    """`renderable` as plain text lines at an unlimited width (trailing blanks stripped)."""
    buffer = io.StringIO()
    Console(file=buffer, width=_WIDE_CONSOLE, no_color=True, highlight=False,
            color_system=None).print(renderable)
    return [line.rstrip() for line in buffer.getvalue().splitlines()]


_NUMERIC = re.compile(r"^[-+$]?[\d.,]+( ?[%a-zA-Z/µ]+)?$|^-$")
"""A cell that reads as a number (right-aligned in compact tables)."""


def _compact_lines(rows: Sequence[Mapping[str, str]]) -> list[str]:
    """The compact table of `rows` as plain text lines (numeric columns right-aligned)."""
    headers = list(rows[0])
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True,
                  padding=(0, 1), title=None)
    for header in headers:
        numeric = all(_NUMERIC.match(row.get(header, "") or "-") for row in rows)
        table.add_column(header, no_wrap=True,
                         justify="right" if numeric else "left")
    for row in rows:
        table.add_row(*(row.get(h, "") for h in headers))
    return _render(table)


def compact_fits(rows: Sequence[Mapping[str, str]], *, width: int | None = None) -> bool:
    """Would `emit_compact` print `rows` as a table (not as records) at `width` columns?"""
    return not rows or max(cell_len(line) for line in _compact_lines(rows)) <= (
        width or terminal_width())


def emit_compact(rows: Sequence[Mapping[str, str]], *, width: int | None = None,
                 title: str | None = None) -> None:
    """Print rows of formatted cells (header -> text, the units in the headers) as a compact
    table; when the table is wider than the terminal it becomes a record layout (one
    'header  value' line per cell, a long value continued under itself, a blank line between
    rows) instead of wrapping cells."""
    limit = width or terminal_width()
    if not rows:
        return
    lines = _compact_lines(rows)
    if title:
        click.echo(title)
    if max(cell_len(line) for line in lines) <= limit:
        for line in lines:
            click.echo(line)
        return
    _emit_records_view(rows, width=limit)


def _emit_records_view(rows: Sequence[Mapping[str, str]], *, width: int,
                       title: str | None = None) -> None:
    """A table too wide for `width` columns as records: one 'header  value' line per cell (a
    long value continued under itself), a blank line between rows."""
    if title:
        click.echo(title)
    headers = list(rows[0]) if rows else []
    label = max((cell_len(h) for h in headers), default=0)
    for i, row in enumerate(rows):
        if i:
            click.echo("")
        for header in headers:
            text = f"{header.ljust(label)}  {row.get(header, '')}"
            for line in wrap_phrases(text, width=width, indent=" " * (label + 2)):
                click.echo(line)


def compact_value(key: str, value: Any) -> str:
    """One value of a record for the answer-first views, its unit read from its key (`_s`
    seconds, `_gib`, `usd`, fractions and MFU as %, token rates)."""
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        value = value.item()
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict | list):
        return json.dumps(json_ready(value))
    if not isinstance(value, int | float):
        return str(value)
    name = key.lower()
    if "usd" in name:
        return format_usd(float(value))
    if "fraction" in name or "utilisation" in name or name == "mfu":
        return format_percent(float(value))
    if "tokens_per_s" in name:
        return format_rate(float(value), "tok/s")
    if (name.endswith("_s") or "_s_" in name) and isinstance(value, float):
        return format_duration(value)
    if name.endswith("_gib"):
        return f"{format_number(float(value))} GiB"
    return format_number(value)


def provenance_lines(record: Mapping[str, Any]) -> list[str]:
    """The profile a prediction rests on, and a one-line warning when its GPU's profile is the
    catalog prior (datasheet figures, no measurement or calibration)."""
    links = [f"{item['link']} {item['provenance']}" for item in record.get("link_provenance", ())]
    lines = [f"profile {record['profile']} ({record['provenance']})"
             + (f"; links: {', '.join(links)}" if links else "")]
    if record.get("active_params", 0) < record.get("total_params", 0):
        lines.append(f"mixture of experts: {format_number(record['total_params'])} total, "
                     f"{format_number(record['active_params'])} active parameters"
                     + (f"; all-to-all: {record['all_to_all_provenance']}"
                        if record.get("all_to_all_provenance") else ""))
    if record["provenance"] == "prior":
        lines.append(prior_warning(str(record["gpu"])))
    return lines


def prior_warning(*gpu_names: str) -> str:
    """The warning of a result that rests on prior profiles, with how far such estimates have
    missed on held-out data (`perfmodel.uncertainty.track_record.misses_clause`)."""
    head = (f"{gpu_names[0]}'s profile is a datasheet prior" if len(gpu_names) == 1 else
            f"the profiles of {', '.join(gpu_names)} are datasheet priors")
    misses = misses_clause("prior")
    return f"warning: {head}: times are estimates" + (f"; {misses}" if misses else "")


def require_torch() -> None:
    """A clear error (exit 1, no traceback) when the optional torch extra is missing."""
    if importlib.util.find_spec("torch") is None:
        raise click.ClickException(
            "torch is not installed.\n"
            "To fix: pip install 'shardmeter[bench]' (torch==2.13.0).")


def verbose_bench_logs() -> None:
    """Benchmarks report progress per configuration at INFO level."""
    logging.getLogger("perfmodel.bench").setLevel(logging.INFO)
    if not logging.getLogger().handlers:
        logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")


class CheckpointParam(click.ParamType):  # type: ignore[type-arg]  # click < 8.2 is not generic
    """An activation checkpointing policy: none, full, op-sac, attn or layer:N (`selective` reads
    as op-sac, with a notice); bad names fail with the allowed ones and a did-you-mean."""

    name = "ac"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return canonical_ac(value, where="--ac")
        except ShardMeterError as err:
            self.fail(f"{err.message}. To fix: {err.hint}", param, ctx)

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "[" + "|".join(AC_MODES) + "]"
