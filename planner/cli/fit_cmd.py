"""`shardmeter fit compute|comm` and `shardmeter validate`.

    shardmeter fit compute DATA.csv -o PROFILE.yaml [--hardware GPU] [--base PROFILE]
    shardmeter fit comm    DATA.csv -o PROFILE.yaml [--hardware GPU] [--base PROFILE] [--backend B]
    shardmeter validate PROFILE [DATA.csv] [--comm COMM.csv] [--format table|json|csv]

`fit` writes a measured profile. It starts from --base, else from the output file when it exists
(so `fit compute` then `fit comm` into one file merges both), else from the catalog prior of
--hardware; fitted phases / (op, link) pairs replace the base's, the rest is kept with its own
provenance. `validate` prints the paper's Table I (per model forward / backward / optimizer / step
MAPE) and per-op communication MAPE. When the profile is measured and the dataset is the one it was
fitted on (same sha256), every model is predicted by a refit without that model's rows
(leave-one-architecture-out) and comm rows by a k-fold refit; otherwise the profile's plain
prediction error is reported. The output says which.

Datasets (CSV, extra columns allowed; a malformed file exits 2 naming file, line, column, value):
- compute: model, hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads,
  intermediate_size, vocab_size, seq_len, micro_batch, phase (forward|backward|optimizer), time_s;
  optional head_dim, tie_word_embeddings, family, num_shards (optimizer), unit (model|block|root).
- comm: backend (nccl|gloo|rccl), op, link (the slowest link of the ring), world_size,
  payload_bytes (full unsharded payload), time_s; optional nics_per_node (per-NIC links).
"""

from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path
from typing import Any

import click
import pandas as pd

from perfmodel.comm import BACKENDS
from perfmodel.errors import CatalogError, UserInputError
from planner.cli.common import emit_json, emit_records, emit_table, format_option

logger = logging.getLogger(__name__)


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


def _base_and_hardware(base: str | None, output: str, hardware: str | None) -> tuple[Any, str]:
    from perfmodel.catalog import get_gpu
    from perfmodel.profile import load_profile, make_prior_profile

    base_profile = None
    if base is not None:
        base_profile = load_profile(base)
    elif Path(output).is_file():
        base_profile = load_profile(output)
    if hardware is None:
        if base_profile is None:
            raise UserInputError("no --hardware given and no base profile to take it from",
                                 hint="pass --hardware with a catalog GPU name, e.g. --hardware "
                                      "CPU-x86-2core for this repository's CPU benchmarks "
                                      "(`shardmeter catalog gpus` lists them), or --base PROFILE.")
        return base_profile, base_profile.hardware
    try:
        hardware = get_gpu(hardware).name
    except CatalogError:
        logger.warning("hardware %r is not in the GPU catalog: no prior to fall back on", hardware)
        return base_profile, hardware
    if base_profile is None:
        base_profile = make_prior_profile(hardware)
    return base_profile, hardware


def _command(kind: str, data: str, output: str, **opts: Any) -> str:
    parts = ["shardmeter", "fit", kind, data, "-o", output]
    for key, value in opts.items():
        if value is not None:
            parts += [f"--{key.replace('_', '-')}", str(value)]
    return " ".join(parts)


def _today() -> str:
    return dt.datetime.now(dt.UTC).date().isoformat()


@fit.command("compute")
@_common_options
@click.option("--backend", type=click.Choice(BACKENDS), default=None,
              help="Collective backend [default: the base's, else gloo for a CPU device, "
                   "nccl for a GPU].")
@click.option("--selection", type=click.Choice(("auto", "exhaustive", "forward", "none")),
              default="auto", show_default=True, help="Feature selection by cross-validation.")
@click.option("--tolerance", type=click.FloatRange(min=0), default=0.05, show_default=True,
              help="Keep the smallest feature set whose CV MAPE is within one standard error "
                   "(over the folds), and at least this fraction, of the best.")
@format_option()
def fit_compute(data: str, output: str, hardware: str | None, base: str | None, name: str | None,
                backend: str | None, selection: str, tolerance: float, fmt: str) -> None:
    """Fit forward/backward/optimizer regressions from a compute dataset."""
    from perfmodel.compute import fit_phases, load_compute_dataset
    from perfmodel.profile import PhaseCoefficients, save_profile
    from perfmodel.profile_fit import dataset_record, with_compute_fit

    frame = load_compute_dataset(data)
    reject_duplicate_rows(frame, data, COMPUTE_KEY)
    base_profile, hw = _base_and_hardware(base, output, hardware)
    settings = {"selection": selection, "tolerance": tolerance}
    regs = fit_phases(frame, **settings)
    phases = {p: PhaseCoefficients(coefficients=r.coefficients, provenance="measured",
                                   cv_mape_pct=r.cv_mape_, cv_scheme=r.cv_scheme_)
              for p, r in regs.items()}
    profile = with_compute_fit(
        base_profile, name=name or Path(output).stem, hardware=hw,
        backend=backend or (base_profile.backend if base_profile else default_backend(hw)),
        phases=phases, dataset=dataset_record(data, "compute", len(frame)), fit_date=_today(),
        settings=settings,
        command=_command("compute", data, output, hardware=hardware, base=base, name=name,
                         backend=backend, selection=selection, tolerance=tolerance))
    save_profile(profile, output)
    click.echo(f"wrote {output} (provenance: measured compute {', '.join(regs)})", err=True)
    rows = [{"phase": p, "rows": int((frame["phase"] == p).sum()), "cv_scheme": r.cv_scheme_,
             "cv_mape_pct": r.cv_mape_, "train_mape_pct": r.train_mape_,
             "features": " ".join(r.selected_features_),
             "coefficients_s": " ".join(f"{k}={v:.4g}" for k, v in r.coefficients.items())}
            for p, r in regs.items()]
    emit_records(rows, fmt, title=f"compute fit -> {output}")


@fit.command("comm")
@_common_options
@click.option("--backend", type=click.Choice(BACKENDS), default=None,
              help="Use only rows of this backend (needed when the dataset has several).")
@format_option()
def fit_comm_cmd(data: str, output: str, hardware: str | None, base: str | None, name: str | None,
                 backend: str | None, fmt: str) -> None:
    """Fit latency/bandwidth coefficients per (op, link) from a communication dataset."""
    from perfmodel.comm import fit_comm, load_comm_dataset
    from perfmodel.profile import save_profile
    from perfmodel.profile_fit import dataset_record, with_comm_fit

    frame = _one_backend(load_comm_dataset(data), backend, data)
    reject_duplicate_rows(frame, data, COMM_KEY)
    base_profile, hw = _base_and_hardware(base, output, hardware)
    coefs, _ = fit_comm(frame)
    if not coefs:
        raise UserInputError(f"{data}: no rows with world_size > 1 to fit",
                             hint="measure collectives over at least 2 ranks.")
    profile = with_comm_fit(
        base_profile, name=name or Path(output).stem, hardware=hw,
        backend=str(frame["backend"].iloc[0]), coefficients=coefs,
        dataset=dataset_record(data, "comm", len(frame)), fit_date=_today(),
        command=_command("comm", data, output, hardware=hardware, base=base, name=name,
                         backend=backend))
    save_profile(profile, output)
    click.echo(f"wrote {output} (provenance: measured comm, backend {profile.backend})", err=True)
    rows = [{"op": op, "link": link, "rows": c.rows, "latency_s": c.latency_s,
             "bandwidth_bytes_per_s": c.bandwidth_bytes_per_s, "per_nic": c.per_nic,
             "cv_mape_pct": c.cv_mape_pct} for (op, link), c in coefs.items()]
    emit_records(rows, fmt, title=f"comm fit -> {output}")


@fit.command("overlap")
@click.argument("data", type=click.Path(exists=True, dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(exists=True, dir_okay=False),
              help="Measured profile YAML to update (its compute and comm are used as they are).")
@format_option()
def fit_overlap(data: str, output: str, fmt: str) -> None:
    """Fit the profile's overlap_slowdown (compute slowed while a collective runs) from measured
    FSDP2 steps (`shardmeter bench fsdp` CSV); reports the step MAPE before, after and
    leave-one-out."""
    from dataclasses import replace

    from perfmodel.calibrate_overlap import fit_overlap_slowdown
    from perfmodel.profile import load_profile, save_profile
    from perfmodel.profile_fit import dataset_record

    profile = load_profile(output)
    result = fit_overlap_slowdown(profile, data)
    detail = dict(profile.provenance_detail)
    record = dataset_record(data, "fsdp", result.errors_pct.shape[1])
    detail["datasets"] = [*[d for d in detail.get("datasets", []) if d.get("kind") != "fsdp"],
                          record]
    detail["overlap_fit"] = {
        "overlap_slowdown": result.overlap_slowdown, "grid": [result.grid[0], result.grid[-1]],
        "step_mape_pct_without": round(result.mape_pct(1.0), 3),
        "step_mape_pct_fitted": round(result.mape_pct(result.overlap_slowdown), 3),
        "step_mape_pct_leave_one_out": round(result.loo_mape_pct(), 3)}
    detail["commands"] = [*detail.get("commands", []), f"shardmeter fit overlap {data} -o {output}"]
    save_profile(replace(profile, overlap_slowdown=result.overlap_slowdown,
                         provenance_detail=detail), output)
    click.echo(f"wrote {output} (overlap_slowdown {result.overlap_slowdown})", err=True)
    emit_records([detail["overlap_fit"]], fmt, title=f"overlap fit -> {output}")


COMPUTE_KEY = ("model", "seq_len", "micro_batch", "phase", "unit", "num_shards", "device", "dtype",
               "threads")
"""Columns naming one compute measurement (those present in the file are compared)."""
COMM_KEY = ("backend", "op", "link", "world_size", "payload_bytes", "nics_per_node")
"""Columns naming one collective measurement."""


def reject_duplicate_rows(frame: pd.DataFrame, path: str, key: tuple[str, ...]) -> None:
    """Two rows measuring the same thing would weigh it twice in the fit: refuse them."""
    from perfmodel.errors import DatasetError

    columns = [c for c in key if c in frame.columns]
    dupes = frame.duplicated(subset=columns, keep=False)
    if dupes.any():
        lines = [int(i) + 2 for i in frame.index[dupes]][:6]
        raise DatasetError(f"{path}, lines {lines}: duplicate rows (same {', '.join(columns)})",
                           hint=f"keep one row per measurement in {path} (delete the "
                                "repeated lines).")


def default_backend(hardware: str) -> str:
    """gloo for a CPU device (its intra-node link is gloo), nccl for GPUs."""
    from perfmodel.catalog import get_gpu

    try:
        return "gloo" if get_gpu(hardware).intra_node_link.startswith("gloo") else "nccl"
    except CatalogError:
        return "gloo" if "cpu" in hardware.lower() else "nccl"


def _one_backend(frame: pd.DataFrame, backend: str | None, path: str) -> pd.DataFrame:
    from perfmodel.errors import DatasetError

    if backend is not None:
        frame = frame[frame["backend"] == backend].reset_index(drop=True)
        if frame.empty:
            raise DatasetError(f"{path}: no rows with backend {backend!r}",
                               hint="pick a backend that appears in the dataset.")
    backends = sorted(set(frame["backend"]))
    if len(backends) > 1:
        raise DatasetError(f"{path}: rows of several backends ({', '.join(backends)})",
                           hint="choose one with --backend (a profile holds one backend).")
    return frame


# ---- validate ------------------------------------------------------------------------------

def _fitted_on(profile: Any, path: str, kind: str) -> bool:
    from perfmodel.profile_fit import dataset_record

    if profile.provenance != "measured":
        return False
    sha = dataset_record(path, kind, 0)["sha256"]
    datasets = profile.provenance_detail.get("datasets", [])
    return isinstance(datasets, list) and any(
        isinstance(d, dict) and d.get("kind") == kind and d.get("sha256") == sha for d in datasets)


def _compute_fit_settings(profile: Any) -> dict[str, Any]:
    """The recorded `fit compute` settings; a hand-edited, malformed record falls back to the
    defaults (the refit is then the default one, which the output's mode line does not hide)."""
    import math

    recorded = profile.provenance_detail.get("fit_settings", {})
    recorded = recorded.get("compute", {}) if isinstance(recorded, dict) else {}
    recorded = recorded if isinstance(recorded, dict) else {}
    out: dict[str, Any] = {}
    if recorded.get("selection") in ("auto", "exhaustive", "forward", "none"):
        out["selection"] = recorded["selection"]
    tolerance = recorded.get("tolerance")
    if isinstance(tolerance, int | float) and not isinstance(tolerance, bool) \
            and math.isfinite(tolerance) and tolerance >= 0:
        out["tolerance"] = float(tolerance)
    if out.keys() != recorded.keys():
        logger.warning("profile %s: ignoring malformed fit_settings.compute %r", profile.name,
                       recorded)
    return out


def _validate_compute(profile: Any, data: str) -> tuple[pd.DataFrame, str]:
    from perfmodel.compute import leave_one_model_out, load_compute_dataset, mape_table
    from perfmodel.profile_fit import predict_compute_dataset

    frame = load_compute_dataset(data)
    if _fitted_on(profile, data, "compute") and frame["model"].nunique() >= 2:
        settings = _compute_fit_settings(profile)
        pred = leave_one_model_out(frame, **settings)
        mode = "leave-one-architecture-out (refit without each model's rows)"
    else:
        pred = predict_compute_dataset(profile, frame)
        mode = "prediction error (profile not fitted on this dataset)"
    return mape_table(frame, pred), mode


def _validate_comm(profile: Any, data: str) -> tuple[pd.DataFrame, str]:
    from perfmodel.comm import comm_mape_table, fit_comm, load_comm_dataset, predict_comm_dataset

    frame = load_comm_dataset(data)
    if _fitted_on(profile, data, "comm"):
        frame = frame[frame["backend"] == profile.backend].reset_index(drop=True)
        _, pred = fit_comm(frame)
        mode = "5-fold cross-validation (refit per op and link)"
    else:
        other = sorted(set(frame["backend"]) - {profile.backend})
        if other:
            logger.warning("rows of backend(s) %s compared with a %s profile", other,
                           profile.backend)
        pred = predict_comm_dataset(profile.comm, frame)
        mode = "prediction error (profile not fitted on this dataset)"
    return comm_mape_table(frame, pred), mode


@click.command()
@click.argument("profile_name", metavar="PROFILE")
@click.argument("data", required=False, type=click.Path(dir_okay=False))
@click.option("--comm", "comm_data", type=click.Path(dir_okay=False), default=None,
              help="Communication dataset to validate the comm coefficients on.")
@click.option("--memory", "memory_data", is_flag=False, flag_value="shipped", default=None,
              help="FSDPMemTracker dataset to validate the memory model on (alone: the shipped "
                   "catalogs/profiles/data/memory-tracker.csv).")
@format_option()
def validate(profile_name: str, data: str | None, comm_data: str | None, memory_data: str | None,
             fmt: str) -> None:
    """MAPE of a profile on a compute dataset (Table I form) and/or a comm dataset (per op);
    --memory: the memory model against PyTorch's FSDP2 memory tracker."""
    from perfmodel.profile import load_profile

    if data is None and comm_data is None and memory_data is None:
        raise UserInputError("nothing to validate",
                             hint="give a compute DATA.csv, --comm COMM.csv and/or --memory.")
    profile = load_profile(profile_name)
    parts: dict[str, tuple[pd.DataFrame, str, str]] = {}
    if data is not None:
        parts["compute"] = (*_validate_compute(profile, data), data)
    if comm_data is not None:
        parts["comm"] = (*_validate_comm(profile, comm_data), comm_data)
    summary = profile.provenance_summary()
    memory = _validate_memory(memory_data)
    if fmt == "json":
        emit_json({"profile": profile.name, "provenance": summary,
                   **{k: {"dataset": path, "mode": mode, "rows": table.to_dict(orient="records")}
                      for k, (table, mode, path) in parts.items()},
                   **({"memory": memory} if memory else {})})
    elif fmt == "csv":
        frames = [t.assign(table=k, mode=mode, profile=profile.name, provenance=profile.provenance)
                  for k, (t, mode, _) in parts.items()]
        if memory:
            frames.append(pd.DataFrame(memory["rows"]).assign(table="memory", mode="tracker"))
        emit_records(pd.concat(frames, ignore_index=True), "csv")
    else:
        click.echo(f"profile {profile.name} ({profile.hardware}, {profile.backend}): "
                   f"provenance {profile.provenance}")
        for kind, (table, mode, path) in parts.items():
            emit_table(table, title=f"{kind} MAPE (%) on {path} - {mode}")
        if memory:
            _emit_memory_tables(memory)


def _validate_memory(memory_data: str | None) -> dict[str, Any] | None:
    """The memory model vs FSDPMemTracker report (perfmodel.memory_validation), or None."""
    if memory_data is None:
        return None
    from perfmodel.memory_validation import memory_report

    return memory_report(None if memory_data == "shipped" else memory_data)


def _emit_memory_tables(memory: dict[str, Any]) -> None:
    emit_table(pd.DataFrame(memory["summary"]),
               title=f"memory model vs FSDPMemTracker on {memory['dataset']}: error %")
    emit_table(pd.DataFrame(memory["components"]), title="memory components: model - tracker")
    worst = sorted(memory["rows"], key=lambda r: -abs(r["error_pct"]))[:10]
    cols = ["model", "world_size", "seq_len", "micro_batch", "accum_steps", "accum_mode", "ac",
            "tracker_gib", "model_gib", "error_pct", "phase"]
    emit_table(pd.DataFrame(worst)[cols], title="memory: the 10 largest errors")
