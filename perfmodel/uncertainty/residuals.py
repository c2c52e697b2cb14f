"""The (prediction, measurement) pairs that the prediction intervals are formed from and scored on,
collected from the data the repository ships.

Claim: every pair is out of sample for the prediction it scores — the model that predicted it
was fitted without it — and no `holdout` row takes part in forming an interval.
Why, per group (the `group` column; the first three are the profile provenances of
`perfmodel.profiles.profile.PROVENANCES`):
* measured — the CPU profile's compute: the nested leave-one-architecture-out predictions of
  catalogs/profiles/data/cpu-compute.csv (catalogs/cv-cache/compute-loao.json, read, never
  recomputed), one step-time pair per (model, sequence, micro-batch): forward + backward + the
  model's mean optimizer step. The Sobol shapes are calibration rows; the five named models of
  the paper's Table I are holdout rows (each is out of fold already; they form no interval), and
  so is the fresh CPU holdout (catalogs/profiles/data/cpu-holdout.csv, predicted by the shipped
  profile without a refit) once it is measured.
* calibrated — the calibrated GPU profiles: the leave-one-model-size-out predictions of
  catalogs/published/calibration-cv.csv (calibration rows); the published torchtitan runs no fit
  reads (catalogs/published/validation-torchtitan.csv), predicted by the shipped calibrated
  profile, are holdout rows.
* prior — the scaled priors (how H200, B200, MI300X are predicted): leave-one-GPU-out over the
  calibrated GPUs' published runs. Each calibrated GPU's runs (llm-foundry.csv) are predicted by
  the prior scaled, as `scripts.make_prior_profiles` scales it, from each OTHER calibrated GPU's
  profile. Runs of A100-SXM4-40GB and A100-SXM4-80GB are calibration rows; runs of
  H100-SXM5-80GB — the reference of the Hopper-and-newer priors — are the held-out GPU (holdout
  rows), as are the torchtitan runs predicted by the prior scaled from the H100. The calibration
  rows keep the A100 runs predicted from the H100's calibrated profile (the scaling every
  Hopper-and-newer prior uses): no H100 measurement is a calibration ratio, though the H100's
  runs shaped that profile.
* memory — the memory model against FSDPMemTracker (quantity peak_memory_bytes), dense models:
  the grid datasets memory-tracker.csv, -layouts.csv and -pipeline.csv are the rows the model
  was designed against (it matches most of them to the byte), so their ratios are in-sample
  (role `in-sample`: they set the ranges an interval covers without widening, never a quantile,
  and are never scored); the *-heldout.csv companions and the real-allocator runs
  memory-tracker-real.csv, held out of the design (reported, never fitted), are the
  calibration rows. No memory
  row is left untouched to score them with, so `perfmodel.uncertainty.coverage` scores these
  groups by cross-conformal folds (every row against the interval the other folds form).
* memory-moe — the same for mixture-of-experts models (its routing and capacity terms err by
  percents where the dense terms err by permille, so one group would give MoE peaks a band far
  too narrow and dense ones one too wide): memory-tracker-moe.csv and the MoE pipeline
  stages' memory-tracker-moe-pipeline.csv in-sample, memory-tracker-moe-heldout.csv and
  memory-tracker-moe-pipeline-heldout.csv the calibration rows.
* collectives — the gloo collectives of cpu-comm.csv: 5-fold out-of-fold predictions
  (`perfmodel.costs.comm.fit_comm`); a fixed quarter of the configurations (by the sha256 of the
  case id) are holdout rows.
Time-like figures are stored as time pairs: a throughput run of T tokens per GPU per step at
x tokens/s/GPU is a step of T / x seconds, so r = measured / predicted > 1 means slower (or, for
memory, bigger) than predicted.
Checked by: tests/test_uncertainty.py (the shipped residuals.csv is what `collect` writes, the
roles are as stated, moving holdout rows changes no multiplier).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd

from perfmodel.api.fit import NESTED_CV_CACHE, compute_fit_settings, nested_predictions
from perfmodel.costs.comm import fit_comm, load_comm_dataset
from perfmodel.costs.compute import load_compute_dataset
from perfmodel.costs.features import spec_from_row
from perfmodel.profiles.cache import ResultCache
from perfmodel.profiles.calibrate import (
    LLM_FOUNDRY_CSV,
    VALIDATION_CSV,
    load_published_runs,
    predict_tokens_per_s_per_gpu,
    scaled_prior_profile,
)
from perfmodel.profiles.fit import predict_compute_dataset
from perfmodel.profiles.memory_validation import predict_row, read_rows, spec_of_row
from perfmodel.profiles.pipeline_memory_validation import predict_pipeline_row, read_pipeline_rows
from perfmodel.profiles.profile import load_profile
from perfmodel.spec.paths import REPO_ROOT
from perfmodel.uncertainty.contract import COLUMNS, GROUPS

logger = logging.getLogger(__name__)

DATA = REPO_ROOT / "catalogs" / "profiles" / "data"
PUBLISHED = REPO_ROOT / "catalogs" / "published"
CPU_PROFILE = REPO_ROOT / "catalogs" / "profiles" / "cpu-x86-2core.yaml"
COMPUTE_DATA = DATA / "cpu-compute.csv"
COMM_DATA = DATA / "cpu-comm.csv"
CPU_HOLDOUT = DATA / "cpu-holdout.csv"
"""The fresh CPU holdout (scripts/validation_heldout.py): measured holdout rows once it exists."""
NAMED_MODELS = ("SmolLM-360M", "Llama-3.2-1B", "Phi-1.5", "Gemma-2B", "Yi-6B")
"""The paper's Table I models in cpu-compute.csv: the measured group's holdout rows."""
CALIBRATED_GPUS = ("A100-SXM4-40GB", "A100-SXM4-80GB", "H100-SXM5-80GB")
HELD_OUT_GPU = "H100-SXM5-80GB"
"""The prior group's held-out GPU (leave-one-GPU-out)."""
MEMORY_SETS = (("memory-tracker.csv", "fsdp", "in-sample", "memory"),
               ("memory-tracker-layouts.csv", "layouts", "in-sample", "memory"),
               ("memory-tracker-pipeline.csv", "pipeline", "in-sample", "memory"),
               ("memory-tracker-heldout.csv", "fsdp", "calibration", "memory"),
               ("memory-tracker-layouts-heldout.csv", "layouts", "calibration", "memory"),
               ("memory-tracker-pipeline-heldout.csv", "pipeline", "calibration", "memory"),
               ("memory-tracker-real.csv", "fsdp", "calibration", "memory"),
               ("memory-tracker-moe.csv", "layouts", "in-sample", "memory-moe"),
               ("memory-tracker-moe-pipeline.csv", "pipeline", "in-sample", "memory-moe"),
               ("memory-tracker-moe-heldout.csv", "layouts", "calibration", "memory-moe"),
               ("memory-tracker-moe-pipeline-heldout.csv", "pipeline", "calibration",
                "memory-moe"))
"""Tracker datasets: file, row kind, role, group."""
COLLECTIVE_HOLDOUT_SHARE = 4
"""One configuration in this many (by the sha256 of its case id) is a collectives holdout row."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Residual:
    """One (prediction, measurement) pair and where the query it answers lies."""

    group: str
    """One of GROUPS."""
    quantity: str
    """One of QUANTITIES."""
    case: str
    """Stable id of the configuration."""
    source: str
    """The file (relative to the repository) the measurement comes from."""
    predicted: float
    """The model's figure (seconds or bytes)."""
    measured: float
    """The measured figure, same unit."""
    role: str
    """One of ROLES."""
    num_gpus: int | None = None
    """GPUs (ranks) of the configuration, None where it has no meaning."""
    seq_len: int | None = None
    """Sequence length in tokens, None where it has no meaning."""
    params: int | None = None
    """Model parameters, None where it has no meaning."""
    layout: str | None = None
    """fsdp, tp or pp (the layout kind), None where it has no meaning."""

    def row(self) -> dict[str, Any]:
        """The residuals.csv row."""
        return {"group": self.group, "quantity": self.quantity, "case": self.case,
                "source": self.source, "predicted": repr(float(self.predicted)),
                "measured": repr(float(self.measured)), "role": self.role}


def _shown(path: Path) -> str:
    resolved = path.resolve()
    return (str(resolved.relative_to(REPO_ROOT)) if resolved.is_relative_to(REPO_ROOT)
            else str(resolved))


# ---- measured: the CPU compute LOAO --------------------------------------------------------

def step_pairs(frame: pd.DataFrame, predicted_s: np.ndarray, *, group: str, source: str,
               role: Callable[[str], str]) -> list[Residual]:
    """One step-time pair per (model, sequence, micro-batch) of a compute dataset with its
    per-row predictions: forward + backward (+ the model's mean optimizer step), whole-model
    rows, repeats as their mean — the step `perfmodel.costs.compute.mape_table` scores."""
    whole = frame.assign(predicted_s=predicted_s).dropna(subset=["predicted_s"])
    whole = whole[whole["unit"] == "model"]
    keys = ["model", "seq_len", "micro_batch"]
    passes = whole[whole["phase"].isin(("forward", "backward"))]
    table = passes.pivot_table(index=keys, columns="phase", values=["time_s", "predicted_s"],
                               aggfunc="mean").dropna()
    optimizer = whole[whole["phase"] == "optimizer"].groupby("model")[
        ["time_s", "predicted_s"]].mean()
    params = {str(name): spec_from_row(part.iloc[0]).total_params
              for name, part in whole.groupby("model", sort=False)}
    out = []
    for index, row in table.iterrows():
        model, seq_len, micro_batch = cast(tuple[str, int, int], index)
        opt = optimizer.loc[model] if model in optimizer.index else None
        measured = row[("time_s", "forward")] + row[("time_s", "backward")]
        pred = row[("predicted_s", "forward")] + row[("predicted_s", "backward")]
        if opt is not None:
            measured, pred = measured + opt["time_s"], pred + opt["predicted_s"]
        out.append(Residual(
            group=group, quantity="step_time_s", case=f"{model}/S{seq_len}/m{micro_batch}",
            source=source, predicted=float(pred), measured=float(measured),
            role=role(str(model)), num_gpus=1, seq_len=int(seq_len), params=params[str(model)],
            layout="fsdp"))
    return out


def measured_residuals(cache: ResultCache, holdout_path: Path = CPU_HOLDOUT) -> list[Residual]:
    """Step-time pairs of the nested leave-one-architecture-out compute predictions, then (once
    measured) the fresh CPU holdout predicted by the shipped profile as it is (all holdout)."""
    frame = load_compute_dataset(str(COMPUTE_DATA))
    profile = load_profile(str(CPU_PROFILE))
    predicted = nested_predictions(frame, str(COMPUTE_DATA), compute_fit_settings(profile), cache)
    out = step_pairs(frame, predicted, group="measured",
                     source=f"{_shown(COMPUTE_DATA)} (catalogs/cv-cache/{NESTED_CV_CACHE}.json)",
                     role=lambda m: "holdout" if m in NAMED_MODELS else "calibration")
    if holdout_path.is_file():
        fresh = load_compute_dataset(str(holdout_path))
        out += step_pairs(fresh, predict_compute_dataset(profile, fresh), group="measured",
                          source=_shown(holdout_path), role=lambda m: "holdout")
    return out


# ---- calibrated and prior: published GPU runs ----------------------------------------------

def _run_case(row: Mapping[str, Any]) -> str:
    return (f"{row['gpu']}/{row['model']}/{row['nodes']}x{row['gpus_per_node']}/"
            f"S{row['seq_len']}/m{row['micro_batch']}/k{row['accum_steps']}/"
            f"{row['activation_checkpointing']}")


def _tokens_per_gpu_step(runs: pd.DataFrame) -> np.ndarray:
    return (runs["seq_len"] * runs["micro_batch"] * runs["accum_steps"]).to_numpy(float)


def _run_pairs(runs: pd.DataFrame, predicted_tps: np.ndarray, *, group: str, role: str,
               source: Path, params: Mapping[str, int], prefix: str = "") -> list[Residual]:
    """Step-time pairs of throughput predictions (time = tokens / (tokens/s))."""
    tokens = _tokens_per_gpu_step(runs)
    measured = tokens / runs["tokens_per_s_per_gpu"].to_numpy(float)
    predicted = tokens / np.asarray(predicted_tps, float)
    out = []
    records = cast(list[dict[str, Any]], runs.to_dict("records"))  # column labels are str
    for row, pred, meas in zip(records, predicted, measured, strict=True):
        out.append(Residual(
            group=group, quantity="step_time_s", case=prefix + _run_case(row),
            source=_shown(source), predicted=float(pred), measured=float(meas), role=role,
            num_gpus=int(row["nodes"]) * int(row["gpus_per_node"]), seq_len=int(row["seq_len"]),
            params=int(params[str(row["model"])]), layout="fsdp"))
    return out


def _params_by_model(*frames: pd.DataFrame) -> dict[str, int]:
    out: dict[str, int] = {}
    for frame in frames:
        out.update({str(m): int(p) for m, p in zip(frame["model"], frame["num_params"],
                                                   strict=True)})
    return out


def calibrated_residuals() -> list[Residual]:
    """Leave-one-model-size-out pairs (calibration) and the torchtitan runs (holdout)."""
    cv_path = PUBLISHED / "calibration-cv.csv"
    cv = pd.read_csv(cv_path)
    foundry, titan = load_published_runs(LLM_FOUNDRY_CSV), load_published_runs(VALIDATION_CSV)
    params = _params_by_model(foundry, titan)
    out = _run_pairs(cv, cv["cv_pred"].to_numpy(float), group="calibrated", role="calibration",
                     source=cv_path, params=params)
    for gpu, runs in titan.groupby("gpu", sort=True):
        pred = predict_tokens_per_s_per_gpu(load_profile(f"{gpu}-calibrated"), runs)
        out += _run_pairs(runs, pred, group="calibrated", role="holdout",
                          source=Path(VALIDATION_CSV), params=params)
    return out


def prior_residuals() -> list[Residual]:
    """Leave-one-GPU-out pairs of the scaled priors over the calibrated GPUs' published runs."""
    foundry, titan = load_published_runs(LLM_FOUNDRY_CSV), load_published_runs(VALIDATION_CSV)
    params = _params_by_model(foundry, titan)
    calibrated = {gpu: load_profile(f"{gpu}-calibrated") for gpu in CALIBRATED_GPUS}
    out = []
    for target in CALIBRATED_GPUS:
        runs = foundry[foundry["gpu"] == target]
        role = "holdout" if target == HELD_OUT_GPU else "calibration"
        for reference in CALIBRATED_GPUS:
            if reference == target:
                continue
            prior = scaled_prior_profile(target, calibrated[reference])
            out += _run_pairs(runs, predict_tokens_per_s_per_gpu(prior, runs), group="prior",
                              role=role, source=Path(LLM_FOUNDRY_CSV), params=params,
                              prefix=f"from-{reference}:")
    for gpu, runs in titan.groupby("gpu", sort=True):
        prior = scaled_prior_profile(str(gpu), calibrated[HELD_OUT_GPU])
        out += _run_pairs(runs, predict_tokens_per_s_per_gpu(prior, runs), group="prior",
                          role="holdout", source=Path(VALIDATION_CSV), params=params,
                          prefix=f"from-{HELD_OUT_GPU}:")
    return out


# ---- memory: the tracker datasets ----------------------------------------------------------

def _layout_kind(tp: int, pp: int) -> str:
    return "pp" if pp > 1 else "tp" if tp > 1 else "fsdp"


def memory_residuals() -> list[Residual]:
    """The memory model's tracked peak against each tracker dataset's peak."""
    out = []
    for name, kind, role, group in MEMORY_SETS:
        path = DATA / name
        if not path.is_file():
            logger.warning("%s missing: no memory residuals from it", _shown(path))
            continue
        rows = read_pipeline_rows(path) if kind == "pipeline" else read_rows(path)
        for i, row in enumerate(rows):
            if kind == "pipeline":
                predicted = predict_pipeline_row(row).breakdown.tracked_bytes
                gpus = int(row["pp"]) * int(row["dp_shard"]) * int(row["tp"])
                layout = _layout_kind(int(row["tp"]), int(row["pp"]))
            else:
                predicted = predict_row(row).tracked_bytes
                gpus = int(row["world_size"])
                layout = _layout_kind(int(row.get("tp", "1") or 1), 1)
            out.append(Residual(
                group=group, quantity="peak_memory_bytes",
                case=f"{path.stem}:{i + 2}:{row['model']}", source=_shown(path),
                predicted=float(predicted), measured=float(row["peak_bytes"]), role=role,
                num_gpus=gpus, seq_len=int(row["seq_len"]),
                params=spec_of_row(row).total_params, layout=layout))
    return out


# ---- collectives -----------------------------------------------------------------------------

def collective_residuals() -> list[Residual]:
    """5-fold out-of-fold predictions of the gloo collectives (one pair per configuration)."""
    frame = load_comm_dataset(str(COMM_DATA))
    _, oof = fit_comm(frame)
    frame = frame.assign(predicted_s=oof).dropna(subset=["predicted_s"])
    keys = ["backend", "op", "link", "world_size", "payload_bytes"]
    grouped = frame.groupby(keys, sort=True)[["time_s", "predicted_s"]].median()
    out = []
    for index, row in grouped.iterrows():
        backend, op, link, world, payload = cast(tuple[str, str, str, int, float], index)
        case = f"{backend}/{op}/{link}/P{world}/{int(payload)}B"
        digest = int(hashlib.sha256(case.encode()).hexdigest(), 16)
        out.append(Residual(
            group="collectives", quantity="collective_time_s", case=case,
            source=_shown(COMM_DATA), predicted=float(row["predicted_s"]),
            measured=float(row["time_s"]),
            role="holdout" if digest % COLLECTIVE_HOLDOUT_SHARE == 0 else "calibration",
            num_gpus=int(world)))
    return out


# ---- the whole collection and its files ----------------------------------------------------

def collect(cache: ResultCache) -> list[Residual]:
    """Every residual of every group, in a stable order."""
    return [*measured_residuals(cache), *calibrated_residuals(), *prior_residuals(),
            *memory_residuals(), *collective_residuals()]


def csv_text(residuals: Iterable[Residual]) -> str:
    """residuals.csv's text."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(COLUMNS), lineterminator="\n")
    writer.writeheader()
    for r in residuals:
        writer.writerow(r.row())
    return buffer.getvalue()


def _span(values: Sequence[int | None]) -> list[int] | None:
    known = [v for v in values if v is not None]
    return [min(known), max(known)] if known else None


def coverage_json(residuals: Sequence[Residual]) -> str:
    """What each group's calibration and in-sample rows cover (GPU count, sequence length,
    parameters, layout kinds), the ranges beyond which an interval widens
    (`perfmodel.uncertainty.intervals`): the model has been checked on both kinds of rows."""
    out: dict[str, Any] = {}
    for group in GROUPS:
        rows = [r for r in residuals if r.group == group and r.role in ("calibration", "in-sample")]
        if not any(r.role == "calibration" for r in rows):
            continue
        layouts = sorted({r.layout for r in rows if r.layout is not None})
        out[group] = {"num_gpus": _span([r.num_gpus for r in rows]),
                      "seq_len": _span([r.seq_len for r in rows]),
                      "params": _span([r.params for r in rows]),
                      "layouts": layouts or None}
    return json.dumps(out, indent=1, sort_keys=True) + "\n"
