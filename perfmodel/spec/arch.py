"""Transformer architecture arithmetic: parameter counts, FLOPs per token, FSDP units.

Conventions (DESIGN §2): h hidden size, L layers, a attention heads, a_kv key/value heads,
d head dim (default h/a), f intermediate size, V vocabulary, S sequence length.
Forward matmul FLOPs per token = 2 x matmul parameters (block linears + LM head) plus attention
2·2·S·a·d per layer (QKᵀ and AV, no causal discount: the FLOP convention of MFU and of PyTorch's
FlopCounterMode); backward = 2 x forward; activation checkpointing adds the forward FLOPs its
policy recomputes (`block_recompute_flops_per_token`).

Beyond the dense Llama-like block (issue 26):

* windowed attention: a layer with a sliding window w lets a query see at most w keys, so its
  attention FLOPs use min(S, w) in place of S (Mistral, StarCoder2: every layer; Gemma-3: five
  windowed layers to one global; gpt-oss: alternating; Llama-4: chunked attention on its RoPE
  layers, a chunk of c keys modelled as a window c). Blocks are priced as one uniform block
  whose attention context is the mean over the layers, so a model's total attention FLOPs are
  exact and each block carries the mean (`ModelSpec.attention_context`).
* mixture of experts (`MoeSpec`): E routed experts of width f_e of which k serve each token,
  shared experts, a router of h x E weights, dense layers where the config keeps them.
  `total_params` counts every expert; `active_params` the parameters one token touches (the k
  routed experts, shared experts, router, attention, norms and both embedding matrices, as the
  totals count them); forward FLOPs per token are 2 x the ACTIVE matmul weights (router
  included) plus attention. The step of an MoE model is priced as L uniform blocks carrying the
  layers' MEAN: `block_matmul_params` the mean active matmul weights (so the step's FLOPs are
  exactly the model's), `block_params` the mean of all parameters (every expert: what FSDP
  gathers, reduces and shards), `expert_block_params` the mean routed-expert share of it (what
  expert parallelism splits); interleaved or dense-first layers are therefore spread evenly
  over the blocks (totals exact, the per-block order not). MLA models (DeepSeek-V3) are still
  refused by every step entry (`ModelSpec.check_step_modelled`): their attention kernel and
  activations are not modelled.
* multi-head latent attention (`MlaSpec`, DeepSeek-V3): low-rank q and kv projections; QKᵀ runs
  at the q/k head width (nope + rope), AV at the value head width.

Checked by: tests/test_arch.py (dense counts by hand and against published totals),
tests/test_model_configs.py (each new layout by hand; parsed totals and active counts within
1 % of catalogs/published/parameter-counts.csv; windowed and MoE FLOPs; every catalog model's
FLOPs equal to the pre-MoE formula bit for bit), tests/test_moe_step.py (the mean blocks sum to
the model's active FLOPs and total parameters; never priced as dense).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from perfmodel.spec.errors import ConfigError, UserInputError
from perfmodel.spec.inputs import LIMITS, check_limit
from perfmodel.spec.recipe import CheckpointPolicy

logger = logging.getLogger(__name__)

NORMS = ("rms", "layer")
SHAPE_LIMITS = {"hidden_size": "width", "num_layers": "layers", "num_heads": "heads",
                "num_kv_heads": "heads", "intermediate_size": "width", "vocab_size": "vocab",
                "head_dim": "width"}
"""The `perfmodel.spec.inputs.LIMITS` entry bounding each shape field."""

QK_NORMS = ("none", "head", "full")
"""Normalisation of queries and keys before attention: none; 'head' (one RMSNorm of head_dim
shared by the heads: Qwen3, Gemma-3); 'full' (RMSNorm over all of q and all of k: OLMo-2)."""


def _positive(owner: str, name: str, value: Any, least: int = 1) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        kind = "a positive integer" if least >= 1 else "an integer >= 0"
        raise ConfigError(f"model {owner!r}: {name} must be {kind}, got {value!r}",
                          hint=f"set {name} to {kind}.")


@dataclass(frozen=True, kw_only=True, slots=True)
class MlaSpec:
    """Multi-head latent attention (DeepSeek-V2/V3): q and kv through low-rank projections."""

    q_lora_rank: int
    """Rank of the q down-projection; 0 projects q straight from h (DeepSeek-V2-Lite)."""
    kv_lora_rank: int
    """Rank of the joint kv down-projection."""
    qk_nope_head_dim: int
    """Per-head q/k width without rotary embedding."""
    qk_rope_head_dim: int
    """Per-head q/k width carrying rotary embedding (k's is shared by the heads)."""
    v_head_dim: int
    """Per-head value width."""

    def __post_init__(self) -> None:
        _positive("mla", "q_lora_rank", self.q_lora_rank, least=0)
        for name in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            _positive("mla", name, getattr(self, name))

    @property
    def qk_head_dim(self) -> int:
        """Per-head width of QKᵀ."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim


@dataclass(frozen=True, kw_only=True, slots=True)
class MoeSpec:
    """The mixture-of-experts layers of a model (the other layers are dense MLPs of the model's
    intermediate_size)."""

    num_experts: int
    """E: routed experts per MoE layer."""
    experts_per_token: int
    """k: routed experts each token is sent to."""
    expert_intermediate_size: int
    """f_e: inner width of one routed expert (gated like the model's MLP)."""
    moe_layers: tuple[int, ...]
    """Indices of the layers whose MLP is the MoE block."""
    num_shared_experts: int = 0
    """Experts every token passes through (DeepSeek, Qwen2-MoE, Llama-4)."""
    shared_intermediate_size: int = 0
    """Inner width of one shared expert."""
    shared_expert_gate: bool = False
    """A sigmoid gate of h x 1 weights on the shared expert's output (Qwen2-MoE)."""
    router_bias: bool = False
    """E router biases (gpt-oss; DeepSeek-V3's e_score_correction_bias)."""
    expert_bias: bool = False
    """Biases on the experts' projections (gpt-oss)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "moe_layers", tuple(self.moe_layers))
        for name in ("num_experts", "experts_per_token", "expert_intermediate_size"):
            _positive("moe", name, getattr(self, name))
        _positive("moe", "num_shared_experts", self.num_shared_experts, least=0)
        _positive("moe", "shared_intermediate_size", self.shared_intermediate_size, least=0)
        if self.experts_per_token > self.num_experts:
            raise ConfigError(f"MoE: {self.experts_per_token} experts per token exceed the "
                              f"{self.num_experts} experts",
                              hint="experts_per_token must be <= num_experts.")
        if self.num_shared_experts and not self.shared_intermediate_size:
            raise ConfigError("MoE: shared experts need a width (shared_intermediate_size)",
                              hint="give the shared experts' intermediate size.")
        if not self.moe_layers:
            raise ConfigError("MoE: no layer is a mixture-of-experts layer",
                              hint="list the MoE layers (or describe a dense model).")
        if list(self.moe_layers) != sorted(set(self.moe_layers)) or self.moe_layers[0] < 0:
            raise ConfigError(f"MoE: moe_layers must be distinct increasing indices >= 0, got "
                              f"{list(self.moe_layers)}", hint="fix the MoE layer list.")


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
    """f: MLP inner width (of the dense layers of an MoE model)."""
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
    qk_norm: str = "none"
    """Query/key normalisation before attention (QK_NORMS)."""
    position_embeddings: int = 0
    """Rows of a learned absolute position embedding (GPT-2's n_positions); 0 = none (RoPE)."""
    sliding_window: int = 0
    """w: keys a query of a windowed layer sees at most; 0 = every layer attends globally."""
    sliding_layers: tuple[int, ...] | None = None
    """Indices of the windowed layers; None = every layer (when sliding_window > 0)."""
    attention_sinks: bool = False
    """A learned sink logit per head in each attention softmax (gpt-oss: a parameters/layer)."""
    mla: MlaSpec | None = None
    """Multi-head latent attention in place of q/k/v/o projections (DeepSeek-V3)."""
    moe: MoeSpec | None = None
    """Mixture-of-experts layers; None = dense."""
    mtp_layers: int = 0
    """Multi-token-prediction modules shipped beside the model (DeepSeek-V3: 1); not part of
    total_params (`mtp_params` reports them apart)."""
    text_model_of: str = ""
    """The outer model_type when this is the text model of a multimodal checkpoint (its vision
    tower is not counted)."""
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
        if self.head_dim == 0 and self.hidden_size % self.num_heads and self.mla is None:
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
        if self.qk_norm not in QK_NORMS:
            raise ConfigError(f"model {self.name!r}: qk_norm must be one of {QK_NORMS}, "
                              f"got {self.qk_norm!r}", hint="use 'none', 'head' or 'full'.")
        for name in ("position_embeddings", "sliding_window", "mtp_layers"):
            _positive(self.name, name, getattr(self, name), least=0)
        if self.sliding_layers is not None:
            layers = tuple(self.sliding_layers)
            object.__setattr__(self, "sliding_layers", layers)
            if not self.sliding_window:
                raise ConfigError(f"model {self.name!r}: sliding_layers given without a "
                                  "sliding_window", hint="give the window size too.")
            if any(not 0 <= i < self.num_layers for i in layers) or len(set(layers)) != len(
                    layers):
                raise ConfigError(f"model {self.name!r}: sliding_layers must be distinct layer "
                                  f"indices below {self.num_layers}, got {list(layers)}",
                                  hint="fix the windowed-layer list.")
        if self.moe is not None and self.moe.moe_layers[-1] >= self.num_layers:
            raise ConfigError(f"model {self.name!r}: MoE layer {self.moe.moe_layers[-1]} is "
                              f"beyond the {self.num_layers} layers",
                              hint="fix the MoE layer list.")

    # ---- what the step simulator models ----------------------------------------------------
    @property
    def is_moe(self) -> bool:
        """A mixture-of-experts model."""
        return self.moe is not None

    @property
    def num_experts(self) -> int:
        """E, the routed experts per MoE layer; 0 for a dense model."""
        return 0 if self.moe is None else self.moe.num_experts

    def check_step_modelled(self, what: str) -> None:
        """Raise a UserInputError (exit 2) naming why the training step of this model cannot be
        simulated yet: MLA layouts (DeepSeek-V3) are never priced as q/k/v/o attention. MoE
        models are modelled (module doc)."""
        if self.mla is not None:
            moe = ("" if self.moe is None else
                   f" (a mixture of {self.moe.num_experts} experts, "
                   f"{self.moe.experts_per_token} active per token; "
                   f"{self.total_params / 1e9:.1f}B total, {self.active_params / 1e9:.1f}B "
                   "active parameters)")
            raise UserInputError(
                f"{self.name} uses multi-head latent attention{moe}: its step is not modelled "
                f"yet, so {what} cannot be computed (the MoE step is; MLA's attention kernel "
                "and activations are not)",
                hint="use a model with q/k/v/o attention (e.g. a mixtral, qwen3_moe or llama4 "
                     "config); `shardmeter catalog models --config PATH` prints its "
                     "parameters.")

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
        """(in_features, out_features) of one block's attention linears: q, k, v, o (MLA: the
        q down/up, joint kv down, kv up and output projections)."""
        h = self.hidden_size
        if self.mla is not None:
            m, a = self.mla, self.num_heads
            q_proj: tuple[tuple[int, int], ...] = (
                ((h, m.q_lora_rank), (m.q_lora_rank, a * m.qk_head_dim)) if m.q_lora_rank
                else ((h, a * m.qk_head_dim),))
            return (*q_proj, (h, m.kv_lora_rank + m.qk_rope_head_dim),
                    (m.kv_lora_rank, a * (m.qk_nope_head_dim + m.v_head_dim)),
                    (a * m.v_head_dim, h))
        q_dim, kv = self.q_dim, self.kv_dim
        return (h, q_dim), (h, kv), (h, kv), (q_dim, h)

    @property
    def mlp_linears(self) -> tuple[tuple[int, int], ...]:
        """(in_features, out_features) of one dense MLP's linears: (gate,) up, down."""
        return self._mlp(self.intermediate_size)

    def _mlp(self, width: int) -> tuple[tuple[int, int], ...]:
        h = self.hidden_size
        return ((h, width),) * (2 if self.gated_mlp else 1) + ((width, h),)

    # ---- layer pattern ------------------------------------------------------------------
    def layer_window(self, layer: int) -> int:
        """Window of one layer's attention (0 = global)."""
        if not self.sliding_window:
            return 0
        if self.sliding_layers is None or layer in self.sliding_layers:
            return self.sliding_window
        return 0

    @property
    def num_sliding_layers(self) -> int:
        if not self.sliding_window:
            return 0
        return self.num_layers if self.sliding_layers is None else len(self.sliding_layers)

    @property
    def attention_pattern(self) -> str:
        """The attention layers in words: 'global', 'sliding 4096 (all layers)',
        'sliding 1024 x 40 + global x 8'."""
        n = self.num_sliding_layers
        if not n:
            return "global"
        if n == self.num_layers:
            return f"sliding {self.sliding_window} (all {n} layers)"
        return f"sliding {self.sliding_window} x {n} + global x {self.num_layers - n}"

    def attention_context(self, seq_len: int) -> float:
        """Keys a query attends to, averaged over the layers: S for a global layer, min(S, w)
        for a windowed one (no causal discount, as for global layers). Exactly float(S) without
        windows, so dense global models keep their FLOPs bit for bit."""
        n = self.num_sliding_layers
        if not n:
            return float(seq_len)
        windowed = min(seq_len, self.sliding_window)
        return (n * windowed + (self.num_layers - n) * seq_len) / self.num_layers

    def is_moe_layer(self, layer: int) -> bool:
        return self.moe is not None and layer in self.moe.moe_layers

    @property
    def num_moe_layers(self) -> int:
        return 0 if self.moe is None else len(self.moe.moe_layers)

    @property
    def num_dense_layers(self) -> int:
        return self.num_layers - self.num_moe_layers

    # ---- parameter counts ---------------------------------------------------------------
    @property
    def attn_matmul_params(self) -> int:
        return sum(i * o for i, o in self.attn_linears)

    @property
    def mlp_matmul_params(self) -> int:
        return sum(i * o for i, o in self.mlp_linears)

    @property
    def attn_extra_params(self) -> int:
        """Attention parameters outside its linears and biases: q/k norms, MLA's latent norms,
        attention sinks."""
        n = 0
        if self.qk_norm == "head":
            n += 2 * self.d
        elif self.qk_norm == "full":
            n += self.q_dim + self.kv_dim
        if self.mla is not None:
            n += self.mla.q_lora_rank + self.mla.kv_lora_rank
        if self.attention_sinks:
            n += self.num_heads
        return n

    @property
    def attn_bias_params(self) -> int:
        n = 0
        if self.qkv_bias:
            n += self.q_dim + 2 * self.kv_dim
        if self.out_bias:
            n += self.hidden_size
        return n

    @property
    def attention_params(self) -> int:
        """All attention parameters of one layer."""
        return self.attn_matmul_params + self.attn_bias_params + self.attn_extra_params

    @property
    def mlp_bias_params(self) -> int:
        if not self.mlp_bias:
            return 0
        return self.intermediate_size * (2 if self.gated_mlp else 1) + self.hidden_size

    @property
    def block_matmul_params(self) -> int:
        """Weights of one block's linear layers (the matmul FLOP carriers); an MoE model's mean
        ACTIVE matmul weights per layer, rounded to the nearest weight (module doc)."""
        self._dense_only("a uniform transformer block")
        if self.moe is not None:
            return round(sum(self.layer_active_matmul_params(i) for i in range(self.num_layers))
                         / self.num_layers)
        return self.attn_matmul_params + self.mlp_matmul_params

    @property
    def expert_block_params(self) -> int:
        """Mean routed-expert parameters per block (every expert of the MoE layers spread over
        the L blocks, rounded): what expert parallelism splits; 0 for a dense model."""
        if self.moe is None:
            return 0
        return round(self.num_moe_layers * self.moe.num_experts * self.expert_params
                     / self.num_layers)

    @property
    def expert_block_matmul_params(self) -> float:
        """Mean routed-expert matmul weights per block one token is multiplied by (k experts of
        the MoE layers over the L blocks): the grouped-GEMM share of `block_matmul_params`."""
        if self.moe is None:
            return 0.0
        expert = sum(i * o for i, o in self._mlp(self.moe.expert_intermediate_size))
        return self.num_moe_layers * self.moe.experts_per_token * expert / self.num_layers

    @property
    def moe_layer_share(self) -> float:
        """MoE layers per block (1 when every layer is one; 0 for a dense model): the mean
        number of dispatch/combine all-to-alls per block in each direction."""
        return self.num_moe_layers / self.num_layers

    @property
    def block_bias_params(self) -> int:
        return self.attn_bias_params + self.mlp_bias_params

    @property
    def norm_params(self) -> int:
        """Parameters of one normalisation layer."""
        return self.hidden_size * (2 if self.norm == "layer" else 1)

    @property
    def block_params(self) -> int:
        """All parameters of one transformer block (an MoE model's mean over its layers, every
        expert counted, rounded)."""
        if self.moe is not None:
            self.check_step_modelled("a uniform transformer block")
            return round(sum(self.layer_params(i) for i in range(self.num_layers))
                         / self.num_layers)
        return (self.block_matmul_params + self.block_bias_params
                + self.norms_per_block * self.norm_params + self.attn_extra_params)

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def position_embedding_params(self) -> int:
        return self.position_embeddings * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        """LM head parameters that are not shared with the embedding."""
        weight = 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size
        return weight + (self.vocab_size if self.lm_head_bias else 0)

    @property
    def root_params(self) -> int:
        """The FSDP root unit: embedding(s), final norm, LM head."""
        return (self.embedding_params + self.norm_params + self.lm_head_params
                + self.position_embedding_params)

    # MoE pieces
    @property
    def expert_params(self) -> int:
        """One routed expert."""
        moe = self._moe()
        f, h = moe.expert_intermediate_size, self.hidden_size
        bias = (f * (2 if self.gated_mlp else 1) + h) if moe.expert_bias else 0
        return sum(i * o for i, o in self._mlp(f)) + bias

    @property
    def shared_expert_params(self) -> int:
        """All shared experts of one MoE layer."""
        moe = self._moe()
        if not moe.num_shared_experts:
            return 0
        return moe.num_shared_experts * sum(i * o for i, o in
                                            self._mlp(moe.shared_intermediate_size))

    @property
    def router_params(self) -> int:
        """The router of one MoE layer (h x E, biases, the shared expert's gate)."""
        moe = self._moe()
        return (self.hidden_size * moe.num_experts + (moe.num_experts if moe.router_bias else 0)
                + (self.hidden_size if moe.shared_expert_gate else 0))

    @property
    def router_matmul_params(self) -> int:
        moe = self._moe()
        return self.hidden_size * (moe.num_experts + (1 if moe.shared_expert_gate else 0))

    @property
    def dense_mlp_params(self) -> int:
        return self.mlp_matmul_params + self.mlp_bias_params

    def _layer_common(self) -> int:
        return self.attention_params + self.norms_per_block * self.norm_params

    def layer_params(self, layer: int) -> int:
        """All parameters of one layer."""
        if not self.is_moe_layer(layer):
            return self._layer_common() + self.dense_mlp_params
        moe = self._moe()
        return (self._layer_common() + moe.num_experts * self.expert_params
                + self.shared_expert_params + self.router_params)

    def layer_active_params(self, layer: int) -> int:
        """Parameters of one layer a token passes through (k routed experts of E)."""
        if not self.is_moe_layer(layer):
            return self.layer_params(layer)
        moe = self._moe()
        return (self._layer_common() + moe.experts_per_token * self.expert_params
                + self.shared_expert_params + self.router_params)

    def layer_active_matmul_params(self, layer: int) -> int:
        """Weights of one layer that multiply a token's activations (attention linears, the k
        routed experts' and the shared experts' linears, the router)."""
        if not self.is_moe_layer(layer):
            return self.attn_matmul_params + self.mlp_matmul_params
        moe = self._moe()
        expert = sum(i * o for i, o in self._mlp(moe.expert_intermediate_size))
        shared = 0 if not moe.num_shared_experts else moe.num_shared_experts * sum(
            i * o for i, o in self._mlp(moe.shared_intermediate_size))
        return (self.attn_matmul_params + moe.experts_per_token * expert + shared
                + self.router_matmul_params)

    @property
    def total_params(self) -> int:
        if self.moe is None:
            return self.num_layers * self.block_params + self.root_params
        return sum(self.layer_params(i) for i in range(self.num_layers)) + self.root_params

    @property
    def active_params(self) -> int:
        """Parameters one token touches: a dense model's total; an MoE model's total less the
        routed experts a token is not sent to (embedding matrices counted whole, as in
        total_params)."""
        if self.moe is None:
            return self.total_params
        return sum(self.layer_active_params(i) for i in range(self.num_layers)) + self.root_params

    @property
    def matmul_params(self) -> int:
        """Parameters that multiply activations per token: block linears and the LM head (MoE:
        the active ones, router included)."""
        if self.moe is None:
            return (self.num_layers * self.block_matmul_params
                    + self.vocab_size * self.hidden_size)
        return (sum(self.layer_active_matmul_params(i) for i in range(self.num_layers))
                + self.vocab_size * self.hidden_size)

    @property
    def mtp_params(self) -> int:
        """Parameters of the multi-token-prediction modules, apart from total_params: per module
        one more layer of the last layer's kind, the enorm and hnorm RMSNorms, the 2h -> h
        eh_proj and the shared head's norm (DeepSeek-V3 README_WEIGHTS.md; embedding and output
        head are shared with the model and not counted again)."""
        if not self.mtp_layers:
            return 0
        h = self.hidden_size
        layer = self.layer_params(self.num_layers - 1)
        return self.mtp_layers * (layer + 2 * h * h + 3 * self.norm_params)

    def parameter_breakdown(self) -> dict[str, int]:
        """Parameters by component; the components sum to total_params."""
        L = self.num_layers
        moe_layers = self.num_moe_layers
        out = {
            "embedding": self.embedding_params,
            "position_embedding": self.position_embedding_params,
            "lm_head": self.lm_head_params,
            "final_norm": self.norm_params,
            "attention": L * self.attention_params,
            "block_norms": L * self.norms_per_block * self.norm_params,
            "dense_mlp": self.num_dense_layers * self.dense_mlp_params,
            "routed_experts": 0, "shared_experts": 0, "routers": 0,
        }
        if self.moe is not None:
            out["routed_experts"] = moe_layers * self.moe.num_experts * self.expert_params
            out["shared_experts"] = moe_layers * self.shared_expert_params
            out["routers"] = moe_layers * self.router_params
        return out

    # ---- FLOPs --------------------------------------------------------------------------
    def attention_flops_per_token(self, seq_len: int) -> float:
        """Forward QKᵀ and AV FLOPs per token per layer, averaged over the layers:
        2·2·ctx·a·d (MLA: 2·ctx·a·(d_qk + d_v)) with ctx = `attention_context(S)`."""
        ctx = self.attention_context(seq_len)
        if self.mla is not None:
            return 2.0 * ctx * self.num_heads * (self.mla.qk_head_dim + self.mla.v_head_dim)
        return 4.0 * ctx * self.num_heads * self.d

    def block_forward_flops_per_token(self, seq_len: int) -> float:
        return 2.0 * self.block_matmul_params + self.attention_flops_per_token(seq_len)

    def root_forward_flops_per_token(self) -> float:
        """LM head matmul (the embedding lookup costs no matmul FLOPs)."""
        return 2.0 * self.vocab_size * self.hidden_size

    def _layers_forward_flops(self, seq_len: int) -> float:
        """Forward FLOPs per token of all layers."""
        if self.moe is None:
            return self.num_layers * self.block_forward_flops_per_token(seq_len)
        matmul = sum(self.layer_active_matmul_params(i) for i in range(self.num_layers))
        return 2.0 * matmul + self.num_layers * self.attention_flops_per_token(seq_len)

    def forward_flops_per_token(self, seq_len: int) -> float:
        """Forward FLOPs per token: 2 x the (active) matmul weights plus attention."""
        return self._layers_forward_flops(seq_len) + self.root_forward_flops_per_token()

    def backward_flops_per_token(self, seq_len: int) -> float:
        return 2.0 * self.forward_flops_per_token(seq_len)

    @property
    def block_linears(self) -> tuple[tuple[int, int], ...]:
        """(in_features, out_features) of one block's linears in forward execution order: q, k,
        v, o, then (gate,) up, down."""
        return self.attn_linears + self.mlp_linears

    def block_recompute_flops_per_token(self, seq_len: int, ac: str | CheckpointPolicy, *,
                                        whole: bool = False) -> float:
        """Forward FLOPs one block recomputes in its backward under checkpointing policy `ac`
        (`CheckpointPolicy` states what each mode recomputes); `whole`: a block the policy
        checkpoints whole (full, and every N-th block of layer:N) recomputes its entire forward.
        op-sac recomputes the block's 2nd, 4th, ... linear (k, o, up; without a gate k, o,
        down), never its attention kernel; attn recomputes the attention core only."""
        policy = CheckpointPolicy.parse(ac)
        if whole or policy.mode == "full":
            return self.block_forward_flops_per_token(seq_len)
        if policy.mode == "op-sac":
            return 2.0 * sum(i * o for n, (i, o) in enumerate(self.block_linears) if n % 2 == 1)
        if policy.mode == "attn":
            return self.attention_flops_per_token(seq_len)
        return 0.0

    def recompute_flops_per_token(self, seq_len: int, ac: str | CheckpointPolicy) -> float:
        """Extra forward FLOPs per token of the whole model spent recomputing activations under
        checkpointing policy `ac` (the blocks' sum; the root unit is never checkpointed)."""
        policy = CheckpointPolicy.parse(ac)
        whole = policy.checkpointed_blocks(self.num_layers)
        return (whole * self.block_recompute_flops_per_token(seq_len, policy, whole=True)
                + (self.num_layers - whole) * self.block_recompute_flops_per_token(seq_len, policy))

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
        self.check_step_modelled("FSDP units")
        blocks = [
            FsdpUnit(name=f"block{i}", params=self.block_params,
                     forward_flops_per_token=self.block_forward_flops_per_token(seq_len))
            for i in range(self.num_layers)
        ]
        root = FsdpUnit(name="root", params=self.root_params,
                        forward_flops_per_token=self.root_forward_flops_per_token())
        return [*blocks, root]

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name, "family": self.family, "hidden_size": self.hidden_size,
            "num_layers": self.num_layers, "num_heads": self.num_heads,
            "num_kv_heads": self.num_kv_heads, "head_dim": self.d,
            "intermediate_size": self.intermediate_size, "vocab_size": self.vocab_size,
            "tie_word_embeddings": self.tie_word_embeddings, "params": self.total_params,
            "block_params": None if self.moe is not None else self.block_params,
            "embedding_params": self.embedding_params,
        }
        out.update(self.parameter_counts())
        return out

    def parameter_counts(self) -> dict[str, Any]:
        """The family and the total / active parameters every model record prints (and, for the
        text model of a multimodal checkpoint, the checkpoint type)."""
        out: dict[str, Any] = {"model_family": self.family, "total_params": self.total_params,
                               "active_params": self.active_params}
        if self.text_model_of:
            out["text_model_of"] = self.text_model_of
        return out

    # ---- guards -------------------------------------------------------------------------
    def _moe(self) -> MoeSpec:
        if self.moe is None:
            raise ValueError(f"model {self.name!r} has no mixture-of-experts layers")
        return self.moe

    def _dense_only(self, what: str) -> None:
        if self.moe is not None:
            self.check_step_modelled(what)


@dataclass(frozen=True, kw_only=True, slots=True)
class FsdpUnit:
    """One FSDP unit: a group of parameters gathered and reduced together."""

    name: str
    """Unit name (block{i} or root)."""
    params: int
    """Parameters in the unit."""
    forward_flops_per_token: float
    """Forward FLOPs per token spent in the unit."""


# ---- family layouts ------------------------------------------------------------------------

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
"""Layout facts per architecture family that config.json files leave implicit: the families a
catalog row, a benchmark space or a dataset row may name (the torch benchmark model builds each
of them, tests/test_bench_model.py)."""

CONFIG_FAMILY_LAYOUT: dict[str, dict[str, Any]] = {
    # Qwen3: a Llama layout with a per-head RMSNorm on q and on k (q_norm, k_norm of head_dim)
    "qwen3": {"qk_norm": "head"},
    # Gemma-3: Gemma-2's four norms per block, per-head q/k RMSNorm, tied embeddings; five
    # sliding-window layers to one global (the window pattern comes from the config)
    "gemma3": {"tie_word_embeddings": True, "norms_per_block": 4, "qk_norm": "head"},
    # OLMo-2: post-attention and post-feed-forward RMSNorm (two per block), RMSNorm over the
    # whole q and the whole k (q_norm of a·d, k_norm of a_kv·d)
    "olmo2": {"qk_norm": "full"},
    # GPT-2: LayerNorm with bias, biases on every linear, plain GELU MLP, tied LM head, learned
    # positions (n_positions, from the config)
    "gpt2": {"gated_mlp": False, "qkv_bias": True, "out_bias": True, "mlp_bias": True,
             "norm": "layer", "tie_word_embeddings": True},
    # GPT-NeoX / Pythia: two LayerNorms per block (parallel residual), biases everywhere, plain
    # MLP, untied embed_out without bias
    "gpt_neox": {"gated_mlp": False, "qkv_bias": True, "out_bias": True, "mlp_bias": True,
                 "norm": "layer"},
    # StarCoder2: LayerNorm with bias, plain GELU MLP (c_fc, c_proj); biases from use_bias
    "starcoder2": {"gated_mlp": False, "norm": "layer"},
    # Granite: a Llama layout (its four multipliers change no parameter)
    "granite": {},
    # mixture-of-experts families (MoeSpec from the config)
    "mixtral": {},
    "qwen2_moe": {"qkv_bias": True},
    "qwen3_moe": {"qk_norm": "head"},
    "deepseek_v3": {},
    # Llama-4: q/k L2 norm without weights; chunked attention on its RoPE layers
    "llama4": {},
    # gpt-oss: biases on q, k, v and o, a learned sink logit per head
    "gpt_oss": {"qkv_bias": True, "out_bias": True, "attention_sinks": True},
}
"""Layouts of the families only a Hugging Face config.json describes completely (windows,
learned positions, experts come from the config), not usable in catalog rows or benchmark
spaces."""

MOE_FAMILIES = frozenset({"mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v3", "llama4",
                          "gpt_oss"})
"""Families whose configs describe mixture-of-experts layers."""
