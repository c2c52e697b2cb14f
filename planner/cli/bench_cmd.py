"""`shardmeter bench compute|comm|fsdp|memory|pipeline|...`: real measurements with torch (the
[bench] extra).

torch is imported only inside the command functions, so `shardmeter --help` stays light.
Every command writes its CSV row by row and resumes when rerun with the same arguments.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import click
import numpy as np

from perfmodel.bench import api_bench
from perfmodel.bench import comm as comm_bench
from perfmodel.bench.comm import CommSettings, run_comm
from perfmodel.bench.common import CsvLog
from perfmodel.bench.dispatch import run_dispatch
from perfmodel.bench.environment import warn_small_pages
from perfmodel.bench.fsdp import FsdpSettings, load_cases, run_fsdp
from perfmodel.profiles import fsdp_compare
from perfmodel.profiles.dispatch import COLUMNS as DISPATCH_COLUMNS
from perfmodel.profiles.dispatch import KEY_COLUMNS as DISPATCH_KEY
from perfmodel.profiles.fsdp_compare import compare_fsdp
from perfmodel.spec.paths import catalog_dir
from planner.cli.bench_memory_cmd import memory_cmd
from planner.cli.bench_pipeline_cmd import (
    pipeline_cmd,
    pipeline_compare_cmd,
    pipeline_order_cmd,
)
from planner.cli.common import (
    emit_records,
    format_option,
    refuse_unused,
    require_torch,
    verbose_bench_logs,
)
from planner.cli.recipe_opts import recipe_from_options, recipe_options, refuse_unmeasurable

logger = logging.getLogger(__name__)


def _default_space(name: str) -> str:
    return str(catalog_dir() / "spaces" / name)




@click.group("bench")
def bench() -> None:
    """Measure compute phases, collectives, FSDP2 and pipeline steps with torch (resumable CSVs)."""


@bench.command("compute")
@click.option("--space", default=lambda: _default_space("cpu.yaml"),
              show_default="catalogs/spaces/cpu.yaml", help="Design-space YAML file.")
@click.option("-n", "n", type=int, default=150, show_default=True,
              help="Sobol configurations to sample.")
@click.option("-o", "--out", "out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Output CSV (appended; rerun to resume).")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option("--dtype", default="float32", show_default=True, help="float32, bfloat16 or float16.")
@click.option("--seed", type=int, default=0, show_default=True, help="Sobol scrambling seed.")
@click.option("--iters", type=int, default=None,
              help="Profiled iterations per point [default: 10; --named: "
                   "the space's named.iters or 10].")
@click.option("--warmup", type=int, default=2, show_default=True,
              help="Unprofiled warm-up steps per point.")
@click.option("--threads", type=int, default=1, show_default=True, help="torch intra-op threads.")
@click.option("--max-time-s", type=float, default=None,
              help="Per-configuration time cap for the micro-batch sweep [default: the space's; "
                   "none with --named].")
@click.option("--memory-cap-gib", type=float, default=None,
              help="Estimated-memory cap for the sweep [default: the space's; none with --named]; "
                   "GPUs stop at OOM.")
@click.option("--named", is_flag=True,
              help="Measure the space's held-out named models instead of Sobol shapes.")
@click.option("--limit", type=int, default=None,
              help="Run at most this many unfinished configurations.")
@click.option("--dry-run", is_flag=True, help="List the configurations and exit.")
def compute_cmd(space: str, n: int, out: Path, device: str, dtype: str, seed: int,
                iters: int | None, warmup: int, threads: int, max_time_s: float | None,
                memory_cap_gib: float | None, named: bool, limit: int | None,
                dry_run: bool) -> None:
    """Profile forward/backward/optimizer phases over a design space (Sobol sample or --named)."""
    if named:
        refuse_unused(("n",), why="with --named (the space's named models are measured, not a "
                      "Sobol sample)", fix="drop -n, or drop --named.")

    plan = api_bench.plan_compute_bench(api_bench.ComputeBenchRequest(
        space_path=space, out_path=out, configs=n, device=device, dtype=dtype, seed=seed,
        iters=iters, warmup=warmup, threads=threads, max_time_s=max_time_s,
        memory_cap_gib=memory_cap_gib, named=named, limit=limit))
    if dry_run:
        emit_records(plan.records(), "table",
                     title=f"{len(plan.configs)} configurations of {plan.space.name}")
        return
    require_torch()
    verbose_bench_logs()
    counts = api_bench.run_compute_bench(plan)
    click.echo(f"{out}: {counts.rows} rows, {counts.configs} configurations, "
               f"{counts.points} (configuration, micro-batch) points")


def _comm_link(backend: str, link: str | None) -> str:
    if link:
        return link
    if backend == "gloo":
        return "gloo-loopback"
    raise click.UsageError("--backend nccl needs --link (the slowest link of the ring, "
                           "e.g. nvlink4).\n"
                           "To fix: pass --link with a name from catalogs/links.csv.")


@bench.command("comm")
@click.option("-o", "--out", "out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Output CSV (appended; rerun to resume).")
@click.option("--nproc", type=int, default=2, show_default=True, help="Processes (ranks) per node.")
@click.option("--backend", type=click.Choice(["gloo", "nccl"]), default="gloo", show_default=True)
@click.option("--link", default=None,
              help="Link name recorded per row [default: gloo-loopback for gloo].")
@click.option("--ops", default="all_gather,reduce_scatter,all_reduce", show_default=True,
              help="Comma list; send_recv (rank 0 to the last rank) is measured when named.")
@click.option("--min-mib", type=float, default=1.0, show_default=True)
@click.option("--max-mib", type=float, default=150.0, show_default=True)
@click.option("--points", type=int, default=12, show_default=True, help="Log-spaced payload sizes.")
@click.option("--iters", type=int, default=20, show_default=True)
@click.option("--warmup", type=int, default=3, show_default=True)
@click.option("--threads", type=int, default=1, show_default=True, help="torch threads per rank.")
@click.option("--dtype", default="float32", show_default=True)
@click.option("--repeats", type=int, default=1, show_default=True,
              help="Launch the sweep this many times (fresh torchrun each): rows gain a repeat "
                   "column, and fit comm records the run-to-run spread per configuration.")
@click.option("--torchrun-args", default=None,
              help='torchrun rendezvous flags replacing --standalone (multi-node), e.g. '
                   '"--nnodes 2 --node-rank 0 --rdzv-backend c10d --rdzv-endpoint host0:29500".')
@click.option("--inline", is_flag=True, default=False,
              help="Time each collective as tensor parallelism issues it: right after a matmul, "
                   "no barrier, the mean (fit the rows with fit comm --inline).")
def comm_cmd(out: Path, nproc: int, backend: str, link: str | None, ops: str, min_mib: float,
             max_mib: float, points: int, iters: int, warmup: int, threads: int, dtype: str,
             repeats: int, torchrun_args: str | None, inline: bool) -> None:
    """Time all_gather / reduce_scatter / all_reduce (and send_recv) over log-spaced payloads
    (torchrun)."""
    require_torch()
    verbose_bench_logs()

    warn_small_pages("cpu" if backend == "gloo" else "cuda")

    settings = CommSettings(backend=backend, link=_comm_link(backend, link),
                            ops=tuple(ops.split(",")), min_mib=min_mib, max_mib=max_mib,
                            points=points, iters=iters, warmup=warmup, threads=threads, dtype=dtype,
                            repeats=repeats, inline=inline)
    run_comm(out, settings, nproc=nproc, torchrun_args=torchrun_args)
    columns = comm_bench.dataset_columns(repeats, inline=inline)
    click.echo(f"{out}: {len(CsvLog(out, *columns).rows())} rows")


@bench.command("dispatch")
@click.option("-o", "--out", "out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Output CSV (appended; rerun to resume).")
@click.option("--iters", type=int, default=20, show_default=True,
              help="Timed repetitions per round (5 rounds per row).")
@click.option("--warmup", type=int, default=5, show_default=True)
def dispatch_cmd(out: Path, iters: int, warmup: int) -> None:
    """Time DTensor's host dispatch under the tensor-parallel plan (one rank: the planned tiny
    Llama beside the plain one, 1-6 blocks, forward and forward + backward); fit the rows with
    `shardmeter fit dispatch`."""
    require_torch()
    verbose_bench_logs()
    run_dispatch(str(out), iters=iters, warmup=warmup)
    click.echo(f"{out}: {len(CsvLog(out, DISPATCH_COLUMNS, DISPATCH_KEY).rows())} rows")


@bench.command("fsdp")
@click.option("--space", default=lambda: _default_space("fsdp-cpu.yaml"),
              show_default="catalogs/spaces/fsdp-cpu.yaml", help="FSDP cases YAML file.")
@click.option("-o", "--out", "out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Output CSV (appended; rerun to resume).")
@click.option("--nproc", type=int, default=2, show_default=True, help="Processes (ranks) per node.")
@click.option("--backend", type=click.Choice(["gloo", "nccl"]), default="gloo", show_default=True)
@click.option("--link", default=None,
              help="Link name recorded per row [default: gloo-loopback for gloo].")
@click.option("--dtype", default="float32", show_default=True)
@click.option("--iters", type=int, default=5, show_default=True, help="Timed steps per case.")
@click.option("--warmup", type=int, default=2, show_default=True)
@click.option("--threads", type=int, default=1, show_default=True, help="torch threads per rank.")
@click.option("--torchrun-args", default=None,
              help="torchrun rendezvous flags replacing --standalone.")
@click.option("--tp", type=int, default=None,
              help="Tensor-parallel degree (torchtitan's Llama plan) [default: the recipe's, 1].")
@click.option("--dp-replicate", type=int, default=None,
              help="HSDP replicas (dp_shard is what the ranks leave) [default: the recipe's, 1].")
@click.option("--sequence-parallel/--no-sequence-parallel", "sequence_parallel", default=None,
              help="Sequence parallelism under --tp > 1 [default: the recipe's, on].")
@recipe_options
def fsdp_cmd(space: str, out: Path, nproc: int, backend: str, link: str | None, dtype: str,
             iters: int, warmup: int, threads: int, torchrun_args: str | None, tp: int | None,
             dp_replicate: int | None, sequence_parallel: bool | None, recipe_name: str,
             **recipe_flags: Any) -> None:
    """Real FSDP2 (fully_shard) training steps with gradient accumulation, trained as the recipe
    says (MixedPrecisionPolicy, resharding, accumulation mode, AC, parallel layout: TP, FSDP x TP,
    HSDP); median step time, peak memory."""
    require_torch()
    verbose_bench_logs()

    warn_small_pages("cpu" if backend == "gloo" else "cuda")

    cases = load_cases(space)
    recipe = recipe_from_options(recipe_name, **recipe_flags)
    refuse_unmeasurable(recipe, "bench")
    layout = recipe.parallel
    layout = layout if tp is None else replace(layout, tp=tp)
    layout = layout if dp_replicate is None else replace(layout, dp_replicate=dp_replicate)
    if sequence_parallel is not None:
        layout = replace(layout, sequence_parallel=sequence_parallel)
    recipe = replace(recipe, parallel=layout)
    settings = FsdpSettings(backend=backend, link=_comm_link(backend, link), dtype=dtype,
                            iters=iters, warmup=warmup, threads=threads, recipe=recipe)
    run_fsdp(cases, out, settings, nproc=nproc, torchrun_args=torchrun_args)
    rows = CsvLog(out, fsdp_compare.COLUMNS, fsdp_compare.KEY_COLUMNS).rows()
    click.echo(f"{out}: {len(rows)} rows "
               f"({len(cases)} cases planned)")


@bench.command("fsdp-compare")
@click.argument("data", type=click.Path(exists=True, dir_okay=False))
@click.option("--profile", "profile_name", required=True,
              help="Hardware profile (name or YAML path).")
@click.option("--hardware", default=None,
              help="Catalog device of the island [default: the profile's].")
@click.option("--memory", "memory_data", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Measured peaks from `bench memory --real --like DATA` "
                   "instead of the rows' own.")
@format_option()
def fsdp_compare_cmd(data: str, profile_name: str, hardware: str | None,
                     memory_data: str | None, fmt: str) -> None:
    """Measured FSDP2 steps (bench fsdp CSV) against the simulator and memory model (no torch)."""


    rows = compare_fsdp(data, profile_name, hardware=hardware, memory_data=memory_data)
    emit_records(rows, fmt, title=f"FSDP2 measured vs predicted ({profile_name})")
    if fmt == "table":
        step = np.mean([abs(r["step_error_pct"]) for r in rows])
        mem = np.nanmean([abs(r["memory_error_pct"]) for r in rows])
        click.echo(f"step MAPE {step:.2f}% over {len(rows)} rows; peak-memory MAPE {mem:.2f}%")


def _register_memory() -> None:
    # `bench memory` lives in its own module (FSDPMemTracker under FakeTensorMode).

    bench.add_command(memory_cmd)
    # the pipeline commands too (torch.distributed.pipelining)
    for command in (pipeline_cmd, pipeline_compare_cmd, pipeline_order_cmd):
        bench.add_command(command)


_register_memory()
