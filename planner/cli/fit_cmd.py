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
    func = click.option("--name", default=None, help="Profile name [default: output file stem].")(func)
    func = click.option("--base", default=None,
                        help="Profile to start from (name or path) [default: the output file if it "
                             "exists, else the prior of --hardware].")(func)
    func = click.option("--hardware", default=None, help="Catalog GPU (or local device) name.")(func)
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
                                 hint="pass --hardware with a catalog GPU name (or --base PROFILE).")
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
              help="Collective backend [default: the base's, else nccl].")
@click.option("--selection", type=click.Choice(("auto", "exhaustive", "forward", "none")),
              default="auto", show_default=True, help="Feature selection by cross-validation.")
@click.option("--tolerance", type=float, default=0.05, show_default=True,
              help="Keep the smallest feature set whose CV MAPE is within one standard error "
                   "(over the folds), and at least this fraction, of the best.")
@format_option()
def fit_compute(data: str, output: str, hardware: str | None, base: str | None, name: str | None,
                backend: str | None, selection: str, tolerance: float, fmt: str) -> None:
    """Fit forward/backward/optimizer regressions from a compute dataset."""
    from perfmodel.compute import fit_phases, load_compute_dataset
    from perfmodel.profile import PhaseCoefficients, dataset_record, save_profile, with_compute_fit

    frame = load_compute_dataset(data)
    base_profile, hw = _base_and_hardware(base, output, hardware)
    settings = {"selection": selection, "tolerance": tolerance}
    regs = fit_phases(frame, **settings)
    phases = {p: PhaseCoefficients(coefficients=r.coefficients, provenance="measured",
                                   cv_mape_pct=r.cv_mape_, cv_scheme=r.cv_scheme_)
              for p, r in regs.items()}
    profile = with_compute_fit(
        base_profile, name=name or Path(output).stem, hardware=hw,
        backend=backend or (base_profile.backend if base_profile else "nccl"), phases=phases,
        dataset=dataset_record(data, "compute", len(frame)), fit_date=_today(), settings=settings,
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
    from perfmodel.profile import dataset_record, save_profile, with_comm_fit

    frame = _one_backend(load_comm_dataset(data), backend, data)
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
    from perfmodel.profile import dataset_record

    if profile.provenance != "measured":
        return False
    sha = dataset_record(path, kind, 0)["sha256"]
    return any(d.get("kind") == kind and d.get("sha256") == sha
               for d in profile.provenance_detail.get("datasets", []))


def _validate_compute(profile: Any, data: str) -> tuple[pd.DataFrame, str]:
    from perfmodel.compute import leave_one_model_out, load_compute_dataset, mape_table
    from perfmodel.profile import predict_compute_dataset

    frame = load_compute_dataset(data)
    if _fitted_on(profile, data, "compute") and frame["model"].nunique() >= 2:
        settings = profile.provenance_detail.get("fit_settings", {}).get("compute", {})
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
            logger.warning("rows of backend(s) %s compared with a %s profile", other, profile.backend)
        pred = predict_comm_dataset(profile.comm, frame)
        mode = "prediction error (profile not fitted on this dataset)"
    return comm_mape_table(frame, pred), mode


@click.command()
@click.argument("profile_name", metavar="PROFILE")
@click.argument("data", required=False, type=click.Path(dir_okay=False))
@click.option("--comm", "comm_data", type=click.Path(dir_okay=False), default=None,
              help="Communication dataset to validate the comm coefficients on.")
@format_option()
def validate(profile_name: str, data: str | None, comm_data: str | None, fmt: str) -> None:
    """MAPE of a profile on a compute dataset (Table I form) and/or a comm dataset (per op)."""
    from perfmodel.profile import load_profile

    if data is None and comm_data is None:
        raise UserInputError("nothing to validate", hint="give a compute DATA.csv and/or --comm COMM.csv.")
    profile = load_profile(profile_name)
    parts: dict[str, tuple[pd.DataFrame, str, str]] = {}
    if data is not None:
        parts["compute"] = (*_validate_compute(profile, data), data)
    if comm_data is not None:
        parts["comm"] = (*_validate_comm(profile, comm_data), comm_data)
    summary = profile.provenance_summary()
    if fmt == "json":
        emit_json({"profile": profile.name, "provenance": summary,
                   **{k: {"dataset": path, "mode": mode, "rows": table.to_dict(orient="records")}
                      for k, (table, mode, path) in parts.items()}})
    elif fmt == "csv":
        frames = [t.assign(table=k, mode=mode, profile=profile.name, provenance=profile.provenance)
                  for k, (t, mode, _) in parts.items()]
        emit_records(pd.concat(frames, ignore_index=True), "csv")
    else:
        click.echo(f"profile {profile.name} ({profile.hardware}, {profile.backend}): "
                   f"provenance {profile.provenance}")
        for kind, (table, mode, path) in parts.items():
            emit_table(table, title=f"{kind} MAPE (%) on {path} - {mode}")
