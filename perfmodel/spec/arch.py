"""Transformer architecture arithmetic: parameter counts, FLOPs per token, FSDP units.

Conventions (DESIGN §2): h hidden size, L layers, a attention heads, a_kv key/value heads,
d head dim (default h/a), f intermediate size, V vocabulary, S sequence length.
Forward matmul FLOPs per token = 2 x matmul parameters (block linears + LM head) plus attention
2·2·S·a·d per layer (QKᵀ and AV, no causal discount); backward = 2 x forward; full recompute adds
one more forward.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfmodel.spec.errors import ConfigError
from perfmodel.spec.inputs import LIMITS, check_limit, load_json, strict_bool

logger = logging.getLogger(__name__)

NORMS = ("rms", "layer")
SHAPE_LIMITS = {"hidden_size": "width", "num_layers": "layers", "num_heads": "heads",
                "num_kv_heads": "heads", "intermediate_size": "width", "vocab_size": "vocab",
                "head_dim": "width"}
"""The `perfmodel.spec.inputs.LIMITS` entry bounding each shape field."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelSpec:
    """A decoder-only transformer's static shape."""

    name: str
    """Display name (catalog name or config path)."""
    hidden_size: int
    """h: residual stream width."""
    num_layers: int
    """L: number of transformer blocks."""
    num_heads: int
    """a: attention (query) heads."""
    num_kv_heads: int
    """a_kv: key/value heads (GQA when < a)."""
    intermediate_size: int
    """f: MLP inner width."""
    vocab_size: int
    """V: vocabulary size (embedding rows)."""
    head_dim: int = 0
    """d: per-head width; 0 means h / a."""
    tie_word_embeddings: bool = False
    """LM head shares the embedding matrix."""
    gated_mlp: bool = True
    """SwiGLU/GeGLU (3 matrices) rather than a plain 2-matrix MLP."""
    qkv_bias: bool = False
    """Biases on the q/k/v projections (Qwen2, Phi)."""
    out_bias: bool = False
    """Bias on the attention output projection (Phi)."""
    mlp_bias: bool = False
    """Biases on the MLP projections (Phi)."""
    norm: str = "rms"
    """'rms' (weight only) or 'layer' (weight and bias)."""
    norms_per_block: int = 2
    """Normalisation layers per block (2 pre-norm; 1 for Phi's parallel block)."""
    lm_head_bias: bool = False
    """Bias on the LM head (Phi)."""
    family: str = "llama"
    """Architecture family (llama, mistral, qwen2, gemma, phi, yi, ...)."""
    published_params: float | None = field(default=None, compare=False)
    """Total parameters as published, for reference only."""

    def __post_init__(self) -> None:
        for name in ("hidden_size", "num_layers", "num_heads", "num_kv_heads",
                     "intermediate_size", "vocab_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"model {self.name!r}: {name} must be a positive integer, "
                                  f"got {value!r}",
                                  hint=f"set {name} to a positive integer.")
        for name, limit in SHAPE_LIMITS.items():
            if getattr(self, name) > LIMITS[limit].maximum:
                check_limit(limit, getattr(self, name), field=name, where=f"model {self.name!r}",
                            error=ConfigError)
        if self.head_dim < 0:
            raise ConfigError(f"model {self.name!r}: head_dim must be >= 0, got {self.head_dim}",
                              hint="omit head_dim to use hidden_size / num_attention_heads.")
        if self.head_dim == 0 and self.hidden_size % self.num_heads:
            raise ConfigError(
                f"model {self.name!r}: hidden_size {self.hidden_size} is not divisible by "
                f"num_attention_heads {self.num_heads}",
                hint="give head_dim explicitly or fix the head count.")
        if self.num_heads % self.num_kv_heads:
            raise ConfigError(
                f"model {self.name!r}: num_attention_heads {self.num_heads} is not a multiple of "
                f"num_key_value_heads {self.num_kv_heads}",
                hint="num_key_value_heads must divide num_attention_heads.")
        if self.norm not in NORMS:
            raise ConfigError(f"model {self.name!r}: norm must be one of {NORMS}, "
                              f"got {self.norm!r}",
                              hint="use 'rms' or 'layer'.")

    # ---- shapes -------------------------------------------------------------------------
    @property
    def d(self) -> int:
        """Head dimension actually used."""
        return self.head_dim or self.hidden_size // self.num_heads

    @property
    def q_dim(self) -> int:
        return self.num_heads * self.d

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.d

    @property
    def attn_linears(self) -> tuple[tuple[int, int], ...]:
        """(in_features, out_features) of one block's attention linears: q, k, v, o."""
        h, q, kv = self.hidden_size, self.q_dim, self.kv_dim
        return (h, q), (h, kv), (h, kv), (q, h)

    @property
    def mlp_linears(self) -> tuple[tuple[int, int], ...]:
        """(in_features, out_features) of one block's MLP linears: (gate,) up, down."""
        h, f = self.hidden_size, self.intermediate_size
        return ((h, f),) * (2 if self.gated_mlp else 1) + ((f, h),)

    # ---- parameter counts ---------------------------------------------------------------
    @property
    def attn_matmul_params(self) -> int:
        return sum(i * o for i, o in self.attn_linears)

    @property
    def mlp_matmul_params(self) -> int:
        return sum(i * o for i, o in self.mlp_linears)

    @property
    def block_matmul_params(self) -> int:
        """Weights of one block's linear layers (the matmul FLOP carriers)."""
        return self.attn_matmul_params + self.mlp_matmul_params

    @property
    def block_bias_params(self) -> int:
        n = 0
        if self.qkv_bias:
            n += self.q_dim + 2 * self.kv_dim
        if self.out_bias:
            n += self.hidden_size
        if self.mlp_bias:
            n += self.intermediate_size * (2 if self.gated_mlp else 1) + self.hidden_size
        return n

    @property
    def norm_params(self) -> int:
        """Parameters of one normalisation layer."""
        return self.hidden_size * (2 if self.norm == "layer" else 1)

    @property
    def block_params(self) -> int:
        """All parameters of one transformer block."""
        return (self.block_matmul_params + self.block_bias_params
                + self.norms_per_block * self.norm_params)

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        """LM head parameters that are not shared with the embedding."""
        weight = 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size
        return weight + (self.vocab_size if self.lm_head_bias else 0)

    @property
    def root_params(self) -> int:
        """The FSDP root unit: embedding, final norm, LM head."""
        return self.embedding_params + self.norm_params + self.lm_head_params

    @property
    def total_params(self) -> int:
        return self.num_layers * self.block_params + self.root_params

    @property
    def matmul_params(self) -> int:
        """Parameters that multiply activations per token: block linears and the LM head."""
        return self.num_layers * self.block_matmul_params + self.vocab_size * self.hidden_size

    # ---- FLOPs --------------------------------------------------------------------------
    def attention_flops_per_token(self, seq_len: int) -> float:
        """Forward QKᵀ and AV FLOPs per token per layer: 2·2·S·a·d."""
        return 4.0 * seq_len * self.num_heads * self.d

    def block_forward_flops_per_token(self, seq_len: int) -> float:
        return 2.0 * self.block_matmul_params + self.attention_flops_per_token(seq_len)

    def root_forward_flops_per_token(self) -> float:
        """LM head matmul (the embedding lookup costs no matmul FLOPs)."""
        return 2.0 * self.vocab_size * self.hidden_size

    def forward_flops_per_token(self, seq_len: int) -> float:
        return (self.num_layers * self.block_forward_flops_per_token(seq_len)
                + self.root_forward_flops_per_token())

    def backward_flops_per_token(self, seq_len: int) -> float:
        return 2.0 * self.forward_flops_per_token(seq_len)

    def recompute_flops_per_token(self, seq_len: int, ac: str) -> float:
        """Extra forward FLOPs spent recomputing activations under checkpointing mode `ac`."""
        if ac == "full":
            return self.num_layers * self.block_forward_flops_per_token(seq_len)
        if ac == "selective":  # attention core recomputed (Korthikanti et al. selective AC)
            return self.num_layers * self.attention_flops_per_token(seq_len)
        return 0.0

    def train_flops_per_token(self, seq_len: int, ac: str = "none") -> float:
        """Hardware FLOPs per trained token: forward + backward + recompute."""
        return (3.0 * self.forward_flops_per_token(seq_len)
                + self.recompute_flops_per_token(seq_len, ac))

    def model_flops_per_token(self, seq_len: int) -> float:
        """Model FLOPs per token for MFU (no recompute): 3 x forward."""
        return 3.0 * self.forward_flops_per_token(seq_len)

    # ---- FSDP units ---------------------------------------------------------------------
    def fsdp_units(self, seq_len: int) -> list[FsdpUnit]:
        """FSDP units in forward order: root (embedding side) is wrapped last, blocks first.

        The root unit holds embedding, final norm and LM head; its forward FLOPs are the LM head's.
        """
        blocks = [
            FsdpUnit(name=f"block{i}", params=self.block_params,
                     forward_flops_per_token=self.block_forward_flops_per_token(seq_len))
            for i in range(self.num_layers)
        ]
        root = FsdpUnit(name="root", params=self.root_params,
                        forward_flops_per_token=self.root_forward_flops_per_token())
        return [*blocks, root]

    def summary(self) -> dict[str, Any]:
        return {
            "name": self.name, "family": self.family, "hidden_size": self.hidden_size,
            "num_layers": self.num_layers, "num_heads": self.num_heads,
            "num_kv_heads": self.num_kv_heads, "head_dim": self.d,
            "intermediate_size": self.intermediate_size, "vocab_size": self.vocab_size,
            "tie_word_embeddings": self.tie_word_embeddings, "params": self.total_params,
            "block_params": self.block_params, "embedding_params": self.embedding_params,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class FsdpUnit:
    """One FSDP unit: a group of parameters gathered and reduced together."""

    name: str
    """Unit name (block{i} or root)."""
    params: int
    """Parameters in the unit."""
    forward_flops_per_token: float
    """Forward FLOPs per token spent in the unit."""


# ---- family layouts and Hugging Face configs ---------------------------------------------

FAMILY_LAYOUT: dict[str, dict[str, Any]] = {
    "llama": {},
    "mistral": {},
    "yi": {},
    "qwen2": {"qkv_bias": True},
    "gemma": {"tie_word_embeddings": True},
    # Gemma-2: input, post-attention, pre-feed-forward and post-feed-forward RMSNorm per block
    "gemma2": {"tie_word_embeddings": True, "norms_per_block": 4},
    # Phi-1/1.5/2: parallel block with one LayerNorm, plain GELU MLP, biases everywhere
    "phi": {"gated_mlp": False, "qkv_bias": True, "out_bias": True, "mlp_bias": True,
            "norm": "layer", "norms_per_block": 1, "lm_head_bias": True},
    # Phi-3: a Llama layout (fused qkv and gate_up projections, RMSNorm, no biases, untied)
    "phi3": {},
    # Chinchilla (Hoffmann et al. 2022) as in the Streaming DiLoCo experiments: plain 4h MLP,
    # RMSNorm, no biases, tied embeddings (not a Hugging Face model_type)
    "chinchilla": {"gated_mlp": False, "tie_word_embeddings": True},
}
"""Layout facts per architecture family that config.json files leave implicit."""

MODEL_TYPE_FAMILY: dict[str, str] = {
    "llama": "llama", "mistral": "mistral", "yi": "yi", "qwen2": "qwen2", "gemma": "gemma",
    "gemma2": "gemma2", "phi": "phi", "phi-msft": "phi", "phi3": "phi3",
}
"""Hugging Face `model_type` -> family, explicitly (no prefix matching: phi3 is not phi)."""

UNSUPPORTED_MODEL_TYPES: dict[str, str] = {
    "mixtral": "a mixture-of-experts model", "qwen2_moe": "a mixture-of-experts model",
    "qwen3_moe": "a mixture-of-experts model", "deepseek_v2": "a mixture-of-experts model",
    "deepseek_v3": "a mixture-of-experts model", "dbrx": "a mixture-of-experts model",
    "olmoe": "a mixture-of-experts model", "phimoe": "a mixture-of-experts model",
    "jamba": "a hybrid state-space / mixture-of-experts model", "mamba": "a state-space model",
    "mamba2": "a state-space model", "falcon_mamba": "a state-space model",
    "rwkv": "a recurrent (RWKV) model", "recurrent_gemma": "a recurrent model",
}
"""Known model types whose parameter layout ShardMeter does not model yet."""

MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_intermediate_size")
"""config.json keys that mark a mixture-of-experts model whatever its model_type says."""

_HF_KEYS = {
    "hidden_size": ("hidden_size", "n_embd", "d_model"),
    "num_layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "num_heads": ("num_attention_heads", "n_head"),
    "intermediate_size": ("intermediate_size", "n_inner"),
    "vocab_size": ("vocab_size",),
}


def _hf_get(config: dict[str, Any], field_name: str, path: str) -> int:
    for key in _HF_KEYS[field_name]:
        if key in config and config[key] is not None:
            value = config[key]
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"{path}: field {key!r} must be a positive integer, "
                                  f"got {value!r}",
                                  hint=f"fix {key!r} in {path}.")
            check_limit(SHAPE_LIMITS[field_name], value, field=key, where=path, error=ConfigError)
            return value
    raise ConfigError(f"{path}: required field {_HF_KEYS[field_name][0]!r} is missing",
                      hint=f"add {_HF_KEYS[field_name][0]!r} to {path} "
                           "(a Hugging Face config.json).")


def _hf_bool(config: dict[str, Any], key: str, path: str) -> bool:
    """A config.json boolean: JSON true/false, or absent/null (false); a string such as "false"
    is refused (`perfmodel.spec.inputs.strict_bool`)."""
    value = config.get(key)
    return False if value is None else strict_bool(value, field=key, where=path,
                                                   error=ConfigError)


def _family(config: dict[str, Any], path: str) -> str:
    """The family of a config's `model_type`; ConfigError (exit 2) for anything not modelled."""
    if "model_type" not in config:
        raise ConfigError(f"{path}: field 'model_type' is missing",
                          hint="add \"model_type\" (one of "
                               f"{', '.join(MODEL_TYPE_FAMILY)}) to {path}.")
    model_type = str(config["model_type"]).lower()
    moe = [k for k in MOE_KEYS if config.get(k)]
    if model_type in UNSUPPORTED_MODEL_TYPES or moe:
        what = UNSUPPORTED_MODEL_TYPES.get(model_type) or f"a mixture-of-experts model ({moe[0]})"
        raise ConfigError(f"{path}: model_type {model_type!r} is {what}, "
                          "which ShardMeter does not model yet",
                          hint="use a dense decoder config (model_type one of "
                               f"{', '.join(MODEL_TYPE_FAMILY)}).")
    if model_type not in MODEL_TYPE_FAMILY:
        raise ConfigError(f"{path}: model_type {model_type!r} has no known parameter layout",
                          hint=f"use one of {', '.join(MODEL_TYPE_FAMILY)}, or add a catalog row "
                               "with an explicit shape.")
    return MODEL_TYPE_FAMILY[model_type]


def spec_from_hf_config(config: dict[str, Any], *, name: str, path: str = "<config>") -> ModelSpec:
    """Build a ModelSpec from a Hugging Face config.json dict: an explicit layout per model_type
    (llama, mistral, yi, qwen2, gemma, gemma2, phi, phi-msft, phi3); MoE, state-space and unknown
    types raise ConfigError."""
    family = _family(config, path)
    layout = dict(FAMILY_LAYOUT[family])
    fields = {k: _hf_get(config, k, path) for k in _HF_KEYS if k != "intermediate_size"}
    if any(config.get(k) is not None for k in _HF_KEYS["intermediate_size"]):
        fields["intermediate_size"] = _hf_get(config, "intermediate_size", path)
    else:  # GPT-style configs (phi-msft) default to 4h
        fields["intermediate_size"] = 4 * fields["hidden_size"]
    kv = config.get("num_key_value_heads")
    kv = fields["num_heads"] if kv is None else kv
    head_dim = config.get("head_dim")
    head_dim = 0 if head_dim is None else head_dim  # [], "" or false are refused below
    for key, value, least in (("num_key_value_heads", kv, 1), ("head_dim", head_dim, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            kind = "a positive" if least else "a non-negative"
            raise ConfigError(f"{path}: field {key!r} must be {kind} integer, got {value!r}",
                              hint=f"fix {key!r} in {path}.")
    if "tie_word_embeddings" in config:
        layout["tie_word_embeddings"] = _hf_bool(config, "tie_word_embeddings", path)
    if _hf_bool(config, "attention_bias", path):
        layout["qkv_bias"] = layout["out_bias"] = True
    if _hf_bool(config, "mlp_bias", path):
        layout["mlp_bias"] = True
    try:
        return ModelSpec(name=name, family=family, hidden_size=fields["hidden_size"],
                         num_layers=fields["num_layers"], num_heads=fields["num_heads"],
                         num_kv_heads=kv, head_dim=head_dim,
                         intermediate_size=fields["intermediate_size"],
                         vocab_size=fields["vocab_size"], **layout)
    except ConfigError as err:  # shape inconsistencies: name the file, not only the model
        raise ConfigError(f"{path}: {err.message}", hint=err.hint) from err


def load_hf_config(path: str | Path) -> ModelSpec:
    """Load a Hugging Face config.json file (malformed files raise ConfigError naming the file)."""
    p = Path(path)
    config = load_json(p, what="model config (a Hugging Face config.json)", error=ConfigError)
    if not isinstance(config, dict):
        raise ConfigError(f"{p}: expected a JSON object, got {type(config).__name__}",
                          hint="pass a Hugging Face config.json file.")
    name = p.stem if p.name != "config.json" else p.parent.name or str(p)
    return spec_from_hf_config(config, name=name, path=str(p))
