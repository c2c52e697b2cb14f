"""`shardmeter` command line: a thin click layer over perfmodel and planner.

The CLI is the one place that imports both packages. Each command group lives in its own module
and is imported lazily, so `shardmeter --help` stays fast and torch is only imported by `bench`.
"""

from __future__ import annotations

import importlib
import logging
import sys

import click

from perfmodel.errors import ShardMeterError

# command name -> (module, attribute, one-line help). Modules are imported only when used.
_COMMANDS: dict[str, tuple[str, str, str]] = {
    "catalog": ("planner.cli.catalog_cmd", "catalog", "List catalog models, GPUs, links, prices."),
    "memory": ("planner.cli.catalog_cmd", "memory", "Per-GPU memory breakdown and largest micro-batch."),
    "fit": ("planner.cli.fit_cmd", "fit", "Fit compute/comm models from benchmark data into a profile."),
    "validate": ("planner.cli.fit_cmd", "validate", "Accuracy of a profile on a dataset (MAPE tables)."),
    "predict": ("planner.cli.sim_cmd", "predict", "Predict one training step: time, throughput, bound."),
    "simulate": ("planner.cli.sim_cmd", "simulate", "Simulate a step timeline; write trace and plot."),
    "sweep": ("planner.cli.sim_cmd", "sweep", "Sweep micro-batch sizes: regime transitions."),
    "streaming": ("planner.cli.sim_cmd", "streaming", "Streaming DiLoCo tuner: fragments and delay."),
    "bench": ("planner.cli.bench_cmd", "bench", "Measure compute, collectives and FSDP2 with torch."),
    "islands": ("planner.cli.plan_cmd", "islands", "Build the per-island throughput/cost table."),
    "plan": ("planner.cli.plan_cmd", "plan", "Best deployment plan for one objective or query."),
    "pareto": ("planner.cli.plan_cmd", "pareto", "Exact cost-vs-time Pareto frontier of plans."),
}


class LazyGroup(click.Group):
    """A click group whose sub-commands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = _COMMANDS.get(cmd_name)
        if target is None:
            return None
        module = importlib.import_module(target[0])
        return getattr(module, target[1], None)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Static help lines: listing commands must not import them (torch, solvers).
        with formatter.section("Commands"):
            formatter.write_dl([(name, _COMMANDS[name][2]) for name in self.list_commands(ctx)])


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="shardmeter")
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
def cli(verbose: int) -> None:
    """ShardMeter: predict, explain and plan sharded and decentralized transformer training."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: user mistakes exit 2 and infeasible plans exit 1, no traceback."""
    try:
        cli.main(args=argv, prog_name="shardmeter", standalone_mode=False)
    except ShardMeterError as err:
        click.echo(f"error: {err}", err=True)
        sys.exit(err.exit_code)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as err:
        err.show()
        sys.exit(err.exit_code)
    except click.exceptions.Exit as err:
        sys.exit(err.exit_code)
