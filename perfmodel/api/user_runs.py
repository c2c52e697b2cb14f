"""`shardmeter fit calibrate`: a calibrated profile from a team's own training runs (issue 27 #5).

A team logs what it ran (model, GPU, nodes, GPUs per node, sequence length, micro-batch,
accumulation, checkpointing, measured tokens/s/GPU or step time). `calibrate_from_runs` validates
that CSV (every error names file, line, field and value, with a fix), turns each row into a run of
the published-run format and refits the calibrated parameters of the GPU with the very code the
shipped calibrated profiles come from (`perfmodel.profiles.calibrate.calibrate_gpu`: the same
least squares on log(predicted/measured), the same leave-one-model-size-out cross-validation,
the same step simulator), then writes a profile of provenance "calibrated" whose
`provenance_detail.source` says "user runs: FILE (n rows)". This is how a GPU known only by a
datasheet prior (H200, B200, MI300X) becomes a calibrated one.

Claim: the refit reproduces the runs it was given within its cross-validated error.
Why: it is the shipped calibration (same parameters, bounds, start and budget) on these rows; the
CV figure is the error on model sizes held out of the fit, which bounds the in-sample error of a
well-posed fit.
Checked by: tests/test_fit_calibrate.py (H100 rows of catalogs/published/llm-foundry.csv in the
user format: the written profile predicts each run, and their MAPE is within the printed CV MAPE;
the parameters equal `calibrate_gpu` on the same rows in the published format; a malformed CSV
exits 2 naming the line and field).

What the calibration models: FSDP runs (tp = pp = 1) of llama-layout dense models (SwiGLU, RMSNorm,
untied head: catalog models or a config.json) and of the MPT models of the published runs, with
llm-foundry's recipe (`calibrate.run_recipe`: flash attention, reduce-scatter accumulation,
`pure_bf16` optional, default false). Anything else is refused with a fix, not approximated.
"""

from __future__ import annotations

import io
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from perfmodel.profiles.calibrate import (
    GpuCalibration,
    calibrate_gpu,
    calibrated_profile,
    calibration_detail,
    load_published_runs,
    run_model,
)
from perfmodel.profiles.fit import dataset_record
from perfmodel.profiles.profile import HardwareProfile, save_profile
from perfmodel.spec.catalog import get_gpu, get_model
from perfmodel.spec.errors import DatasetError, ShardMeterError
from perfmodel.spec.inputs import read_text
from perfmodel.spec.recipe import canonical_ac

logger = logging.getLogger(__name__)

REQUIRED_COLUMNS = ("model", "gpu", "nodes", "gpus_per_node", "seq_len", "micro_batch",
                    "grad_accum", "activation_checkpointing")
"""Columns every runs CSV has."""
MEASURED_COLUMNS = ("tokens_per_s_per_gpu", "step_time_s")
"""At least one of these columns; each row fills exactly one."""
OPTIONAL_COLUMNS = ("tp", "pp", "pure_bf16")
"""tp and pp default to 1 (only 1 is modelled by the calibration); pure_bf16 to false."""
ARCH_COLUMNS = ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "intermediate_size",
                "vocab_size")
_INTS = ("nodes", "gpus_per_node", "seq_len", "micro_batch", "grad_accum", "tp", "pp")
_FORMAT_HINT = ("columns: " + ", ".join(REQUIRED_COLUMNS) + ", and tokens_per_s_per_gpu or "
                "step_time_s (optional: tp, pp, pure_bf16); see `shardmeter fit calibrate "
                "--help`.")


@dataclass(frozen=True, kw_only=True, slots=True)
class CalibrateRunsRequest:
    """`shardmeter fit calibrate --runs CSV --gpu NAME -o PROFILE`."""

    runs_path: str
    """The team's runs (CSV, the columns of REQUIRED_COLUMNS and MEASURED_COLUMNS)."""
    gpu: str
    """Catalog GPU whose parameters are refitted (rows of other GPUs are left out)."""
    output_path: str
    """Profile YAML to write."""
    name: str | None = None
    """Profile name; None: the output file's stem."""

    def __post_init__(self) -> None:
        for name in ("runs_path", "gpu", "output_path"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise DatasetError(f"{name} = {value!r}: must be a non-empty string",
                                   hint=f"give {name.replace('_path', '')} (see --help).")


@dataclass(frozen=True, kw_only=True, slots=True)
class CalibrateRunsResult:
    """The written profile and the cross-validated fit it came from."""

    profile: HardwareProfile
    """The profile as written (provenance calibrated)."""
    calibration: GpuCalibration
    """Parameters, folds and per-run predictions (`cv_pred`, `fit_pred`, `prior_pred`)."""
    records: list[dict[str, Any]]
    """One printed row per run: measured, cross-validated, fitted and prior tokens/s/GPU."""

    @property
    def cv_mape_pct(self) -> float:
        """Leave-one-model-size-out MAPE of tokens/s/GPU over the runs, %."""
        return self.calibration.mape_pct()


def _published_models() -> dict[str, dict[str, Any]]:
    """The models of the published runs (MPT layout) by lower-cased name: their architecture."""
    runs = load_published_runs()
    return {str(m).lower(): {"model": str(m), **{c: int(rows[c].iloc[0]) for c in ARCH_COLUMNS},
                             "layout": str(rows["layout"].iloc[0]) if "layout" in rows else "mpt"}
            for m, rows in runs.groupby("model")}


def _model_columns(value: str, fail: Any) -> dict[str, Any]:
    """The architecture columns of a run's model: a published MPT model, else a catalog model or
    config.json of llama layout (checked: the calibration's reconstruction has its parameters)."""
    published = _published_models().get(value.lower())
    if published is not None:
        return published
    try:
        spec = get_model(value)
    except ShardMeterError as err:
        raise fail("model", value, f"not a model ({err.message})",
                   "give a catalog model name, a config.json path, or a model of "
                   "catalogs/published/llm-foundry.csv.") from None
    columns = {"model": spec.name, "hidden_size": spec.hidden_size,
               "num_layers": spec.num_layers, "num_heads": spec.num_heads,
               "num_kv_heads": spec.num_kv_heads, "intermediate_size": spec.intermediate_size,
               "vocab_size": spec.vocab_size, "layout": "llama"}
    if run_model(columns).total_params != spec.total_params:
        raise fail("model", value, f"{spec.family} layout is not modelled by the calibration",
                   "calibrate with runs of llama-layout models (SwiGLU, RMSNorm, untied head) or "
                   "of the published MPT models.")
    return columns


def load_user_runs(path: str, gpu: str) -> pd.DataFrame:
    """The rows of `gpu` in the published-run format, every row of the file validated."""
    text = read_text(Path(path), what="runs file", error=DatasetError, hint=_FORMAT_HINT)
    try:
        frame = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False,
                            skipinitialspace=True)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, ValueError) as err:
        raise DatasetError(f"{path}: cannot read the runs CSV ({err})", hint=_FORMAT_HINT) from None
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
    if missing or not any(c in frame.columns for c in MEASURED_COLUMNS):
        raise DatasetError(f"{path}: missing columns {missing or list(MEASURED_COLUMNS)}",
                           hint=_FORMAT_HINT)
    gpu_name = get_gpu(gpu).name
    rows = []
    for index, raw in enumerate(frame.to_dict("records")):
        line = index + 2

        def fail(field: str, value: Any, problem: str, hint: str, *, line: int = line) -> Exception:
            return DatasetError(f"{path}, line {line}: field {field!r} = {value!r}: {problem}",
                                hint=hint)

        row = {k: str(v).strip() for k, v in raw.items()}
        ints: dict[str, int] = {}
        for field in _INTS:
            value = row.get(field, "") or ("1" if field in ("tp", "pp") else "")
            try:
                ints[field] = int(value)
            except ValueError:
                raise fail(field, value, "not a whole number", "put a whole number >= 1 "
                           "there.") from None
            if ints[field] < 1:
                raise fail(field, value, "must be >= 1", "put a whole number >= 1 there.")
        for field in ("tp", "pp"):
            if ints[field] != 1:
                raise fail(field, row[field], "only FSDP runs (tp = pp = 1) are calibrated",
                           "leave the row out, or give runs without tensor/pipeline "
                           "parallelism.")
        try:
            row_gpu = get_gpu(row["gpu"]).name
        except ShardMeterError as err:
            raise fail("gpu", row["gpu"], "not a catalog GPU", err.hint or "") from None
        try:
            ac = canonical_ac(row["activation_checkpointing"],
                              where=f"{path}, line {line}: field 'activation_checkpointing'")
        except ShardMeterError as err:
            raise DatasetError(err.message, hint=err.hint) from None
        pure = row.get("pure_bf16", "").lower() or "false"
        if pure not in ("true", "false"):
            raise fail("pure_bf16", row["pure_bf16"], "not true or false", "write true or false.")
        measured = {c: row.get(c, "") for c in MEASURED_COLUMNS if row.get(c, "")}
        if len(measured) != 1:
            raise fail("tokens_per_s_per_gpu", row.get("tokens_per_s_per_gpu", ""),
                       "give exactly one of tokens_per_s_per_gpu and step_time_s",
                       "fill one of the two measured columns in each row.")
        (field, text_value), = measured.items()
        try:
            number = float(text_value)
        except ValueError:
            number = math.nan
        if not math.isfinite(number) or number <= 0:
            raise fail(field, text_value, "not a finite number > 0",
                       "put the measured value (tokens/s per GPU, or seconds per optimizer step) "
                       "there.")
        tokens = ints["micro_batch"] * ints["grad_accum"] * ints["seq_len"]
        tokens_per_s_per_gpu = number if field == "tokens_per_s_per_gpu" else tokens / number
        if row_gpu != gpu_name:
            continue
        rows.append({**_model_columns(row["model"], fail), "gpu": row_gpu,
                     "nodes": ints["nodes"], "gpus_per_node": ints["gpus_per_node"],
                     "seq_len": ints["seq_len"], "micro_batch": ints["micro_batch"],
                     "accum_steps": ints["grad_accum"], "activation_checkpointing": ac,
                     "pure_bf16": pure == "true", "interconnect": "",
                     "tokens_per_s_per_gpu": tokens_per_s_per_gpu, "source_commit": "",
                     "source_repo": "", "source_path": str(path), "line": line})
    runs = pd.DataFrame(rows)
    if runs.empty:
        raise DatasetError(f"{path}: no run of GPU {gpu_name}",
                           hint=f"add rows whose gpu is {gpu_name}, or pass the GPU of your runs "
                                "with --gpu.")
    if runs["model"].nunique() < 2:
        raise DatasetError(f"{path}: the runs of {gpu_name} have one model ({runs['model'][0]}): "
                           "the cross-validation leaves one model size out",
                           hint="add runs of at least one more model size.")
    runs.attrs["path"] = str(path)
    return runs


def calibrate_from_runs(request: CalibrateRunsRequest) -> CalibrateRunsResult:
    """Refit the GPU's calibrated parameters on the user's runs, cross-validate, write the
    profile."""
    runs = load_user_runs(request.runs_path, request.gpu)
    gpu = str(runs["gpu"].iloc[0])
    calib = calibrate_gpu(runs, gpu)
    detail = calibration_detail(calib, dataset_record(request.runs_path, "user runs", len(runs)))
    detail["source"] = f"user runs: {request.runs_path} ({len(runs)} rows)"
    detail["generated_by"] = (f"shardmeter fit calibrate --runs {request.runs_path} --gpu {gpu} "
                              "(perfmodel.api.user_runs; perfmodel.profiles.calibrate)")
    profile: HardwareProfile = calibrated_profile(
        gpu, calib.params, name=request.name or Path(request.output_path).stem, detail=detail,
        nested_cv_mape_pct=round(calib.mape_pct(), 3))
    save_profile(profile, request.output_path)
    records = [{"line": int(r["line"]), "model": r["model"], "nodes": int(r["nodes"]),
                "seq_len": int(r["seq_len"]), "micro_batch": int(r["micro_batch"]),
                "grad_accum": int(r["accum_steps"]), "ac": r["activation_checkpointing"],
                "measured_tokens_per_s_per_gpu": float(r["tokens_per_s_per_gpu"]),
                "cv_tokens_per_s_per_gpu": float(r["cv_pred"]),
                "fit_tokens_per_s_per_gpu": float(r["fit_pred"]),
                "prior_tokens_per_s_per_gpu": float(r["prior_pred"]),
                "cv_error_pct": 100.0 * (float(r["cv_pred"]) / float(r["tokens_per_s_per_gpu"])
                                         - 1.0)}
               for r in calib.runs.to_dict("records")]
    return CalibrateRunsResult(profile=profile, calibration=calib, records=records)
