"""Typed API of `shardmeter fit compute|comm|overlap` and `shardmeter validate`.

`fit_compute`, `fit_comm` and `fit_overlap` read a benchmark dataset, fit it into a hardware
profile and write the profile YAML; `validate_profile` measures a profile's error on datasets.
Each takes a frozen request and returns a typed result whose `records` are the rows the CLI
prints; the CLI (`planner.cli.fit_cmd`) only parses options and formats.

Where a fit starts from: `base_path` when given, else the output file when it exists (so
`fit compute` then `fit comm` into one file merges both), else the catalog prior of `hardware`.
Fitted phases / (op, link) pairs replace the base's; the rest is kept with its own provenance.

Repeated rows of one configuration (benchmarks repeat to measure noise) are fitted as their
median, each configuration once (`perfmodel.costs.datasets.configurations` says why), and the
profile keeps their spread per configuration (`provenance_detail.repeats`).
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from joblib import Parallel, delayed

from perfmodel import progress
from perfmodel.costs.comm import (
    BACKENDS,
    COMM_KEY,
    LinkCoefficients,
    comm_mape_table,
    load_comm_dataset,
    predict_comm_dataset,
)
from perfmodel.costs.comm import fit_comm as fit_links
from perfmodel.costs.compute import (
    COMPUTE_KEY,
    PhaseRegressor,
    compute_configurations,
    fit_phases,
    held_out_model_predictions,
    leave_one_model_out,
    load_compute_dataset,
    mape_table,
)
from perfmodel.costs.datasets import configurations, mape_pct, repeat_spread
from perfmodel.profiles.bounds import BoundFlag, bound_flags, flag_records, flag_text
from perfmodel.profiles.cache import ResultCache, cache_key
from perfmodel.profiles.dispatch import dispatch_coefficients, load_dispatch_dataset
from perfmodel.profiles.fit import (
    dataset_record,
    merge_flags,
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
from perfmodel.spec.paths import REPO_ROOT

if TYPE_CHECKING:
    import pandas as pd

    from perfmodel.profiles.profile import HardwareProfile

logger = logging.getLogger(__name__)

SELECTIONS = ("auto", "exhaustive", "forward", "none")
"""Feature-selection modes of `fit compute` (`perfmodel.costs.compute.fit_phases`)."""
NESTED_CV_CACHE = "compute-loao"
"""Cache name of the nested leave-one-architecture-out predictions (`fit compute` and
`validate` share them: the same rows, settings and code give the same predictions)."""
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
    nested_cv: bool = True
    """Also run the nested leave-one-architecture-out CV (feature selection redone without each
    model; one refit per model and phase) and record it as `nested_cv_mape_pct`; False leaves
    it null (the selection score is always recorded)."""
    cache: ResultCache | None = None
    """Where the nested CV's predictions may come from (`perfmodel.profiles.cache`; None:
    always recompute)."""

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
    inline: bool = False
    """The rows time collectives issued inline on the compute stream (`shardmeter bench comm
    --inline`): fitted into the profile's inline table (`CommModel.inline_coefficients`)."""

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
    base_profile, hw = _base_and_hardware(r.base, r.output_path, r.hardware)
    settings = {"selection": r.selection, "tolerance": r.tolerance}
    with progress.task("fit compute phases (feature selection by cross-validation)"):
        regs = fit_phases(frame, **settings)
    nested = _nested_cv_mape(frame, r.data_path, settings, r.cache) if r.nested_cv else {}
    phases = {p: PhaseCoefficients(coefficients=reg.coefficients, provenance="measured",
                                   selection_cv_mape_pct=reg.cv_mape_,
                                   nested_cv_mape_pct=nested.get(p), cv_scheme=reg.cv_scheme_)
              for p, reg in regs.items()}
    configs, _ = compute_configurations(frame)
    profile = with_compute_fit(
        base_profile, name=r.name or Path(r.output_path).stem, hardware=hw,
        backend=r.backend or (base_profile.backend if base_profile else default_backend(hw)),
        phases=phases, dataset={**dataset_record(r.data_path, "compute", len(frame)),
                                "configurations": len(configs)},
        fit_date=_today(), settings={**settings, "nested_cv": r.nested_cv},
        command=_command("compute", r.data_path, r.output_path, hardware=r.hardware, base=r.base,
                         name=r.name, backend=r.backend, selection=r.selection,
                         tolerance=r.tolerance, no_nested_cv=None if r.nested_cv else True),
        at_bound=flag_records(_compute_flags(regs)),
        repeats=repeat_spread(frame, COMPUTE_KEY))
    save_profile(profile, r.output_path)
    rows = [{"phase": p, "rows": int((frame["phase"] == p).sum()),
             "configurations": int((configs["phase"] == p).sum()), "cv_scheme": reg.cv_scheme_,
             "cv_mape_pct": reg.cv_mape_, "selection_cv_mape_pct": reg.cv_mape_,
             "nested_cv_mape_pct": nested.get(p), "train_mape_pct": reg.train_mape_,
             "features": " ".join(reg.selected_features_),
             "coefficients_s": " ".join(f"{k}={v:.4g}" for k, v in reg.coefficients.items())}
            for p, reg in regs.items()]
    return FitResult(profile=profile, fitted=tuple(regs), records=rows)


def nested_predictions(frame: pd.DataFrame, data: str, settings: dict[str, Any],
                        cache: ResultCache | None) -> np.ndarray:
    """Nested leave-one-architecture-out predictions of every row (from `cache` when its key,
    the dataset, the compute code and the settings, holds)."""
    # one refit per architecture inside perfmodel.costs.compute: a spinner with the elapsed time
    with progress.task(f"leave-one-architecture-out refits ({frame['model'].nunique()} models)"):
        if cache is None:
            return loao_by_phase(frame, settings)
        key = cache_key([data], ["perfmodel.costs.compute"], settings)
        return np.array(cache.get(NESTED_CV_CACHE, key,
                                  lambda: loao_by_phase(frame, settings).tolist()),
                        dtype=float)


PARALLEL_MIN_MODELS = 24
"""Architectures from which `loao_by_phase` runs its phases in worker processes: below it the
start-up of a process pool costs more than the refits (tests' small datasets run in-process)."""


def loao_by_phase(frame: pd.DataFrame, settings: dict[str, Any]) -> np.ndarray:
    """`leave_one_model_out(frame)`, one phase per worker process.

    Claim: equal to the single call, element for element.
    Why: `leave_one_model_out` refits each phase against that phase's rows only (the folds, the
    nested feature selection and the repeats' medians are all within a phase), so the phases are
    independent computations on disjoint rows, each deterministic.
    Checked by: tests/test_fit_parallel.py (the per-phase result equals the single call on the
    shipped data's rows, in-process and in worker processes).
    On the shipped CPU dataset (about 220 architectures) the nested CV is most of an hour on one
    core; forward and backward cost about the same, so two cores take about half."""
    phase_of = frame["phase"].to_numpy()
    masks = [phase_of == phase for phase in dict.fromkeys(phase_of)]
    jobs = min(len(masks), os.cpu_count() or 1) \
        if frame["model"].nunique() >= PARALLEL_MIN_MODELS else 1
    parts = Parallel(n_jobs=jobs)(delayed(leave_one_model_out)(frame[mask], **settings)
                                  for mask in masks)
    out = np.full(len(frame), np.nan)
    for mask, part in zip(masks, parts, strict=True):
        out[mask] = part
    return out


def _nested_cv_mape(frame: pd.DataFrame, data: str, settings: dict[str, Any],
                    cache: ResultCache | None) -> dict[str, float | None]:
    """Per phase, the MAPE (percent) of the nested leave-one-architecture-out predictions over
    the configurations (repeats as their median, like the fit); None for a phase with one
    model (nothing to hold it out against)."""
    pred = nested_predictions(frame, data, settings, cache)
    configs, ids = compute_configurations(frame)
    first = np.unique(ids, return_index=True)[1]
    pred_conf = pred[first]
    out: dict[str, float | None] = {}
    for phase in dict.fromkeys(configs["phase"]):
        mine = (configs["phase"] == phase).to_numpy() & ~np.isnan(pred_conf)
        out[str(phase)] = (mape_pct(configs["time_s"].to_numpy(float)[mine], pred_conf[mine])
                           if mine.any() else None)
    return out


def _compute_flags(regs: dict[str, PhaseRegressor]) -> list[BoundFlag]:
    """Selected coefficients the non-negative fit left at its bound, zero."""
    return [flag for phase, reg in regs.items()
            for flag in bound_flags("compute", {f"{phase}.{n}": v
                                                for n, v in reg.coefficients.items()},
                                    {f"{phase}.{n}": (0.0, math.inf) for n in reg.coefficients})]


def _comm_flags(coefs: dict[tuple[str, str], LinkCoefficients], *,
                inline: bool = False) -> list[BoundFlag]:
    """Latencies and inverse bandwidths the non-negative fit left at zero."""
    values = {}
    tag = "inline:" if inline else ""
    for (op, link), c in coefs.items():
        values[f"{tag}{op}/{link}.latency_s"] = c.latency_s
        values[f"{tag}{op}/{link}.inverse_bandwidth_s_per_byte"] = 1.0 / c.bandwidth_bytes_per_s
    return bound_flags("comm", values, {name: (0.0, math.inf) for name in values})


def fit_comm(request: CommFitRequest) -> FitResult:
    """Fit latency/bandwidth per (op, link), write the profile, return the fit rows."""

    r = request
    frame = one_backend(load_comm_dataset(r.data_path), r.backend, r.data_path)
    inline_rows = bool((frame["compute_s"] > 0).any())
    if r.inline != inline_rows:
        raise UserInputError(
            f"{r.data_path}: {'no' if r.inline else 'its'} rows time collectives issued inline "
            f"(column compute_s {'absent or 0' if r.inline else '> 0'}), but --inline is "
            f"{'set' if r.inline else 'not set'}",
            hint="fit `shardmeter bench comm --inline` rows with --inline, and isolated rows "
                 "(bench comm) without it.")
    base_profile, hw = _base_and_hardware(r.base, r.output_path, r.hardware)
    coefs, _ = fit_links(frame)
    if not coefs:
        raise UserInputError(f"{r.data_path}: no rows with world_size > 1 to fit",
                             hint="measure collectives over at least 2 ranks.")
    configs, _ = configurations(frame, COMM_KEY)
    profile = with_comm_fit(
        base_profile, name=r.name or Path(r.output_path).stem, hardware=hw,
        backend=str(frame["backend"].iloc[0]), coefficients=coefs,
        dataset={**dataset_record(r.data_path, "comm", len(frame)),
                 "configurations": len(configs)}, fit_date=_today(),
        command=_command("comm", r.data_path, r.output_path, hardware=r.hardware, base=r.base,
                         name=r.name, backend=r.backend, inline=r.inline or None),
        at_bound=flag_records(_comm_flags(coefs, inline=r.inline)),
        repeats=repeat_spread(frame, COMM_KEY), inline=r.inline)
    save_profile(profile, r.output_path)
    per_link = configs.groupby(["op", "link"], sort=False).size()
    rows = [{"op": op, "link": link, "rows": c.rows,
             "configurations": int(per_link.get((op, link), 0)), "latency_s": c.latency_s,
             "bandwidth_bytes_per_s": c.bandwidth_bytes_per_s, "per_nic": c.per_nic,
             **({"wait_per_compute": c.wait_per_compute} if r.inline else {}),
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
        "step_mape_pct_shape_held_out": round(result.cv_mape_pct(), 3),
        "effective": "both values are effective: fitted end to end on these steps, they absorb "
                     "the step model's error, not only contention and copies",
        "at_bound": "; ".join(f"{f.parameter} {flag_text(f)}" for f in result.at_bound())
                    or "none"}
    detail["at_bound"] = merge_flags(detail.get("at_bound", []), "overlap",
                                     flag_records(result.at_bound()))
    detail["commands"] = [*detail.get("commands", []), f"shardmeter fit overlap {data} -o {output}"]
    fitted = replace(profile, overlap_slowdown=result.overlap_slowdown,
                     fsdp_copy_s_per_byte=result.fsdp_copy_s_per_byte, provenance_detail=detail)
    save_profile(fitted, output)
    return FitResult(profile=fitted, fitted=("overlap_slowdown", "fsdp_copy_s_per_byte"),
                     records=[detail["overlap_fit"]])


@dataclass(frozen=True, kw_only=True, slots=True)
class DispatchFitRequest:
    """`shardmeter fit dispatch`: the profile's tp_dispatch_s from `bench dispatch` rows."""

    data_path: str
    """Dispatch dataset CSV (`shardmeter bench dispatch`)."""
    output_path: str
    """Measured profile YAML to update (everything else in it is kept)."""


def fit_dispatch(request: DispatchFitRequest) -> FitResult:
    """Fit DTensor's host dispatch per pass (`perfmodel.profiles.dispatch.dispatch_coefficients`)
    into the profile, record the dataset and command, return one row per layout and place."""
    data, output = request.data_path, request.output_path
    rows = load_dispatch_dataset(data)
    table = dispatch_coefficients(rows)
    profile = load_profile(output)
    detail = dict(profile.provenance_detail)
    record = dataset_record(data, "dispatch", len(rows))
    detail["datasets"] = [*[d for d in detail.get("datasets", [])
                            if d.get("kind") != "dispatch"], record]
    detail["commands"] = [*detail.get("commands", []),
                          f"shardmeter fit dispatch {data} -o {output}"]
    fitted = replace(profile, tp_dispatch_s=table, provenance_detail=detail)
    save_profile(fitted, output)
    records = [{"layout": layout, "place": place, "host_s": value}
               for layout, places in table.items() for place, value in places.items()]
    return FitResult(profile=fitted, fitted=("tp_dispatch_s",), records=records)


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
        if value is True:
            parts.append(f"--{key.replace('_', '-')}")
        elif value is not None:
            parts += [f"--{key.replace('_', '-')}", str(value)]
    return " ".join(parts)


def _today() -> str:
    return dt.datetime.now(dt.UTC).date().isoformat()


# ---- validate -------------------------------------------------------------------------------

def validate_profile(request: ValidationRequest) -> ValidationReport:
    """MAPE of a profile on a compute dataset (Table I form), a comm dataset (per op) and/or
    the memory model against PyTorch's FSDP2 memory tracker.

    In-sample or out-of-sample is decided ROW BY ROW, by overlap with the rows the profile was
    fitted on (its recorded dataset, found at the recorded path with the recorded sha256; a row
    overlaps when its configuration, `COMPUTE_KEY` / `COMM_KEY`, is among them), not by the
    file: a subset or a copy of the fitting data is in sample. When rows overlap, every model of
    the fitting data is predicted by a refit without that model's fitting rows
    (leave-one-architecture-out, feature selection nested) and collective rows by their k-fold
    out-of-fold prediction on the fitting data; rows that do not overlap are predicted by the
    profile (plain prediction error). Rows that can be neither (a model alone in its phase of
    the fitting data) are left out of the table. Each table's `mode` says which, with counts.
    """

    profile = load_profile(request.profile_name)
    parts: dict[str, ValidationTable] = {}
    asked = [request.compute_data_path, request.comm_data_path, request.memory_data]
    with progress.task(f"validate {profile.name} (datasets)",
                       total=sum(a is not None for a in asked)) as done:
        if request.compute_data_path is not None:
            parts["compute"] = _validate_compute(profile, request.compute_data_path,
                                                 request.cache)
            done(1)
        if request.comm_data_path is not None:
            parts["comm"] = _validate_comm(profile, request.comm_data_path)
            done(1)
        memory = _validate_memory(request.memory_data)
    return ValidationReport(profile=profile, parts=parts, memory=memory)


def _locate(recorded: str) -> Path | None:
    """A recorded dataset path (relative to the repository or the working directory when it was
    written, else absolute) on this machine, or None."""
    path = Path(recorded)
    for candidate in ([path] if path.is_absolute() else [REPO_ROOT / path, Path.cwd() / path]):
        if candidate.is_file():
            return candidate
    return None


def _fitting_rows(profile: HardwareProfile, kind: str, data: str, frame: pd.DataFrame,
                 loader: Any) -> tuple[pd.DataFrame | None, str]:
    """The rows the profile's `kind` part ('compute' or 'comm') was fitted on — `frame` itself
    when `data` is one of its datasets (same sha256), else every recorded file read with
    `loader` and stacked (a comm part may be fitted on several: collectives, then send_recv) —
    and where they came from; (None, why) when the profile names no such dataset or a file is
    not at hand with its recorded sha256."""
    datasets = profile.provenance_detail.get("datasets", [])
    records = [d for d in (datasets if isinstance(datasets, list) else [])
               if isinstance(d, dict) and d.get("kind") == kind]
    if profile.provenance != "measured" or not records:
        return None, f"the profile's {kind} part was not fitted on measured rows"
    if dataset_record(data, kind, 0)["sha256"] in {r.get("sha256") for r in records}:
        return frame, "the dataset the profile was fitted on"
    frames = []
    for record in records:
        path = _locate(str(record.get("path", "")))
        if path is None or dataset_record(path, kind, 0)["sha256"] != record.get("sha256"):
            return None, (f"its fitting dataset {record.get('path')} is not at hand with the "
                          "recorded sha256, so the overlap is unknown")
        frames.append(loader(str(path)))
    names = ", ".join(str(r.get("path")) for r in records)
    return (pd.concat(frames, ignore_index=True),
            f"fitting dataset{'s' if len(records) > 1 else ''} {names}")


def _overlap(frame: pd.DataFrame, fit: pd.DataFrame, key: tuple[str, ...]) -> np.ndarray:
    """For every row of `frame`: is its configuration (the `key` columns both frames have) among
    the rows of `fit`?"""
    columns = [c for c in key if c in frame.columns and c in fit.columns]
    seen = pd.MultiIndex.from_frame(fit[columns].astype(str))
    result: np.ndarray = pd.MultiIndex.from_frame(frame[columns].astype(str)).isin(seen)
    return result


def compute_fit_settings(profile: HardwareProfile) -> dict[str, Any]:
    """The recorded `fit compute` settings; a hand-edited, malformed record falls back to the
    defaults (the refit is then the default one, which the output's mode line does not hide)."""
    recorded = profile.provenance_detail.get("fit_settings", {})
    recorded = recorded.get("compute", {}) if isinstance(recorded, dict) else {}
    recorded = recorded if isinstance(recorded, dict) else {}
    recorded = {k: v for k, v in recorded.items() if k != "nested_cv"}
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


def _plain(source: str) -> str:
    return f"prediction error ({source})"


def _validate_compute(profile: HardwareProfile, data: str,
                      cache: ResultCache | None) -> ValidationTable:
    frame = load_compute_dataset(data)
    fit, source = _fitting_rows(profile, "compute", data, frame, load_compute_dataset)
    in_fit = None if fit is None else _overlap(frame, fit, COMPUTE_KEY)
    if fit is None or in_fit is None or not in_fit.any():
        if fit is None and "unknown" in source:
            logger.warning("profile %s: %s", profile.name, source)
        why = source if fit is None else "no row of this dataset is in the profile's fitting data"
        pred, mode = predict_compute_dataset(profile, frame), _plain(why)
    elif fit is frame:
        settings = compute_fit_settings(profile)
        if frame["model"].nunique() >= 2:
            pred = nested_predictions(frame, data, settings, cache)
            mode = "leave-one-architecture-out (refit without each model's rows)"
        else:
            pred = np.full(len(frame), np.nan)
            mode = ("none: every row is in the fitting data and it has one model, so none can be "
                    "held out (no rows reported)")
    else:
        held = held_out_model_predictions(fit, frame, **compute_fit_settings(profile))
        known = frame["model"].isin(fit["model"]).to_numpy()
        pred = np.where(known, held, predict_compute_dataset(profile, frame))
        dropped = int((known & np.isnan(held)).sum())
        models = int(frame.loc[known, "model"].nunique())
        mode = (f"leave-one-architecture-out against {source}: {int(in_fit.sum())} of "
                f"{len(frame)} rows are in it; the rows of its {models} model(s) predicted by "
                "a refit without that model's fitting rows, "
                f"the other {int((~known).sum())} by the profile (prediction error)"
                + (f"; {dropped} row(s) of a model alone in its phase left out" if dropped
                   else ""))
    return ValidationTable(table=mape_table(frame, pred), mode=mode, dataset_path=data)


def _validate_comm(profile: HardwareProfile, data: str) -> ValidationTable:

    frame = load_comm_dataset(data)
    fit, source = _fitting_rows(profile, "comm", data, frame, load_comm_dataset)
    in_fit = None if fit is None else _overlap(frame, fit, COMM_KEY)
    if fit is None or in_fit is None or not in_fit.any():
        if fit is None and "unknown" in source:
            logger.warning("profile %s: %s", profile.name, source)
        other = sorted(set(frame["backend"]) - {profile.backend})
        if other:
            logger.warning("rows of backend(s) %s compared with a %s profile", other,
                           profile.backend)
        why = source if fit is None else "no row of this dataset is in the profile's fitting data"
        pred, mode = predict_comm_dataset(profile.comm, frame), _plain(why)
    elif fit is frame:
        frame = frame[frame["backend"] == profile.backend].reset_index(drop=True)
        _, pred = fit_links(frame)
        mode = "5-fold cross-validation (refit per op and link)"
    else:
        fit = fit[fit["backend"] == profile.backend].reset_index(drop=True)
        _, fit_oof = fit_links(fit)
        columns = [c for c in COMM_KEY if c in frame.columns and c in fit.columns]
        by_config = pd.Series(fit_oof, index=pd.MultiIndex.from_frame(fit[columns].astype(str)))
        by_config = by_config[~by_config.index.duplicated()]
        oof = by_config.reindex(pd.MultiIndex.from_frame(frame[columns].astype(str))).to_numpy()
        pred = np.where(in_fit, oof, predict_comm_dataset(profile.comm, frame))
        mode = (f"5-fold cross-validation on {source} for the {int(in_fit.sum())} of "
                f"{len(frame)} rows in it (refit per op and link); prediction error for the "
                f"{int((~in_fit).sum())} others")
    return ValidationTable(table=comm_mape_table(frame, pred), mode=mode, dataset_path=data)


def _validate_memory(memory_data: str | None) -> dict[str, Any] | None:
    """The memory model vs FSDPMemTracker report (perfmodel.profiles.memory_validation), or None."""
    if memory_data is None:
        return None

    return memory_report(None if memory_data == SHIPPED_MEMORY_DATASET else memory_data)
