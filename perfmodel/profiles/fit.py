"""Measured profiles: a fit's coefficients merged into a base profile, with the provenance (path,
sha256, rows, command, date, CV error) of the dataset they came from."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from perfmodel.costs.comm import CommModel, LinkCoefficients
from perfmodel.costs.features import PHASES, dataset_features
from perfmodel.profiles.profile import HardwareProfile, PhaseCoefficients, _sha256
from perfmodel.spec.paths import REPO_ROOT


def predict_compute_dataset(profile: HardwareProfile, frame: Any) -> np.ndarray:
    """The profile's prediction for every row of a compute dataset (perfmodel.costs.compute
    format)."""

    pred = np.full(len(frame), np.nan)
    phases = frame["phase"].to_numpy()
    for phase in PHASES:
        mask = phases == phase
        if mask.any():
            pred[mask] = dataset_features(frame[mask], phase) @ profile._coef_vector(phase)
    return pred


def dataset_record(path: str | Path, kind: str, rows: int) -> dict[str, Any]:
    """Provenance entry of a dataset: path (relative to the repository when inside it), sha256."""
    p = Path(path).resolve()
    for root in (REPO_ROOT, Path.cwd()):
        if p.is_relative_to(root):
            shown = str(p.relative_to(root))
            break
    else:
        shown = str(p)
    return {"kind": kind, "path": shown, "sha256": _sha256(p), "rows": int(rows)}


def _measured_detail(base: HardwareProfile | None, dataset: dict[str, Any], command: str,
                     cv_mape_pct: Mapping[str, float], fit_date: str,
                     settings: Mapping[str, Any] | None,
                     fitted: Collection[str] | None = None) -> dict[str, Any]:
    """The provenance of `base` refitted on `dataset`. A compute or FSDP dataset replaces the one
    of its kind; a comm fit replaces only the "op/link" coefficients it `fitted`, so a comm
    dataset fitted before (the collectives) stays cited, with its CV MAPEs, for the coefficients
    it still backs (a p2p dataset fitted second adds send_recv)."""
    old = dict(base.provenance_detail) if base is not None and base.provenance == "measured" else {}
    detail: dict[str, Any] = {"kind": "measured"}
    base_name = old.get("base") or (base.name if base is not None and base.provenance != "measured"
                                    else None)
    if base_name:
        detail["base"] = base_name
    old_cv = old.get("cv_mape_pct", {})
    if fitted is None:
        datasets = [d for d in old.get("datasets", []) if d.get("kind") != dataset["kind"]]
        kept = {k: v for k, v in old_cv.items()
                if (k.split("/")[0] in PHASES) != (dataset["kind"] == "compute")}
    else:
        datasets = _still_cited(old.get("datasets", []), old_cv, dataset, set(fitted))
        kept = {k: v for k, v in old_cv.items() if k not in fitted}
        dataset = {**dataset, "fits": sorted(fitted)}
    detail["datasets"] = [*datasets, dataset]
    detail["cv_mape_pct"] = {**kept, **{k: float(v) for k, v in cv_mape_pct.items()}}
    detail["fit_date"] = fit_date
    detail["commands"] = [*old.get("commands", []), command]
    detail["fit_settings"] = {**old.get("fit_settings", {}), **({dataset["kind"]: dict(settings)}
                                                               if settings else {})}
    return detail


def _still_cited(datasets: list[dict[str, Any]], cv_mape_pct: Mapping[str, Any],
                 new: dict[str, Any], fitted: set[str]) -> list[dict[str, Any]]:
    """The old dataset entries a comm fit of the `fitted` "op/link" keys leaves standing: every
    non-comm one; a comm one (not the new file itself) that still backs a coefficient, with its
    `fits` narrowed to those (an entry written before `fits` existed backs the comm keys of the
    old CV MAPEs)."""
    legacy = sorted(k for k in cv_mape_pct if k.split("/")[0] not in PHASES)
    out = []
    for entry in datasets:
        if entry.get("kind") != "comm":
            out.append(entry)
            continue
        if entry.get("path") == new["path"]:
            continue
        backs = [k for k in entry.get("fits", legacy) if k not in fitted]
        if backs:
            out.append({**entry, "fits": backs})
    return out


def with_compute_fit(base: HardwareProfile | None, *, name: str, hardware: str, backend: str,
                     phases: Mapping[str, PhaseCoefficients], dataset: dict[str, Any],
                     command: str, fit_date: str, settings: Mapping[str, Any]) -> HardwareProfile:
    """`base` with the fitted phases replaced (other phases and comm kept) and measured
    provenance."""
    compute = {**(dict(base.compute) if base else {}), **phases}
    cv = {p: c.cv_mape_pct for p, c in phases.items() if c.cv_mape_pct is not None}
    return HardwareProfile(
        name=name, hardware=hardware, backend=backend, provenance="measured",
        provenance_detail=_measured_detail(base, dataset, command, cv, fit_date, settings),
        compute=compute, **_contention(base),
        comm=base.comm if base and base.backend == backend else CommModel(
            backend=backend,
            coefficients={k: v for k, v in (base.comm.coefficients.items() if base else ())
                          if v.provenance == "prior"}))


class _Contention(TypedDict, total=False):
    overlap_slowdown: float
    recompute_factor: float
    fsdp_copy_s_per_byte: float


def _contention(base: HardwareProfile | None) -> _Contention:
    """The base's overlap_slowdown, recompute_factor and fsdp_copy_s_per_byte (kept by a refit of
    other parts)."""
    if base is None:
        return {}
    return {"overlap_slowdown": base.overlap_slowdown, "recompute_factor": base.recompute_factor,
            "fsdp_copy_s_per_byte": base.fsdp_copy_s_per_byte}


def with_comm_fit(base: HardwareProfile | None, *, name: str, hardware: str, backend: str,
                  coefficients: Mapping[tuple[str, str], LinkCoefficients], dataset: dict[str, Any],
                  command: str, fit_date: str) -> HardwareProfile:
    """`base` with the fitted (op, link) coefficients added or replaced and measured provenance.
    Measured coefficients of a base with another backend are dropped (priors are kept)."""
    old = {} if base is None else {k: v for k, v in base.comm.coefficients.items()
                                   if base.backend == backend or v.provenance == "prior"}
    cv = {f"{op}/{link}": c.cv_mape_pct for (op, link), c in coefficients.items()
          if c.cv_mape_pct is not None}
    return HardwareProfile(
        name=name, hardware=hardware, backend=backend, provenance="measured",
        provenance_detail=_measured_detail(base, dataset, command, cv, fit_date, None,
                                           fitted=[f"{op}/{link}" for op, link in coefficients]),
        compute=dict(base.compute) if base else {}, **_contention(base),
        comm=CommModel(backend=backend, coefficients={**old, **coefficients}))
