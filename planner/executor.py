"""Where many independent tasks run: one executor for scenario sweeps and Monte Carlo grids
(issue 27 item 7).

Claim: `run_tasks(fn, tasks, executor)` returns `[fn(*t) for t in tasks]` — the same values in
the same order — whether the tasks run in this process (`serial`), in joblib's local process pool
(`local`, `local:N`; the default) or on a dask.distributed cluster (`dask://HOST:PORT`).
Why: a task is a pure function of its arguments (a Monte Carlo task carries its own seed, never
a generator shared across tasks; a solve is deterministic unless its time limit cuts it short,
which depends on the machine's speed whatever the executor), and the results are collected in
task order, not completion order (joblib's `Parallel` and dask's `Client.gather` both return
them in submission order). A task's `ShardMeterError` (a bad scenario, an infeasible one) comes
back with its class and fields and is raised again in the caller — the first failed task's in
task order — so a user error on a worker still exits 2 with its "To fix:" line; the error
classes themselves do not pickle (an `InfeasibleError` needs its `binding`).
Checked by: tests/test_executor.py (a scenario sweep and the failure-simulation grid on a real
`dask.distributed.LocalCluster` equal the serial and joblib runs; bad specs, a missing dask, an
unreachable scheduler and a scheduler without workers exit 2 with a fix, within the connect
timeout).

Specs (`--executor`): `serial`; `local` (one process per CPU this process may use, at most one
per task); `local:N` (N processes); `dask://HOST:PORT` (the scheduler a user started with
`dask scheduler`, reached over TCP). A dask cluster needs `pip install 'shardmeter[dask]'` here
and the same ShardMeter on every worker; its workers read the instance files by path (this module
sends absolute paths), so they need the same file system or the files at the same paths.
"""

from __future__ import annotations

import importlib
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from perfmodel import progress
from perfmodel.spec.errors import ShardMeterError, did_you_mean

LOG = logging.getLogger(__name__)

T = TypeVar("T")

KINDS = ("serial", "local", "dask")
"""Executor kinds: this process, joblib's local process pool, a dask.distributed scheduler."""
DEFAULT_SPEC = "local"
"""The default executor: joblib's local process pool, one process per CPU."""
SPEC_FORMS = "serial, local, local:N (N processes) or dask://HOST:PORT"
"""How the accepted specs are named in errors and help texts."""
CONNECT_TIMEOUT_S = 10.0
"""How long a dask connection (and the wait for a first worker) may take before it is refused:
long enough for a scheduler across a data centre, short enough that a typo does not hang."""
LOCAL_BACKEND = "multiprocessing"
"""joblib's backend for `local`: a multiprocessing pool, whose workers on Linux fork from this
process and start at once (joblib runs one `gc.collect()` before forking). Not loky: its fresh
interpreters re-import pandas, ortools and the planner in every worker, seconds before the first
scenario of a command starts (its pool is reused only within one process)."""
INSTALL_HINT = "pip install 'shardmeter[dask]' (dask and distributed)"
"""How to get the dask executor."""
_DASK = re.compile(r"^dask://(?P<host>\[[0-9A-Fa-f:.]+\]|[^:/\s\[\]]+):(?P<port>[0-9]+)/?$")
"""dask://HOST:PORT (an IPv6 host in brackets)."""


class ExecutorError(ShardMeterError):
    """A bad executor spec, or an executor that cannot run (dask missing, scheduler unreachable,
    no workers): the user's setup, exit 2 with a fix."""

    exit_code = 2


@dataclass(frozen=True, kw_only=True, slots=True)
class Executor:
    """A parsed `--executor` spec (`parse_executor`)."""

    kind: str
    """serial, local or dask (KINDS)."""
    processes: int | None = None
    """local: the process count (None: one per CPU); otherwise None."""
    address: str | None = None
    """dask: the scheduler address, tcp://HOST:PORT; otherwise None."""

    @property
    def spec(self) -> str:
        """The spec as a user writes it (`local:4`, `dask://host:8786`)."""
        if self.kind == "dask" and self.address is not None:
            return "dask://" + self.address.removeprefix("tcp://")
        if self.kind == "local" and self.processes is not None:
            return f"local:{self.processes}"
        return self.kind

    def parallel(self, tasks: int) -> bool:
        """Whether `tasks` tasks run outside this process (then each task should use one
        thread: the executor already uses every core it is given)."""
        if self.kind == "dask":
            return True
        return self.kind == "local" and _local_processes(self, tasks) > 1


def parse_executor(value: str | Executor | None, *, source: str = "--executor") -> Executor:
    """`serial` | `local` | `local:N` | `dask://HOST:PORT` (None: the default, `local`) -> an
    Executor; anything else is an ExecutorError naming `source` and the value."""
    if isinstance(value, Executor):
        return value
    if value is None:
        value = DEFAULT_SPEC
    if not isinstance(value, str):
        raise ExecutorError(f"{source} = {value!r}: not a text", hint=f"give one of {SPEC_FORMS}.")
    text = value.strip()
    if text in ("serial", "local"):
        return Executor(kind=text)
    if text.startswith("local:"):
        count = text.removeprefix("local:")
        if not count.isdigit() or int(count) < 1:
            raise ExecutorError(f"{source} = {value!r}: the process count {count!r} is not an "
                                "integer >= 1",
                                hint="write local:N with N >= 1 (e.g. local:4), or local for one "
                                     "process per CPU.")
        return Executor(kind="local", processes=int(count))
    match = _DASK.match(text)
    if match:
        port = int(match["port"])
        if not 1 <= port <= 65535:
            raise ExecutorError(f"{source} = {value!r}: port {port} is outside 1..65535",
                                hint="give the port the dask scheduler listens on (8786 unless "
                                     "it was started with another --port).")
        return Executor(kind="dask", address=f"tcp://{match['host']}:{port}")
    scheme = text.split("://", 1)[0] if "://" in text else text.split(":", 1)[0]
    guess = did_you_mean(scheme, KINDS) if scheme else ""
    example = ("dask://HOST:PORT, e.g. dask://10.0.0.5:8786" if "://" in text
               or scheme.lower().startswith("d") else SPEC_FORMS)
    raise ExecutorError(f"{source} = {value!r}: not one of {SPEC_FORMS}",
                        hint=(f"{guess} " if guess.startswith("did you mean") else "")
                        + f"Write {example}.")


def run_tasks(fn: Callable[..., T], tasks: Sequence[tuple[Any, ...]],
              executor: str | Executor | None = None, *, description: str = "tasks") -> list[T]:
    """`[fn(*task) for task in tasks]`, computed by `executor` (module docstring). `fn` must be a
    module-level function (it is pickled by reference) and every task's arguments picklable.
    Serial and local runs advance a progress task named `description` (`perfmodel.progress`) as
    tasks end; the worker processes report nothing themselves."""
    spec = parse_executor(executor)
    if not tasks:
        return []
    if spec.kind == "dask":
        done = _run_dask(fn, tasks, spec)
    elif spec.kind == "local" and _local_processes(spec, len(tasks)) > 1:
        done = _run_local(fn, tasks, _local_processes(spec, len(tasks)), description)
    else:
        done = [_guarded(fn, task) for task in progress.track(tasks, description)]
    for item in done:  # the first failure in task order, whichever finished first
        if isinstance(item, _Failed):
            raise item.error()
    return [item for item in done if not isinstance(item, _Failed)]


def _local_processes(spec: Executor, tasks: int) -> int:
    """local:N's N, or joblib's count of the CPUs this process may use (its affinity and cgroup
    quota, not the machine's cores), at most one per task."""
    if spec.processes is None:
        # lazy: joblib (with scikit-learn) only when a pool is sized; a predict never needs it
        import joblib

        return max(1, min(tasks, int(joblib.cpu_count())))
    return max(1, min(tasks, spec.processes))


class _Failed:
    """A task's ShardMeterError in transit: its class (pickled by reference) and its fields."""

    __slots__ = ("fields", "kind")

    def __init__(self, err: ShardMeterError) -> None:
        self.kind = type(err)
        self.fields = dict(vars(err))

    def error(self) -> ShardMeterError:
        """The error again, of the same class, with the same message, hint and fields."""
        err = self.kind.__new__(self.kind)
        vars(err).update(self.fields)
        Exception.__init__(err, str(err))
        return err


def _guarded(fn: Callable[..., T], task: tuple[Any, ...]) -> T | _Failed:
    """Run one task; a ShardMeterError comes back as a value (`_Failed`)."""
    try:
        return fn(*task)
    except ShardMeterError as err:
        return _Failed(err)


def _silent_guarded(fn: Callable[..., T], task: tuple[Any, ...]) -> T | _Failed:
    """`_guarded` in a worker process: a fork copies the parent's progress sink, whose bars
    would then be drawn from two processes, so the worker reports nowhere."""
    progress.silence()
    return _guarded(fn, task)


def _run_local(fn: Callable[..., T], tasks: Sequence[tuple[Any, ...]],
               processes: int, description: str) -> list[T | _Failed]:
    # lazy: joblib only for a local pool; a single solve never starts one
    import joblib

    LOG.info("running %d tasks in %d local processes (joblib)", len(tasks), processes)
    runner = joblib.Parallel(n_jobs=processes, backend=LOCAL_BACKEND)
    # the fork backend returns all results at once (no generator): one step when they are in
    with progress.task(f"{description}, {processes} processes", total=len(tasks)) as advance:
        results = list(runner(joblib.delayed(_silent_guarded)(fn, task) for task in tasks))
        advance(len(tasks))
    return results


def _distributed(spec: Executor) -> Any:
    """The `distributed` module, or an ExecutorError saying how to install it."""
    try:
        return importlib.import_module("distributed")
    except ImportError as err:
        raise ExecutorError(f"--executor {spec.spec}: the dask executor needs dask.distributed, "
                            f"which is not installed ({err})",
                            hint=f"{INSTALL_HINT}, or use --executor local.") from None


def connect(spec: Executor, timeout_s: float | None = None) -> Any:
    """A `distributed.Client` of the scheduler with at least one worker, or an ExecutorError
    naming the address and the fix within `timeout_s` (None: CONNECT_TIMEOUT_S; twice, at worst:
    connect, then wait for a worker)."""
    timeout_s = CONNECT_TIMEOUT_S if timeout_s is None else timeout_s
    distributed = _distributed(spec)
    address = spec.address
    try:
        client = distributed.Client(address, timeout=timeout_s, set_as_default=False)
    except (OSError, TimeoutError) as err:
        raise ExecutorError(f"--executor {spec.spec}: cannot reach the dask scheduler at "
                            f"{address} within {timeout_s:g} s ({type(err).__name__}: "
                            f"{str(err).splitlines()[0] if str(err) else 'no answer'})",
                            hint=f"start it there (`dask scheduler --port "
                                 f"{address.rsplit(':', 1)[1] if address else 8786}` and "
                                 "`dask worker ADDRESS`), check the host and port, or use "
                                 "--executor local.") from None
    try:
        client.wait_for_workers(1, timeout=timeout_s)
    except (OSError, TimeoutError):
        client.close()
        raise ExecutorError(f"--executor {spec.spec}: the dask scheduler at {address} has no "
                            f"worker (none joined within {timeout_s:g} s)",
                            hint=f"start workers: `dask worker {address}` on each machine, or "
                                 "use --executor local.") from None
    return client


def _run_dask(fn: Callable[..., T], tasks: Sequence[tuple[Any, ...]],
              spec: Executor) -> list[T | _Failed]:
    client = connect(spec)
    try:
        LOG.info("running %d tasks on the dask scheduler %s", len(tasks), spec.address)
        futures = [client.submit(_guarded, fn, task, pure=False) for task in tasks]
        return list(client.gather(futures))  # in submission order
    finally:
        client.close()


def run_or_exit(parser: Any, build: Callable[[str], T], spec: str | None) -> T:
    """For the generators' `--executor SPEC` (argparse): `build(spec)` with the spec checked
    first; an executor error (a bad spec, an unreachable scheduler) ends the run with its message
    and "To fix:" line and exit 2 (`parser.error`), not a traceback."""
    try:
        return build(parse_executor(spec).spec)
    except ExecutorError as err:
        parser.error(str(err))
        raise  # parser.error exits; this line only satisfies the type checker
