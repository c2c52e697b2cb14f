"""Commands `islands`, `plan` and `pareto`: island tables, single plans and the exact frontier.

A thin layer: each command parses its options, calls one function of `planner.api` (`islands`,
`query`, `frontier`) and formats the result; several files or `--vary` give a scenario study,
printed by `planner.cli.scenario_cmd`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from perfmodel.numbers import format_duration, format_number, format_percent, format_usd
from perfmodel.uncertainty.track_record import track_record_line
from planner import api
from planner.analysis import report
from planner.api import DEFAULT_TIME_LIMIT_S
from planner.cli.common import (
    compact_fits,
    compact_value,
    echo_wrapped,
    emit_compact,
    emit_json,
    emit_mapping,
    emit_records,
    format_option,
    prior_warning,
    refuse_unused,
    terminal_width,
    wide_option,
)
from planner.cli.layout_labels import short_layout
from planner.cli.scenario_cmd import emit_study
from planner.model.uncertainty import EXTRAPOLATION_LABEL
from planner.requests import DEFAULT_MIN_GAIN

__all__ = ["DEFAULT_TIME_LIMIT_S", "islands", "pareto", "plan"]

_INSTANCE = click.Path(exists=False, dir_okay=False, path_type=Path)


def _stderr(line: str) -> None:
    click.echo(line, err=True)


def _verbose_option(func: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("-v", "--verbose", is_flag=True, default=False,
                        help="Table format: add the solver's internals (solves, price "
                             "resolution, cross-checks).")(func)


def _warn_unproven(meta: dict[str, Any]) -> None:
    """A frontier or plan that is not proven exact says so on the terminal, not only in JSON."""
    if meta.get("proven_exact") is False:
        click.echo(f"warning: the {meta.get('solver')} solve stopped before proving the result "
                   f"exact (after {meta.get('solve_time_s', 0):.1f} s); points may be dominated "
                   "or missing. To fix: raise --time-limit-s or use --solver cpsat.", err=True)


def _solver_options(func: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option("--solver", type=click.Choice(api.SOLVERS), default="auto", show_default=True,
                     help="auto: the exact DP where it applies, else CP-SAT; dp/cpsat/milp/brute "
                          "are exact; heuristic is the paper's proportional split."),
        click.option("--threads", type=click.IntRange(min=1), default=None,
                     help="Solver threads (CP-SAT workers, MILP threads); default: the CPU count."),
        click.option("--time-limit-s", type=click.FloatRange(min=0, min_open=True),
                     default=DEFAULT_TIME_LIMIT_S, show_default=True,
                     help="Total solve time; a frontier cut short says so (proven_exact: false)."),
        click.option("--milp-backend", type=click.Choice(api.MILP_BACKENDS), default="highs",
                     show_default=True,
                     help="MILP solver behind PuLP when --solver milp (CBC is the fallback)."),
        click.option("--budget-usd", type=click.FloatRange(min=0, min_open=True), default=None,
                     help="Cost cap (overrides limits.budget_usd)."),
        click.option("--deadline-hours", type=click.FloatRange(min=0, min_open=True), default=None,
                     help="Wall-time cap (overrides limits.deadline_hours)."),
        click.option("--failures", is_flag=True, default=False,
                     help="Plan on expected values under failures, spot preemptions, "
                          "checkpoints, egress and billing (as an instance's failures: section; "
                          "catalogs/reliability/). Caps then apply to expected values."),
        click.option("--quantile", type=float, default=None, metavar="Q",
                     help="Plan on Q-quantiles (0 < Q < 1, e.g. 0.9): time, cost and the caps "
                          "are those that hold with probability Q under the comonotone "
                          "per-provenance error model of catalogs/uncertainty/residuals.csv "
                          "(planner.model.uncertainty). Below 0.5 the figures are lower "
                          "bounds: a run takes at least that long with probability 1 - Q."),
        click.option("--interval", "interval_level", type=float, default=None, metavar="L",
                     help="Add *_lo/*_hi bounds and interval_level at this two-sided level "
                          "(e.g. 0.9) beside the p10/p90 band every plan carries (JSON, CSV)."),
        click.option("--executor", default=None, metavar="SPEC",
                     help="Where the scenarios of a study (several files, --vary, --scenario) "
                          "are solved: local (default: joblib's process pool, one process per "
                          "CPU), local:N, serial, or dask://HOST:PORT (a dask.distributed "
                          "scheduler; pip install 'shardmeter[dask]', workers with ShardMeter and "
                          "the instance files at the same paths). Results are identical on every "
                          "executor (solves that finish within --time-limit-s)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


@click.command("islands")
@click.argument("instance_path", metavar="INSTANCE", type=_INSTANCE)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the island table here (JSON if the name ends in .json, else CSV).")
@wide_option()
@format_option()
def islands(instance_path: Path, output: Path | None, wide: bool, fmt: str) -> None:
    """Validate (or build) the island table of INSTANCE and write it."""
    if output is not None:
        refuse_unused(("fmt", "wide"), why="with -o (the file's extension sets its format: "
                      ".json, else CSV; the file holds every column)",
                      fix="drop --format / --wide, or drop -o to print the table.")
    result = api.islands(api.IslandsRequest(instance_path=instance_path, output_path=output),
                         notify=_stderr)
    if result.written is None and (fmt != "table" or wide):
        emit_records(result.table, fmt, title="island table")
    elif result.written is None:
        _emit_island_rows(result.table)
    # the table (JSON: its rows) keeps its shape; what it leaves out follows it or goes to stderr
    _emit_excluded(list(result.excluded), "table" if result.written is None and fmt == "table"
                   else "stderr")


_VARY_HELP = ("What-if: PATH=V1,V2,... into the instance (clusters.A.wan_gbit_s, "
              "training.inner_steps, clusters.B.price.tier, clusters.A.price_scale (0.7: 30% "
              "cheaper), gpu.H100-SXM5-80GB.price_scale (every cluster of that GPU), ...); "
              "repeatable (all combinations). Each scenario is solved, every plan scored "
              "under every scenario with its regret; scenarios run in parallel (--executor).")
_SCENARIO_HELP = ("A linked what-if: one named scenario setting several paths together, e.g. "
                  "cheap-h100:clusters.A.price_scale=0.7,clusters.B.price_scale=0.7; "
                  "repeatable (with base, one axis, crossed with --vary).")


def _refuse_solver_flags(solve: dict[str, Any]) -> None:
    """The MILP backend acts only under --solver milp."""
    if solve.get("solver") != "milp":
        refuse_unused(("milp_backend",), why="without --solver milp",
                      fix="drop --milp-backend, or pass --solver milp.")


def _html_option(func: Callable[..., Any]) -> Callable[..., Any]:
    """`--html PATH`: the self-contained HTML report (planner.analysis.html_report)."""
    return click.option("--html", type=click.Path(dir_okay=False, path_type=Path), default=None,
                        metavar="PATH",
                        help="Write one self-contained HTML page here (answer, interactive "
                             "frontier, plan table, assumptions, profile provenance; no network "
                             "needed); one instance only.")(func)


def _energy_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Energy and CO2 caps (issue 14): exact on the time-vs-energy/CO2 frontier
    (planner.analysis.energy)."""
    func = click.option("--max-energy-kwh", type=click.FloatRange(min=0, min_open=True),
                        default=None,
                        help="Energy cap of the run, kWh (facility energy incl. PUE).")(func)
    return click.option("--max-co2-kg", type=click.FloatRange(min=0, min_open=True), default=None,
                        help="CO2 cap of the run, kg CO2e (grid intensity of each cluster's "
                             "region).")(func)


@click.command("pareto")
@click.argument("instance_paths", metavar="INSTANCE...", nargs=-1, required=True, type=_INSTANCE)
@click.option("--vary", "vary", multiple=True, metavar="PATH=V1,V2,...", help=_VARY_HELP)
@click.option("--scenario", "scenario", multiple=True, metavar="NAME:PATH=V,PATH=V,...",
              help=_SCENARIO_HELP)
@click.option("--objectives", type=click.Choice(api.FRONTIER_OBJECTIVES), default="time,cost",
              show_default=True,
              help="The two objectives of the frontier (energy/CO2: the exact energy DP).")
@_energy_options
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the frontier CSV here.")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write a figure-7 style PNG here and a figure-8 style PNG next to it "
                   "(*_throughput.png); with scenarios, their frontiers side by side.")
@_html_option
@click.option("--min-gain", type=click.FloatRange(min=0, max=1, max_open=True),
              default=DEFAULT_MIN_GAIN, show_default=True,
              help="Mark frontier points whose gain over a neighbour is below this fraction of "
                   "wall time or cost (all points stay; usd_per_hour_saved is measured against "
                   "a point that saves at least this fraction of wall time).")
@_solver_options
@format_option()
@wide_option()
@_verbose_option
def pareto(instance_paths: tuple[Path, ...], vary: tuple[str, ...], scenario: tuple[str, ...],
           output: Path | None,
           plot: Path | None, fmt: str, objectives: str, max_co2_kg: float | None,
           max_energy_kwh: float | None, min_gain: float, wide: bool, verbose: bool,
           html: Path | None, **solve: Any) -> None:
    """The exact cost-time Pareto frontier of INSTANCE (one or several files; what-ifs with
    --vary)."""
    _refuse_solver_flags(solve)
    request = api.FrontierRequest(instance_paths=instance_paths, vary=vary, scenario=scenario,
                                  objectives=objectives,
                                  max_co2_kg=max_co2_kg, max_energy_kwh=max_energy_kwh,
                                  csv_path=output, plot_path=plot, min_gain=min_gain,
                                  html_path=html,
                                  options=api.SolveOptions(**solve))
    result = api.frontier(request, notify=_stderr)
    if not isinstance(result, api.FrontierResult):
        emit_study(result, fmt, wide=wide)
        return
    solved = result.solved
    excluded = report.exclusion_records(solved.problem)
    if fmt == "json":
        emit_json(report.frontier_document(result.records, result.meta,
                                           instance=solved.instance, problem=solved.problem,
                                           metric=solved.metric, min_gain=min_gain))
    elif fmt == "csv":
        emit_records(report.group_rows(result.records), "csv")
    elif wide:
        emit_records(_points(result.records).drop(columns=["islands"]), fmt, title=result.title)
        emit_records(_islands(result.records), fmt, title="islands per point")
        emit_mapping(result.meta, fmt, title="solve")
    else:
        _frontier_view(result, min_gain=min_gain, verbose=_is_verbose(verbose))
    _emit_excluded(excluded, "stderr" if fmt != "table" else "table" if wide else "summary")
    _warn_unproven(result.meta)


def _points(records: list[dict[str, Any]]) -> Any:

    return report.points_frame(records)


def _islands(records: list[dict[str, Any]]) -> Any:

    return report.islands_frame(records)


@click.command("plan")
@click.argument("instance_paths", metavar="INSTANCE...", nargs=-1, required=True, type=_INSTANCE)
@click.option("--vary", "vary", multiple=True, metavar="PATH=V1,V2,...", help=_VARY_HELP)
@click.option("--scenario", "scenario", multiple=True, metavar="NAME:PATH=V,PATH=V,...",
              help=_SCENARIO_HELP)
@click.option("--objective", type=click.Choice(api.OBJECTIVES), default="time",
              show_default=True,
              help="time: fastest plan (ties → cheaper); cost: cheapest plan (ties → faster); "
                   "co2/energy: least CO2/energy (ties → faster; the exact energy DP).")
@_energy_options
@click.option("--min-throughput-fraction", type=click.FloatRange(min=0, max=1, min_open=True),
              default=None,
              help="Cheapest plan with tokens/s >= this fraction of the best; reports the saving.")
@_html_option
@_solver_options
@format_option()
@wide_option()
@_verbose_option
def plan(instance_paths: tuple[Path, ...], vary: tuple[str, ...], scenario: tuple[str, ...],
         objective: str,
         min_throughput_fraction: float | None, fmt: str, max_co2_kg: float | None,
         max_energy_kwh: float | None, wide: bool, verbose: bool, html: Path | None,
         **solve: Any) -> None:
    """One plan of INSTANCE: fastest, cheapest, least CO2/energy, or cheapest near the best
    throughput (what-ifs with --vary)."""
    _refuse_solver_flags(solve)
    if min_throughput_fraction is not None and objective == "time":
        refuse_unused(("objective",), why="as --objective time with --min-throughput-fraction "
                      "(the query is the cheapest plan near the best throughput)",
                      fix="drop --objective time, or use --objective co2 or energy (least of "
                          "that near the best throughput).")
    request = api.QueryRequest(instance_paths=instance_paths, vary=vary, scenario=scenario,
                               objective=objective,
                               min_throughput_fraction=min_throughput_fraction,
                               max_co2_kg=max_co2_kg, max_energy_kwh=max_energy_kwh,
                               html_path=html, options=api.SolveOptions(**solve))
    result = api.query(request, notify=_stderr)
    if not isinstance(result, api.PlanAnswer):
        emit_study(result, fmt, wide=wide)
        return
    record = dict(result.record)
    _warn_unproven(record)
    if fmt == "json":  # with its "excluded" list
        emit_json(report.plan_document(record, instance=result.solved.instance))
        return
    if fmt == "csv":
        emit_records(report.group_rows([record]), "csv")
        _emit_excluded(record["excluded"], "stderr")
        return
    if not wide:
        _plan_view(result, verbose=_is_verbose(verbose))
        _emit_excluded(record["excluded"], "summary")
        return
    islands_list = record.pop("islands")
    excluded = record.pop("excluded")
    record.pop("island_groups")
    emit_mapping(record, fmt, title=f"plan: {result.solved.name}")
    emit_records(islands_list, fmt, title="islands")
    _emit_excluded(excluded, "table")


# ---- answer-first views (80 columns; --wide: the full tables) ---------------------------------


def _is_verbose(local: bool) -> bool:
    """-v on the command or on `shardmeter` itself."""
    root = click.get_current_context().find_root()
    return local or int(root.params.get("verbose") or 0) > 0


SOLVE_SUMMARY_KEYS = ("solver", "proven_exact", "points", "solve_time_s")
"""Solve facts every view shows (in one line); the rest of the solve record needs -v."""


def _frontier_view(result: api.FrontierResult, *, min_gain: float, verbose: bool) -> None:
    """Answer first: the fastest and the cheapest plan (what to rent where, wall time, cost),
    the GPUs' profile provenance, then one compact row per frontier point."""
    records = result.records
    metric = result.solved.metric
    if not records:
        click.echo(f"{result.title}: no plan")
        return
    second = _second_key(metric)
    fast = records[0]
    least = min(records, key=lambda r: (r[second], r["wall_time_s"]))
    _answer_line("fastest", fast, second)
    _answer_line("cheapest" if metric == "cost" else f"least {metric}", least, second)
    _profile_lines(report.gpu_profiles(result.solved.instance, report._gpus_of(records)))
    _quantile_line(result.meta)
    click.echo("")
    click.echo(f"{result.title} ({len(records)} points; {_solve_line(result.meta)})")
    names = _cluster_names(records)
    rows = []
    for r in records:
        row = {"#": f"{r['point']}{'*' if r.get('near_duplicate') else ''}",
               "wall time": format_duration(r["wall_time_s"]),
               _SECOND_HEADER[metric]: _second_cell(metric, r[second])}
        if metric == "cost":
            saved = r.get("usd_per_hour_saved")
            row["$/h saved"] = "-" if saved is None else format_usd(saved)
        else:
            row["cost"] = format_usd(r["cost_usd"])
        row["tok/s"] = format_number(r["tokens_per_s"])
        row["GPUs"] = format_number(r["num_gpus"])
        row["islands"] = ", ".join(f"{g['count']}×{g['nodes']}×{g['gpus_per_node']} "
                                   f"{names[(g['cluster'], g['tier'])]}"
                                   for g in r["island_groups"])
        rows.append(row)
    if not compact_fits(rows):  # the GPU count is the islands' sum: the first to go
        rows = [{k: v for k, v in row.items() if k != "GPUs"} for row in rows]
    emit_compact(rows)
    if any(r.get("near_duplicate") for r in records):
        echo_wrapped(f"* near-duplicate: gains less than {format_number(min_gain * 100)} % of "
                     "wall time or cost over a neighbour (--min-gain)")
    _legend(records, names)
    if verbose:
        _emit_solve(result.meta)


def _legend(records: list[dict[str, Any]], names: dict[tuple[str, str], str]) -> None:
    """One line per (cluster, tier) on the page: GPU, provider and tier, price list, region."""
    for (cluster, tier), short in names.items():
        group = next(g for r in records for g in r["island_groups"]
                     if (g["cluster"], g["tier"]) == (cluster, tier))
        named = "" if short in (cluster, f"{cluster}/{tier}") else f" = {cluster}"
        echo_wrapped(f"{short}{named}: {group['gpu_type']} @ "
                     f"{group.get('provider') or 'instance price'}"
                     f" {tier}; price list {group['price_list']}"
                     + (f"; region {group['region']}" if group.get("region") else ""))


def _second_key(metric: str) -> str:
    return {"cost": "cost_usd", "energy": "energy_kwh", "co2": "co2_kg"}[metric]


_SECOND_HEADER = {"cost": "cost", "energy": "energy kWh", "co2": "CO2 kg"}
"""Compact-table header of the frontier's second objective (units in the header or cells)."""


def _second_cell(metric: str, value: float | None) -> str:
    if value is None:
        return "-"
    return format_usd(value) if metric == "cost" else format_number(value)


def _answer_line(name: str, record: dict[str, Any], second: str) -> None:
    """'fastest: 2.046 days, $15,020, 565,800 tok/s on 128 GPUs — 1 × (8 nodes × 8 ...)'."""
    extra = "" if second == "cost_usd" else \
        f", {format_number(record[second] or 0)} {second.rsplit('_', 1)[-1]}"
    groups = "; ".join(g["description"] for g in record["island_groups"])
    echo_wrapped(f"{name}: {format_duration(record['wall_time_s'])}, "
                 f"{format_usd(record['cost_usd'])}{extra} on {record['num_gpus']} GPUs: {groups}")


def _profile_lines(profiles: list[dict[str, str]]) -> None:
    """'profiles: H200-SXM-141GB prior, A100-PCIe-80GB calibrated' and one warning line when a
    plan rests on a prior."""
    echo_wrapped("profiles: " + ", ".join(f"{p['gpu_type']} {p['provenance']}"
                                          for p in profiles))
    priors = [p["gpu_type"] for p in profiles if p["provenance"] == "prior"]
    if priors:
        echo_wrapped(prior_warning(*priors))


def _quantile_line(record: dict[str, Any]) -> None:
    """A plan on quantiles (--quantile) says so, with its error model, right after the answer."""
    if record.get("quantile") is not None:
        echo_wrapped(f"quantile {format_number(float(record['quantile']))} time and cost: "
                     f"{record.get('error_model', '')}")


def _band_line(record: dict[str, Any]) -> None:
    """The plan's 80 % band of time and cost (`planner.model.uncertainty.PlanBands`), wrapped,
    or why it has none; the full band is in --wide and JSON."""
    if "wall_time_s_p10" not in record:
        echo_wrapped(str(record.get("interval_note", "no band")), indent="  ")
        return
    groups = ", ".join(f"{c} {g}" for c, g in record["interval_groups"].items())
    echo_wrapped(f"p10–p90: {format_duration(record['wall_time_s_p10'])} – "
                 f"{format_duration(record['wall_time_s_p90'])}, "
                 f"{format_usd(record['cost_usd_p10'])} – {format_usd(record['cost_usd_p90'])} "
                 f"(residual groups {groups})", indent="  ")
    if record.get("interval_extrapolation"):  # the band is not widened there: say so here
        echo_wrapped(f"{EXTRAPOLATION_LABEL}: {record['interval_extrapolation']}",
                     indent="  ")
    track = track_record_line(record["interval_groups"].values())
    if track:  # how far such bands have held before
        echo_wrapped(track, indent="  ")


def _solve_line(meta: dict[str, Any]) -> str:
    """'exact, dp, 0.4 s' (or 'NOT proven exact')."""
    exact = "exact" if meta.get("proven_exact") else "NOT proven exact"
    return f"{exact}, {meta.get('solver')}, {format_duration(float(meta.get('solve_time_s', 0)))}"


def _emit_solve(meta: dict[str, Any]) -> None:
    """-v: every solve fact, one compact 'key value' row each."""
    rows = [{"solve": key, "value": compact_value(key, value)} for key, value in meta.items()
            if key not in SOLVE_SUMMARY_KEYS]
    emit_compact(rows)


SHORT_NAME_CHARS = 4
"""Cluster names longer than this are shown as letters (a, b, ...) in compact tables, the
legend under the table naming each."""


def _cluster_names(records: list[dict[str, Any]]) -> dict[tuple[str, str], str]:
    """Short names of the (cluster, tier) pairs on the page: the cluster, with '/tier' where one
    cluster appears at several tiers; letters a, b, ... when a name would be long."""
    pairs = sorted({(g["cluster"], g["tier"]) for r in records for g in r["island_groups"]})
    clusters = [c for c, _ in pairs]
    names = {(c, t): c if clusters.count(c) == 1 else f"{c}/{t}" for c, t in pairs}
    if max(len(n) for n in names.values()) <= SHORT_NAME_CHARS:
        return names
    return {pair: _letters(i) for i, pair in enumerate(pairs)}


def _letters(index: int) -> str:
    """0 -> 'a', 25 -> 'z', 26 -> 'aa', ..."""
    text = ""
    index += 1
    while index:
        index, rest = divmod(index - 1, 26)
        text = chr(ord("a") + rest) + text
    return text


def _plan_view(result: api.PlanAnswer, *, verbose: bool) -> None:
    """Answer first: what was asked and the plan (what to rent where, wall time, cost), the GPUs'
    profile provenance, then the island groups and the plan's figures in compact tables."""
    record = result.record
    name = f"{record.get('query', 'plan')}"
    echo_wrapped(f"plan ({name}) for {result.solved.name}: "
                 f"{format_duration(record['wall_time_s'])}, {format_usd(record['cost_usd'])}, "
                 f"{format_number(record['tokens_per_s'])} tok/s on {record['num_gpus']} GPUs")
    for group in record["island_groups"]:
        echo_wrapped("  " + group["description"], indent="    ")
    _band_line(record)
    _profile_lines(report.gpu_profiles(result.solved.instance, report._gpus_of([record])))
    _quantile_line(record)
    click.echo("")
    emit_compact([{"n": str(g["count"]), "cluster": g["cluster"], "GPU": g["gpu_type"],
                   "nodes×GPUs": f"{g['nodes']}×{g['gpus_per_node']}",
                   "m": str(g["micro_batch"]), "k": str(g["accum_steps"]),
                   "tok/s": format_number(g["tokens_per_s"]),
                   "$/h": format_usd(g["usd_per_hour"]), "cost": format_usd(g["cost_usd"])}
                  for g in record["island_groups"]])
    click.echo("")
    failures = "egress_usd" in record  # the expected figures differ from the plan's
    figures = {label: (format_percent(record[key]) if key == "goodput"
                       else compact_value(key, record[key]))
               for key, label in PLAN_FIGURES.items()
               if record.get(key) is not None and (failures or key not in FAILURE_FIGURES)}
    for key, value in record.items():
        if key.startswith("saving_pct"):
            figures[key.removeprefix("saving_pct_").replace("_", " ") + " saving"] = \
                f"{format_number(float(value))} %"
    emit_compact([{"figure": label, "value": value} for label, value in figures.items()])
    _legend([record], _cluster_names([record]))
    click.echo(_solve_line(record))
    if verbose:
        _emit_solve({k: v for k, v in record.items() if k in SOLVE_DETAIL_KEYS})


PLAN_FIGURES = {"tokens_per_s_per_gpu": "throughput per GPU", "usd_per_hour": "price per hour",
                "inner_step_s": "inner step", "sync_s": "outer sync", "energy_kwh": "energy kWh",
                "co2_kg": "CO2 kg", "goodput": "goodput", "expected_wall_time_s":
                "expected wall time", "expected_cost_usd": "expected cost",
                "egress_usd": "egress"}
"""The plan figures the compact view shows after the answer, with their labels (every key:
--wide)."""
FAILURE_FIGURES = ("goodput", "expected_wall_time_s", "expected_cost_usd", "egress_usd")
"""Figures shown only when failures are modelled (else they equal the plan's own)."""
SOLVE_DETAIL_KEYS = ("num_solves", "price_resolution_usd_per_hour", "max_cost_rounding_usd",
                     "cross_checks", "cost_rounding_bound_usd", "not_exact_because")
"""Solver internals a plan shows with -v."""


MAX_EXCLUDED_SHOWN = 20
"""Exclusions a table section or stderr lists before counting the rest (JSON lists all)."""


_BOUND_WORDS = {"compute": "comp", "communication": "comm"}
"""The compact island view's short bound names."""


def _island_row(row: dict[str, Any]) -> dict[str, str]:
    """One island-table row in the compact view: the option, its layout and checkpointing where
    the table has them, the micro-batch and the figures the planner reads."""
    out = {"n×g": f"{_cell(row['nodes'])}×{_cell(row['gpus_per_node'])}"}
    if "dp" in row:  # a layout table: the layout command's short label (dp there is dp_shard)
        layout = {k: row.get(k, 1) for k in ("tp", "pp", "cp", "virtual_stages", "ep")}
        layout = {k: int(v) if v == v else 1 for k, v in layout.items()}  # NaN: not a column
        replicas = int(row.get("dp_replicate", 1) or 1)
        out["layout"] = short_layout({
            **layout, "dp_replicate": replicas, "dp_shard": int(row["dp"]) // replicas,
            "pp_schedule": row.get("pp_schedule") or "1f1b",
            "sequence_parallel": bool(row.get("sequence_parallel", False))})
    if "ac" in row:
        out["ac"] = str(row["ac"])
    out |= {"m": _cell(row["micro_batch"]), "micro s": format_number(row["microstep_s"]),
            "fixed s": format_number(row["step_fixed_s"]),
            "$/h": format_usd(row["usd_per_hour"]), "GiB": format_number(row["memory_gib"]),
            "bound": _BOUND_WORDS.get(str(row["bound"]), str(row["bound"]))}
    return out


def _emit_island_rows(table: Any) -> None:
    """The island table's answer line, then per cluster (its GPU and row count) its rows in the
    compact view; every column: --wide or --format csv/json."""
    records = table.to_dict(orient="records")
    clusters = dict.fromkeys(str(r["cluster"]) for r in records)
    echo_wrapped(f"island table: {len(records)} rows over {len(clusters)} cluster"
                 f"{'s' if len(clusters) != 1 else ''}")
    for cluster in clusters:
        mine = [r for r in records if str(r["cluster"]) == cluster]
        rows = [_island_row(r) for r in mine]
        rates = {round(float(r["usd_per_hour"]) / (r["nodes"] * r["gpus_per_node"]), 9)
                 for r in mine}
        price = ""
        if len(rates) == 1:  # one price per GPU-hour: said once, not per row
            price = f" at {format_usd(rates.pop())}/GPU-h"
            rows = [{k: v for k, v in row.items() if k != "$/h"} for row in rows]
        click.echo("")
        echo_wrapped(f"{cluster}: {mine[0]['gpu_type']}{price}, {len(mine)} row"
                     f"{'s' if len(mine) != 1 else ''}")
        emit_compact(rows, width=terminal_width())
    click.echo("")
    echo_wrapped("micro s: per micro-batch; fixed s: per step; bound: comp(ute), "
                 "comm(unication) or mixed; every column: --wide or --format csv/json")


def _emit_excluded(records: list[dict[str, Any]], where: str) -> None:
    """The clusters and options that contribute no row, with reason and fix: a table section
    after the answer (`where` "table"), else one stderr line each (CSV has no place for them;
    `plan --format json` lists them under "excluded")."""
    if not records:
        return
    shown = records[:MAX_EXCLUDED_SHOWN]
    more = len(records) - len(shown)
    tail = (f"{more} more: `shardmeter plan INSTANCE --format json` lists every one under "
            "\"excluded\"") if more else ""
    if where == "summary":
        options = ", ".join(_excluded_option(r) for r in records[:8])
        echo_wrapped(f"excluded: {len(records)} cluster or island option"
                     f"{'s contribute' if len(records) != 1 else ' contributes'} no row ({options}"
                     f"{', …' if len(records) > 8 else ''}); --wide or --format json says why "
                     "and how to fix")
        return
    if where == "table":
        rows = [{"cluster": r["cluster"], "nodes": _cell(r["nodes"]),
                 "gpus_per_node": _cell(r["gpus_per_node"]), "reason": r["reason"],
                 "fix": r["fix"]} for r in shown]
        if tail:
            rows.append({"cluster": "…", "nodes": "", "gpus_per_node": "", "reason": tail,
                         "fix": ""})
        emit_records(rows, "table", title="excluded: contributes no row (reason and fix)")
        return
    for r in shown:
        option = "" if r["nodes"] is None and r["gpus_per_node"] is None else \
            f" {_cell(r['nodes'])}x{_cell(r['gpus_per_node'])}"
        _stderr(f"excluded: {r['cluster']}{option}: {r['reason'].rstrip('.')}. "
                f"To fix: {r['fix'].rstrip('.')}.")
    if tail:
        _stderr(f"excluded: {tail}")


def _excluded_option(record: dict[str, Any]) -> str:
    """'B 1x2' (an island option) or 'B' (the whole cluster)."""
    if record["nodes"] is None and record["gpus_per_node"] is None:
        return str(record["cluster"])
    return f"{record['cluster']} {_cell(record['nodes'])}x{_cell(record['gpus_per_node'])}"


def _cell(value: int | None) -> str:
    """A node or GPU count of an exclusion ("all" for the whole cluster)."""
    return "all" if value is None else str(value)
