"""Typed API of `shardmeter fit compute|comm|overlap` and `shardmeter validate`.

`fit_compute`, `fit_comm` and `fit_overlap` read a benchmark dataset, fit it into a hardware
profile and write the profile YAML; `validate_profile` measures a profile's error on datasets.
Each takes a frozen request and returns a typed result whose `records` are the rows the CLI
prints; the CLI (`planner.cli.fit_cmd`) only parses options and formats.

Where a fit starts from: `base_path` when given, else the output file when it exists (so
`fit compute` then `fit comm` into one file merges both), else the catalog prior of `hardware`.
Fitted phases / (op, link) pairs replace the base's; the rest is kept with its own provenance.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from perfmodel.costs.comm import BACKENDS, comm_mape_table, load_comm_dataset, predict_comm_dataset
from perfmodel.costs.comm import fit_comm as fit_links
from perfmodel.costs.compute import (
    fit_phases,
    leave_one_model_out,
    load_compute_dataset,
    mape_table,
)
from perfmodel.profiles.cache import ResultCache, cache_key
from perfmodel.profiles.fit import (
    dataset_record,
    predict_compute_dataset,
    with_comm_fit,
    with_compute_fit,
)
from perfmodel.profiles.memory_validation import memory_report
from perfmodel.profiles.overlap import fit_overlap_slowdown
from perfmodel.profiles.profile import (
    PhaseCoefficients,
    load_profile,
    make_prior_profile,
    save_profile,
)
from perfmodel.spec.catalog import get_gpu
from perfmodel.spec.errors import CatalogError, DatasetError, UserInputError

if TYPE_CHECKING:
    import pandas as pd

    from perfmodel.profiles.profile import HardwareProfile

logger = logging.getLogger(__name__)

SELECTIONS = ("auto", "exhaustive", "forward", "none")
"""Feature-selection modes of `fit compute` (`perfmodel.costs.compute.fit_phases`)."""
COMPUTE_KEY = ("model", "seq_len", "micro_batch", "phase", "unit", "num_shards", "device", "dtype",
               "threads")
"""Columns naming one compute measurement (those present in the file are compared)."""
COMM_KEY = ("backend", "op", "link", "world_size", "payload_bytes", "nics_per_node")
"""Columns naming one collective measurement."""
SHIPPED_MEMORY_DATASET = "shipped"
"""`ValidationRequest.memory_data` value naming catalogs/profiles/data/memory-tracker.csv."""


# ---- requests and results -------------------------------------------------------------------

def _check_backend(backend: str | None) -> None:
    if backend is not None and backend not in BACKENDS:
        raise UserInputError(f"unknown backend {backend!r}",
                             hint=f"use one of {', '.join(BACKENDS)}.")


@dataclass(frozen=True, kw_only=True, slots=True)
class _ProfileFitTarget:
    """Where a fit of part of a profile starts and what it writes (shared by compute and comm)."""

    output_path: str
    """Profile YAML to write (also the base when it exists and `base` is None)."""
    hardware: str | None = None
    """Catalog GPU (or local device) name; None: the base profile's."""
    base: str | None = None
    """Profile (name or path) to start from; None: the output file, else the prior."""
    name: str | None = None
    """Profile name; None: the output file's stem."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ComputeFitRequest(_ProfileFitTarget):
    """`shardmeter fit compute`: forward/backward/optimizer regressions from a compute CSV."""

    data_path: str
    """Compute dataset CSV (`shardmeter bench compute`)."""
    backend: str | None = None
    """Collective backend; None: the base's, else gloo for a CPU device, nccl for a GPU."""
    selection: str = "auto"
    """Feature selection by cross-validation: auto, exhaustive, forward or none."""
    tolerance: float = 0.05
    """Keep the smallest feature set whose CV MAPE is within one standard error, and at least
    this fraction, of the best (>= 0)."""

    def __post_init__(self) -> None:
        _check_backend(self.backend)
        if self.selection not in SELECTIONS:
            raise UserInputError(f"unknown feature selection {self.selection!r}",
                                 hint=f"use one of {', '.join(SELECTIONS)}.")
        if not (math.isfinite(self.tolerance) and self.tolerance >= 0):
            raise UserInputError(f"tolerance must be finite and >= 0, got {self.tolerance}",
                                 hint="pass a fraction such as 0.05.")


@dataclass(frozen=True, kw_only=True, slots=True)
class CommFitRequest(_ProfileFitTarget):
    """`shardmeter fit comm`: latency/bandwidth per (op, link) from a communication CSV."""

    data_path: str
    """Communication dataset CSV (`shardmeter bench comm`)."""
    backend: str | None = None
    """Use only rows of this backend (needed when the dataset has several)."""

    def __post_init__(self) -> None:
        _check_backend(self.backend)


@dataclass(frozen=True, kw_only=True, slots=True)
class OverlapFitRequest:
    """`shardmeter fit overlap`: the profile's overlap_slowdown and fsdp_copy_s_per_byte from
    measured FSDP2 steps."""

    data_path: str
    """FSDP2 step dataset CSV (`shardmeter bench fsdp`)."""
    output_path: str
    """Measured profile YAML to update (its compute and comm are used as they are)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class FitResult:
    """A written profile and the fit's rows (one per phase, (op, link) pair, or one summary)."""

    profile: HardwareProfile
    """The profile as written to the output file."""
    fitted: tuple[str, ...]
    """Fitted phases (compute), "op/link" pairs (comm), or the FSDP-side parameters."""
    records: list[dict[str, Any]]
    """The printed rows, in output order."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ValidationRequest:
    """`shardmeter validate`: a profile's MAPE on compute, comm and/or memory datasets."""

    profile_name: str
    """Profile name or YAML path."""
    compute_data_path: str | None = None
    """Compute dataset CSV (Table I form: per model forward / backward / optimizer / step)."""
    comm_data_path: str | None = None
    """Communication dataset CSV (per op and link)."""
    memory_data: str | None = None
    """FSDPMemTracker dataset CSV, or `SHIPPED_MEMORY_DATASET` for the shipped one."""
    cache: ResultCache | None = None
    """Where the nested leave-one-architecture-out predictions may come from
    (`perfmodel.profiles.cache`; None: always recompute)."""

    def __post_init__(self) -> None:
        if self.compute_data_path is None and self.comm_data_path is None \
                and self.memory_data is None:
            raise UserInputError("nothing to validate",
                                 hint="give a compute DATA.csv, --comm COMM.csv and/or --memory.")


@dataclass(frozen=True, kw_only=True, slots=True)
class ValidationTable:
    """The MAPE table of one dataset."""

    table: pd.DataFrame
    """MAPE (%) per model and phase (compute) or per op and link (comm)."""
    mode: str
    """How the predictions were made (held-out refit, or plain prediction error)."""
    dataset_path: str
    """The dataset it was computed on."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ValidationReport:
    """A profile's error on the requested datasets."""

    profile: HardwareProfile
    """The validated profile."""
    parts: dict[str, ValidationTable]
    """'compute' and/or 'comm' -> its table, in that order."""
    memory: dict[str, Any] | None
    """The memory model vs FSDPMemTracker report (`perfmodel.profiles.memory_validation`), or
    None."""

    def record(self) -> dict[str, Any]:
        """Everything as one JSON-ready mapping."""
        return {"profile": self.profile.name, "provenance": self.profile.provenance_summary(),
                **{k: {"dataset": p.dataset_path, "mode": p.mode,
                       "rows": p.table.to_dict(orient="records")} for k, p in self.parts.items()},
                **({"memory": self.memory} if self.memory else {})}

    def frame(self) -> pd.DataFrame:
        """Every table stacked into one frame with `table` and `mode` columns."""

        frames = [p.table.assign(table=k, mode=p.mode, profile=self.profile.name,
                                 provenance=self.profile.provenance)
                  for k, p in self.parts.items()]
        if self.memory:
            frames.append(pd.DataFrame(self.memory["rows"]).assign(table="memory", mode="tracker"))
        return pd.concat(frames, ignore_index=True)


# ---- fits -----------------------------------------------------------------------------------

def fit_compute(request: ComputeFitRequest) -> FitResult:
    """Fit forward/backward/optimizer regressions, write the profile, return the fit rows."""

    r = request
    frame = load_compute_dataset(r.data_path)
    reject_duplicate_rows(frame, r.data_path, COMPUTE_KEY)
    base_profile, hw = _base_and_hardware(r.base, r.output_path, r.hardware)
    settings = {"selection": r.selection, "tolerance": r.tolerance}
    regs = fit_phases(frame, **settings)
    phases = {p: PhaseCoefficients(coefficients=reg.coefficients, provenance="measured",
                                   cv_mape_pct=reg.cv_mape_, cv_scheme=reg.cv_scheme_)
              for p, reg in regs.items()}
    profile = with_compute_fit(
        base_profile, name=r.name or Path(r.output_path).stem, hardware=hw,
        backend=r.backend or (base_profile.backend if base_profile else default_backend(hw)),
        phases=phases, dataset=dataset_record(r.data_path, "compute", len(frame)),
        fit_date=_today(), settings=settings,
        command=_command("compute", r.data_path, r.output_path, hardware=r.hardware, base=r.base,
                         name=r.name, backend=r.backend, selection=r.selection,
                         tolerance=r.tolerance))
    save_profile(profile, r.output_path)
    rows = [{"phase": p, "rows": int((frame["phase"] == p).sum()), "cv_scheme": reg.cv_scheme_,
             "cv_mape_pct": reg.cv_mape_, "train_mape_pct": reg.train_mape_,
             "features": " ".join(reg.selected_features_),
             "coefficients_s": " ".join(f"{k}={v:.4g}" for k, v in reg.coefficients.items())}
            for p, reg in regs.items()]
    return FitResult(profile=profile, fitted=tuple(regs), records=rows)


def fit_comm(request: CommFitRequest) -> FitResult:
    """Fit latency/bandwidth per (op, link), write the profile, return the fit rows."""

    r = request
    frame = one_backend(load_comm_dataset(r.data_path), r.backend, r.data_path)
    reject_duplicate_rows(frame, r.data_path, COMM_KEY)
    base_profile, hw = _base_and_hardware(r.base, r.output_path, r.hardware)
    coefs, _ = fit_links(frame)
    if not coefs:
        raise UserInputError(f"{r.data_path}: no rows with world_size > 1 to fit",
                             hint="measure collectives over at least 2 ranks.")
    profile = with_comm_fit(
        base_profile, name=r.name or Path(r.output_path).stem, hardware=hw,
        backend=str(frame["backend"].iloc[0]), coefficients=coefs,
        dataset=dataset_record(r.data_path, "comm", len(frame)), fit_date=_today(),
        command=_command("comm", r.data_path, r.output_path, hardware=r.hardware, base=r.base,
                         name=r.name, backend=r.backend))
    save_profile(profile, r.output_path)
    rows = [{"op": op, "link": link, "rows": c.rows, "latency_s": c.latency_s,
             "bandwidth_bytes_per_s": c.bandwidth_bytes_per_s, "per_nic": c.per_nic,
             "cv_mape_pct": c.cv_mape_pct} for (op, link), c in coefs.items()]
    return FitResult(profile=profile, fitted=tuple(f"{op}/{link}" for op, link in coefs),
                     records=rows)


def fit_overlap(request: OverlapFitRequest) -> FitResult:
    """Fit overlap_slowdown and fsdp_copy_s_per_byte on measured FSDP2 steps (step MAPE before,
    fitted, and with each model shape held out), write the updated profile, return the one
    summary row."""


    data, output = request.data_path, request.output_path
    profile = load_profile(output)
    result = fit_overlap_slowdown(profile, data)
    detail = dict(profile.provenance_detail)
    record = dataset_record(data, "fsdp", result.errors_pct.shape[1])
    detail["datasets"] = [*[d for d in detail.get("datasets", []) if d.get("kind") != "fsdp"],
                          record]
    detail["overlap_fit"] = {
        "overlap_slowdown": result.overlap_slowdown,
        "fsdp_copy_s_per_byte": result.fsdp_copy_s_per_byte,
        "grid_overlap_slowdown": [result.grid[0][0], result.grid[-1][0]],
        "grid_fsdp_copy_s_per_byte": [result.grid[0][1], result.grid[-1][1]],
        "step_mape_pct_without": round(result.mape_pct((1.0, 0.0)), 3),
        "step_mape_pct_fitted": round(result.mape_pct(result.best), 3),
        "step_mape_pct_shape_held_out": round(result.cv_mape_pct(), 3)}
    detail["commands"] = [*detail.get("commands", []), f"shardmeter fit overlap {data} -o {output}"]
    fitted = replace(profile, overlap_slowdown=result.overlap_slowdown,
                     fsdp_copy_s_per_byte=result.fsdp_copy_s_per_byte, provenance_detail=detail)
    save_profile(fitted, output)
    return FitResult(profile=fitted, fitted=("overlap_slowdown", "fsdp_copy_s_per_byte"),
                     records=[detail["overlap_fit"]])


def reject_duplicate_rows(frame: pd.DataFrame, path: str, key: tuple[str, ...]) -> None:
    """Two rows measuring the same thing would weigh it twice in the fit: refuse them."""
    columns = [c for c in key if c in frame.columns]
    dupes = frame.duplicated(subset=columns, keep=False)
    if dupes.any():
        lines = [int(i) + 2 for i in frame.index[dupes]][:6]
        raise DatasetError(f"{path}, lines {lines}: duplicate rows (same {', '.join(columns)})",
                           hint=f"keep one row per measurement in {path} (delete the "
                                "repeated lines).")


def default_backend(hardware: str) -> str:
    """gloo for a CPU device (its intra-node link is gloo), nccl for GPUs."""

    try:
        return "gloo" if get_gpu(hardware).intra_node_link.startswith("gloo") else "nccl"
    except CatalogError:
        return "gloo" if "cpu" in hardware.lower() else "nccl"


def one_backend(frame: pd.DataFrame, backend: str | None, path: str) -> pd.DataFrame:
    """The rows of `backend` (all rows when None), refusing a dataset of several backends."""
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


def _base_and_hardware(base: str | None, output: str,
                       hardware: str | None) -> tuple[HardwareProfile | None, str]:

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
    """The `shardmeter fit` command line recorded in the profile's provenance."""
    parts = ["shardmeter", "fit", kind, data, "-o", output]
    for key, value in opts.items():
        if value is not None:
            parts += [f"--{key.replace('_', '-')}", str(value)]
    return " ".join(parts)


def _today() -> str:
    return dt.datetime.now(dt.UTC).date().isoformat()


# ---- validate -------------------------------------------------------------------------------

def validate_profile(request: ValidationRequest) -> ValidationReport:
    """MAPE of a profile on a compute dataset (Table I form), a comm dataset (per op) and/or
    the memory model against PyTorch's FSDP2 memory tracker.

    When the profile is measured and the dataset is the one it was fitted on (same sha256),
    every model is predicted by a refit without that model's rows (leave-one-architecture-out)
    and comm rows by a k-fold refit; otherwise the profile's plain prediction error is reported.
    Each table's `mode` says which.
    """

    profile = load_profile(request.profile_name)
    parts: dict[str, ValidationTable] = {}
    if request.compute_data_path is not None:
        parts["compute"] = _validate_compute(profile, request.compute_data_path, request.cache)
    if request.comm_data_path is not None:
        parts["comm"] = _validate_comm(profile, request.comm_data_path)
    return ValidationReport(profile=profile, parts=parts,
                            memory=_validate_memory(request.memory_data))


def _fitted_on(profile: HardwareProfile, path: str, kind: str) -> bool:

    if profile.provenance != "measured":
        return False
    sha = dataset_record(path, kind, 0)["sha256"]
    datasets = profile.provenance_detail.get("datasets", [])
    return isinstance(datasets, list) and any(
        isinstance(d, dict) and d.get("kind") == kind and d.get("sha256") == sha for d in datasets)


def _compute_fit_settings(profile: HardwareProfile) -> dict[str, Any]:
    """The recorded `fit compute` settings; a hand-edited, malformed record falls back to the
    defaults (the refit is then the default one, which the output's mode line does not hide)."""
    recorded = profile.provenance_detail.get("fit_settings", {})
    recorded = recorded.get("compute", {}) if isinstance(recorded, dict) else {}
    recorded = recorded if isinstance(recorded, dict) else {}
    out: dict[str, Any] = {}
    if recorded.get("selection") in SELECTIONS:
        out["selection"] = recorded["selection"]
    tolerance = recorded.get("tolerance")
    if isinstance(tolerance, int | float) and not isinstance(tolerance, bool) \
            and math.isfinite(tolerance) and tolerance >= 0:
        out["tolerance"] = float(tolerance)
    if out.keys() != recorded.keys():
        logger.warning("profile %s: ignoring malformed fit_settings.compute %r", profile.name,
                       recorded)
    return out


def _validate_compute(profile: HardwareProfile, data: str,
                      cache: ResultCache | None) -> ValidationTable:
    frame = load_compute_dataset(data)
    if _fitted_on(profile, data, "compute") and frame["model"].nunique() >= 2:
        settings = _compute_fit_settings(profile)
        if cache is None:
            pred = leave_one_model_out(frame, **settings)
        else:
            key = cache_key([data], ["perfmodel.costs.compute"], settings)
            pred = np.array(cache.get("compute-loao", key,
                                      lambda: leave_one_model_out(frame, **settings).tolist()),
                            dtype=float)
        mode = "leave-one-architecture-out (refit without each model's rows)"
    else:
        pred = predict_compute_dataset(profile, frame)
        mode = "prediction error (profile not fitted on this dataset)"
    return ValidationTable(table=mape_table(frame, pred), mode=mode, dataset_path=data)


def _validate_comm(profile: HardwareProfile, data: str) -> ValidationTable:

    frame = load_comm_dataset(data)
    if _fitted_on(profile, data, "comm"):
        frame = frame[frame["backend"] == profile.backend].reset_index(drop=True)
        _, pred = fit_links(frame)
        mode = "5-fold cross-validation (refit per op and link)"
    else:
        other = sorted(set(frame["backend"]) - {profile.backend})
        if other:
            logger.warning("rows of backend(s) %s compared with a %s profile", other,
                           profile.backend)
        pred = predict_comm_dataset(profile.comm, frame)
        mode = "prediction error (profile not fitted on this dataset)"
    return ValidationTable(table=comm_mape_table(frame, pred), mode=mode, dataset_path=data)


def _validate_memory(memory_data: str | None) -> dict[str, Any] | None:
    """The memory model vs FSDPMemTracker report (perfmodel.profiles.memory_validation), or None."""
    if memory_data is None:
        return None

    return memory_report(None if memory_data == SHIPPED_MEMORY_DATASET else memory_data)
