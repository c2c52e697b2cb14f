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

from planner import api
from planner.analysis import report
from planner.api import DEFAULT_TIME_LIMIT_S
from planner.cli.common import (
    emit_json,
    emit_mapping,
    emit_records,
    format_option,
    refuse_unused,
)
from planner.cli.scenario_cmd import emit_study

__all__ = ["DEFAULT_TIME_LIMIT_S", "islands", "pareto", "plan"]

_INSTANCE = click.Path(exists=False, dir_okay=False, path_type=Path)


def _stderr(line: str) -> None:
    click.echo(line, err=True)


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
                          "(planner.model.uncertainty)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


@click.command("islands")
@click.argument("instance_path", metavar="INSTANCE", type=_INSTANCE)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the island table here (JSON if the name ends in .json, else CSV).")
@format_option()
def islands(instance_path: Path, output: Path | None, fmt: str) -> None:
    """Validate (or build) the island table of INSTANCE and write it."""
    if output is not None:
        refuse_unused(("fmt",), why="with -o (the file's extension sets its format: .json, "
                      "else CSV)", fix="drop --format, or drop -o to print the table.")
    result = api.islands(api.IslandsRequest(instance_path=instance_path, output_path=output),
                         notify=_stderr)
    if result.written is None:
        emit_records(result.table, fmt, title="island table")
    # the table (JSON: its rows) keeps its shape; what it leaves out follows it or goes to stderr
    _emit_excluded(list(result.excluded), "table" if result.written is None and fmt == "table"
                   else "stderr")


_VARY_HELP = ("What-if: PATH=V1,V2,... into the instance (clusters.A.wan_gbit_s, "
              "training.inner_steps, clusters.B.price.tier, clusters.A.price_scale (0.7: 30% "
              "cheaper), gpu.H100-SXM5-80GB.price_scale (every cluster of that GPU), ...); "
              "repeatable (all combinations). Each scenario is solved, every plan scored "
              "under every scenario with its regret; scenarios run in parallel.")
_SCENARIO_HELP = ("A linked what-if: one named scenario setting several paths together, e.g. "
                  "cheap-h100:clusters.A.price_scale=0.7,clusters.B.price_scale=0.7; "
                  "repeatable (with base, one axis, crossed with --vary).")


def _refuse_solver_flags(solve: dict[str, Any]) -> None:
    """The MILP backend acts only under --solver milp."""
    if solve.get("solver") != "milp":
        refuse_unused(("milp_backend",), why="without --solver milp",
                      fix="drop --milp-backend, or pass --solver milp.")


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
@_solver_options
@format_option()
def pareto(instance_paths: tuple[Path, ...], vary: tuple[str, ...], scenario: tuple[str, ...],
           output: Path | None,
           plot: Path | None, fmt: str, objectives: str, max_co2_kg: float | None,
           max_energy_kwh: float | None, **solve: Any) -> None:
    """The exact cost-time Pareto frontier of INSTANCE (one or several files; what-ifs with
    --vary)."""
    _refuse_solver_flags(solve)
    request = api.FrontierRequest(instance_paths=instance_paths, vary=vary, scenario=scenario,
                                  objectives=objectives,
                                  max_co2_kg=max_co2_kg, max_energy_kwh=max_energy_kwh,
                                  csv_path=output, plot_path=plot,
                                  options=api.SolveOptions(**solve))
    result = api.frontier(request, notify=_stderr)
    if not isinstance(result, api.FrontierResult):
        emit_study(result, fmt)
        return
    excluded = report.exclusion_records(result.solved.problem)
    if fmt == "json":
        emit_json(result.records)
    elif fmt == "csv":
        click.echo(_points(result.records).to_csv(index=False), nl=False)
    else:
        emit_records(_points(result.records).drop(columns=["islands"]), fmt, title=result.title)
        emit_records(_islands(result.records), fmt, title="islands per point")
        emit_mapping(result.meta, fmt, title="solve")
    _emit_excluded(excluded, "table" if fmt == "table" else "stderr")
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
@_solver_options
@format_option()
def plan(instance_paths: tuple[Path, ...], vary: tuple[str, ...], scenario: tuple[str, ...],
         objective: str,
         min_throughput_fraction: float | None, fmt: str, max_co2_kg: float | None,
         max_energy_kwh: float | None, **solve: Any) -> None:
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
                               options=api.SolveOptions(**solve))
    result = api.query(request)
    if not isinstance(result, api.PlanAnswer):
        emit_study(result, fmt)
        return
    record = dict(result.record)
    _warn_unproven(record)
    if fmt == "json":
        emit_json(record)  # with its "excluded" list
        return
    islands_list = record.pop("islands")
    excluded = record.pop("excluded")
    emit_mapping(record, fmt, title=f"plan: {result.solved.name}")
    if fmt == "table":
        emit_records(islands_list, fmt, title="islands")
    _emit_excluded(excluded, "table" if fmt == "table" else "stderr")


MAX_EXCLUDED_SHOWN = 20
"""Exclusions a table section or stderr lists before counting the rest (JSON lists all)."""


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


def _cell(value: int | None) -> str:
    """A node or GPU count of an exclusion ("all" for the whole cluster)."""
    return "all" if value is None else str(value)
