"""GPU profiles calibrated on published FSDP throughput runs (catalogs/published/).

A calibrated profile has FEW physically meaningful coefficients per GPU (`CalibrationParams`):

* matmul efficiency that saturates with GEMM size g = tokens per micro-batch x width:
  e(g) = e_max · g / (g + g_half). A GEMM then takes FLOPs/(peak·e_max) plus a fixed
  2·weights·g_half/(width·peak·e_max) per pass: the `tok_block_matmul` / `tok_lm_head` and
  `gemm_fixed` features of `perfmodel.costs.features`;
* attention (flash) FLOPs at their own efficiency: causal flash attention computes half of the
  4·S·a·d score/value FLOPs per token in forward and 2.5 times that in backward (it recomputes the
  scores), at peak·`attention_efficiency`;
* memory-bound elementwise work (norms, residuals, activation, softmax/loss, optimizer) at the
  datasheet HBM bandwidth times the prior's HBM efficiency (not fitted: too small to identify);
* recompute (activation checkpointing) at its own cost: `recompute_factor` x the forward time
  of what is recomputed (`HardwareProfile.recompute_factor`, read by `perfmodel.sim.fsdp`);
* contention: compute slows by `overlap_slowdown` while a collective runs
  (`HardwareProfile.overlap_slowdown`, simulated by `perfmodel.sim.graph` / the fast path).

Every prediction of tokens/s/GPU goes through the project's FSDP step simulator with the
published run's model, island (nodes x 8 GPUs, catalog links) and recipe, so multi-node scaling
losses come from the communication model and the contention factor, not from a formula here.
The parameters are fitted per GPU by non-linear least squares on log(predicted/published) and
scored by leave-one-model-size-out cross-validation (scikit-learn's LeaveOneGroupOut).
A measured (CPU) profile's contention is fitted on its own FSDP2 steps instead
(`perfmodel.profiles.overlap`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from scipy.optimize import least_squares
from sklearn.model_selection import LeaveOneGroupOut

from perfmodel.costs.compute import (
    CAUSAL_FRACTION,
    FLASH_BACKWARD_FACTOR,
    PriorAssumptions,
    attention_seconds_per_feature,
    prior_compute_coefficients,
)
from perfmodel.costs.datasets import mape_pct
from perfmodel.profiles.cache import ResultCache, cache_key
from perfmodel.profiles.profile import (
    HardwareProfile,
    PhaseCoefficients,
    _field_docs,
    make_prior_profile,
)
from perfmodel.sim.fastpath import concat_fast_costs, fast_step, model_fast_costs
from perfmodel.spec.arch import ModelSpec
from perfmodel.spec.catalog import get_gpu, get_link
from perfmodel.spec.errors import DatasetError
from perfmodel.spec.hardware import GpuSpec, IslandSpec
from perfmodel.spec.paths import catalog_dir
from perfmodel.spec.recipe import DEFAULT_RECIPE, TrainingRecipe, canonical_ac

logger = logging.getLogger(__name__)

PUBLISHED_DIR = catalog_dir() / "published"
LLM_FOUNDRY_CSV = PUBLISHED_DIR / "llm-foundry.csv"
"""The calibration data (python -m scripts.import_published_runs writes it)."""
VALIDATION_CSV = PUBLISHED_DIR / "validation-torchtitan.csv"
"""Published runs for VALIDATION ONLY (torchtitan FSDP2, Llama on A100): never fitted to."""
CV_SCHEME = "leave-one-model-size-out (sklearn LeaveOneGroupOut over published runs)"
PRIOR_REFERENCE = {"H200-SXM-141GB": "H100-SXM5-80GB", "B200": "H100-SXM5-80GB",
                   "AMD-MI300X": "H100-SXM5-80GB", "L40S": "A100-SXM4-80GB",
                   "A100-PCIe-80GB": "A100-SXM4-80GB"}
"""GPUs without published runs -> the calibrated GPU whose coefficients their prior scales:
Hopper and the newer parts from the H100, Ampere/Ada PCIe cards from the A100 80GB."""


# ---- the published runs ----------------------------------------------------------------------

class PublishedRun(BaseModel):
    """One row of catalogs/published/llm-foundry.csv (validated on load)."""

    model_config = ConfigDict(extra="ignore", strict=False)

    model: str = Field(min_length=1)
    hidden_size: int = Field(gt=0)
    num_layers: int = Field(gt=0)
    num_heads: int = Field(gt=0)
    num_kv_heads: int = Field(gt=0)
    intermediate_size: int = Field(gt=0)
    vocab_size: int = Field(gt=0)
    gpu: str = Field(min_length=1)
    nodes: int = Field(gt=0)
    gpus_per_node: int = Field(gt=0)
    seq_len: int = Field(gt=0)
    micro_batch: int = Field(gt=0)
    accum_steps: int = Field(gt=0)
    activation_checkpointing: str = Field(min_length=1)
    """A `CheckpointPolicy` name (checked by `load_published_runs`)."""
    pure_bf16: bool
    interconnect: str
    tokens_per_s_per_gpu: float = Field(gt=0, allow_inf_nan=False)
    mfu_pct: float = Field(gt=0, le=100, allow_inf_nan=False)
    source_commit: str = Field(pattern="^[0-9a-f]{40}$")


def load_published_runs(path: str | Path = LLM_FOUNDRY_CSV) -> pd.DataFrame:
    """The published runs, every row validated (DatasetError naming line and field)."""

    try:
        frame = pd.read_csv(path)
    except (FileNotFoundError, pd.errors.ParserError, pd.errors.EmptyDataError) as err:
        raise DatasetError(f"{path}: cannot read the published runs ({err})",
                           hint="regenerate it with `python -m scripts.import_published_runs`."
                           ) from err
    for i, record in enumerate(frame.to_dict("records")):
        try:
            PublishedRun.model_validate(record)
            get_gpu(str(record["gpu"]))
            canonical_ac(record["activation_checkpointing"],
                         where=f"{path}, line {i + 2}: activation_checkpointing")
        except ValidationError as err:
            first = err.errors()[0]
            raise DatasetError(f"{path}, line {i + 2}: field {first['loc'][0]!r}: {first['msg']}",
                               hint="regenerate it with "
                                    "`python -m scripts.import_published_runs`.") from err
    frame.attrs["path"] = str(path)
    return frame


def run_model(row: Mapping[str, Any]) -> ModelSpec:
    """The model of a published run: layout 'mpt' (llm-foundry: plain GELU MLP, biases,
    LayerNorm, tied LM head; the default) or 'llama' (SwiGLU, RMSNorm, GQA, untied)."""
    if str(row.get("layout", "mpt")) == "llama":
        return ModelSpec(name=str(row["model"]), family="llama",
                         hidden_size=int(row["hidden_size"]), num_layers=int(row["num_layers"]),
                         num_heads=int(row["num_heads"]), num_kv_heads=int(row["num_kv_heads"]),
                         intermediate_size=int(row["intermediate_size"]),
                         vocab_size=int(row["vocab_size"]))
    return ModelSpec(name=str(row["model"]), family="mpt", hidden_size=int(row["hidden_size"]),
                     num_layers=int(row["num_layers"]), num_heads=int(row["num_heads"]),
                     num_kv_heads=int(row["num_kv_heads"]),
                     intermediate_size=int(row["intermediate_size"]),
                     vocab_size=int(row["vocab_size"]), tie_word_embeddings=True, gated_mlp=False,
                     qkv_bias=True, out_bias=True, mlp_bias=True, norm="layer")


def run_recipe(row: Mapping[str, Any]) -> TrainingRecipe:
    """llm-foundry's FSDP setup: FULL_SHARD with bf16 parameters; 'DEFAULT' mixed precision
    reduces in fp32, 'PURE' keeps everything in bf16; Composer syncs gradients every micro-batch
    under FSDP (reduce-scatter accumulation); flash attention; full or no checkpointing."""
    pure = bool(row["pure_bf16"])
    return DEFAULT_RECIPE.with_overrides(
        name="llm-foundry", reduce_dtype="bf16" if pure else "fp32",
        master_dtype="bf16" if pure else "fp32", accum_mode="reduce_scatter",
        ac=str(row["activation_checkpointing"]), attention="sdpa")


def run_island(row: Mapping[str, Any]) -> IslandSpec:
    """Nodes x GPUs of the run with the catalog links; a stated node-to-node bandwidth
    ('1600 Gbps') sets the NIC count at the catalog link's line rate."""

    gpu = get_gpu(str(row["gpu"]))
    nics = gpu.nics_per_node
    stated = _gbps(str(row.get("interconnect", "")))
    if stated:
        line_gb_s = get_link(gpu.inter_node_link).line_rate_bytes_per_s * 8 / 1e9
        nics = max(1, round(stated / line_gb_s))
    return IslandSpec(gpu=gpu, num_nodes=int(row["nodes"]), gpus_per_node=int(row["gpus_per_node"]),
                      intra_link=gpu.intra_node_link, inter_link=gpu.inter_node_link,
                      nics_per_node=nics)


def _gbps(text: str) -> float:
    for word, nxt in zip(text.split(), text.split()[1:], strict=False):
        if nxt.lower() == "gbps":
            try:
                return float(word)
            except ValueError:
                return 0.0
    return 0.0


# ---- the physical coefficients --------------------------------------------------------------

@dataclass(frozen=True, kw_only=True, slots=True)
class CalibrationParams:
    """The fitted coefficients of one GPU."""

    matmul_efficiency: float
    """e_max: fraction of dense bf16 peak that large GEMMs reach."""
    gemm_half_size: float
    """g_half: GEMM size (tokens per micro-batch x width, elements) at half of e_max."""
    attention_efficiency: float
    """Fraction of dense bf16 peak that (causal) flash attention reaches."""
    recompute_factor: float
    """Recompute time / forward time of what is recomputed (activation checkpointing)."""
    overlap_slowdown: float
    """Compute slowdown while a collective runs on the island (>= 1)."""

    def __post_init__(self) -> None:
        for f in fields(self):
            low, high = PARAM_BOUNDS[f.name]
            value = getattr(self, f.name)
            if not (math.isfinite(value) and low <= value <= high):
                raise ValueError(f"{f.name} must be within [{low}, {high}], got {value}")

    def as_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items()}


PARAM_BOUNDS: dict[str, tuple[float, float]] = {
    "matmul_efficiency": (0.05, 1.0), "gemm_half_size": (1e3, 1e10),
    "attention_efficiency": (0.02, 1.0), "recompute_factor": (0.05, 3.0),
    "overlap_slowdown": (1.0, 1.5)}
"""Physical ranges: efficiencies at most the datasheet peak; the contention slowdown between 1
and 1.5, because NCCL's ring kernels occupy one SM per channel (up to 32 channels: about 30 % of
an A100's 108 SMs, a quarter of an H100's 132) plus a share of HBM bandwidth, so compute keeps at
least about two thirds of the GPU while a collective runs."""
_LOG_PARAMS = ("gemm_half_size",)
"""Parameters fitted on a log scale (they span decades)."""
START = CalibrationParams(matmul_efficiency=0.6, gemm_half_size=1e6, attention_efficiency=0.35,
                          recompute_factor=0.8, overlap_slowdown=1.1)
"""Starting point of every fit."""


def calibrated_coefficients(gpu: GpuSpec, params: CalibrationParams,
                            assume: PriorAssumptions | None = None) -> dict[str, dict[str, float]]:
    """Profile coefficients (perfmodel.costs.features) of a GPU with the physical parameters; the
    elementwise, optimizer and kernel-gap coefficients are the prior's (datasheet HBM)."""
    coefs = prior_compute_coefficients(gpu, assume)
    mm_s = 1.0 / (gpu.bf16_flops_per_s * params.matmul_efficiency)
    for phase, mult in (("forward", 1.0), ("backward", 2.0)):
        coefs[phase]["tok_block_matmul"] = 2.0 * mult * mm_s
        coefs[phase]["tok_lm_head"] = 2.0 * mult * mm_s
        coefs[phase]["gemm_fixed"] = 2.0 * mult * params.gemm_half_size * mm_s
        coefs[phase]["tok_attn"] = attention_seconds_per_feature(
            phase, gpu.bf16_flops_per_s * params.attention_efficiency)
    return coefs


def calibrated_profile(gpu_name: str, params: CalibrationParams, *, provenance: str = "calibrated",
                       name: str | None = None, detail: Mapping[str, Any] | None = None,
                       cv_mape_pct: float | None = None) -> Any:
    """A HardwareProfile of `gpu_name` with the calibrated compute model and catalog link priors."""

    gpu = get_gpu(gpu_name)
    base = make_prior_profile(gpu.name)
    compute = {phase: PhaseCoefficients(coefficients=c, provenance=provenance,
                                        cv_mape_pct=cv_mape_pct,
                                        cv_scheme=CV_SCHEME if cv_mape_pct is not None else "")
               for phase, c in calibrated_coefficients(gpu, params).items()}
    suffix = "calibrated" if provenance == "calibrated" else "prior"
    return HardwareProfile(name=name or f"{gpu.name}-{suffix}", hardware=gpu.name,
                           backend=base.backend, provenance=provenance,
                           provenance_detail=dict(detail or {}), compute=compute, comm=base.comm,
                           overlap_slowdown=params.overlap_slowdown,
                           recompute_factor=params.recompute_factor)


def scaled_params(target: GpuSpec, reference: GpuSpec,
                  params: CalibrationParams) -> CalibrationParams:
    """Prior parameters of a GPU without published runs from a calibrated one: efficiencies,
    recompute and contention carried over; the GEMM size that saturates the GPU scaled by the
    dense-peak ratio (a GPU with twice the FLOP/s needs twice the work per GEMM to fill)."""
    ratio = target.bf16_flops_per_s / reference.bf16_flops_per_s
    low, high = PARAM_BOUNDS["gemm_half_size"]
    return replace(params, gemm_half_size=min(max(params.gemm_half_size * ratio, low), high))


# ---- predictions through the step simulator -------------------------------------------------

def predict_tokens_per_s_per_gpu(profile: Any, runs: pd.DataFrame) -> np.ndarray:
    """Tokens/s/GPU of every run: its FSDP step of k micro-steps through the step graph's fast
    path (`perfmodel.sim.fastpath`, equal to the graph simulator), runs of one model and recipe
    evaluated in one vectorised pass."""

    records = cast(list[dict[str, Any]], runs.to_dict("records"))  # column labels are str
    out = np.empty(len(records))
    groups: dict[tuple[Any, ...], list[int]] = {}
    for i, row in enumerate(records):
        groups.setdefault((run_model(row), run_recipe(row)), []).append(i)
    for (model, recipe), idx in groups.items():
        parts = [model_fast_costs(model, profile, run_island(records[i]),
                                  seq_len=int(records[i]["seq_len"]),
                                  micro_batches=np.array([int(records[i]["micro_batch"])]),
                                  recipe=recipe) for i in idx]
        step = fast_step(concat_fast_costs(parts))
        k = np.array([int(records[i]["accum_steps"]) for i in idx])
        tokens = np.array([int(records[i]["micro_batch"]) * int(records[i]["seq_len"])
                           for i in idx])
        out[idx] = tokens * k / step.step_time_s(k)
    return out


def _to_vector(params: CalibrationParams, names: Sequence[str]) -> np.ndarray:
    return np.array([math.log10(getattr(params, n)) if n in _LOG_PARAMS else getattr(params, n)
                     for n in names])


def _from_vector(x: np.ndarray, names: Sequence[str], base: CalibrationParams) -> CalibrationParams:
    values = {n: float(10.0 ** v if n in _LOG_PARAMS else v) for n, v in zip(names, x, strict=True)}
    for n, v in values.items():  # the optimizer may step onto a bound by rounding
        low, high = PARAM_BOUNDS[n]
        values[n] = min(max(v, low), high)
    return replace(base, **values)


def free_parameters(runs: pd.DataFrame) -> tuple[str, ...]:
    """Parameters the runs can identify: recompute needs checkpointed runs, contention needs
    runs whose collectives overlap compute (more than one GPU)."""
    names = ["matmul_efficiency", "gemm_half_size", "attention_efficiency"]
    if (runs["activation_checkpointing"] != "none").any():
        names.append("recompute_factor")
    if ((runs["nodes"] * runs["gpus_per_node"]) > 1).any():
        names.append("overlap_slowdown")
    return tuple(names)


def fit_params(runs: pd.DataFrame, gpu_name: str, *, start: CalibrationParams = START,
               max_nfev: int = 60) -> CalibrationParams:
    """Least-squares fit of the parameters to log(predicted / published tokens/s/GPU)."""

    names = free_parameters(runs)
    measured = runs["tokens_per_s_per_gpu"].to_numpy(dtype=float)
    lows = [math.log10(PARAM_BOUNDS[n][0]) if n in _LOG_PARAMS else PARAM_BOUNDS[n][0]
            for n in names]
    highs = [math.log10(PARAM_BOUNDS[n][1]) if n in _LOG_PARAMS else PARAM_BOUNDS[n][1]
             for n in names]

    def residuals(x: np.ndarray) -> np.ndarray:
        profile = calibrated_profile(gpu_name, _from_vector(x, names, start))
        result: np.ndarray = np.log(predict_tokens_per_s_per_gpu(profile, runs) / measured)
        return result

    x0 = np.clip(_to_vector(start, names), np.array(lows) + 1e-9, np.array(highs) - 1e-9)
    result = least_squares(residuals, x0, bounds=(lows, highs), diff_step=1e-3, max_nfev=max_nfev,
                           x_scale="jac")
    return _from_vector(result.x, names, start)


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuCalibration:
    """The calibration of one GPU: fitted parameters and cross-validated predictions."""

    gpu: str
    """Catalog GPU name."""
    params: CalibrationParams
    """Parameters fitted on all of the GPU's runs."""
    runs: pd.DataFrame
    """The GPU's runs with `cv_pred` (leave-one-model-size-out), `fit_pred` (all runs) and
    `prior_pred` (the uncalibrated prior profile) tokens/s/GPU columns."""

    def mape_pct(self, column: str = "cv_pred", ac: str | None = None) -> float:
        rows = self.runs if ac is None else self.runs[self.runs["activation_checkpointing"] == ac]
        return mape_pct(rows["tokens_per_s_per_gpu"].to_numpy(), rows[column].to_numpy())

    def summary(self) -> dict[str, Any]:
        """CV and prior MAPE per checkpointing mode and overall (for the profile's YAML)."""
        modes = sorted(self.runs["activation_checkpointing"].unique())
        return {"rows": len(self.runs), "cv_mape_pct": round(self.mape_pct(), 3),
                "fit_mape_pct": round(self.mape_pct("fit_pred"), 3),
                "prior_mape_pct": round(self.mape_pct("prior_pred"), 3),
                "cv_mape_pct_by_ac": {m: round(self.mape_pct(ac=m), 3) for m in modes},
                "prior_mape_pct_by_ac": {m: round(self.mape_pct("prior_pred", m), 3)
                                         for m in modes}}


def fit_calibration(rows: pd.DataFrame, gpu_name: str) -> dict[str, Any]:
    """The slow part of a calibration, as JSON values: the parameters fitted on all of a GPU's
    runs (`params`) and, per model size, on the runs of the other sizes (`folds`)."""
    params = fit_params(rows, gpu_name)
    folds = {}
    for train, test in LeaveOneGroupOut().split(rows, groups=rows["model"]):
        held_out = str(rows["model"].iloc[test[0]])
        folds[held_out] = fit_params(rows.iloc[train], gpu_name, start=params).as_dict()
    return {"params": params.as_dict(), "folds": folds}


def calibrate_gpu(runs: pd.DataFrame, gpu_name: str, *,
                  cache: ResultCache | None = None) -> GpuCalibration:
    """Fit on all of a GPU's runs, cross-validate leaving one model size out at a time (the fits
    from `cache` when its key — the runs file, this code, the GPU — holds)."""
    rows = runs[runs["gpu"] == gpu_name].reset_index(drop=True)
    if rows.empty:
        raise DatasetError(f"no published runs for {gpu_name}",
                           hint="calibrate a GPU that has rows in catalogs/published/.")
    if cache is None:
        fits = fit_calibration(rows, gpu_name)
    else:
        source = runs.attrs.get("path", LLM_FOUNDRY_CSV)
        key = cache_key([source], [__name__], {"gpu": gpu_name})
        fits = cache.get(f"calibration-{gpu_name}", key, lambda: fit_calibration(rows, gpu_name))
    params = CalibrationParams(**fits["params"])
    cv = np.empty(len(rows))
    for _, test in LeaveOneGroupOut().split(rows, groups=rows["model"]):
        fold = CalibrationParams(**fits["folds"][str(rows["model"].iloc[test[0]])])
        cv[test] = predict_tokens_per_s_per_gpu(calibrated_profile(gpu_name, fold), rows.iloc[test])
    out = rows.assign(
        cv_pred=cv,
        fit_pred=predict_tokens_per_s_per_gpu(calibrated_profile(gpu_name, params), rows),
        prior_pred=predict_tokens_per_s_per_gpu(make_prior_profile(gpu_name), rows))
    calib = GpuCalibration(gpu=gpu_name, params=params, runs=out)
    logger.info("%s: CV MAPE %.2f %% (prior %.2f %%), %s", gpu_name, calib.mape_pct(),
                calib.mape_pct("prior_pred"), params)
    return calib


# ---- profiles on disk ------------------------------------------------------------------------

def calibration_detail(calib: GpuCalibration, dataset: Mapping[str, Any]) -> dict[str, Any]:
    """provenance_detail of a calibrated profile: data, parameters, method and CV errors."""
    first = calib.runs.iloc[0]
    tables = sorted(set(calib.runs.get("source_table", pd.Series([""])).astype(str)))
    return {
        "kind": "calibrated",
        "generated_by": "python -m scripts.make_calibrated_profiles (perfmodel.profiles.calibrate)",
        "dataset": dict(dataset),
        "source": {"repo": str(first.get("source_repo", "")),
                   "path": str(first.get("source_path", "")), "commit": str(first["source_commit"]),
                   "tables": tables},
        "params": calib.params.as_dict(),
        "param_notes": _param_notes(),
        "fixed": {"flash_backward_factor": FLASH_BACKWARD_FACTOR,
                  "causal_fraction": CAUSAL_FRACTION,
                  "elementwise_optimizer_kernels": "prior (PriorAssumptions: HBM efficiency, bytes "
                                                   "per element, kernel gaps)"},
        "recipe": "per run (perfmodel.profiles.calibrate.run_recipe): "
                  + " ".join((run_recipe.__doc__ or "").split()),
        "cv_scheme": CV_SCHEME,
        "errors": calib.summary(),
        "method": "tokens/s/GPU of each published run simulated by the FSDP step graph with this "
                  "profile; least squares on log(predicted/published); "
                  "CV leaves one model size out.",
    }


def _param_notes() -> dict[str, str]:

    return _field_docs(CalibrationParams)


def params_of(profile: Any) -> CalibrationParams:
    """The CalibrationParams stored in a calibrated (or scaled prior) profile's YAML."""
    stored = dict(profile.provenance_detail.get("params") or {})
    if set(stored) != {f.name for f in fields(CalibrationParams)}:
        raise ValueError(f"profile {profile.name!r} carries no calibration parameters")
    return CalibrationParams(**stored)


def profile_from_calibration(calib: GpuCalibration, dataset: Mapping[str, Any]) -> Any:
    """The calibrated HardwareProfile of a GPU (CV MAPE on every phase)."""
    return calibrated_profile(calib.gpu, calib.params, detail=calibration_detail(calib, dataset),
                              cv_mape_pct=round(calib.mape_pct(), 3))


def scaled_prior_profile(target_gpu: str, reference: Any) -> Any:
    """Prior profile of a GPU without published runs, scaled from a calibrated profile."""

    target, ref_gpu = get_gpu(target_gpu), get_gpu(reference.hardware)
    params = scaled_params(target, ref_gpu, params_of(reference))
    datasheet = dict(make_prior_profile(target.name).provenance_detail)
    assumptions = {k: v for k, v in datasheet["assumptions"].items() if k != "matmul_efficiency"}
    detail = {
        "kind": "prior",
        "generated_by": "python -m scripts.make_prior_profiles "
                        "(perfmodel.profiles.calibrate.scaled_prior_profile)",
        "scaled_from": {"profile": reference.name, "provenance": reference.provenance,
                        "params": params_of(reference).as_dict(),
                        "bf16_dense_flops_per_s": ref_gpu.bf16_flops_per_s,
                        "hbm_bytes_per_s": ref_gpu.hbm_bytes_per_s},
        "params": params.as_dict(),
        "param_notes": _param_notes(),
        "datasheet": datasheet["datasheet"],
        "assumptions": assumptions,
        "method": "PRIOR, not calibrated: no published runs for this GPU. Efficiencies, recompute "
                  "and contention of the calibrated reference; GEMM half-saturation size scaled by "
                  "the dense bf16 peak ratio; this GPU's own peak and HBM bandwidth (datasheet); "
                  "elementwise and optimizer work at HBM bandwidth x hbm_efficiency (assumptions).",
    }
    return calibrated_profile(target.name, params, provenance="prior", detail=detail)
