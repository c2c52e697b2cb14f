"""One self-contained HTML page of a frontier or a plan (`pareto/plan ... --html report.html`).

Claim: the page a planner can send to finance holds, with no network access (no CDN, no
external src/href: styles, the SVG chart and a few lines of script are inline), the answer first
(fastest, cheapest, or the chosen plan: what to rent from whom, wall time, cost, and the p10/p90
interval or the quantile where the result carries one), an interactive frontier (hover or focus
a point: its islands, GPUs, providers, time and cost; every point also has an SVG <title>, so
the plan shows without script), the plan table, the assumptions (instance, model, batch,
strategy, caps, each cluster's price list with its date and price) and each GPU's profile
provenance (measured / calibrated / prior), the date generated and the ShardMeter version.
Why: issue 29 item 7: a terminal table does not travel; a PNG plot does not say which plan a
point is, nor what it rests on.
How: numbers go through the one formatter of `perfmodel.numbers` (through the planner's door
`perfmodel.facts`); plan facts come from the
records of `planner.analysis.report` (`frontier_records`, `plan_record`, `gpu_profiles`); the
chart is hand-written SVG whose axis ticks come from matplotlib's locators (no new dependency),
one <circle class="point"> per frontier point carrying its plan in data-* attributes.
Checked by: tests/test_html_report.py (the page parsed with html.parser: one svg, one point per
frontier point with its plan, the plan table rows, nothing external; and loaded in headless
chromium, where the hover script fills the detail panel, skipped where none is installed).
"""

from __future__ import annotations

import datetime as dt
import html
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from perfmodel.facts import (
    __version__,
    format_duration,
    format_number,
    format_usd,
    misses_clause,
    track_record_line,
)
from planner.analysis import report
from planner.model.instance import Instance
from planner.model.problem import Problem
from planner.model.uncertainty import EXTRAPOLATION_LABEL

CHART_WIDTH_PX = 760
"""Width of the frontier chart (SVG user units = CSS px at 100 % zoom)."""
CHART_HEIGHT_PX = 420
"""Height of the frontier chart."""
CHART_MARGIN_PX = (20, 20, 56, 84)
"""Top, right, bottom, left margins of the plot area (room for tick labels and axis titles)."""
LOG_RANGE_FACTOR = 10.0
"""An axis whose values span more than this factor is drawn on a log scale (as
`report.plot_frontier`)."""
PROVENANCE_MEANING = {
    "measured": "fitted to runs measured on this GPU",
    "calibrated": "a prior calibrated against measured runs of this GPU",
    "prior": "datasheet prior: no measurement of this GPU; times are estimates",
    "island table": "the instance's fixed island table (its own figures)",
}
"""What each profile provenance means, for readers who do not know the planner."""
SECOND_OBJECTIVE = {"cost": ("cost_usd", "cost (USD)"), "energy": ("energy_kwh", "energy (kWh)"),
                    "co2": ("co2_kg", "CO2 (kg CO2e)")}
"""Record key and axis title of the frontier's second objective."""


def frontier_page(records: Sequence[dict[str, Any]], meta: dict[str, Any], *,
                  instance: Instance, problem: Problem, metric: str = "cost",
                  chosen: dict[str, Any] | None = None,
                  generated: dt.datetime | None = None) -> str:
    """The whole page: `records` are the frontier points (`report.frontier_records`, fastest
    first), `meta` how they were solved; `chosen` the plan record a `plan` query picked (None:
    a `pareto` report, whose answer is the fastest and the cheapest point)."""
    key, _ = SECOND_OBJECTIVE[metric]
    chosen_point = _chosen_point(records, chosen)
    title = f"ShardMeter report: {problem.name}"
    when = (generated or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%d %H:%M UTC")
    profiles = report.gpu_profiles(instance,
                                   report._gpus_of([*records, *([chosen] if chosen else [])]))
    body = [
        f"<header><h1>{_e(title)}</h1><p class=\"meta\">Generated {_e(when)} by ShardMeter "
        f"{_e(__version__)} (no network needed: everything on this page is inline).</p>"
        "</header>",
        _answer(records, meta, problem, metric, chosen, profiles),
        _chart(records, key, metric, chosen_point),
        _plan_tables(records, key, metric, chosen, chosen_point),
        _assumptions(instance, problem, meta),
        _provenance(profiles),
        _excluded(problem),
        f"<footer>ShardMeter {_e(__version__)} · generated {_e(when)} · "
        f"{_e(_solve_line(meta))}</footer>",
    ]
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            f"<title>{_e(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
            + "\n".join(part for part in body if part)
            + f"\n<script>{_SCRIPT}</script>\n</body>\n</html>\n")


def write_frontier_page(path: str | Path, records: Sequence[dict[str, Any]],
                        meta: dict[str, Any], *, instance: Instance, problem: Problem,
                        metric: str = "cost", chosen: dict[str, Any] | None = None) -> None:
    """`frontier_page` written to `path` whole or not at all (`report.write_text_atomic`)."""
    report.write_text_atomic(path, frontier_page(records, meta, instance=instance,
                                                 problem=problem, metric=metric, chosen=chosen))


# ---- sections --------------------------------------------------------------------------------


def _answer(records: Sequence[dict[str, Any]], meta: dict[str, Any], problem: Problem,
            metric: str, chosen: dict[str, Any] | None,
            profiles: list[dict[str, str]]) -> str:
    """The answer first: the chosen plan (plan) or the fastest and cheapest points (pareto),
    what to rent from whom, then the quantile statement and the prior warning."""
    key, _ = SECOND_OBJECTIVE[metric]
    parts = ["<section id=\"answer\"><h2>Answer</h2>"]
    if chosen is not None:
        parts.append(_answer_block(f"Chosen plan ({chosen.get('query', 'plan')})", chosen, key,
                                   "chosen"))
    if records:  # the frontier's ends (a plan page: those that are not the chosen plan)
        chosen_point = _chosen_point(records, chosen)
        least = min(range(len(records)), key=lambda i: (_value(records[i], key),
                                                         records[i]["wall_time_s"]))
        ends = [("Fastest", 0, "fastest"),
                ("Cheapest" if metric == "cost" else f"Least {metric}", least, "cheapest")]
        prefix = "" if chosen is None else "On the frontier, the "
        for name, i, css in ends:
            if i != chosen_point and not (css == "cheapest" and i == 0):
                label = name if chosen is None else prefix + name.lower()
                parts.append(_answer_block(label, records[i], key, css))
    elif chosen is None:
        parts.append("<p class=\"answer\">No feasible plan.</p>")
    quantile = meta.get("quantile", (chosen or {}).get("quantile"))
    if quantile is not None:
        model = meta.get("error_model", (chosen or {}).get("error_model", ""))
        parts.append(f"<p class=\"note\">Times and costs are the {_e(format_number(quantile))}"
                     f"-quantiles: {_e(model)}</p>")
    if meta.get("failures"):
        parts.append("<p class=\"note\">Times and costs are expected values under failures, "
                     "spot preemptions, checkpoints, egress and billing (the failure model; "
                     "see Assumptions).</p>")
    priors = [p["gpu_type"] for p in profiles if p["provenance"] == "prior"]
    if priors:
        which = (f"the profile of {priors[0]} is a datasheet prior, not a measurement"
                 if len(priors) == 1 else
                 f"the profiles of {', '.join(priors)} are datasheet priors, not measurements")
        misses = misses_clause("prior")  # how far such estimates have missed before
        parts.append(f"<p class=\"warning\">Warning: {_e(which)}: the times are estimates"
                     + (f"; {_e(misses)}" if misses else "") + " (see Provenance).</p>")
    if meta.get("proven_exact") is False:
        parts.append("<p class=\"warning\">Warning: the solve stopped before proving the "
                     f"frontier exact: {_e(meta.get('not_exact_because', ''))}</p>")
    parts.append("</section>")
    return "\n".join(parts)


def _sentence(text: str) -> str:
    """`text` with its first letter capitalised (a table's lower-case label as a paragraph)."""
    return text[:1].upper() + text[1:]


def _answer_block(name: str, record: dict[str, Any], key: str, css: str) -> str:
    """'Fastest: 2.046 days, $15,020 on 128 GPUs' and one line per island group."""
    extra = "" if key == "cost_usd" else f", {_second_text(key, record.get(key))}"
    time = _with_interval(record, "wall_time_s", format_duration)
    cost = _with_interval(record, "cost_usd", format_usd)
    head = (f"<strong>{_e(name)}:</strong> {_e(time)}, {_e(cost)}{_e(extra)} on "
            f"{_e(format_number(record['num_gpus']))} GPUs, "
            f"{_e(format_number(record['tokens_per_s']))} tok/s")
    groups = "".join(f"<li>{_e(g['description'])}</li>" for g in record["island_groups"])
    beyond = record.get("interval_extrapolation")  # the band is not widened there: say so
    note = (f"<p class=\"note\">{_e(_sentence(EXTRAPOLATION_LABEL))}: {_e(beyond)}</p>"
            if beyond else "")
    track = track_record_line(record.get("interval_groups", {}).values())
    if track and "wall_time_s_p10" in record:  # how far such bands have held before
        note += f"<p class=\"note\">{_e(_sentence(track))}</p>"
    return f"<div class=\"answer {css}\"><p>{head}</p><ul>{groups}</ul>{note}</div>"


def _chart(records: Sequence[dict[str, Any]], key: str, metric: str,
           chosen_point: int | None) -> str:
    """The frontier as SVG: a staircase through the points (time vs the second objective), one
    focusable <circle class="point"> per point with its plan in data-* attributes and <title>,
    and a detail panel the script fills on hover."""
    _, y_title = SECOND_OBJECTIVE[metric]
    points = [(r["wall_time_s"], _value(r, key)) for r in records]
    drawable = [(t, v) for t, v in points if math.isfinite(v) and v > 0 and t > 0]
    head = (f"<section id=\"frontier\"><h2>Frontier: wall-clock time vs {_e(y_title)}, "
            f"{len(records)} point{'s' if len(records) != 1 else ''}</h2>")
    if not drawable:
        return head + "<p>No point to draw.</p></section>"
    day = max(t for t, _ in drawable) > 2 * 86400.0
    unit_s, x_title = (86400.0, "wall-clock time (days)") if day else (3600.0,
                                                                      "wall-clock time (hours)")
    x_axis = _Axis([t / unit_s for t, _ in drawable])
    y_axis = _Axis([v for _, v in drawable])
    top, right, bottom, left = CHART_MARGIN_PX
    width, height = CHART_WIDTH_PX - left - right, CHART_HEIGHT_PX - top - bottom

    def px(t_s: float, value: float) -> tuple[float, float]:
        return (left + x_axis.fraction(t_s / unit_s) * width,
                top + (1 - y_axis.fraction(value)) * height)

    out = [head, f"<svg id=\"frontier-chart\" xmlns=\"http://www.w3.org/2000/svg\" "
                 f"viewBox=\"0 0 {CHART_WIDTH_PX} {CHART_HEIGHT_PX}\" width=\"{CHART_WIDTH_PX}\" "
                 f"height=\"{CHART_HEIGHT_PX}\" role=\"img\" "
                 f"aria-label=\"{_e(x_title)} against {_e(y_title)}\">",
           f"<rect class=\"plot\" x=\"{left}\" y=\"{top}\" width=\"{width}\" "
           f"height=\"{height}\"/>"]
    y_format: Callable[[float], str] = format_usd if key == "cost_usd" else format_number
    for tick in x_axis.ticks:
        x = left + x_axis.fraction(tick) * width
        out.append(f"<line class=\"grid\" x1=\"{x:.1f}\" y1=\"{top}\" x2=\"{x:.1f}\" "
                   f"y2=\"{top + height}\"/><text class=\"tick\" x=\"{x:.1f}\" "
                   f"y=\"{top + height + 18}\" text-anchor=\"middle\">"
                   f"{_e(format_number(tick))}</text>")
    for tick in y_axis.ticks:
        y = top + (1 - y_axis.fraction(tick)) * height
        out.append(f"<line class=\"grid\" x1=\"{left}\" y1=\"{y:.1f}\" x2=\"{left + width}\" "
                   f"y2=\"{y:.1f}\"/><text class=\"tick\" x=\"{left - 6}\" y=\"{y + 4:.1f}\" "
                   f"text-anchor=\"end\">{_e(y_format(tick))}</text>")
    out.append(f"<text class=\"axis\" x=\"{left + width / 2:.1f}\" y=\"{CHART_HEIGHT_PX - 12}\" "
               f"text-anchor=\"middle\">{_e(x_title)}"
               f"{' (log scale)' if x_axis.log else ''}</text>")
    out.append(f"<text class=\"axis\" transform=\"translate(16 {top + height / 2:.1f}) "
               f"rotate(-90)\" text-anchor=\"middle\">{_e(y_title)}"
               f"{' (log scale)' if y_axis.log else ''}</text>")
    steps = [px(t, v) for t, v in sorted(drawable)]
    path = f"M{steps[0][0]:.1f},{steps[0][1]:.1f}" + "".join(
        f" H{x:.1f} V{y:.1f}" for x, y in steps[1:])
    out.append(f"<path class=\"staircase\" d=\"{path}\"/>")
    for i, record in enumerate(records):
        t, v = points[i]
        if not (math.isfinite(v) and v > 0 and t > 0):
            continue
        x, y = px(t, v)
        classes = "point" + (" chosen" if i == chosen_point else "") + \
            (" near-duplicate" if record.get("near_duplicate") else "")
        data = _point_data(record, key)
        attrs = " ".join(f"data-{name}=\"{_e(value)}\"" for name, value in data.items())
        out.append(f"<circle id=\"point-{_e(data['point'])}\" class=\"{classes}\" "
                   f"cx=\"{x:.1f}\" cy=\"{y:.1f}\" "
                   f"r=\"{7 if i == chosen_point else 5}\" tabindex=\"0\" {attrs}>"
                   f"<title>{_e(_point_text(data))}</title></circle>")
    out.append("</svg>")
    legend = ("Each dot is one plan of the exact frontier: no plan is both faster and cheaper. "
              "Hover or focus a dot (or a table row) to see its plan.")
    if chosen_point is not None:
        legend += " The large dot is the chosen plan."
    if any(r.get("near_duplicate") for r in records):
        legend += (" Hollow dots are near-duplicates: they gain less than the --min-gain "
                   "fraction over a neighbour.")
    out.append(f"<p class=\"legend\">{_e(legend)}</p>")
    out.append("<div id=\"point-detail\" aria-live=\"polite\">Hover a point to see its plan."
               "</div></section>")
    return "\n".join(out)


def _point_data(record: dict[str, Any], key: str) -> dict[str, str]:
    """What a point carries (data-* attributes; the script shows them on hover)."""
    sellers = []
    for group in record["island_groups"]:
        seller = (f"{group.get('provider') or 'instance price'} {group['tier']} "
                  f"(cluster {group['cluster']}), price list {group.get('price_list') or '-'}")
        if seller not in sellers:
            sellers.append(seller)
    data = {"point": str(record.get("point", 0)), "label": str(record["label"]),
            "time": _with_interval(record, "wall_time_s", format_duration),
            "cost": _with_interval(record, "cost_usd", format_usd),
            "gpus": format_number(record["num_gpus"]),
            "tokens": f"{format_number(record['tokens_per_s'])} tok/s",
            "islands": "\n".join(g["description"] for g in record["island_groups"]),
            "providers": "\n".join(sellers)}
    if key != "cost_usd":
        data["second"] = _second_text(key, record.get(key))
    return data


def _point_text(data: dict[str, str]) -> str:
    """The tooltip of a point without script (the SVG <title>)."""
    second = f", {data['second']}" if "second" in data else ""
    return (f"#{data['point']} {data['label']}\n{data['time']}, {data['cost']}{second}, "
            f"{data['gpus']} GPUs\n{data['islands']}\nfrom: {data['providers']}")


def _plan_tables(records: Sequence[dict[str, Any]], key: str, metric: str,
                 chosen: dict[str, Any] | None, chosen_point: int | None) -> str:
    """The chosen plan's island groups (plan), then one row per frontier point."""
    parts = ["<section id=\"plans\">"]
    if chosen is not None:
        parts.append("<h2>Chosen plan: what to rent</h2>")
        parts.append(_table("group-table",
                            ["islands", "nodes × GPUs", "GPU", "provider", "tier", "cluster",
                             "price list", "m", "k", "tok/s", "$/h", "cost"],
                            [(None, [format_number(g["count"]),
                                     f"{g['nodes']} × {g['gpus_per_node']}", g["gpu_type"],
                                     g.get("provider") or "instance price", g["tier"],
                                     g["cluster"], g.get("price_list") or "-",
                                     str(g["micro_batch"]), str(g["accum_steps"]),
                                     format_number(g["tokens_per_s"]),
                                     format_usd(g["usd_per_hour"]), format_usd(g["cost_usd"])])
                             for g in chosen["island_groups"]]))
    _, y_title = SECOND_OBJECTIVE[metric]
    header = ["#", "wall time", "cost"]
    if key != "cost_usd":
        header.append(y_title)
    else:
        header.append("$/h saved")
    header += ["tok/s", "GPUs", "plan"]
    rows = []
    for i, record in enumerate(records):
        cells = [f"{record.get('point', i)}{'*' if record.get('near_duplicate') else ''}"
                 f"{' (chosen)' if i == chosen_point else ''}",
                 _with_interval(record, "wall_time_s", format_duration),
                 _with_interval(record, "cost_usd", format_usd)]
        if key != "cost_usd":
            cells.append(_second_text(key, record.get(key)))
        else:
            saved = record.get("usd_per_hour_saved")
            cells.append("-" if saved is None else format_usd(saved))
        cells += [format_number(record["tokens_per_s"]), format_number(record["num_gpus"]),
                  "; ".join(g["description"] for g in record["island_groups"])]
        rows.append((str(record.get("point", i)), cells))
    parts.append(f"<h2>Frontier plans ({len(records)})</h2>")
    parts.append(_table("plan-table", header, rows))
    if any(r.get("near_duplicate") for r in records):
        parts.append("<p class=\"legend\">* near-duplicate: gains less than the --min-gain "
                     "fraction of wall time or cost over a neighbour. $/h saved: dollars paid "
                     "per hour of wall time saved against the next faster point that saves a "
                     "noticeable share.</p>")
    parts.append("</section>")
    return "\n".join(parts)


def _assumptions(instance: Instance, problem: Problem, meta: dict[str, Any]) -> str:
    """What the answer rests on: the instance, the model and batch, the strategy, the caps, and
    each cluster's GPU, provider, price list (with its date), price and region."""
    training = instance.training
    caps = [f"at most {problem.max_islands} islands"]
    if problem.max_gpus is not None:
        caps.append(f"at most {format_number(problem.max_gpus)} GPUs")
    if problem.budget_usd is not None:
        caps.append(f"budget {format_usd(problem.budget_usd)}")
    if problem.deadline_s is not None:
        caps.append(f"deadline {format_duration(problem.deadline_s)}")
    facts = [
        ("instance", problem.name), ("model", instance.model),
        ("sequence length", f"{format_number(problem.seq_len)} tokens"),
        ("global batch", f"{format_number(problem.global_batch_seqs)} sequences = "
                         f"{format_number(problem.global_batch_seqs * problem.seq_len)} tokens"),
        ("training tokens", f"{format_number(problem.train_tokens)} tokens"),
        ("strategy", f"{training.strategy}, {format_number(problem.inner_steps)} inner steps "
                     "per outer sync"),
        ("activation checkpointing", str(training.activation_checkpointing)),
        ("limits", ", ".join(caps)),
        ("solver", _solve_line(meta)),
    ]
    if meta.get("failures"):
        facts.append(("failure model", "on: expected time and cost under failures, "
                                       "preemptions, checkpoints, egress and billing"))
    parts = ["<section id=\"assumptions\"><h2>Assumptions</h2>",
             _table("assumption-table", ["assumption", "value"],
                    [(None, [name, value]) for name, value in facts]),
             "<h3>Clusters and price lists</h3>",
             _table("price-table", ["cluster", "GPU", "nodes", "provider", "tier",
                                    "price list (date)", "$/GPU-h", "region"],
                    [(None, row) for row in _price_rows(problem)]),
             "</section>"]
    return "\n".join(parts)


def _price_rows(problem: Problem) -> list[list[str]]:
    """One row per (cluster, tier) offered: the price per GPU-hour as the planner uses it (the
    island price over its GPUs, scale and list applied)."""
    rows = []
    seen: set[tuple[str, str]] = set()
    clusters = {c.name: c for c in problem.clusters}
    for option in problem.options:
        if (option.cluster, option.tier) in seen:
            continue
        seen.add((option.cluster, option.tier))
        info = clusters.get(option.cluster)
        rows.append([option.cluster, option.gpu_type,
                     format_number(info.num_nodes) if info else "-",
                     (info.provider if info else None) or "instance price", option.tier,
                     (info.price_list if info else "") or "-",
                     format_usd(option.usd_per_hour / option.num_gpus),
                     (info.region if info else None) or "-"])
    return rows


def _provenance(profiles: list[dict[str, str]]) -> str:
    """Each GPU's profile and how far to trust it."""
    rows = [(None, [p["gpu_type"], p["provenance"], p["profile"],
                    PROVENANCE_MEANING.get(p["provenance"], "")]) for p in profiles]
    return ("<section id=\"provenance\"><h2>Provenance of the GPU profiles</h2>"
            + _table("provenance-table", ["GPU", "provenance", "profile", "meaning"], rows)
            + "</section>")


def _excluded(problem: Problem) -> str:
    """Clusters and island options that contribute no plan, with reason and fix."""
    records = report.exclusion_records(problem)
    if not records:
        return ""
    rows = [(None, [str(r["cluster"]), "all" if r["nodes"] is None else str(r["nodes"]),
                    "all" if r["gpus_per_node"] is None else str(r["gpus_per_node"]),
                    str(r["reason"]), str(r["fix"])]) for r in records]
    return ("<section id=\"excluded\"><h2>Left out (reason and fix)</h2>"
            + _table("excluded-table", ["cluster", "nodes", "GPUs per node", "reason", "fix"],
                     rows) + "</section>")


# ---- helpers ---------------------------------------------------------------------------------


class _Axis:
    """Linear or log axis over `values` (log when they span more than LOG_RANGE_FACTOR) with
    tick positions from matplotlib's locators (1-2-5 per decade on a log axis)."""

    def __init__(self, values: Sequence[float]) -> None:
        lo, hi = min(values), max(values)
        self.log = hi > LOG_RANGE_FACTOR * lo
        # lazy: matplotlib (ticks only) loads when a report is written
        from matplotlib.ticker import LogLocator, MaxNLocator

        if self.log:
            self.lo, self.hi = lo / 1.15, hi * 1.15
            ticks = LogLocator(subs=(1.0, 2.0, 5.0)).tick_values(self.lo, self.hi)
        else:
            span = (hi - lo) or abs(hi) or 1.0
            self.lo, self.hi = max(lo - 0.06 * span, 0.0 if lo >= 0 else -math.inf), \
                hi + 0.06 * span
            ticks = MaxNLocator(nbins=6).tick_values(self.lo, self.hi)
        self.ticks = [float(t) for t in ticks if self.lo <= t <= self.hi]

    def fraction(self, value: float) -> float:
        """Where `value` lies between the axis ends, 0..1."""
        if self.log:
            return (math.log(value) - math.log(self.lo)) / (math.log(self.hi) - math.log(self.lo))
        return (value - self.lo) / (self.hi - self.lo)


def _table(table_id: str, header: Sequence[str],
           rows: Sequence[tuple[str | None, Sequence[str]]]) -> str:
    """A table; a row with a point number is a `plan-row` carrying data-point (hover links it to
    its dot)."""
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = []
    for point, cells in rows:
        attrs = f" class=\"plan-row\" data-point=\"{_e(point)}\"" if point is not None else ""
        body.append(f"<tr{attrs}>" + "".join(f"<td>{_e(c)}</td>" for c in cells) + "</tr>")
    return (f"<table id=\"{table_id}\"><thead><tr>{head}</tr></thead><tbody>"
            + "".join(body) + "</tbody></table>")


def _chosen_point(records: Sequence[dict[str, Any]], chosen: dict[str, Any] | None) -> int | None:
    """The frontier point that is the chosen plan (equal time and cost), if any."""
    if chosen is None:
        return None
    for i, record in enumerate(records):
        if math.isclose(record["wall_time_s"], chosen["wall_time_s"], rel_tol=1e-12) and \
                math.isclose(record["cost_usd"], chosen["cost_usd"], rel_tol=1e-12):
            return i
    return None


def _value(record: dict[str, Any], key: str) -> float:
    value = record.get(key)
    return math.nan if value is None else float(value)


def _second_text(key: str, value: float | None) -> str:
    """An energy or CO2 figure with its unit."""
    if value is None:
        return "-"
    return f"{format_number(float(value))} {'kWh' if key == 'energy_kwh' else 'kg CO2e'}"


def _with_interval(record: dict[str, Any], key: str, fmt: Callable[[float], str]) -> str:
    """'2.046 days' or, where the record carries `key_p10` and `key_p90`, '2.046 days (p10-p90
    1.9-2.2 days)'."""
    text = fmt(float(record[key]))
    low, high = record.get(f"{key}_p10"), record.get(f"{key}_p90")
    if low is not None and high is not None:
        text += f" (p10–p90 {fmt(float(low))} – {fmt(float(high))})"
    return text


def _solve_line(meta: dict[str, Any]) -> str:
    """'exact frontier (dp solver, 379 ms)' or 'NOT proven exact (...)'."""
    exact = "exact frontier" if meta.get("proven_exact") else "NOT proven exact"
    return (f"{exact} ({meta.get('solver')} solver, "
            f"{format_duration(float(meta.get('solve_time_s') or 0.0))})")


def _e(value: Any) -> str:
    """HTML-escaped text (quotes too: it also fills attributes)."""
    return html.escape(str(value), quote=True)


_CSS = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d2433;
max-width:1100px;margin:24px auto;padding:0 16px}
h1{font-size:1.6em;margin:.2em 0}h2{font-size:1.2em;margin:1.4em 0 .4em;
border-bottom:1px solid #d8dce4}h3{font-size:1.05em}
.meta,.legend,footer{color:#5b6577;font-size:.9em}
.answer{background:#f3f6fb;border-left:4px solid #2f6fdb;padding:6px 12px;margin:8px 0}
.answer.chosen{border-left-color:#c2410c}.answer p{margin:.2em 0}.answer ul{margin:.2em 0}
.warning{background:#fff6e0;border-left:4px solid #d99a00;padding:6px 12px}
.note{color:#374151}
table{border-collapse:collapse;margin:6px 0;font-size:.9em}
th,td{border:1px solid #d8dce4;padding:3px 8px;text-align:left;vertical-align:top}
td{white-space:nowrap}td:last-child{white-space:normal}
th{background:#eef1f6}tr.plan-row.active td{background:#fde9d9}
svg{max-width:100%;height:auto;display:block}
.plot{fill:#fbfcfe;stroke:#9aa3b2}.grid{stroke:#e3e7ee}
.tick{font-size:11px;fill:#4b5563}.axis{font-size:13px;fill:#1d2433}
.staircase{fill:none;stroke:#c0392b;stroke-width:1.5}
.point{fill:#c0392b;stroke:#fff;stroke-width:1.5;cursor:pointer}
.point.near-duplicate{fill:#fff;stroke:#c0392b}
.point.chosen{fill:#c2410c;stroke:#1d2433;stroke-width:2}
.point.active{stroke:#1d2433;stroke-width:3}
#point-detail{white-space:pre-line;background:#f7f7f9;border:1px solid #d8dce4;
padding:8px 12px;min-height:5em;max-width:740px}
footer{margin-top:2em;border-top:1px solid #d8dce4;padding-top:6px}
"""
"""The page's style (inline: the page must open without network access)."""

_SCRIPT = """
(function () {
  var detail = document.getElementById("point-detail");
  var points = Array.prototype.slice.call(document.querySelectorAll("circle.point"));
  var rows = Array.prototype.slice.call(document.querySelectorAll("tr.plan-row"));
  function show(dot) {
    var d = dot.dataset;
    points.forEach(function (p) { p.classList.toggle("active", p === dot); });
    rows.forEach(function (r) { r.classList.toggle("active", r.dataset.point === d.point); });
    var lines = ["Point " + d.point + ": " + d.label,
                 "wall time " + d.time + ", cost " + d.cost +
                 (d.second ? ", " + d.second : "") + ", " + d.gpus + " GPUs, " + d.tokens,
                 "islands:\\n" + d.islands, "rented from:\\n" + d.providers];
    detail.textContent = lines.join("\\n");
  }
  points.forEach(function (p) {
    p.addEventListener("mouseenter", function () { show(p); });
    p.addEventListener("focus", function () { show(p); });
  });
  rows.forEach(function (r) {
    r.addEventListener("mouseenter", function () {
      var dot = points.filter(function (p) { return p.dataset.point === r.dataset.point; })[0];
      if (dot) { show(dot); }
    });
  });
  var wanted = /^#point-([0-9]+)$/.exec(window.location.hash);
  var linked = wanted && points.filter(function (p) {
    return p.dataset.point === wanted[1];
  })[0];
  var first = linked || document.querySelector("circle.point.chosen") || points[0];
  if (first) { show(first); }
  document.body.setAttribute("data-ready", "1");
})();
"""
"""Hover/focus a dot or a table row: the detail panel shows that plan (textContent: no markup
from data). On load it shows the plan the link names (report.html#point-3), else the chosen,
else the fastest; `data-ready` on <body> says the script ran (the headless-browser test checks
both)."""
