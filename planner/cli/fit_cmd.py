"""`shardmeter fit compute|comm` and `shardmeter validate`.

    shardmeter fit compute DATA.csv -o PROFILE.yaml [--hardware GPU] [--base PROFILE]
    shardmeter fit comm    DATA.csv -o PROFILE.yaml [--hardware GPU] [--base PROFILE] [--backend B]
                           [--inline]   (rows of `bench comm --inline`: the profile's inline table)
    shardmeter fit overlap  DATA.csv -o PROFILE.yaml   (FSDP2 steps: overlap_slowdown, copies)
    shardmeter fit dispatch DATA.csv -o PROFILE.yaml   (`bench dispatch`: tp_dispatch_s)
    shardmeter fit calibrate --runs RUNS.csv --gpu GPU -o PROFILE.yaml   (perfmodel.api.user_runs)
    shardmeter validate PROFILE [DATA.csv] [--comm COMM.csv] [--format table|json|csv]

`fit` writes a measured profile. It starts from --base, else from the output file when it exists
(so `fit compute` then `fit comm` into one file merges both), else from the catalog prior of
--hardware; fitted phases / (op, link) pairs replace the base's, the rest is kept with its own
provenance. Repeated rows of one configuration are welcome (repeats measure noise): the fit uses
their median, each configuration once, and the profile keeps their spread per configuration
(`provenance_detail.repeats`). `fit compute` records two CV figures per phase: the score that
chose the features (`selection_cv_mape_pct`, optimistic; the printed `cv_mape_pct` is the same
figure, kept for existing readers) and the nested leave-one-architecture-out one
(`nested_cv_mape_pct`, selection redone without each model; skip it with --no-nested-cv).
`validate` prints the paper's Table I (per model forward / backward / optimizer / step MAPE) and
per-op communication MAPE. In-sample or not is decided by row overlap with the profile's fitting
data: rows of models the profile was fitted on are predicted by a refit without that model's rows
(leave-one-architecture-out) and comm rows by a k-fold refit; the other rows by the profile (plain
prediction error). The output says which, with counts.

Datasets (CSV, extra columns allowed; a malformed file exits 2 naming file, line, column, value):
- compute: model, hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads,
  intermediate_size, vocab_size, seq_len, micro_batch, phase (forward|backward|optimizer), time_s;
  optional head_dim, tie_word_embeddings, family, num_shards (optimizer), unit (model|block|root).
- comm: backend (nccl|gloo|rccl), op, link (the slowest link of the ring), world_size,
  payload_bytes (full unsharded payload), time_s; optional nics_per_node (per-NIC links); inline
  rows add filler_side and compute_s (the compute before each collective, seconds).
- dispatch: sequence_parallel, layers, pass (forward|step), plain_s, tp_s, excess_s, iters.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click
import pandas as pd

from perfmodel.api import fit as api_fit
from perfmodel.api import user_runs as api_user_runs
from perfmodel.costs.comm import BACKENDS
from perfmodel.numbers import format_number
from planner.cli.common import (
    compact_value,
    echo_wrapped,
    emit_compact,
    emit_json,
    emit_records,
    emit_table,
    format_option,
    wide_option,
)


@click.group()
def fit() -> None:
    """Fit compute/comm models from benchmark data into a hardware profile (YAML)."""


def _common_options(func: Any) -> Any:
    func = click.option("--name", default=None,
                        help="Profile name [default: output file stem].")(func)
    func = click.option("--base", default=None,
                        help="Profile to start from (name or path) [default: the output file if it "
                             "exists, else the prior of --hardware].")(func)
    func = click.option("--hardware", default=None,
                        help="Catalog GPU (or local device) name.")(func)
    func = click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
                        help="Profile YAML to write.")(func)
    return click.argument("data", type=click.Path(dir_okay=False))(func)


@fit.command("compute")
@_common_options
@click.option("--backend", type=click.Choice(BACKENDS), default=None,
              help="Collective backend [default: the base's, else gloo for a CPU device, "
                   "nccl for a GPU].")
@click.option("--selection", type=click.Choice(api_fit.SELECTIONS),
              default="auto", show_default=True, help="Feature selection by cross-validation.")
@click.option("--tolerance", type=click.FloatRange(min=0), default=0.05, show_default=True,
              help="Keep the smallest feature set whose CV MAPE is within one standard error "
                   "(over the folds), and at least this fraction, of the best.")
@click.option("--nested-cv/--no-nested-cv", default=True, show_default=True,
              help="Also cross-validate the whole fit, feature selection included, leaving one "
                   "model out at a time (one refit per model and phase).")
@format_option()
@wide_option()
def fit_compute(data: str, output: str, hardware: str | None, base: str | None, name: str | None,
                backend: str | None, selection: str, tolerance: float, nested_cv: bool,
                fmt: str, wide: bool) -> None:
    """Fit forward/backward/optimizer regressions from a compute dataset."""
    result = api_fit.fit_compute(api_fit.ComputeFitRequest(
        data_path=data, output_path=output, hardware=hardware, base=base, name=name,
        backend=backend, selection=selection, tolerance=tolerance, nested_cv=nested_cv))
    click.echo(f"wrote {output} (provenance: measured compute {', '.join(result.fitted)})",
               err=True)
    _emit_fit(result.records, fmt, wide=wide, title=f"compute fit -> {output}",
              answer=f"fitted compute ({', '.join(result.fitted)}) into {output}")


@fit.command("calibrate")
@click.option("--runs", "runs", required=True, type=click.Path(dir_okay=False),
              help="CSV of your own runs: model (catalog name, config.json path or a published "
                   "MPT model), gpu, nodes, gpus_per_node, seq_len, micro_batch, grad_accum, "
                   "activation_checkpointing, tokens_per_s_per_gpu or step_time_s; optional tp, "
                   "pp (1 only), pure_bf16.")
@click.option("--gpu", required=True, help="Catalog GPU to calibrate (rows of other GPUs are "
                                           "left out).")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="Profile YAML to write (provenance calibrated).")
@click.option("--name", default=None, help="Profile name [default: output file stem].")
@format_option()
def fit_calibrate_cmd(runs: str, gpu: str, output: str, name: str | None, fmt: str) -> None:
    """Refit a GPU's calibrated profile on your own runs (the shipped calibration's least squares
    and leave-one-model-size-out cross-validation); prints the CV MAPE."""
    result = api_user_runs.calibrate_from_runs(api_user_runs.CalibrateRunsRequest(
        runs_path=runs, gpu=gpu, output_path=output, name=name))
    summary = result.calibration.summary()
    source = result.profile.provenance_detail["source"]
    click.echo(f"wrote {output} (provenance: calibrated, {source}); "
               f"CV MAPE {summary['cv_mape_pct']:.2f} % (leave one model size out), in-sample "
               f"{summary['fit_mape_pct']:.2f} %, prior {summary['prior_mape_pct']:.2f} %",
               err=True)
    if fmt == "json":
        emit_json({"profile": output, **summary, "params": result.calibration.params.as_dict(),
                   "runs": result.records})
        return
    emit_records(result.records, fmt, title=f"calibration on {runs} -> {output} "
                                             f"(CV MAPE {summary['cv_mape_pct']:.2f} %)")


@fit.command("comm")
@_common_options
@click.option("--backend", type=click.Choice(BACKENDS), default=None,
              help="Use only rows of this backend (needed when the dataset has several).")
@click.option("--inline", is_flag=True, default=False,
              help="The dataset times collectives issued inline (bench comm --inline): fit the "
                   "profile's inline table, used by tensor- and context-parallel collectives.")
@format_option()
@wide_option()
def fit_comm_cmd(data: str, output: str, hardware: str | None, base: str | None, name: str | None,
                 backend: str | None, inline: bool, fmt: str, wide: bool) -> None:
    """Fit latency/bandwidth coefficients per (op, link) from a communication dataset."""
    result = api_fit.fit_comm(api_fit.CommFitRequest(
        data_path=data, output_path=output, hardware=hardware, base=base, name=name,
        backend=backend, inline=inline))
    click.echo(f"wrote {output} (provenance: measured comm, backend {result.profile.backend})",
               err=True)
    _emit_fit(result.records, fmt, wide=wide, title=f"comm fit -> {output}",
              answer=f"fitted comm ({len(result.records)} op/link pairs, backend "
                     f"{result.profile.backend}) into {output}")


F = TypeVar("F", bound=Callable[..., Any])


def _update_options(output_help: str) -> Callable[[F], F]:
    """DATA, -o/--output (an existing profile the fit updates), --format and --wide: the options
    of the fits that refine one part of a measured profile."""
    def wrap(func: F) -> F:
        for decorate in reversed((
                click.argument("data", type=click.Path(exists=True, dir_okay=False)),
                click.option("-o", "--output", required=True,
                             type=click.Path(exists=True, dir_okay=False), help=output_help),
                format_option(), wide_option())):
            func = decorate(func)
        return func
    return wrap


@fit.command("overlap")
@_update_options("Measured profile YAML to update (its compute and comm are used as they are).")
def fit_overlap(data: str, output: str, fmt: str, wide: bool) -> None:
    """Fit the profile's overlap_slowdown (compute slowed while a collective runs) and
    fsdp_copy_s_per_byte (FSDP2's copies around each collective) from measured FSDP2 steps
    (`shardmeter bench fsdp` CSV); reports the step MAPE before, fitted, and with each model
    shape held out of the fit."""
    result = api_fit.fit_overlap(api_fit.OverlapFitRequest(data_path=data, output_path=output))
    click.echo(f"wrote {output} (overlap_slowdown {result.profile.overlap_slowdown}, "
               f"fsdp_copy_s_per_byte {result.profile.fsdp_copy_s_per_byte:.3g})", err=True)
    _emit_fit(result.records, fmt, wide=wide, title=f"overlap fit -> {output}",
              answer=f"fitted overlap_slowdown {format_number(result.profile.overlap_slowdown)} "
                     f"into {output}")


@fit.command("dispatch")
@_update_options("Measured profile YAML to update (everything else in it is kept).")
def fit_dispatch_cmd(data: str, output: str, fmt: str, wide: bool) -> None:
    """Fit the profile's tp_dispatch_s (DTensor's host dispatch per block and root pass under
    tensor parallelism) from `shardmeter bench dispatch` rows."""
    result = api_fit.fit_dispatch(api_fit.DispatchFitRequest(data_path=data, output_path=output))
    click.echo(f"wrote {output} (tp_dispatch_s)", err=True)
    _emit_fit(result.records, fmt, wide=wide, title=f"dispatch fit -> {output}",
              answer=f"fitted DTensor's host dispatch per pass into {output}")


def _emit_fit(records: list[dict[str, Any]], fmt: str, *, wide: bool, title: str,
              answer: str) -> None:
    """JSON / CSV / the full table (`--wide`) as before; else the answer, its worst
    cross-validated error where the records have one, and the records as a compact table (units
    read from the keys; a record layout when too wide)."""
    if fmt != "table" or wide:
        emit_records(records, fmt, title=title)
        return
    errors = [float(r[k]) for r in records for k in r if k.endswith("mape_pct")
              and isinstance(r[k], int | float) and r[k] == r[k]]
    echo_wrapped(answer + (f"; worst CV MAPE {format_number(max(errors))} %" if errors else ""))
    emit_compact([{_fit_header(k): _fit_cell(k, v) for k, v in r.items()} for r in records])
    click.echo("every column: --wide or --format json")


def _fit_header(key: str) -> str:
    """A record key as a header with its unit: 'bandwidth_bytes_per_s' -> 'bandwidth GB/s'."""
    if key.endswith("_bytes_per_s"):
        return key.removesuffix("_bytes_per_s").replace("_", " ") + " GB/s"
    if key.endswith("_pct"):
        return key.removesuffix("_pct").replace("_", " ") + " %"
    if key.endswith("_s"):  # the cell carries the unit (µs, ms, s, ...)
        return key.removesuffix("_s").replace("_", " ")
    return {"configurations": "configs"}.get(key, key.replace("_", " "))


def _fit_cell(key: str, value: Any) -> str:
    """A record value in the unit `_fit_header` names."""
    if key.endswith("_bytes_per_s") and isinstance(value, int | float) \
            and not isinstance(value, bool):
        return format_number(float(value) / 1e9)
    if key.endswith("_pct") and isinstance(value, int | float) and not isinstance(value, bool):
        return format_number(float(value))
    return compact_value(key, value)


# ---- validate ------------------------------------------------------------------------------

@click.command()
@click.argument("profile_name", metavar="PROFILE")
@click.argument("data", required=False, type=click.Path(dir_okay=False))
@click.option("--comm", "comm_data", type=click.Path(dir_okay=False), default=None,
              help="Communication dataset to validate the comm coefficients on.")
@click.option("--memory", "memory_data", is_flag=False,
              flag_value=api_fit.SHIPPED_MEMORY_DATASET, default=None,
              help="FSDPMemTracker dataset to validate the memory model on (alone: the shipped "
                   "catalogs/profiles/data/memory-tracker.csv).")
@format_option()
def validate(profile_name: str, data: str | None, comm_data: str | None, memory_data: str | None,
             fmt: str) -> None:
    """MAPE of a profile on a compute dataset (Table I form) and/or a comm dataset (per op);
    --memory: the memory model against PyTorch's FSDP2 memory tracker."""
    report = api_fit.validate_profile(api_fit.ValidationRequest(
        profile_name=profile_name, compute_data_path=data, comm_data_path=comm_data,
        memory_data=memory_data))
    if fmt == "json":
        emit_json(report.record())
    elif fmt == "csv":
        emit_records(report.frame(), "csv")
    else:
        _emit_report_tables(report)


def _emit_report_tables(report: api_fit.ValidationReport) -> None:
    profile = report.profile
    click.echo(f"profile {profile.name} ({profile.hardware}, {profile.backend}): "
               f"provenance {profile.provenance}")
    for kind, part in report.parts.items():
        emit_table(part.table, title=f"{kind} MAPE (%) on {part.dataset_path} - {part.mode}")
    if report.memory:
        _emit_memory_tables(report.memory)


def _emit_memory_tables(memory: dict[str, Any]) -> None:
    emit_table(pd.DataFrame(memory["summary"]),
               title=f"memory model vs FSDPMemTracker on {memory['dataset']}: error %")
    emit_table(pd.DataFrame(memory["components"]), title="memory components: model - tracker")
    worst = sorted(memory["rows"], key=lambda r: -abs(r["error_pct"]))[:10]
    cols = ["model", "world_size", "seq_len", "micro_batch", "accum_steps", "accum_mode", "ac",
            "tracker_gib", "model_gib", "error_pct", "phase"]
    emit_table(pd.DataFrame(worst)[cols], title="memory: the 10 largest errors")
