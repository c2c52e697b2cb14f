"""`shardmeter` command line: a thin click layer over perfmodel and planner.

The CLI is the one place that imports both packages. Each command group lives in its own module
and is imported lazily, so `shardmeter --help` stays fast and torch is only imported by `bench`.

Error contract (DESIGN): no command ends in a Python traceback. User mistakes (a `UserInputError`,
a click usage error, an unreadable path) exit 2 with a "To fix:" line; infeasible plans exit 1
naming the binding limit; an unexpected exception is a bug: one clean message, exit 1, and
`--debug` (or SHARDMETER_DEBUG=1) prints its traceback.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import logging
import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any

import click

from perfmodel.spec.errors import InfeasibleError, ShardMeterError, did_you_mean
from perfmodel.spec.inputs import cap_message
from planner.cli.common import OutputPath, harden_command
from planner.cli.progress import progress_bars

DEBUG_ENV = "SHARDMETER_DEBUG"
"""Set to 1 to see the traceback of an unexpected error."""
BUG_REPORT = "report a bug with the command line and the traceback that `SHARDMETER_DEBUG=1` (or " \
             "`shardmeter --debug ...`) prints"
"""The "To fix:" advice for an error that is ShardMeter's fault."""

# command name -> (module, attribute, one-line help). Modules are imported only when used.
_COMMANDS: dict[str, tuple[str, str, str]] = {
    "catalog": ("planner.cli.catalog_cmd", "catalog", "List catalog models, GPUs, links, prices."),
    "memory": ("planner.cli.catalog_cmd", "memory",
               "Per-GPU memory breakdown and largest micro-batch."),
    "fit": ("planner.cli.fit_cmd", "fit",
            "Fit compute/comm models from benchmark data into a profile."),
    "validate": ("planner.cli.fit_cmd", "validate",
                 "Accuracy of a profile on a dataset (MAPE tables)."),
    "predict": ("planner.cli.sim_cmd", "predict",
                "Predict one training step: time, throughput, bound."),
    "simulate": ("planner.cli.sim_cmd", "simulate",
                 "Simulate a step timeline; write trace and plot."),
    "sweep": ("planner.cli.sim_cmd", "sweep", "Sweep micro-batch sizes: regime transitions."),
    "layout": ("planner.cli.layout_cmd", "layout",
               "Rank the parallel layouts of one island by throughput."),
    "streaming": ("planner.cli.streaming_cmd", "streaming",
                  "Streaming DiLoCo tuner; --bandwidth-for-utilisation: "
                  "link Gbit/s per utilisation."),
    "bench": ("planner.cli.bench_cmd", "bench",
              "Measure compute, collectives and FSDP2 with torch."),
    "islands": ("planner.cli.plan_cmd", "islands", "Build the per-island throughput/cost table."),
    "plan": ("planner.cli.plan_cmd", "plan", "Best deployment plan for one objective or query."),
    "pareto": ("planner.cli.plan_cmd", "pareto", "Exact cost-vs-time Pareto frontier of plans."),
    "schema": ("planner.cli.schema_cmd", "schema",
               "Print the JSON Schema of predict, memory, layout, plan or pareto output."),
    "init": ("planner.cli.init_cmd", "init", "Write a commented starter instance YAML."),
}


class LazyGroup(click.Group):
    """A click group whose sub-commands are imported on first use (and given strict types)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = _COMMANDS.get(cmd_name)
        if target is None:
            return None
        module = importlib.import_module(target[0])
        command = getattr(module, target[1], None)
        return None if command is None else harden_command(command)

    def resolve_command(self, ctx: click.Context,
                        args: list[str]) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        if name and not name.startswith("-") and name not in _COMMANDS:
            raise click.UsageError(f"no such command {name!r}; {did_you_mean(name, _COMMANDS)}",
                                   ctx)
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Static help lines: listing commands must not import them (torch, solvers).
        with formatter.section("Commands"):
            formatter.write_dl([(name, _COMMANDS[name][2]) for name in self.list_commands(ctx)])

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True, **extra: Any) -> Any:
        """Run the CLI under the error contract (see the module docstring); any caller, the
        console script or click's CliRunner, gets the same exit codes and messages."""
        argv = list(sys.argv[1:] if args is None else args)
        OutputPath.written_paths.clear()
        try:
            result = super().main(args=argv, prog_name=prog_name or "shardmeter",
                                  complete_var=complete_var, standalone_mode=False, **extra)
        except BaseException as err:  # noqa: BLE001 - the one place that turns errors into exits
            sys.exit(report_error(err, debug=_debug_requested(argv)))
        if isinstance(result, int) and result != 0:
            sys.exit(result)
        return result


def _debug_requested(argv: Sequence[str]) -> bool:
    if os.environ.get(DEBUG_ENV, "").strip() not in ("", "0", "false", "no"):
        return True
    for arg in argv:  # only the group's own options, before the command name
        if not arg.startswith("-"):
            return False
        if arg == "--debug":
            return True
    return False


def _with_fix(text: str, hint: str) -> str:
    return text if "To fix:" in text else f"{text}\nTo fix: {hint}"


def report_error(err: BaseException, *, debug: bool = False) -> int:
    """Print `err` by the error contract and return the exit code."""
    if isinstance(err, SystemExit):
        return err.code if isinstance(err.code, int) else (0 if err.code is None else 1)
    if isinstance(err, click.exceptions.Exit):
        return err.exit_code
    if isinstance(err, click.exceptions.Abort | KeyboardInterrupt):
        click.echo("aborted", err=True)
        return 130
    if isinstance(err, InfeasibleError):
        _echo_err(f"error: {cap_message(err.message)}\nbinding limit: {err.binding}\n"
                  f"To fix: {cap_message(err.hint or 'relax the binding limit.', 1000)}")
        return err.exit_code
    if isinstance(err, ShardMeterError):
        message = cap_message(err.message)
        _echo_err("error: " + (f"{message}\nTo fix: {cap_message(err.hint, 1000)}" if err.hint
                               else _with_fix(message, "see `shardmeter --help`.")))
        return err.exit_code
    if isinstance(err, click.UsageError):
        _show_usage_error(err)
        return 2
    if isinstance(err, click.ClickException):
        click.echo("error: " + _with_fix(err.format_message(), "see `shardmeter --help`."),
                   err=True)
        return err.exit_code
    if isinstance(err, OSError) and err.filename is not None:
        _echo_err(f"error: cannot use {os.fsdecode(err.filename)!r}: {err.strerror or err}\n"
                  "To fix: check that the path exists, is a file (not a folder) and that you may "
                  "read or write it.")
        return 2
    if isinstance(err, OSError) and err.errno in ENVIRONMENT_ERRNOS:
        # a write without a file name: standard output (a full disk, a closed pipe) or a file
        # whose name the library did not attach; either way the environment, not a bug
        outputs = " or ".join(OutputPath.written_paths)
        where = ("standard output" if _stdout_failed(err) or not outputs
                 else f"{outputs} (or standard output)")
        _echo_err(f"error: cannot write to {where}: {err.strerror or err}\n"
                  "To fix: free space on the device (or point the output elsewhere) and rerun.")
        return 2
    if isinstance(err, MemoryError):
        _echo_err("error: out of memory\nTo fix: ask for less work (fewer steps, islands, nodes "
                  "or scenarios; the README lists the limits) or use a machine with more memory.")
        return 2
    if debug:
        traceback.print_exception(err, file=sys.stderr)
    message = str(err).strip().splitlines()[0] if str(err).strip() else ""
    click.echo(f"error: internal error ({type(err).__name__}{': ' + message if message else ''})\n"
               f"To fix: {BUG_REPORT}.", err=True)
    return 1


ENVIRONMENT_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO,
                                errno.EPIPE, errno.EACCES, errno.EPERM, errno.ENOENT,
                                errno.ENOTDIR, errno.EISDIR})
"""OSErrors the environment causes (full or read-only device, closed pipe, missing folder):
exit 2 naming what could not be written, never "internal error"."""


def _stdout_failed(err: OSError) -> bool:
    """Did standard output fail (a full device or a closed pipe behind it)?"""
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        _silence_stdout()
        return True
    if isinstance(err, BrokenPipeError):
        _silence_stdout()
        return True
    return False


def _silence_stdout() -> None:
    """Point a failed standard output at /dev/null, so the interpreter's final flush does not
    print an "Exception ignored" trace on the way out."""
    with contextlib.suppress(OSError, ValueError, AttributeError):  # captured or closed: no-op
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _echo_err(text: str) -> None:
    """An error message on stderr; a stderr that cannot be written is given up silently."""
    with contextlib.suppress(OSError, ValueError):
        click.echo(text, err=True)


def _show_usage_error(err: click.UsageError) -> None:
    """Usage line, the problem, and a "To fix:" line for every click usage error."""
    ctx = err.ctx
    path = ctx.command_path if ctx is not None else "shardmeter"
    if type(err).__name__ == "NoArgsIsHelpError":  # a group run without a command: its help
        click.echo(err.format_message(), err=True)
        click.echo(f"To fix: add one of the commands listed above (`{path} COMMAND --help`).",
                   err=True)
        return
    if ctx is not None:
        click.echo(ctx.get_usage(), err=True)
    click.echo(f"error: {err.format_message()}", err=True)
    click.echo(f"To fix: {_usage_hint(err, path)}", err=True)


def _usage_hint(err: click.UsageError, command_path: str) -> str:
    help_ref = f"see `{command_path} --help`"
    param = getattr(err, "param", None)
    if isinstance(err, click.MissingParameter) and param is not None:
        if not isinstance(param, click.Option):
            return f"give {param.human_readable_name} ({help_ref})."
        metavar = param.make_metavar(err.ctx) if err.ctx is not None else "VALUE"
        return f"pass {param.opts[0]} {metavar} ({help_ref})."
    if isinstance(err, click.NoSuchOption):
        return f"use an option that exists ({help_ref})."
    if isinstance(err, click.BadParameter) and param is not None:
        name = (param.opts[0] if isinstance(param, click.Option) and param.opts
                else param.human_readable_name)
        kind = getattr(param.type, "inner", param.type)
        choices = getattr(kind, "choices", None)
        if choices:
            return f"pass {name} with one of: {', '.join(map(str, choices))}."
        if getattr(param.type, "figure", False):
            return f"pass {name} a file name ending in .png, .pdf or .svg."
        describe = getattr(kind, "_describe_range", None)
        if callable(describe) and (getattr(kind, "min", None) is not None
                                   or getattr(kind, "max", None) is not None):
            number = ("an integer" if isinstance(kind, click.types.IntParamType)
                      else "a finite number")
            return f"pass {name} {number} with {describe()} ({help_ref})."
        return f"pass {name} a valid {getattr(kind, 'name', 'value')} ({help_ref})."
    return f"correct the command line ({help_ref})."


@click.group("shardmeter", cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="shardmeter")
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
@click.option("--debug", is_flag=True,
              help=f"Print the traceback of an unexpected error (also {DEBUG_ENV}=1).")
@click.option("-q", "--quiet", is_flag=True,
              help="No progress bars (shown on stderr only when it is a terminal, for work "
                   "over about 2 s).")
def cli(verbose: int, debug: bool, quiet: bool) -> None:
    """ShardMeter: predict, explain and plan sharded and decentralized transformer training."""
    level = logging.WARNING - 10 * min(verbose + 2 * debug, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    # the bars live as long as the group's context: through the sub-command, closed after it
    click.get_current_context().with_resource(progress_bars(quiet=quiet))


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: user mistakes exit 2 and infeasible plans exit 1,
    no traceback."""
    cli.main(args=argv, prog_name="shardmeter")
