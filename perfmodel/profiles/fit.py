"""Measured profiles: a fit's coefficients merged into a base profile, with the provenance (path,
sha256, rows, command, date, CV errors, values at a bound, the spread of repeated rows) of the
dataset they came from."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
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


def _floats(values: Mapping[str, float | None]) -> dict[str, float | None]:
    return {k: None if v is None else float(v) for k, v in values.items()}


def _measured_detail(base: HardwareProfile | None, dataset: dict[str, Any], command: str,
                     fit_date: str, settings: Mapping[str, Any] | None, *,
                     cv_mape_pct: Mapping[str, float] | None = None,
                     selection_cv_mape_pct: Mapping[str, float | None] | None = None,
                     nested_cv_mape_pct: Mapping[str, float | None] | None = None,
                     at_bound: Iterable[Mapping[str, Any]] = (),
                     repeats: Mapping[str, Any] | None = None,
                     fitted: Collection[str] | None = None) -> dict[str, Any]:
    """provenance_detail of a measured profile after a compute or comm fit: the base's record
    with this fit's dataset, CV figures, values at a bound and repeat spread replacing those of
    the same kind. `cv_mape_pct` holds the collectives' k-fold CV (a genuine out-of-sample
    figure); the compute phases' figures are `selection_cv_mape_pct` (the score that chose the
    features) and `nested_cv_mape_pct` (selection redone inside every fold). Files from before
    issue 22 kept the selection score under `cv_mape_pct`: it is moved where it belongs.

    A comm fit names the "op/link" coefficients it `fitted` and replaces only those: a comm
    dataset fitted before (cpu-comm.csv, the collectives) stays cited, with its CV figures and
    flags, for the coefficients it still backs when a second one (cpu-p2p.csv, send_recv) is
    fitted; each comm dataset entry lists them (`fits`), and the second one's repeat spread is
    kept under `comm:<its path>`."""
    old = dict(base.provenance_detail) if base is not None and base.provenance == "measured" else {}
    kind = dataset["kind"]
    detail: dict[str, Any] = {"kind": "measured"}
    base_name = old.get("base") or (base.name if base is not None and base.provenance != "measured"
                                    else None)
    if base_name:
        detail["base"] = base_name
    old_cv = dict(old.get("cv_mape_pct", {}))
    old_selection = {**{k: v for k, v in old_cv.items() if k in PHASES},
                     **dict(old.get("selection_cv_mape_pct", {}))}
    old_cv = {k: v for k, v in old_cv.items() if k not in PHASES}
    old_flags = list(old.get("at_bound", []))
    repeats_key = kind
    if fitted is None:
        datasets = [d for d in old.get("datasets", []) if d.get("kind") != kind]
    else:
        keys = set(fitted)
        datasets = _still_cited(old.get("datasets", []), old_cv, dataset, keys)
        if any(d.get("kind") == kind for d in datasets):
            repeats_key = f"{kind}:{dataset['path']}"
        dataset = {**dataset, "fits": sorted(keys)}
        # the other coefficients' CV figures and flags stay with the dataset that backs them
        cv_mape_pct = {**{k: v for k, v in old_cv.items() if k not in keys},
                       **(cv_mape_pct or {})}
        at_bound = [*(f for f in old_flags if f.get("fit") == kind
                      and str(f.get("parameter", "")).split(".")[0] not in keys), *at_bound]
    detail["datasets"] = [*datasets, dataset]
    if kind == "compute":
        detail["cv_mape_pct"] = old_cv
        detail["selection_cv_mape_pct"] = _floats(selection_cv_mape_pct or {})
        detail["nested_cv_mape_pct"] = _floats(nested_cv_mape_pct or {})
    else:
        detail["cv_mape_pct"] = {k: float(v) for k, v in (cv_mape_pct or {}).items()}
        detail["selection_cv_mape_pct"] = old_selection
        detail["nested_cv_mape_pct"] = dict(old.get("nested_cv_mape_pct", {}))
    detail["at_bound"] = merge_flags(old_flags, kind, at_bound)
    detail["repeats"] = {**dict(old.get("repeats", {})), **({repeats_key: dict(repeats)}
                                                           if repeats is not None else {})}
    detail["fit_date"] = fit_date
    detail["commands"] = [*old.get("commands", []), command]
    detail["fit_settings"] = {**old.get("fit_settings", {}), **({kind: dict(settings)}
                                                               if settings else {})}
    if "overlap_fit" in old:  # the FSDP-side values stay in the profile, so does their record
        detail["overlap_fit"] = old["overlap_fit"]
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


def merge_flags(old: Iterable[Mapping[str, Any]], fit: str,
                new: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """`provenance_detail.at_bound` after a refit of `fit`: the other fits' flags kept, this
    fit's replaced by `new`."""
    return [*(dict(f) for f in old if f.get("fit") != fit), *(dict(f) for f in new)]


def with_compute_fit(base: HardwareProfile | None, *, name: str, hardware: str, backend: str,
                     phases: Mapping[str, PhaseCoefficients], dataset: dict[str, Any],
                     command: str, fit_date: str, settings: Mapping[str, Any],
                     at_bound: Iterable[Mapping[str, Any]] = (),
                     repeats: Mapping[str, Any] | None = None) -> HardwareProfile:
    """`base` with the fitted phases replaced (other phases and comm kept) and measured
    provenance."""
    compute = {**(dict(base.compute) if base else {}), **phases}
    detail = _measured_detail(
        base, dataset, command, fit_date, settings,
        selection_cv_mape_pct={p: c.selection_cv_mape_pct for p, c in phases.items()},
        nested_cv_mape_pct={p: c.nested_cv_mape_pct for p, c in phases.items()},
        at_bound=at_bound, repeats=repeats)
    return HardwareProfile(
        name=name, hardware=hardware, backend=backend, provenance="measured",
        provenance_detail=detail,
        compute=compute, **_contention(base),
        comm=base.comm if base and base.backend == backend else CommModel(
            backend=backend,
            coefficients={k: v for k, v in (base.comm.coefficients.items() if base else ())
                          if v.provenance == "prior"}))


class _Contention(TypedDict, total=False):
    overlap_slowdown: float
    recompute_factor: float
    fsdp_copy_s_per_byte: float
    tp_dispatch_s: Mapping[str, Mapping[str, float]]


def _contention(base: HardwareProfile | None) -> _Contention:
    """The base's overlap_slowdown, recompute_factor, fsdp_copy_s_per_byte and tp_dispatch_s (kept
    by a refit of other parts)."""
    if base is None:
        return {}
    return {"overlap_slowdown": base.overlap_slowdown, "recompute_factor": base.recompute_factor,
            "fsdp_copy_s_per_byte": base.fsdp_copy_s_per_byte,
            "tp_dispatch_s": base.tp_dispatch_s}


def with_comm_fit(base: HardwareProfile | None, *, name: str, hardware: str, backend: str,
                  coefficients: Mapping[tuple[str, str], LinkCoefficients], dataset: dict[str, Any],
                  command: str, fit_date: str, at_bound: Iterable[Mapping[str, Any]] = (),
                  repeats: Mapping[str, Any] | None = None, inline: bool = False
                  ) -> HardwareProfile:
    """`base` with the fitted (op, link) coefficients added or replaced and measured provenance.
    Measured coefficients of a base with another backend are dropped (priors are kept).
    `inline`: the coefficients are of collectives issued on the compute stream
    (`CommModel.inline_coefficients`); their provenance keys read "inline:op/link"."""
    same = base is not None and base.backend == backend
    old = {} if base is None else {k: v for k, v in base.comm.coefficients.items()
                                   if same or v.provenance == "prior"}
    old_inline = dict(base.comm.inline_coefficients) if base is not None and same else {}
    tag = "inline:" if inline else ""
    cv = {f"{tag}{op}/{link}": c.cv_mape_pct for (op, link), c in coefficients.items()
          if c.cv_mape_pct is not None}
    isolated, inline_table = ((old, {**old_inline, **coefficients}) if inline
                              else ({**old, **coefficients}, old_inline))
    return HardwareProfile(
        name=name, hardware=hardware, backend=backend, provenance="measured",
        provenance_detail=_measured_detail(base, dataset, command, fit_date, None,
                                           cv_mape_pct=cv, at_bound=at_bound, repeats=repeats,
                                           fitted=[f"{tag}{op}/{link}"
                                                   for op, link in coefficients]),
        compute=dict(base.compute) if base else {}, **_contention(base),
        comm=CommModel(backend=backend, coefficients=isolated, inline_coefficients=inline_table))
