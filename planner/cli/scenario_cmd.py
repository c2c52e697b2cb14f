"""Printing of scenario studies: `pareto` and `plan` over several instance files and what-if
scenarios (`--vary`).

Output: a summary table (one row per instance and scenario), each scenario's p10–p90 band (of a
`plan` study's answer, or of a `pareto` study's fastest time and cheapest cost; or why it has
none), then per instance the cross table (every plan scored under every scenario, with its
regret) and the robust (min-max-regret) choice.
The study comes from `planner.api` (`frontier`, `query`; `planner.studies`); this module
only formats.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import click
import pandas as pd

from perfmodel.numbers import format_duration, format_number, format_usd
from planner.analysis.report import SCHEMA_VERSION, groups_cell
from planner.cli.common import (
    compact_fits,
    echo_wrapped,
    emit_compact,
    emit_json,
    emit_records,
)
from planner.studies import ScenarioSection, ScenarioStudy

MAX_PLANS_SHOWN = 12
"""Plans of the compact cross table (least maximum regret first); --wide and JSON list all."""
MAX_PLAN_COLUMNS = 6
"""Plans shown as columns when the scenarios do not fit as columns."""


def emit_study(study: ScenarioStudy, fmt: str, *, wide: bool = False) -> None:
    """Print a scenario study as JSON (with `schema_version`), CSV (the summary) or tables (the
    robust choice first, then compact tables at the terminal's width; `wide`: every column);
    whatever the format, a study with scenarios not proven exact (or not solved in the time
    limit) says so on stderr."""
    _warn_unproven(study)
    if fmt == "json":
        emit_json({"schema_version": SCHEMA_VERSION, **study.payload})
        return
    if fmt == "csv":
        emit_records(pd.DataFrame([_csv_row(row) for row in study.summary]), "csv")
        return
    if not wide:
        _study_view(study)
        return
    emit_records(pd.DataFrame(study.summary), fmt, title="scenarios")
    for section in study.sections:
        key = pd.DataFrame({"scenario": [f"s{j}" for j in range(len(section.scenarios))],
                            "values": list(section.scenarios)})
        emit_records(key, fmt, title=f"{section.instance}: scenario key")
        emit_records(section.cross_table, fmt,
                     title=f"{section.instance}: every plan under every scenario (regret vs "
                           "hindsight)")
        if section.robust is not None:
            click.echo(_robust_line(section))


def _robust_line(section: ScenarioSection) -> str:
    """'robust choice for X.yaml (least maximum regret): LABEL, max regret 0 %'."""
    worst = section.robust_max_regret_pct
    label = section.robust.label if section.robust is not None else "none"
    return (f"robust choice for {section.instance} (least maximum regret): {label}, max regret "
            + ("infinite: infeasible or unmatched in some scenario" if worst is None
               else _pct(worst)))


def _pct(value: Any) -> str:
    """A regret in percent ('-' for an infinite one: infeasible or unmatched)."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{format_number(float(value), digits=3)} %"


def _study_view(study: ScenarioStudy) -> None:
    """Answer first: each instance's robust choice (with its islands), then the scenarios (key
    and each one's fastest and cheapest, or its answer), then the plans' regret per scenario."""
    for section in study.sections:
        echo_wrapped(_robust_line(section))
        if section.robust is not None and section.robust.islands:
            counts = Counter((i[0], i[1], i[2], i[3], i[4], i[5]) for i in section.robust.islands)
            echo_wrapped("  " + "; ".join(
                f"{n} × ({nodes} node{'s' if nodes != 1 else ''} × {gpn} GPUs) of {cluster} "
                f"{tier}, m {m}, k {k}"
                for (cluster, nodes, gpn, m, k, tier), n in counts.most_common()), indent="    ")
    click.echo("")
    several = len(study.sections) > 1
    names = {(row["instance"], row["scenario"]) for row in study.summary}
    keys: dict[tuple[str, str], str] = {}
    for section in study.sections:
        for j, scenario in enumerate(section.scenarios):
            keys[(section.instance, scenario)] = f"s{j}"
    rows = []
    for row in study.summary:
        out = {"s": keys.get((row["instance"], row["scenario"]), "?")}
        if several:
            out["instance"] = str(row["instance"])
        out.update(_summary_cells(row))
        rows.append(out)
    if not compact_fits(rows):  # a plan's label is long: name it by its cross-table number
        numbers = _plan_numbers(study)
        for out, row in zip(rows, study.summary, strict=True):
            name = numbers.get((row["instance"], out.get("plan", "")))
            if name is not None:
                out["plan"] = f"plan {name}"
    echo_wrapped("scenarios" + (" (s<j>: " + "; ".join(
        f"s{j} {name}" for j, name in enumerate(study.sections[0].scenarios)) + ")"
        if not several and len(names) <= 4 else ""))
    emit_compact(rows)
    if several or len(names) > 4:
        for section in study.sections:
            for j, scenario in enumerate(section.scenarios):
                echo_wrapped(f"s{j}{' of ' + section.instance if several else ''}: {scenario}")
    _band_lines(study, [row["s"] for row in rows])
    for section in study.sections:
        _cross_view(section)


def _csv_row(row: dict[str, Any]) -> dict[str, Any]:
    """A summary row as a CSV row: `interval_groups` as one cell "A=prior;B=calibrated", as the
    plan CSV writes it (`planner.analysis.report.groups_cell`)."""
    groups = row.get("interval_groups")
    if not isinstance(groups, dict):
        return row
    return {**row, "interval_groups": groups_cell(groups)}


def _band_lines(study: ScenarioStudy, keys: list[str]) -> None:
    """One line per scenario with a band, as `plan` states it: 'p10–p90' of a plan study's answer
    (time, cost) or of a frontier study's fastest time and cheapest cost; the scenarios without
    one share a line saying why (their `interval_note`)."""
    lines: list[str] = []
    missing: Counter[str] = Counter()
    for key, row in zip(keys, study.summary, strict=True):
        if "wall_time_s_p10" in row:
            lines.append(f"{key} p10–p90: {format_duration(row['wall_time_s_p10'])} – "
                         f"{format_duration(row['wall_time_s_p90'])}, "
                         f"{format_usd(row['cost_usd_p10'])} – {format_usd(row['cost_usd_p90'])}")
        elif "fastest_h_p10" in row:
            lines.append(f"{key} p10–p90: fastest {format_duration(row['fastest_h_p10'] * 3600)} "
                         f"– {format_duration(row['fastest_h_p90'] * 3600)}, cheapest "
                         f"{format_usd(row['cheapest_usd_p10'])} – "
                         f"{format_usd(row['cheapest_usd_p90'])}")
        elif row.get("interval_note"):
            missing[str(row["interval_note"])] += 1
    if lines:
        echo_wrapped("80 % band of each scenario (step-time error model, shipped residuals):")
        for line in lines:
            echo_wrapped("  " + line, indent="    ")
    for note, count in missing.items():
        echo_wrapped(f"{count} scenario{'s' if count != 1 else ''}: {note}", indent="  ")


def _plan_numbers(study: ScenarioStudy) -> dict[tuple[str, str], str]:
    """(instance, label) -> the plan's name in that instance's cross table ('0*'), for labels
    that name one plan only (the cross view lists each plan's label under its name)."""
    out: dict[tuple[str, str], str] = {}
    for section in study.sections:
        frame = section.cross_table
        if frame.empty:
            continue
        counts = Counter(str(label) for label in frame["label"])
        for record in frame.to_dict(orient="records"):
            if counts[str(record["label"])] == 1:
                out[(section.instance, str(record["label"]))] = _plan_name(
                    {str(k): v for k, v in record.items()})
    return out


def _summary_cells(row: dict[str, Any]) -> dict[str, str]:
    """A summary row's figures: a frontier's ends, or a query's answer; the note if any."""
    if "fastest_h" in row:
        cells = {"points": str(row["points"]),
                 "fastest": format_duration(row["fastest_h"] * 3600),
                 "fastest $": format_usd(row["fastest_usd"]),
                 "cheapest": format_duration(row["cheapest_h"] * 3600),
                 "cheapest $": format_usd(row["cheapest_usd"])}
    elif "wall_time_h" in row:
        cells = {"plan": str(row.get("label", "")),
                 "wall time": format_duration(row["wall_time_h"] * 3600),
                 "cost": format_usd(row["cost_usd"])}
    else:
        cells = {}
    if row.get("note"):
        cells["note"] = str(row["note"])
    if row.get("proven_exact") is False:
        cells["exact"] = "no"
    return cells


def _cross_view(section: ScenarioSection) -> None:
    """The plans' regret under each scenario, least maximum regret first (MAX_PLANS_SHOWN): one
    row per plan, or, when the scenario columns do not fit the terminal, one row per scenario
    and a column per plan (the plans' islands listed under it)."""
    frame = section.cross_table
    if frame.empty:
        return
    records: list[dict[str, Any]] = [{str(k): v for k, v in r.items()}
                                     for r in frame.to_dict(orient="records")]
    records.sort(key=lambda r: (math.inf if r["max_regret_pct"] is None
                                or not math.isfinite(r["max_regret_pct"])
                                else r["max_regret_pct"], r["plan"]))
    shown = records[:MAX_PLANS_SHOWN]
    rows = []
    for r in shown:
        row = {"plan": _plan_name(r), "islands": str(r["label"])}
        for j in range(len(section.scenarios)):
            row[f"s{j}"] = _pct(r[f"s{j}_regret_pct"])
        row["max"] = _pct(r["max_regret_pct"])
        rows.append(row)
    click.echo("")
    echo_wrapped(f"{section.instance}: regret of each plan under each scenario vs hindsight "
                 "(* robust)")
    if compact_fits(rows):
        emit_compact(rows)
    else:
        shown = shown[:MAX_PLAN_COLUMNS]
        by_scenario = [{"s": f"s{j}", **{_plan_name(r): _pct(r[f"s{j}_regret_pct"])
                                          for r in shown}}
                       for j in range(len(section.scenarios))]
        by_scenario.append({"s": "max", **{_plan_name(r): _pct(r["max_regret_pct"])
                                           for r in shown}})
        emit_compact(by_scenario)
        for r in shown:
            echo_wrapped(f"plan {_plan_name(r)}: {r['label']}")
    if len(records) > len(shown):
        echo_wrapped(f"… {len(records) - len(shown)} more plans: --wide or --format json lists "
                     "every plan with its time and cost per scenario")


def _plan_name(record: dict[str, Any]) -> str:
    """'3', or '3*' for the robust plan."""
    return f"{record['plan']}{'*' if record['robust'] else ''}"


def _warn_unproven(study: ScenarioStudy) -> None:
    if study.unproven:
        shown = study.unproven[:10]
        more = len(study.unproven) - len(shown)
        click.echo("warning: NOT proven exact: " + ", ".join(shown)
                   + (f" and {more} more" if more else "")
                   + ". To fix: raise --time-limit-s.", err=True)
