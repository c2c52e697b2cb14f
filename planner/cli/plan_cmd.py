"""Commands `islands`, `plan` and `pareto`: island tables, single plans and the exact frontier."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from planner.cli.common import emit_json, emit_mapping, emit_records, format_option

_INSTANCE = click.Path(exists=False, dir_okay=False, path_type=Path)
DEFAULT_TIME_LIMIT_S = 300.0
"""Every solver stops after this long unless --time-limit-s says otherwise (the result then says
it is not proven exact)."""


def _warn_unproven(meta: dict[str, Any]) -> None:
    """A frontier or plan that is not proven exact says so on the terminal, not only in JSON."""
    if meta.get("proven_exact") is False:
        click.echo(f"warning: the {meta.get('solver')} solve stopped before proving the result "
                   f"exact (after {meta.get('solve_time_s', 0):.1f} s); points may be dominated or "
                   "missing. To fix: raise --time-limit-s or use --solver cpsat.", err=True)


def _solver_options(func: Callable[..., Any]) -> Callable[..., Any]:
    from planner.pareto import SOLVERS

    options = [
        click.option("--solver", type=click.Choice(SOLVERS), default="auto", show_default=True,
                     help="auto: the exact DP where it applies, else CP-SAT; dp/cpsat/milp/brute are "
                          "exact; heuristic is the paper's proportional split."),
        click.option("--threads", type=click.IntRange(min=1), default=None,
                     help="Solver threads (CP-SAT workers, MILP threads); default: the CPU count."),
        click.option("--time-limit-s", type=click.FloatRange(min=0, min_open=True),
                     default=DEFAULT_TIME_LIMIT_S, show_default=True,
                     help="Total solve time; a frontier cut short says so (proven_exact: false)."),
        click.option("--milp-backend", type=click.Choice(["highs", "cbc"]), default="highs", show_default=True,
                     help="MILP solver behind PuLP when --solver milp (CBC is the fallback)."),
        click.option("--budget-usd", type=click.FloatRange(min=0, min_open=True), default=None,
                     help="Cost cap (overrides limits.budget_usd)."),
        click.option("--deadline-hours", type=click.FloatRange(min=0, min_open=True), default=None,
                     help="Wall-time cap (overrides limits.deadline_hours)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _load(instance_path: Path) -> tuple[Any, Any]:
    from planner.instance import load_instance, load_island_table

    instance = load_instance(instance_path)
    return instance, load_island_table(instance)


@click.command("islands")
@click.argument("instance_path", metavar="INSTANCE", type=_INSTANCE)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the island table here (JSON if the name ends in .json, else CSV).")
@format_option()
def islands(instance_path: Path, output: Path | None, fmt: str) -> None:
    """Validate (or build) the island table of INSTANCE and write it."""
    _, table = _load(instance_path)
    if output is not None and output.suffix.lower() == ".json":
        output.write_text(table.to_json(orient="records", indent=2) + "\n")
        click.echo(f"wrote {len(table)} rows (JSON) to {output}", err=True)
    elif output is not None:
        table.to_csv(output, index=False)
        click.echo(f"wrote {len(table)} rows to {output}", err=True)
    else:
        emit_records(table, fmt, title="island table")


_VARY_HELP = ("What-if: PATH=V1,V2,... into the instance (clusters.A.wan_gbit_s, training.inner_steps, "
              "clusters.B.price.tier, clusters.A.max_nodes_per_island, ...); repeatable (all "
              "combinations). Each scenario is solved, every plan scored under every scenario with "
              "its regret; scenarios run in parallel.")


def _energy_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Energy and CO2 caps (issue 14): exact on the time-vs-energy/CO2 frontier (planner.energy)."""
    func = click.option("--max-energy-kwh", type=click.FloatRange(min=0, min_open=True), default=None,
                        help="Energy cap of the run, kWh (facility energy incl. PUE).")(func)
    return click.option("--max-co2-kg", type=click.FloatRange(min=0, min_open=True), default=None,
                        help="CO2 cap of the run, kg CO2e (grid intensity of each cluster's region).")(func)


@click.command("pareto")
@click.argument("instance_paths", metavar="INSTANCE...", nargs=-1, required=True, type=_INSTANCE)
@click.option("--vary", "vary", multiple=True, metavar="PATH=V1,V2,...", help=_VARY_HELP)
@click.option("--objectives", type=click.Choice(["time,cost", "time,co2", "time,energy"]), default="time,cost",
              show_default=True, help="The two objectives of the frontier (energy/CO2: the exact energy DP).")
@_energy_options
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the frontier CSV here.")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write a figure-7 style PNG here and a figure-8 style PNG next to it (*_throughput.png); "
                   "with scenarios, their frontiers side by side.")
@_solver_options
@format_option()
def pareto(instance_paths: tuple[Path, ...], vary: tuple[str, ...], output: Path | None, plot: Path | None,
           fmt: str, objectives: str, max_co2_kg: float | None, max_energy_kwh: float | None,
           **solve: Any) -> None:
    """The exact cost-time Pareto frontier of INSTANCE (one or several files; what-ifs with --vary)."""
    from planner import report
    from planner.energy import metric_of
    from planner.pareto import solve_instance

    second = objectives.split(",")[1]
    metric = metric_of(second if second != "cost" else "time", max_co2_kg, max_energy_kwh)
    if second == "cost" and metric is not None:
        raise _cap_on_cost_frontier(metric)
    if metric is not None:
        _pareto_energy(instance_paths, vary, output, plot, fmt, metric, max_co2_kg or max_energy_kwh, solve)
        return
    if len(instance_paths) > 1 or vary:
        from planner.cli.scenario_cmd import pareto_scenarios

        pareto_scenarios(instance_paths, vary, output, plot, fmt, solve)
        return
    instance_path = instance_paths[0]
    instance, table = _load(instance_path)
    problem, frontier = solve_instance(instance, table, **solve)
    records = report.frontier_records(frontier, problem)
    if output is not None:
        report.write_csv(records, output)
    if plot is not None:
        _plots(problem, frontier, plot)
    if fmt == "json":
        emit_json(records)
    elif fmt == "csv":
        click.echo(report.points_frame(records).to_csv(index=False), nl=False)
    else:
        exact = "" if frontier.proven_exact else f" — NOT proven exact: {frontier.note}"
        emit_records(report.points_frame(records).drop(columns=["islands"]), fmt,
                     title=f"Pareto frontier: {problem.name}{exact}")
        emit_records(report.islands_frame(records), fmt, title="islands per point")
        emit_mapping(report.frontier_meta(frontier), fmt, title="solve")
    _warn_unproven(report.frontier_meta(frontier))


def _cap_on_cost_frontier(metric: str) -> Exception:
    from perfmodel.errors import UserInputError

    return UserInputError(f"a {metric} cap on the time-vs-cost frontier is a third objective",
                          hint=f"use --objectives time,{metric} (the cap filters that frontier exactly).")


def _solve_energy(instance_paths: tuple[Path, ...], vary: tuple[str, ...], metric: str,
                  cap: float | None, solve: dict[str, Any]) -> tuple[Any, Any]:
    from perfmodel.errors import UserInputError
    from planner.energy import solve_energy

    if len(instance_paths) > 1 or vary:
        raise UserInputError("energy and CO2 queries take one instance without --vary",
                             hint="run one instance at a time.")
    instance, table = _load(instance_paths[0])
    return solve_energy(instance, table, metric, max_value=cap, **solve)


def _pareto_energy(instance_paths: tuple[Path, ...], vary: tuple[str, ...], output: Path | None,
                   plot: Path | None, fmt: str, metric: str, cap: float | None, solve: dict[str, Any]) -> None:
    from planner import report

    problem, frontier = _solve_energy(instance_paths, vary, metric, cap, solve)
    records = report.frontier_records(frontier, problem)
    for record in records:  # cost is not monotone along a time-vs-energy frontier
        record.pop("usd_per_hour_saved", None)
    if output is not None:
        report.write_csv(records, output)
    if plot is not None:
        click.echo("note: --plot draws time-vs-cost frontiers only; no plot written", err=True)
    if fmt == "json":
        emit_json(records)
    elif fmt == "csv":
        click.echo(report.points_frame(records).to_csv(index=False), nl=False)
    else:
        emit_records(report.points_frame(records).drop(columns=["islands"]), fmt,
                     title=f"time-vs-{metric} frontier: {problem.name}")
        emit_records(report.islands_frame(records), fmt, title="islands per point")
        emit_mapping(report.frontier_meta(frontier), fmt, title="solve")
    _warn_unproven(report.frontier_meta(frontier))


def _plots(problem: Any, frontier: Any, plot: Path) -> None:
    from planner import report
    from planner.baselines import sample_plans

    cloud, sampled = sample_plans(problem, 5000)
    report.plot_frontier(cloud, frontier.points, plot, sampled=sampled,
                         title=f"{problem.name}: cost vs wall-clock time")
    second = report.throughput_plot_path(plot)
    report.plot_top_throughput(frontier.points, second, title=f"{problem.name}: highest-throughput frontier plans",
                               problem=problem)
    click.echo(f"wrote {plot} and {second}", err=True)


@click.command("plan")
@click.argument("instance_paths", metavar="INSTANCE...", nargs=-1, required=True, type=_INSTANCE)
@click.option("--vary", "vary", multiple=True, metavar="PATH=V1,V2,...", help=_VARY_HELP)
@click.option("--objective", type=click.Choice(["time", "cost", "co2", "energy"]), default="time",
              show_default=True,
              help="time: fastest plan (ties → cheaper); cost: cheapest plan (ties → faster); co2/energy: "
                   "least CO2/energy (ties → faster; the exact energy DP).")
@_energy_options
@click.option("--min-throughput-fraction", type=click.FloatRange(min=0, max=1, min_open=True), default=None,
              help="Cheapest plan with tokens/s >= this fraction of the best; reports the saving.")
@_solver_options
@format_option()
def plan(instance_paths: tuple[Path, ...], vary: tuple[str, ...], objective: str,
         min_throughput_fraction: float | None, fmt: str, max_co2_kg: float | None,
         max_energy_kwh: float | None, **solve: Any) -> None:
    """One plan of INSTANCE: fastest, cheapest, least CO2/energy, or cheapest near the best
    throughput (what-ifs with --vary)."""
    from planner import report
    from planner.energy import metric_of
    from planner.pareto import solve_instance

    metric = metric_of(objective, max_co2_kg, max_energy_kwh)
    if metric is not None:
        _plan_energy(instance_paths, vary, objective, metric, max_co2_kg or max_energy_kwh, fmt, solve)
        return
    if len(instance_paths) > 1 or vary:
        from planner.cli.scenario_cmd import plan_scenarios

        plan_scenarios(instance_paths, vary, objective, min_throughput_fraction, fmt, solve)
        return
    first_only = objective == "cost" and min_throughput_fraction is None
    instance, table = _load(instance_paths[0])
    problem, frontier = solve_instance(instance, table, first_only=first_only, **solve)
    chosen, extra = answer(problem, frontier, objective, min_throughput_fraction)
    record = {**extra, **report.plan_record(chosen, problem), **report.frontier_meta(frontier)}
    _emit_plan(record, problem.name, fmt)


def _plan_energy(instance_paths: tuple[Path, ...], vary: tuple[str, ...], objective: str, metric: str,
                 cap: float | None, fmt: str, solve: dict[str, Any]) -> None:
    from planner import report
    from planner.energy import FIELD
    from planner.pareto import fastest

    problem, frontier = _solve_energy(instance_paths, vary, metric, cap, solve)
    field = FIELD[metric]
    if objective == "time":
        chosen, query = fastest(frontier.points), f"fastest within the {metric} cap"
    else:
        chosen = min(frontier.points, key=lambda p: (getattr(p, field), p.wall_time_s))
        query = f"least {metric}" + (f" within the {metric} cap" if cap is not None else "")
    record = {"query": query, **report.plan_record(chosen, problem), **report.frontier_meta(frontier)}
    _emit_plan(record, problem.name, fmt)


def _emit_plan(record: dict[str, Any], name: str, fmt: str) -> None:
    """Print one plan record: JSON whole; table/CSV as a mapping, tables also list its islands."""
    _warn_unproven(record)
    if fmt == "json":
        emit_json(record)
        return
    islands_list = record.pop("islands")
    emit_mapping(record, fmt, title=f"plan: {name}")
    if fmt == "table":
        emit_records(islands_list, fmt, title="islands")


def answer(problem: Any, frontier: Any, objective: str, fraction: float | None) -> tuple[Any, dict[str, Any]]:
    """The `plan` query on a frontier: (chosen plan, what was asked and the saving)."""
    from planner.pareto import cheapest, cheapest_at_throughput, fastest

    if fraction is not None:
        chosen, saving = cheapest_at_throughput(frontier.points, fraction)
        best = fastest(frontier.points)
        return chosen, {"query": f"cheapest with tokens/s >= {fraction} x best",
                        "saving_pct_vs_fastest": saving, "fastest_cost_usd": best.cost_usd,
                        "fastest_tokens_per_s": best.tokens_per_s}
    if objective == "time":
        return fastest(frontier.points), {
            "query": "fastest" + (" within budget" if problem.budget_usd is not None else "")}
    return cheapest(frontier.points), {
        "query": "cheapest" + (" within deadline" if problem.deadline_s is not None else "")}
