"""Static regression features of (model, sequence length S, micro-batch m) per phase and FSDP unit.

Every feature is a product of architecture numbers that scales one family of kernel dimensions
linearly (paper §III-B: no interaction terms between features, the products are the features).
Features are defined PER FSDP UNIT (`ModelSpec.fsdp_units`): the "block" unit is ONE transformer
block and the "root" unit holds the embedding, final norm and LM head, so that

    features(model) = L · features(block) + features(root)

and one set of coefficients predicts a whole model's pass or a single unit's pass alike.

With T = m·S tokens per micro-batch every forward/backward feature is `T·a + c` for per-unit
vectors `a` (per token) and `c` (per pass), so for a fixed (model, S, unit) the time of a pass is an
affine function of m; `unit_feature_affine` exposes that for fast evaluation.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from perfmodel.spec.arch import FAMILY_LAYOUT, ModelSpec

if TYPE_CHECKING:
    import pandas as pd

PHASES = ("forward", "backward", "optimizer")
UNITS = ("model", "block", "root")

PASS_FEATURES: tuple[str, ...] = (
    "tok_block_matmul", "tok_attn", "tok_lm_head", "tok_vocab", "tok_hidden", "tok_ffn",
    "layers", "const", "gemm_fixed", "emb_grad", "tied_grad", "param_grads", "weight_read",
    "aligned_weight_grads",
)
"""Candidate features of the forward and backward passes (same names, separate coefficients)."""

OPTIMIZER_FEATURES: tuple[str, ...] = ("shard_params", "layers", "const")
"""Candidate features of the optimizer step."""

_BASE_PASS = PASS_FEATURES[:8]
REGRESSION_CANDIDATES: Mapping[str, tuple[str, ...]] = {
    "forward": (*_BASE_PASS, "weight_read"),
    "backward": (*_BASE_PASS, "emb_grad", "tied_grad", "param_grads", "weight_read",
                 "aligned_weight_grads"),
    "optimizer": OPTIMIZER_FEATURES,
}
"""Features the measured regression (perfmodel.costs.compute) selects from, per phase. `gemm_fixed`
is
left out: its coefficient is a physical one of calibrated profiles (perfmodel.profiles.calibrate).
The parameter-count features `emb_grad`, `tied_grad` and `param_grads` are backward candidates only:
that is where the dense embedding gradient, tied-weight accumulation and fresh gradient buffers
run; `weight_read` (matmul weights streamed from memory once per pass) is a candidate of both;
`aligned_weight_grads` is a backward candidate: that is where widths that are multiples of
`ALIGNED_WIDTH` were measured slower (catalogs/profiles/data/cpu-width-probe.csv); their forward
was not."""

ALIGNED_WIDTH = 1024
"""Rows of a multiple of this many fp32 elements are a multiple of 4 KiB long, the stride at which
a CPU's L1 cache sets and load/store forwarding alias addresses. On the 2-core Xeon the backward
pass of a model this wide measured slower than at the widths beside it (docs/VALIDATION.md part
(a), width probe), so `aligned_weight_grads` lets the regression price it. Real models' widths
(2048, 4096) are such multiples, cpu-wide.yaml's Sobol widths almost never are
(catalogs/spaces/cpu-aligned.yaml samples them). The measured profiles are fp32; a bf16 row
aliases at twice the elements, which this constant does not model."""


def aligned_rows(n: int) -> bool:
    """Whether a row of n elements is a multiple of ALIGNED_WIDTH long."""
    return n % ALIGNED_WIDTH == 0


def _aligned_block_grads(model: ModelSpec) -> float:
    """Elements of one block's weight gradients whose rows (in_features) are aligned."""
    return float(sum(i * o for i, o in (*model.attn_linears, *model.mlp_linears)
                     if aligned_rows(i)))


FEATURE_DOCS: Mapping[str, str] = {
    "tok_block_matmul": "tokens x matmul weights of the unit's block linears (block: "
                        "one block; root: 0)",
    "tok_attn": "tokens x attention context x heads x head_dim (attention score/value kernels; "
                "block only; the context is S, or the layers' mean of min(S, window) for "
                "sliding-window models)",
    "tok_lm_head": "tokens x hidden x vocab (LM-head matmul; root only)",
    "tok_vocab": "tokens x vocab (logits softmax / cross-entropy, elementwise; root only)",
    "tok_hidden": "tokens x hidden (norms, residual adds, embedding gather; each unit)",
    "tok_ffn": "tokens x intermediate (MLP activation, elementwise; block only)",
    "layers": "1 per transformer block (per-layer kernel-launch overhead; root: 0)",
    "const": "1 per pass of the root unit (per-pass fixed overhead; block: 0)",
    "gemm_fixed": "matmul weights / hidden per pass (block: block linears / h; root: vocab): the "
                  "fixed cost of a GEMM whose efficiency saturates with tokens x width",
    "emb_grad": "vocab x hidden per pass of the root (the embedding's dense gradient is zeroed and "
                "scattered into whatever the token count; block: 0)",
    "tied_grad": "vocab x hidden per pass of a tied root (the LM-head gradient accumulated into "
                 "the embedding's; untied or block: 0)",
    "param_grads": "parameters of the unit per pass (fresh gradient buffers allocated and written "
                   "once per backward)",
    "weight_read": "matmul weights of the unit per pass (block: block linears; root: the LM "
                   "head's vocab x hidden): at few tokens per pass a GEMM streams its weights "
                   "from memory, a cost that grows with the weights, not the tokens",
    "aligned_weight_grads": f"weight-gradient elements per pass in matrices whose rows are a "
                            f"multiple of {ALIGNED_WIDTH} long (4 KiB in fp32; block: each "
                            "linear by its in_features; root: the LM head's and the embedding's "
                            "vocab x hidden when hidden is)",
    "shard_params": "parameters of the unit / num_shards (optimizer step on a G-way shard)",
}
"""What each feature counts; coefficients are seconds per unit of the feature."""


def phase_features(phase: str) -> tuple[str, ...]:
    """Candidate feature names of one phase."""
    if phase in ("forward", "backward"):
        return PASS_FEATURES
    if phase == "optimizer":
        return OPTIMIZER_FEATURES
    raise ValueError(f"unknown phase {phase!r}; expected one of {PHASES}")


def candidate_columns(phase: str) -> list[int]:
    """Indices of the phase's regression candidates among `phase_features(phase)`."""
    names = phase_features(phase)
    return [names.index(n) for n in REGRESSION_CANDIDATES[phase]]


def _check_unit(unit: str) -> None:
    if unit not in UNITS:
        raise ValueError(f"unknown unit {unit!r}; expected one of {UNITS}")


@functools.lru_cache(maxsize=4096)
def _pass_vectors(model: ModelSpec, seq_len: int, unit: str) -> tuple[np.ndarray, np.ndarray]:
    h, f, V = model.hidden_size, model.intermediate_size, model.vocab_size
    # order: tok_block_matmul, tok_attn, tok_lm_head, tok_vocab, tok_hidden, tok_ffn, layers, const,
    # gemm_fixed. A GEMM of g = tokens x width at efficiency e_max·g/(g + g_half) takes
    # FLOPs/(peak·e_max) + 2·weights·g_half/(width·peak·e_max): the second term is gemm_fixed.
    # emb_grad, tied_grad, param_grads, weight_read: per-pass work that grows with parameters,
    # not tokens; aligned_weight_grads: those of them whose rows alias (LM head and embedding:
    # two gradient matrices written, tied or not).
    tied = float(h * V) if model.tie_word_embeddings else 0.0
    # attention context: S, or the layers' mean of min(S, window) (arch.attention_context)
    context = model.attention_context(seq_len)
    block_tok = np.array([model.block_matmul_params, context * model.num_heads * model.d,
                          0.0, 0.0, h, f, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    block_one = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, model.block_matmul_params / h,
                          0.0, 0.0, float(model.block_params), float(model.block_matmul_params),
                          _aligned_block_grads(model)])
    root_tok = np.zeros(len(PASS_FEATURES))
    root_tok[[2, 3, 4]] = h * V, V, h
    root_one = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, float(V), float(h * V), tied,
                         float(model.root_params), float(h * V), aligned_rows(h) * 2.0 * h * V])
    if unit == "block":
        out = block_tok, block_one
    elif unit == "root":
        out = root_tok, root_one
    else:
        out = model.num_layers * block_tok + root_tok, model.num_layers * block_one + root_one
    for arr in out:
        arr.setflags(write=False)
    return out


def _optimizer_vectors(model: ModelSpec, unit: str) -> tuple[np.ndarray, np.ndarray]:
    """(sharded part, unsharded part): features = sharded / num_shards + unsharded."""
    block = (np.array([model.block_params, 0.0, 0.0]), np.array([0.0, 1.0, 0.0]))
    root = (np.array([model.root_params, 0.0, 0.0]), np.array([0.0, 0.0, 1.0]))
    if unit == "block":
        return block
    if unit == "root":
        return root
    L = model.num_layers
    return L * block[0] + root[0], L * block[1] + root[1]


def unit_feature_affine(model: ModelSpec, seq_len: int, unit: str = "model",
                        phase: str = "forward",
                        num_shards: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Feature vectors (per_micro_batch, constant): features(m) = m·per_micro_batch + constant.

    For the optimizer the features do not depend on m (per_micro_batch is zero).
    """
    _check_unit(unit)
    if phase == "optimizer":
        if num_shards < 1:
            raise ValueError(f"num_shards must be >= 1, got {num_shards}")
        sharded, fixed = _optimizer_vectors(model, unit)
        return np.zeros(len(OPTIMIZER_FEATURES)), sharded / num_shards + fixed
    phase_features(phase)
    per_token, const = _pass_vectors(model, int(seq_len), unit)
    return per_token * seq_len, const


def unit_feature_matrix(model: ModelSpec, seq_len: int, micro_batches: np.ndarray | int,
                        unit: str = "model", phase: str = "forward",
                        num_shards: np.ndarray | int = 1) -> np.ndarray:
    """Feature matrix, one row per micro-batch size (and/or shard count, broadcast together).

    Columns follow `phase_features(phase)`; unit is 'model', 'block' (ONE block) or 'root'.
    """
    _check_unit(unit)
    m = np.atleast_1d(np.asarray(micro_batches, dtype=float))
    if phase == "optimizer":
        shards = np.atleast_1d(np.asarray(num_shards, dtype=float))
        if np.any(shards < 1):
            raise ValueError("num_shards must be >= 1")
        m, shards = np.broadcast_arrays(m, shards)
        sharded, fixed = _optimizer_vectors(model, unit)
        sharded_x: np.ndarray = np.outer(1.0 / shards, sharded) + fixed
        return sharded_x
    per_mb, const = unit_feature_affine(model, seq_len, unit, phase)
    x: np.ndarray = np.outer(m, per_mb) + const
    return x


def model_features(model: ModelSpec, seq_len: int, micro_batch: int, phase: str = "forward",
                   num_shards: int = 1) -> dict[str, float]:
    """Whole-model features as a name -> value mapping (for reports and tests)."""
    row = unit_feature_matrix(model, seq_len, micro_batch, "model", phase, num_shards)[0]
    return dict(zip(phase_features(phase), row.tolist(), strict=True))


# ---- dataset rows (perfmodel.costs.compute dataset format)
# -----------------------------------------

SHAPE_COLUMNS = ("model", "family", "hidden_size", "num_hidden_layers", "num_attention_heads",
                  "num_key_value_heads", "head_dim", "intermediate_size", "vocab_size",
                  "tie_word_embeddings")


def spec_from_row(row: Mapping[str, Any] | pd.Series) -> ModelSpec:
    """The ModelSpec of one dataset row (family layout from arch.FAMILY_LAYOUT)."""
    layout = dict(FAMILY_LAYOUT[str(row.get("family", "llama"))])
    tie = row.get("tie_word_embeddings", False)
    layout["tie_word_embeddings"] = tie.strip().lower() in ("true", "1") if isinstance(tie, str) \
        else bool(tie)
    return ModelSpec(
        name=str(row["model"]), family=str(row.get("family", "llama")),
        hidden_size=int(row["hidden_size"]), num_layers=int(row["num_hidden_layers"]),
        num_heads=int(row["num_attention_heads"]), num_kv_heads=int(row["num_key_value_heads"]),
        head_dim=int(row.get("head_dim", 0) or 0), intermediate_size=int(row["intermediate_size"]),
        vocab_size=int(row["vocab_size"]), **layout)


def dataset_features(frame: pd.DataFrame, phase: str) -> np.ndarray:
    """Feature matrix (columns `phase_features(phase)`) of dataset rows, all of one phase."""
    out = np.zeros((len(frame), len(phase_features(phase))))
    keys = [*SHAPE_COLUMNS, "seq_len", "unit", "num_shards"]
    for idx in frame.groupby(keys, sort=False).indices.values():
        row = frame.iloc[idx[0]]
        out[idx] = unit_feature_matrix(
            spec_from_row(row), int(row["seq_len"]), frame["micro_batch"].to_numpy()[idx],
            unit=str(row["unit"]), phase=phase, num_shards=int(row["num_shards"]))
    return out
