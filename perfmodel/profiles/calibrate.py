"""GPU profiles calibrated on published FSDP throughput runs (catalogs/published/).

A calibrated profile has FEW coefficients per GPU (`CalibrationParams`), each named after the
physics it stands for but EFFECTIVE: fitted end to end on tokens/s, each also absorbs whatever
the step model misprices (a value at a bound is flagged, `perfmodel.profiles.bounds`):

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

Claim: the cross-validated predictions of a held-out model size do not depend on that size's
published throughput.
Why: every fold's fit is cold-started from `START`, exactly as the all-runs fit is, with the same
evaluation budget (`MAX_NFEV`), so a fold sees nothing but its training runs; a fold started from
the all-runs fit (as before issue 22) would carry the held-out size's runs into its start.
Checked by: tests/test_leakage.py (perturbing a held-out size's published tokens/s leaves its
cross-validated predictions bit-identical while the all-runs fit moves).
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
from perfmodel.profiles.bounds import BoundFlag, bound_flags, flag_records
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
    """The fitted coefficients of one GPU. All are EFFECTIVE: fitted end to end on published
    tokens/s/GPU, each absorbs the step model's error in the runs it moves, beside the physics
    it is named after."""

    matmul_efficiency: float
    """Effective e_max: fraction of dense bf16 peak that large GEMMs reach (also absorbs the
    per-kernel overheads the features do not price)."""
    gemm_half_size: float
    """Effective g_half: GEMM size (tokens per micro-batch x width, elements) at half of
    e_max."""
    attention_efficiency: float
    """Effective fraction of dense bf16 peak that (causal) flash attention reaches."""
    recompute_factor: float
    """Effective recompute time / forward time of what is recomputed (activation checkpointing):
    it absorbs any difference between the recompute the time model charges and the one the runs
    did, so a value well below 1 is not a recompute faster than the forward pass."""
    overlap_slowdown: float
    """Effective compute slowdown while a collective runs on the island (>= 1): it absorbs the
    communication model's multi-node error as well as the SMs NCCL takes."""

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
"""Starting point of every fit: the all-runs fit and each cross-validation fold (cold starts)."""
MAX_NFEV = 200
"""Residual evaluations allowed to every fit, the all-runs fit and each fold alike (scipy's 'trf'
does not count the finite-difference Jacobian's). The fits end on scipy's tolerances (ftol, xtol,
gtol 1e-8) far inside it: from START every all-runs fit and cold fold of the shipped data stops
within a tenth of it (each fit's count is recorded in the profile, `fits`, and docs/VALIDATION.md
prints their range), so the budget only guards against a fit that wanders; a fit that stops on
it is logged and recorded as not converged, never passed off as a fit. The cap of 60 before
issue 22 was set for folds warm-started from the all-runs fit."""


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
                       nested_cv_mape_pct: float | None = None) -> Any:
    """A HardwareProfile of `gpu_name` with the calibrated compute model and catalog link priors
    (`nested_cv_mape_pct`: the cross-validated tokens/s/GPU MAPE, on every phase)."""

    gpu = get_gpu(gpu_name)
    base = make_prior_profile(gpu.name)
    compute = {phase: PhaseCoefficients(coefficients=c, provenance=provenance,
                                        nested_cv_mape_pct=nested_cv_mape_pct,
                                        cv_scheme=CV_SCHEME if nested_cv_mape_pct is not None
                                        else "")
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
               max_nfev: int = MAX_NFEV) -> CalibrationParams:
    """Least-squares fit of the parameters to log(predicted / published tokens/s/GPU)."""
    return fit_params_reported(runs, gpu_name, start=start, max_nfev=max_nfev)[0]


def fit_params_reported(runs: pd.DataFrame, gpu_name: str, *, start: CalibrationParams = START,
                        max_nfev: int = MAX_NFEV) -> tuple[CalibrationParams, dict[str, Any]]:
    """`fit_params` and how the fit ended (JSON values): residual evaluations `nfev`, scipy's
    `status` and `converged` (False when it stopped on the `max_nfev` budget)."""

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
    report = {"nfev": int(result.nfev), "status": int(result.status),
              "converged": bool(result.status > 0)}
    return _from_vector(result.x, names, start), report


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
    folds: Mapping[str, CalibrationParams]
    """Held-out model size -> the parameters fitted without its runs."""
    fits: Mapping[str, Any]
    """How every fit ended (`fit_params_reported`): {'all': report, 'folds': {size: report}};
    empty for fits cached before the reports existed."""

    def at_bound(self) -> list[BoundFlag]:
        """The all-runs parameters at (or within 1 % of) a bound of PARAM_BOUNDS."""
        return params_at_bound(self.params)

    def folds_at_bound(self) -> dict[str, list[str]]:
        """Parameter -> the held-out sizes whose fold fit ended at one of its bounds."""
        out: dict[str, list[str]] = {}
        for size, params in self.folds.items():
            for flag in params_at_bound(params):
                out.setdefault(flag.parameter, []).append(size)
        return out

    def not_converged(self) -> list[str]:
        """Fits that stopped on the evaluation budget ('all' or a held-out size)."""
        reports = {"all": self.fits.get("all", {}), **dict(self.fits.get("folds", {}))}
        return [name for name, r in reports.items() if r and not r.get("converged", True)]

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


def fit_calibration(rows: pd.DataFrame, gpu_name: str, *,
                    max_nfev: int = MAX_NFEV) -> dict[str, Any]:
    """The slow part of a calibration, as JSON values: the parameters fitted on all of a GPU's
    runs (`params`) and, per model size, on the runs of the other sizes (`folds`), every fit
    cold-started from START with the same budget (so a fold sees nothing of its held-out size),
    and how each fit ended (`fits`)."""
    params, report = fit_params_reported(rows, gpu_name, max_nfev=max_nfev)
    folds, reports = {}, {}
    for train, test in LeaveOneGroupOut().split(rows, groups=rows["model"]):
        held_out = str(rows["model"].iloc[test[0]])
        fold, reports[held_out] = fit_params_reported(rows.iloc[train], gpu_name,
                                                      max_nfev=max_nfev)
        folds[held_out] = fold.as_dict()
    return {"params": params.as_dict(), "folds": folds,
            "fits": {"all": report, "folds": reports}}


def calibrate_gpu(runs: pd.DataFrame, gpu_name: str, *, cache: ResultCache | None = None,
                  max_nfev: int = MAX_NFEV) -> GpuCalibration:
    """Fit on all of a GPU's runs, cross-validate leaving one model size out at a time (the fits
    from `cache` when its key — the runs file, this code, the GPU, the budget — holds)."""
    rows = runs[runs["gpu"] == gpu_name].reset_index(drop=True)
    if rows.empty:
        raise DatasetError(f"no published runs for {gpu_name}",
                           hint="calibrate a GPU that has rows in catalogs/published/.")
    if cache is None:
        fits = fit_calibration(rows, gpu_name, max_nfev=max_nfev)
    else:
        source = runs.attrs.get("path", LLM_FOUNDRY_CSV)
        key = cache_key([source], [__name__], {"gpu": gpu_name, "max_nfev": max_nfev})
        fits = cache.get(f"calibration-{gpu_name}", key,
                         lambda: fit_calibration(rows, gpu_name, max_nfev=max_nfev))
    params = CalibrationParams(**fits["params"])
    folds = {size: CalibrationParams(**p) for size, p in fits["folds"].items()}
    cv = np.empty(len(rows))
    for _, test in LeaveOneGroupOut().split(rows, groups=rows["model"]):
        fold = folds[str(rows["model"].iloc[test[0]])]
        cv[test] = predict_tokens_per_s_per_gpu(calibrated_profile(gpu_name, fold), rows.iloc[test])
    out = rows.assign(
        cv_pred=cv,
        fit_pred=predict_tokens_per_s_per_gpu(calibrated_profile(gpu_name, params), rows),
        prior_pred=predict_tokens_per_s_per_gpu(make_prior_profile(gpu_name), rows))
    calib = GpuCalibration(gpu=gpu_name, params=params, runs=out, folds=folds,
                           fits=fits.get("fits", {}))
    logger.info("%s: CV MAPE %.2f %% (prior %.2f %%), %s", gpu_name, calib.mape_pct(),
                calib.mape_pct("prior_pred"), params)
    for flag in calib.at_bound():
        logger.warning("%s: %s = %.6g is at its %s bound %g (effective, not physical)", gpu_name,
                       flag.parameter, flag.value, flag.side, flag.bound)
    if calib.not_converged():
        logger.warning("%s: fits that stopped on the budget of %d evaluations: %s", gpu_name,
                       max_nfev, ", ".join(calib.not_converged()))
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
                  "CV leaves one model size out, every fold cold-started from the all-runs fit's "
                  "start with the same budget.",
        "effective": "every parameter is effective: fitted end to end on tokens/s, it absorbs "
                     "the step model's error beside the physics it is named after",
        "fit_budget": {"start": START.as_dict(), "max_nfev": MAX_NFEV,
                       "cv_start": "cold: each fold starts from `start`, as the all-runs fit"},
        "fits": json_fits(calib.fits),
        "at_bound": flag_records(calib.at_bound()),
        "folds_at_bound": calib.folds_at_bound(),
    }


def json_fits(fits: Mapping[str, Any]) -> dict[str, Any]:
    """The fit reports as plain YAML values (evaluations and convergence per fit)."""
    return {"all": dict(fits.get("all", {})),
            "folds": {k: dict(v) for k, v in dict(fits.get("folds", {})).items()}}


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
                              nested_cv_mape_pct=round(calib.mape_pct(), 3))


def params_at_bound(params: CalibrationParams, fit: str = "calibration") -> list[BoundFlag]:
    """Parameters at (or within 1 % of) a bound of PARAM_BOUNDS."""
    return bound_flags(fit, params.as_dict(), PARAM_BOUNDS)


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
        "at_bound": flag_records(params_at_bound(params, f"calibration of {reference.name}")),
        "datasheet": datasheet["datasheet"],
        "assumptions": assumptions,
        "method": "PRIOR, not calibrated: no published runs for this GPU. Efficiencies, recompute "
                  "and contention of the calibrated reference (effective parameters there; a "
                  "value at a bound is flagged in at_bound); GEMM half-saturation size scaled by "
                  "the dense bf16 peak ratio; this GPU's own peak and HBM bandwidth (datasheet); "
                  "elementwise and optimizer work at HBM bandwidth x hbm_efficiency (assumptions).",
    }
    return calibrated_profile(target.name, params, provenance="prior", detail=detail)
