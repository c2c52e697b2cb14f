"""`shardmeter bench pipeline | pipeline-compare | pipeline-order`: pipeline-parallel ground truth
with torch.distributed.pipelining (issue 24).

torch is imported inside the benchmark functions only, so `shardmeter --help` stays light.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from perfmodel.bench.common import CsvLog
from perfmodel.bench.environment import warn_small_pages
from perfmodel.bench.pipeline import (
    COLUMNS,
    KEY_COLUMNS,
    PipelineSettings,
    compare_pipeline,
    load_cases,
    pipeline_summary,
    run_pipeline,
)
from perfmodel.bench.pipeline_order import SOURCES, record_order_dataset
from perfmodel.spec.paths import catalog_dir
from planner.cli.common import emit_records, format_option, require_torch, verbose_bench_logs
from planner.cli.recipe_opts import recipe_from_options, recipe_options, refuse_unmeasurable


@click.command("pipeline")
@click.option("--space", default=lambda: str(catalog_dir() / "spaces" / "pipeline-cpu.yaml"),
              show_default="catalogs/spaces/pipeline-cpu.yaml", help="Pipeline cases YAML file.")
@click.option("-o", "--out", "out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Output CSV (appended; rerun to resume).")
@click.option("--nproc", type=int, default=2, show_default=True,
              help="Processes = pipeline ranks (pp).")
@click.option("--backend", type=click.Choice(["gloo", "nccl"]), default="gloo", show_default=True)
@click.option("--link", default=None,
              help="Link name recorded per row [default: gloo-loopback for gloo].")
@click.option("--dtype", default="float32", show_default=True)
@click.option("--iters", type=int, default=10, show_default=True, help="Timed steps per case.")
@click.option("--warmup", type=int, default=3, show_default=True)
@click.option("--threads", type=int, default=1, show_default=True, help="torch threads per rank.")
@click.option("--torchrun-args", default=None,
              help="torchrun rendezvous flags replacing --standalone.")
@recipe_options
def pipeline_cmd(space: str, out: Path, nproc: int, backend: str, link: str | None, dtype: str,
                 iters: int, warmup: int, threads: int, torchrun_args: str | None,
                 recipe_name: str, **recipe_flags: Any) -> None:
    """Real pipeline-parallel training steps (GPipe, 1F1B, interleaved 1F1B over the space's
    cases, one process per stage rank); median step time per case."""
    require_torch()
    verbose_bench_logs()
    warn_small_pages("cpu" if backend == "gloo" else "cuda")
    if link is None and backend != "gloo":
        raise click.UsageError("--backend nccl needs --link (the link between the stages).\n"
                               "To fix: pass --link with a name from catalogs/links.csv.")
    cases = load_cases(space)
    recipe = recipe_from_options(recipe_name, **recipe_flags)
    refuse_unmeasurable(recipe, "bench pipeline")
    settings = PipelineSettings(backend=backend, link=link or "gloo-loopback", dtype=dtype,
                                iters=iters, warmup=warmup, threads=threads, recipe=recipe)
    run_pipeline(cases, out, settings, nproc=nproc, torchrun_args=torchrun_args)
    click.echo(f"{out}: {len(CsvLog(out, COLUMNS, KEY_COLUMNS).rows())} rows "
               f"({len(cases)} cases planned)")


@click.command("pipeline-compare")
@click.argument("data", type=click.Path(exists=True, dir_okay=False))
@click.option("--profile", "profile_name", required=True,
              help="Hardware profile (name or YAML path).")
@click.option("--hardware", default=None,
              help="Catalog device of the island [default: the profile's].")
@format_option()
def pipeline_compare_cmd(data: str, profile_name: str, hardware: str | None, fmt: str) -> None:
    """Measured pipeline steps (bench pipeline CSV) against the predicted step (no torch)."""
    rows = compare_pipeline(data, profile_name, hardware=hardware)
    emit_records(rows, fmt, title=f"pipeline steps measured vs predicted ({profile_name})")
    if fmt == "table":
        s = pipeline_summary(rows)
        click.echo(f"step MAPE {s['mape_pct']:.2f}% over {s['rows']} rows, worst "
                   f"{s['max_abs_error_pct']:.2f}%, {s['within_15_pct']} within 15%")


@click.command("pipeline-order")
@click.option("-o", "--out", "out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Output CSV (appended; cases already there are skipped).")
@click.option("--source", "sources", type=click.Choice(SOURCES), multiple=True,
              help="gloo (2 real processes) and/or fake (one process, torch's fake process "
                   "group; pp 2 and 4) [default: both].")
def pipeline_order_cmd(out: Path, sources: tuple[str, ...]) -> None:
    """Record the compute and point-to-point order torch's GPipe, 1F1B and interleaved 1F1B run
    on each pipeline rank (the simulator's ground truth)."""
    require_torch()
    verbose_bench_logs()
    result = record_order_dataset(out, sources=sources or SOURCES)
    click.echo(f"{result.path}: {result.rows} rows; recorded {len(result.recorded)} cases, "
               f"{result.skipped} already there")
