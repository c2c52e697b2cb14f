"""Commands `islands`, `plan` and `pareto`: island tables, single plans and the exact frontier."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from planner.cli.common import emit_json, emit_mapping, emit_records, format_option

_INSTANCE = click.Path(exists=False, dir_okay=False, path_type=Path)


def _solver_options(func: Callable[..., Any]) -> Callable[..., Any]:
    from planner.pareto import SOLVERS

    options = [
        click.option("--solver", type=click.Choice(SOLVERS), default="cpsat", show_default=True,
                     help="cpsat/milp/brute are exact; heuristic is the paper's proportional split."),
        click.option("--threads", type=click.IntRange(min=1), default=1, show_default=True,
                     help="Solver threads (CP-SAT workers, CBC threads)."),
        click.option("--time-limit-s", type=click.FloatRange(min=0, min_open=True), default=None,
                     help="Total solve time; a frontier cut short says proven_exact: false."),
        click.option("--milp-backend", type=click.Choice(["cbc", "highs"]), default="cbc", show_default=True,
                     help="MILP solver behind PuLP when --solver milp."),
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
              help="Write the island table CSV here.")
@format_option()
def islands(instance_path: Path, output: Path | None, fmt: str) -> None:
    """Validate (or build) the island table of INSTANCE and write it."""
    _, table = _load(instance_path)
    if output is not None:
        table.to_csv(output, index=False)
        click.echo(f"wrote {len(table)} rows to {output}", err=True)
    else:
        emit_records(table, fmt, title="island table")


@click.command("pareto")
@click.argument("instance_path", metavar="INSTANCE", type=_INSTANCE)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the frontier CSV here.")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write a figure-7 style PNG here and a figure-8 style PNG next to it (*_throughput.png).")
@_solver_options
@format_option()
def pareto(instance_path: Path, output: Path | None, plot: Path | None, fmt: str, **solve: Any) -> None:
    """The exact cost-time Pareto frontier of INSTANCE (epsilon-constraint)."""
    from planner import report
    from planner.pareto import solve_instance

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
        emit_records(report.points_frame(records).drop(columns=["islands"]), fmt, title=f"Pareto frontier: {problem.name}")
        emit_records(report.islands_frame(records), fmt, title="islands per point")
        emit_mapping(report.frontier_meta(frontier), fmt, title="solve")


def _plots(problem: Any, frontier: Any, plot: Path) -> None:
    from planner import report
    from planner.baselines import sample_plans

    cloud, sampled = sample_plans(problem, 5000)
    report.plot_frontier(cloud, frontier.points, plot, sampled=sampled,
                         title=f"{problem.name}: cost vs wall-clock time")
    second = report.throughput_plot_path(plot)
    report.plot_top_throughput(frontier.points, second, title=f"{problem.name}: highest-throughput frontier plans")
    click.echo(f"wrote {plot} and {second}", err=True)


@click.command("plan")
@click.argument("instance_path", metavar="INSTANCE", type=_INSTANCE)
@click.option("--objective", type=click.Choice(["time", "cost"]), default="time", show_default=True,
              help="time: fastest plan (ties → cheaper); cost: cheapest plan (ties → faster).")
@click.option("--min-throughput-fraction", type=click.FloatRange(min=0, max=1, min_open=True), default=None,
              help="Cheapest plan with tokens/s >= this fraction of the best; reports the saving.")
@_solver_options
@format_option()
def plan(instance_path: Path, objective: str, min_throughput_fraction: float | None, fmt: str, **solve: Any) -> None:
    """One plan of INSTANCE: fastest, cheapest, or cheapest near the best throughput."""
    from planner import report
    from planner.pareto import cheapest, cheapest_at_throughput, fastest, solve_instance

    first_only = objective == "cost" and min_throughput_fraction is None
    instance, table = _load(instance_path)
    problem, frontier = solve_instance(instance, table, first_only=first_only, **solve)
    extra: dict[str, Any] = {}
    if min_throughput_fraction is not None:
        chosen, saving = cheapest_at_throughput(frontier.points, min_throughput_fraction)
        best = fastest(frontier.points)
        extra = {"query": f"cheapest with tokens/s >= {min_throughput_fraction} x best",
                 "saving_pct_vs_fastest": saving, "fastest_cost_usd": best.cost_usd,
                 "fastest_tokens_per_s": best.tokens_per_s}
    elif objective == "time":
        chosen = fastest(frontier.points)
        extra = {"query": "fastest" + (" within budget" if problem.budget_usd is not None else "")}
    else:
        chosen = cheapest(frontier.points)
        extra = {"query": "cheapest" + (" within deadline" if problem.deadline_s is not None else "")}
    record = {**extra, **report.plan_record(chosen, problem), **report.frontier_meta(frontier)}
    if fmt == "json":
        emit_json(record)
        return
    islands_list = record.pop("islands")
    emit_mapping(record, fmt, title=f"plan: {problem.name}")
    if fmt == "table":
        emit_records(islands_list, fmt, title="islands")
