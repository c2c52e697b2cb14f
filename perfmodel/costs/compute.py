"""Compute regression (paper §III-B): T_phase = Σ_f c_f · f over static features, c_f ≥ 0.

One `PhaseRegressor` per phase (forward, backward, optimizer) and hardware. It minimises the
squared RELATIVE error (rows scaled by 1/y, non-negative least squares) because the accuracy metric
is MAPE, and selects its features by cross-validation: leave-one-architecture-out when the rows
are grouped by model name (the paper's "unseen models"), k-fold otherwise. Among all candidate
subsets (exhaustive when few, greedy forward otherwise) the smallest whose CV MAPE is within
one standard error (over the folds) of the best wins. All MAPE figures are in percent.
PhaseRegressor is a scikit-learn estimator; folds come from sklearn.model_selection.

The CV MAPE that chose the features (`PhaseRegressor.cv_mape_`) is a SELECTION score: the
minimum over the candidate subsets, so optimistic. The out-of-sample figure is the nested one,
`leave_one_model_out`: every held-out model predicted by a fit, feature selection included, that
never saw its rows.
Claim: a held-out model's out-of-fold predictions do not depend on its own measured times.
Why: each fold's regressor (column scaling, feature search and NNLS) is fitted on the other
models' rows only, and repeats of one configuration are collapsed before the split, so no repeat
of a held-out configuration sits in a training fold.
Checked by: tests/test_leakage.py (perturbing one model's times leaves its predictions
bit-identical while the other models' move).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple, cast

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.model_selection import KFold, LeaveOneGroupOut, cross_val_predict

from perfmodel.costs.datasets import (
    configurations,
    mape_pct,
    numeric_column,
    read_dataset_csv,
    reject_first,
)
from perfmodel.costs.features import (
    PHASES,
    REGRESSION_CANDIDATES,
    SHAPE_COLUMNS,
    UNITS,
    candidate_columns,
    dataset_features,
    spec_from_row,
)
from perfmodel.costs.nnls import relative_design, solve_scaled
from perfmodel.spec.arch import FAMILY_LAYOUT, ModelSpec
from perfmodel.spec.errors import ConfigError, DatasetError
from perfmodel.spec.hardware import GpuSpec

logger = logging.getLogger(__name__)

COMPUTE_COLUMNS = ("model", "hidden_size", "num_hidden_layers", "num_attention_heads",
                   "num_key_value_heads", "intermediate_size", "vocab_size", "seq_len",
                   "micro_batch", "phase", "time_s")
"""Required columns of a compute dataset (extra columns are allowed)."""
COMPUTE_KEY = (*SHAPE_COLUMNS, "seq_len", "micro_batch", "phase", "unit", "num_shards", "device",
               "dtype", "threads")
"""Columns naming one compute configuration (those present are compared): rows equal on them
are repeats of one measurement."""

_INT_COLUMNS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                "intermediate_size", "vocab_size", "seq_len", "micro_batch")


def load_compute_dataset(path: str) -> pd.DataFrame:
    """A compute benchmark dataset (COMPUTE_COLUMNS; optional head_dim, tie_word_embeddings,
    family, num_shards, unit). Every row's architecture is checked."""

    frame = read_dataset_csv(path, COMPUTE_COLUMNS, positive_int=_INT_COLUMNS,
                             positive_float=("time_s",), choices={"phase": PHASES})
    defaults = {"head_dim": "0", "tie_word_embeddings": "false", "family": "llama",
                "num_shards": "1", "unit": "model"}
    for col, default in defaults.items():
        if col not in frame.columns:
            frame[col] = default
        frame[col] = frame[col].replace("", default)
    frame["num_shards"] = numeric_column(frame, "num_shards", path, integer=True)
    head_dim = pd.to_numeric(frame["head_dim"], errors="coerce")
    reject_first(frame, "head_dim", head_dim.isna() | ~np.isfinite(head_dim) | (head_dim < 0)
            | (head_dim != head_dim.round()),
            path, "must be an integer >= 0",
            "leave head_dim empty for hidden_size / num_attention_heads.")
    frame["head_dim"] = head_dim.astype(int)
    tie = frame["tie_word_embeddings"].str.strip().str.lower()
    reject_first(frame, "tie_word_embeddings", ~tie.isin(("true", "false", "1", "0")), path,
            "must be true or false", "write true or false.")
    frame["tie_word_embeddings"] = tie.isin(("true", "1"))
    for col, allowed in (("family", tuple(FAMILY_LAYOUT)), ("unit", UNITS)):
        frame[col] = frame[col].str.strip()
        reject_first(frame, col, ~frame[col].isin(allowed), path,
                     f"must be one of {', '.join(allowed)}",
                f"use one of {', '.join(allowed)}.")
    for idx, row in frame.drop_duplicates(subset=list(SHAPE_COLUMNS)).iterrows():
        try:
            spec_from_row(row)
        except ConfigError as err:
            line = cast(int, idx) + 2  # idx: the 0-based RangeIndex label; the header is line 1
            raise DatasetError(f"{path}, line {line}: {err.message}",
                               hint=err.hint) from err
    frame.attrs["path"] = str(path)
    return frame


# ---- the regressor -------------------------------------------------------------------------

class PhaseRegressor(RegressorMixin, BaseEstimator):  # type: ignore[misc]  # sklearn is untyped
    """Non-negative linear regression minimising relative error, with CV feature selection.

    Selection keeps the smallest feature subset whose CV MAPE is within `_slack` of the best
    (one-standard-error rule over the folds, floored by `tolerance` and `abs_tolerance_pct`).

    A scikit-learn estimator (BaseEstimator: get_params, set_params, clone; RegressorMixin:
    `score` = R²). Fitted attributes: `coef_` (seconds per feature unit, aligned with
    `feature_names`, zero where not selected), `selected_features_`, `cv_mape_` and
    `train_mape_` (percent), `subset_scores_` (selected-size path: features -> CV MAPE),
    `cv_scheme_`.
    """

    def __init__(self, feature_names: Sequence[str] = REGRESSION_CANDIDATES["forward"], *,
                 selection: str = "auto", max_features: int | None = None, se_factor: float = 1.0,
                 tolerance: float = 0.05, abs_tolerance_pct: float = 0.05, n_splits: int = 5,
                 random_state: int = 0) -> None:
        self.feature_names = feature_names  # as given: sklearn's clone checks it round-trips
        self.selection = selection  # auto | exhaustive | forward | none
        self.max_features = max_features
        self.se_factor = se_factor
        self.tolerance = tolerance
        self.abs_tolerance_pct = abs_tolerance_pct
        self.n_splits = n_splits
        self.random_state = random_state

    # -- fitting --------------------------------------------------------------------------
    def fit(self, X: Any, y: np.ndarray, groups: np.ndarray | None = None) -> PhaseRegressor:
        X = self._matrix(X)
        y = np.asarray(y, dtype=float)
        if len(y) != len(X) or len(y) == 0:
            raise ValueError(f"X has {len(X)} rows and y has {len(y)}")
        rel, scale = relative_design(X, y)
        usable = [j for j in range(X.shape[1]) if np.any(X[:, j] != 0)]
        splits, self.cv_scheme_ = self._splits(len(y), groups)
        scores = self._search(rel, usable, splits)
        chosen = self._choose(scores)
        w = solve_scaled(rel[:, list(chosen)])
        coef = np.zeros(X.shape[1])
        coef[list(chosen)] = w / scale[list(chosen)]
        self.coef_ = coef
        names = tuple(self.feature_names)
        self.selected_features_ = tuple(names[j] for j in chosen)
        self.cv_mape_ = scores[chosen].mape_pct
        self.subset_scores_ = {tuple(names[j] for j in s): v.mape_pct
                               for s, v in scores.items()}
        self.train_mape_ = mape_pct(y, X @ coef)
        self.n_features_in_ = X.shape[1]
        return self

    def predict(self, X: Any) -> np.ndarray:
        return self._matrix(X) @ self.coef_

    @property
    def coefficients(self) -> dict[str, float]:
        """Selected feature -> coefficient (seconds per feature unit)."""
        return {n: float(c) for n, c in zip(self.feature_names, self.coef_, strict=True)
                if n in self.selected_features_}

    def _matrix(self, X: Any) -> np.ndarray:
        """X as a float matrix with one column per feature name (DataFrames selected by name)."""
        if hasattr(X, "columns"):
            X = X[list(self.feature_names)].to_numpy(dtype=float)
        X = np.asarray(X, dtype=float)
        if X.ndim != 2 or X.shape[1] != len(self.feature_names):
            raise ValueError(f"X must have {len(self.feature_names)} columns "
                             f"{tuple(self.feature_names)}")
        result: np.ndarray = X
        return result

    def _splits(self, n: int,
                groups: np.ndarray | None) -> tuple[list[tuple[np.ndarray, np.ndarray]], str]:
        """CV folds as (train, test) row indices, and the scheme's name."""
        if groups is not None and len(set(groups)) >= 3:
            # LeaveOneGroupOut sorts the groups; restore first-appearance order so the pooled
            # float sums (and so the shipped profiles' CV figures) are unchanged to the last bit.
            folds = LeaveOneGroupOut().split(np.zeros((n, 1)), groups=np.asarray(groups))
            return sorted(folds, key=lambda f: int(f[1][0])), "leave-one-model-out"
        k = min(self.n_splits, n)
        if k < 2:
            logger.warning("only %d row(s): CV MAPE is the training error", n)
            return [(np.arange(n), np.arange(n))], "in-sample"
        # Unshuffled KFold over a numpy-Generator permutation keeps the profiles' folds
        # (KFold(shuffle=True) draws from another RNG); sorted train rows keep NNLS's row order.
        order = np.random.default_rng(self.random_state).permutation(n)
        return [(np.sort(order[train]), order[test])
                for train, test in KFold(n_splits=k).split(order)], f"{k}-fold"

    def _search(self, rel: np.ndarray, usable: list[int],
                splits: list[tuple[np.ndarray, np.ndarray]]) -> dict[tuple[int, ...], _Score]:
        limit = min(self.max_features or len(usable), len(usable))
        mode = self.selection
        if mode == "auto":
            mode = "exhaustive" if len(usable) <= 10 else "forward"
        if mode == "none":
            return {tuple(usable): _cv_score(rel, tuple(usable), splits)}
        if mode == "exhaustive":
            return {s: _cv_score(rel, s, splits)
                    for k in range(1, limit + 1) for s in itertools.combinations(usable, k)}
        if mode != "forward":
            raise ValueError(f"selection must be auto, exhaustive, forward or none, not {mode!r}")
        scores: dict[tuple[int, ...], _Score] = {}

        def best_of(subsets: list[tuple[int, ...]]) -> tuple[int, ...]:
            for s in subsets:
                if s not in scores:
                    scores[s] = _cv_score(rel, s, splits)
            return min(subsets, key=lambda s: scores[s].mape_pct)

        # Forward pass to the full size (an early stop strands the search when a proxy feature
        # wins the first steps), then a backward pass from the best subset on that path.
        current: tuple[int, ...] = ()
        path: list[tuple[int, ...]] = []
        while len(current) < limit:
            current = best_of([tuple(sorted((*current, j))) for j in usable if j not in current])
            path.append(current)
        current = min(path, key=lambda s: scores[s].mape_pct)
        while len(current) > 1:  # backward pass: drop features an early proxy made redundant
            best = best_of([tuple(j for j in current if j != k) for k in current])
            if scores[best].mape_pct > scores[current].mape_pct + self._slack(scores[current]):
                break
            current = best
        return scores

    def _slack(self, score: _Score) -> float:
        """CV differences smaller than this are noise: se_factor standard errors of the fold
        MAPEs (the one-standard-error rule), at least `tolerance` x MAPE and abs_tolerance_pct."""
        return max(self.se_factor * score.se_pct, self.tolerance * score.mape_pct,
                   self.abs_tolerance_pct)

    def _choose(self, scores: dict[tuple[int, ...], _Score]) -> tuple[int, ...]:
        best = min(scores.values(), key=lambda v: v.mape_pct)
        limit = best.mape_pct + self._slack(best)
        ok = [s for s, v in scores.items() if v.mape_pct <= limit]
        return min(ok, key=lambda s: (len(s), scores[s].mape_pct))


class _Score(NamedTuple):
    mape_pct: float
    """CV MAPE pooled over all held-out rows, percent."""
    se_pct: float
    """Standard error of the per-fold MAPEs, percent (0 with one fold)."""


def _cv_score(rel: np.ndarray, subset: tuple[int, ...],
              splits: list[tuple[np.ndarray, np.ndarray]]) -> _Score:
    cols = list(subset)
    errors = []
    for train, test in splits:
        w = solve_scaled(rel[np.ix_(train, np.asarray(cols, dtype=np.intp))])
        errors.append(np.abs(rel[np.ix_(test, np.asarray(cols, dtype=np.intp))] @ w - 1.0) * 100.0)
    folds = np.array([e.mean() for e in errors])
    se = float(folds.std(ddof=1) / np.sqrt(len(folds))) if len(folds) > 1 else 0.0
    return _Score(float(np.mean(np.concatenate(errors))), se)


# ---- whole datasets ------------------------------------------------------------------------

def compute_configurations(frame: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """One row per configuration (`COMPUTE_KEY`; repeats enter as their median) and each row's
    configuration (`perfmodel.costs.datasets.configurations`)."""
    return configurations(frame, COMPUTE_KEY)


def fit_phases(frame: pd.DataFrame, **hyper: Any) -> dict[str, PhaseRegressor]:
    """One fitted PhaseRegressor per phase present in `frame` (groups = model names); repeated
    rows of one configuration enter as their median (`compute_configurations`)."""
    frame, _ = compute_configurations(frame)
    out = {}
    for phase in PHASES:
        rows = frame[frame["phase"] == phase]
        if rows.empty:
            continue
        reg = PhaseRegressor(REGRESSION_CANDIDATES[phase], **hyper)
        out[phase] = reg.fit(dataset_features(rows, phase)[:, candidate_columns(phase)],
                             rows["time_s"].to_numpy(float), groups=rows["model"].to_numpy())
        logger.info("%s: features %s, CV MAPE %.2f%% (%s)", phase, reg.selected_features_,
                    reg.cv_mape_, reg.cv_scheme_)
    return out


def leave_one_model_out(frame: pd.DataFrame, **hyper: Any) -> np.ndarray:
    """Out-of-sample predictions: each row predicted by a model refitted without its model's rows
    (feature selection included, nested). Models alone in the data cannot be held out: NaN.
    Repeats of one configuration are fitted as their median and share its prediction."""

    configs, ids = compute_configurations(frame)
    if configs is not frame:
        spread: np.ndarray = _leave_one_model_out(configs, **hyper)[ids]
        return spread
    return _leave_one_model_out(frame, **hyper)


def _leave_one_model_out(frame: pd.DataFrame, **hyper: Any) -> np.ndarray:
    pred = np.full(len(frame), np.nan)
    for phase in PHASES:
        in_phase = frame["phase"].to_numpy() == phase
        rows = frame[in_phase]
        models = rows["model"].to_numpy()
        if len(set(models)) < 2:  # nothing left to train on once the only model is held out
            continue
        # Features are row-wise, so one matrix serves every fold; `params` hands each nested fit
        # its rows' model names, so its feature selection is leave-one-model-out too.
        X = dataset_features(rows, phase)[:, candidate_columns(phase)]
        pred[in_phase] = cross_val_predict(
            PhaseRegressor(REGRESSION_CANDIDATES[phase], **hyper), X,
            rows["time_s"].to_numpy(float), groups=models, cv=LeaveOneGroupOut(),
            params={"groups": models})
    return pred


def held_out_model_predictions(fit: pd.DataFrame, evaluate: pd.DataFrame,
                               **hyper: Any) -> np.ndarray:
    """Predictions of `evaluate`'s rows, each by a regressor fitted on `fit` without the rows of
    the row's model (feature selection nested, as in `leave_one_model_out`, which this equals
    when both frames are one): how `shardmeter validate` scores rows of models the profile was
    fitted on. NaN for rows whose model is not in `fit` (the caller predicts them with the
    profile: they are out of sample already) or whose phase in `fit` has no other model."""
    fit, _ = compute_configurations(fit)
    pred = np.full(len(evaluate), np.nan)
    for phase in PHASES:
        train_rows = fit[fit["phase"] == phase]
        mine = evaluate["phase"].to_numpy() == phase
        if train_rows.empty or not mine.any():
            continue
        X_fit = dataset_features(train_rows, phase)[:, candidate_columns(phase)]
        X_eval = dataset_features(evaluate[mine], phase)[:, candidate_columns(phase)]
        y_fit = train_rows["time_s"].to_numpy(float)
        fit_models = train_rows["model"].to_numpy()
        eval_models = evaluate["model"].to_numpy()[mine]
        positions = np.flatnonzero(mine)
        for model in dict.fromkeys(eval_models):
            keep = fit_models != model
            if keep.all() or not keep.any():  # not in the fitting data, or nothing else there
                continue
            reg = PhaseRegressor(REGRESSION_CANDIDATES[phase], **hyper)
            reg.fit(X_fit[keep], y_fit[keep], groups=fit_models[keep])
            rows = eval_models == model
            pred[positions[rows]] = reg.predict(X_eval[rows])
    return pred


def mape_table(frame: pd.DataFrame, predicted_s: np.ndarray) -> pd.DataFrame:
    """Paper Table I form: per model forward / backward / optimizer / step MAPE (percent).

    step = forward + backward (+ the model's mean optimizer time) per (seq_len, micro_batch),
    whole-model rows only. The last row, 'all', pools every row.
    """

    data = frame.assign(predicted_s=np.asarray(predicted_s, float)).dropna(subset=["predicted_s"])
    rows = [_model_row(name, part) for name, part in data.groupby("model", sort=False)]
    rows.append(_model_row("all", data, params_b=float("nan")))
    return pd.DataFrame(rows)


def _model_row(name: Hashable, part: pd.DataFrame,
               params_b: float | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"model": name, "params_b": params_b if params_b is not None
                           else spec_from_row(part.iloc[0]).total_params / 1e9, "rows": len(part)}
    for phase in PHASES:
        sub = part[part["phase"] == phase]
        out[f"{phase}_mape_pct"] = mape_pct(sub["time_s"], sub["predicted_s"])
    out["step_mape_pct"] = _step_mape(part)
    return out


def _step_mape(part: pd.DataFrame) -> float:
    whole = part[part["unit"] == "model"]
    keys = ["model", "seq_len", "micro_batch"]
    passes = whole[whole["phase"].isin(("forward", "backward"))]
    table = passes.pivot_table(index=keys, columns="phase", values=["time_s", "predicted_s"],
                               aggfunc="mean")
    if table.empty or "forward" not in table["time_s"] or "backward" not in table["time_s"]:
        return float("nan")
    table = table.dropna()
    measured = table["time_s"]["forward"] + table["time_s"]["backward"]
    predicted = table["predicted_s"]["forward"] + table["predicted_s"]["backward"]
    opt = whole[whole["phase"] == "optimizer"].groupby("model")[["time_s", "predicted_s"]].mean()
    names = table.index.get_level_values("model")
    measured = measured.to_numpy() + opt["time_s"].reindex(names).fillna(0).to_numpy()
    predicted = predicted.to_numpy() + opt["predicted_s"].reindex(names).fillna(0).to_numpy()
    return mape_pct(measured, predicted)


# ---- prior coefficients from datasheet figures --------------------------------------------

@dataclass(frozen=True, kw_only=True)
class PriorAssumptions:
    """Efficiency and byte-count assumptions of a datasheet-based (prior) compute model."""

    matmul_efficiency: float = 0.44
    """Fraction of dense bf16 peak reached by matmul and attention kernels: midpoint of the 40-48%
    H100 range in shared/data/training_mfu.csv (Llama 3 405B: 430 and 400 TFLOP/s of 989 = 43%,
    40%; Megatron-LM: 41-48% MFU). MFU counts whole-step time, so kernels reach at least about
    this; the same value is assumed for every GPU (no sourced MFU for the others)."""
    hbm_efficiency: float = 0.7
    """Fraction of datasheet HBM bandwidth reached by elementwise and optimizer kernels
    (assumption)."""
    kernel_gap_s: float = 2e-6
    """Fixed cost per kernel launch on the GPU timeline, seconds (assumption)."""
    kernels_per_block: Mapping[str, int] = field(default_factory=lambda: {
        "forward": 15, "backward": 30, "optimizer": 2})
    """Kernels per transformer block per phase (forward ~15: norms, q/k/v/o, rope, attention,
    MLP, adds; backward twice that; optimizer: multi-tensor Adam kernels)."""
    kernels_root: Mapping[str, int] = field(default_factory=lambda: {
        "forward": 6, "backward": 12, "optimizer": 2})
    """Kernels of the root unit per phase (embedding, final norm, LM head, loss)."""
    bytes_per_token_hidden: Mapping[str, float] = field(default_factory=lambda: {
        "forward": 20.0, "backward": 40.0})
    """HBM bytes per token per hidden element (bf16): forward 2 norms (2 reads+writes) + 2
    residual adds (3 each) = 10 elements x 2 B; backward twice."""
    bytes_per_token_ffn: Mapping[str, float] = field(default_factory=lambda: {
        "forward": 6.0, "backward": 10.0})
    """HBM bytes per token per intermediate element: forward act(gate)*up reads 2 writes 1 (x2 B);
    backward reads 3 writes 2."""
    bytes_per_token_vocab: Mapping[str, float] = field(default_factory=lambda: {
        "forward": 12.0, "backward": 12.0})
    """HBM bytes per token per vocab entry for the fp32 softmax / cross-entropy."""
    optimizer_bytes_per_param: float = 32.0
    """AdamW with fp32 master weights: read param, grad, m, v (16 B), write param, m, v (12 B),
    write the bf16 copy (2 B), rounded up to 32 B per parameter of the local shard."""

    def as_dict(self) -> dict[str, Any]:
        """Plain values (for the provenance block of a prior profile)."""
        return {k: dict(v) if isinstance(v, Mapping) else v for k, v in asdict(self).items()}


FLASH_BACKWARD_FACTOR = 2.5
"""Flash-attention backward / forward FLOPs: backward recomputes the scores and runs 4 more
matmuls (dS, dV, dQ, dK) against forward's 2 (Dao 2023, FlashAttention-2 §3.1; PyTorch's
FlopCounterMode counts its SDPA backward the same way)."""
CAUSAL_FRACTION = 0.5
"""Causal flash attention skips the masked half of the S x S blocks."""


def attention_seconds_per_feature(phase: str, flops_per_s: float) -> float:
    """Seconds per unit of the `tok_attn` feature (tokens·S·a·d) for attention kernels running at
    `flops_per_s`: the one attention convention of the prior and the calibrated profiles — causal
    flash attention, forward CAUSAL_FRACTION·4 FLOPs per unit, backward FLASH_BACKWARD_FACTOR
    times that. (MFU and the recompute FLOPs keep the non-causal 4·S·a·d of `ModelSpec`, the
    convention published MFU figures and PyTorch's FLOP counter use.)"""
    forward = CAUSAL_FRACTION * 4.0 / flops_per_s
    return forward * (FLASH_BACKWARD_FACTOR if phase == "backward" else 1.0)


def prior_compute_coefficients(gpu: GpuSpec, assume: PriorAssumptions | None = None
                               ) -> dict[str, dict[str, float]]:
    """Datasheet compute coefficients: FLOPs / (peak · efficiency) for matmul features (backward =
    2 x forward FLOPs) and for attention (`attention_seconds_per_feature`: causal flash
    attention), bytes / (HBM bandwidth · efficiency) for elementwise and optimizer features,
    kernel gaps for the per-layer and per-pass overheads."""
    a = assume or PriorAssumptions()
    flop_s = 1.0 / (gpu.bf16_flops_per_s * a.matmul_efficiency)
    byte_s = 1.0 / (gpu.hbm_bytes_per_s * a.hbm_efficiency)
    out: dict[str, dict[str, float]] = {}
    for phase, mult in (("forward", 1.0), ("backward", 2.0)):
        out[phase] = {
            "tok_block_matmul": 2.0 * mult * flop_s,   # 2 FLOPs per weight per token
            "tok_attn": attention_seconds_per_feature(
                phase, gpu.bf16_flops_per_s * a.matmul_efficiency),
            "tok_lm_head": 2.0 * mult * flop_s,
            "tok_vocab": a.bytes_per_token_vocab[phase] * byte_s,
            "tok_hidden": a.bytes_per_token_hidden[phase] * byte_s,
            "tok_ffn": a.bytes_per_token_ffn[phase] * byte_s,
            "layers": a.kernels_per_block[phase] * a.kernel_gap_s,
            "const": a.kernels_root[phase] * a.kernel_gap_s,
        }
    out["optimizer"] = {"shard_params": a.optimizer_bytes_per_param * byte_s,
                        "layers": a.kernels_per_block["optimizer"] * a.kernel_gap_s,
                        "const": a.kernels_root["optimizer"] * a.kernel_gap_s}
    return out


def moe_compute_scale(model: ModelSpec, seq_len: int, *, token_factor: float,
                      grouped_gemm_efficiency: float) -> float:
    """Multiplier of a mixture-of-experts block's forward / backward time over the time the
    compute model prices for its FLOPs (1.0 for a dense model).

    Claim: with s the routed experts' share of a block's forward FLOPs (k active experts,
    `ModelSpec.expert_block_matmul_params`), the slowest rank runs its expert GEMMs on
    `token_factor` times the mean tokens (the capacity factor, or the load imbalance under
    expert parallelism: `perfmodel.spec.recipe.moe_token_factor`) at `grouped_gemm_efficiency`
    of a dense GEMM's throughput, so its block takes 1 + s·(token_factor / efficiency − 1)
    times the dense-priced time; router and shared experts run as dense GEMMs.
    Why: the compute models (measured and prior) price FLOPs at dense-GEMM rates, and a step
    waits for its slowest rank at every all-to-all. Both factors are stated priors (recipe
    fields), not fits: there is no MoE compute ground truth yet.
    Checked by: tests/test_moe_step.py (1 for dense and for the default recipe; the expert share
    scales as stated).
    """
    if model.moe is None:
        return 1.0
    share = 2.0 * model.expert_block_matmul_params / model.block_forward_flops_per_token(seq_len)
    return 1.0 + share * (token_factor / grouped_gemm_efficiency - 1.0)
