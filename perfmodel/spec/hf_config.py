"""Hugging Face config.json -> ModelSpec: one explicit parameter layout per `model_type`.

No prefix guessing: a model_type is either in MODEL_TYPE_FAMILY (its layout is
`arch.FAMILY_LAYOUT` / `arch.CONFIG_FAMILY_LAYOUT` plus what the config states) or refused with a
ConfigError (exit 2) naming the file and the field. Every value is type-checked: integers must be
JSON integers, booleans JSON booleans (`"false"` in quotes is refused, not read as true).

Multimodal checkpoints (NESTED_TEXT_MODEL_TYPES: Gemma-3, Llama-4) are read through their
`text_config`: the spec is the text model (`ModelSpec.text_model_of` names the checkpoint type;
the vision tower is not counted). Values such a config leaves out take the defaults of the
transformers configuration class (CONFIG_DEFAULTS, each with its source).

Mixture-of-experts types build a `MoeSpec` (experts, shared experts, router, which layers are
MoE); DeepSeek-V3 adds its multi-head latent attention (`MlaSpec`) and reports its
multi-token-prediction module apart (`ModelSpec.mtp_layers`).

Checked by: tests/test_arch.py (malformed and refused configs), tests/test_model_configs.py (one
published config per model type, tests/data/configs/README.md; string booleans; the sparse
Gemma-3 text_config against its full form).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from perfmodel.spec.arch import (
    CONFIG_FAMILY_LAYOUT,
    FAMILY_LAYOUT,
    MOE_FAMILIES,
    SHAPE_LIMITS,
    MlaSpec,
    ModelSpec,
    MoeSpec,
)
from perfmodel.spec.errors import ConfigError
from perfmodel.spec.inputs import check_limit, load_json, strict_bool

MODEL_TYPE_FAMILY: dict[str, str] = {
    "llama": "llama", "mistral": "mistral", "yi": "yi", "qwen2": "qwen2", "gemma": "gemma",
    "gemma2": "gemma2", "phi": "phi", "phi-msft": "phi", "phi3": "phi3",
    # issue 26: dense
    "qwen3": "qwen3", "gemma3_text": "gemma3", "olmo2": "olmo2", "gpt2": "gpt2",
    "gpt_neox": "gpt_neox", "starcoder2": "starcoder2", "granite": "granite",
    # issue 26: mixture of experts
    "mixtral": "mixtral", "qwen2_moe": "qwen2_moe", "qwen3_moe": "qwen3_moe",
    "deepseek_v3": "deepseek_v3", "llama4_text": "llama4", "gpt_oss": "gpt_oss",
}
"""Hugging Face `model_type` -> family, explicitly (no prefix matching: phi3 is not phi)."""

NESTED_TEXT_MODEL_TYPES: dict[str, tuple[str, ...]] = {
    "gemma3": ("gemma3_text",),
    "llama4": ("llama4_text", "llama4"),
}
"""Multimodal checkpoint types read through `text_config` -> the text model types accepted there
(the first is assumed when `text_config` names none; Llama-4 checkpoints also write
"llama4")."""

UNSUPPORTED_MODEL_TYPES: dict[str, str] = {
    "deepseek_v2": "a mixture-of-experts model", "dbrx": "a mixture-of-experts model",
    "olmoe": "a mixture-of-experts model", "phimoe": "a mixture-of-experts model",
    "granitemoe": "a mixture-of-experts model",
    "jamba": "a hybrid state-space / mixture-of-experts model", "mamba": "a state-space model",
    "mamba2": "a state-space model", "falcon_mamba": "a state-space model",
    "rwkv": "a recurrent (RWKV) model", "recurrent_gemma": "a recurrent model",
}
"""Known model types whose parameter layout ShardMeter does not model yet."""

MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_intermediate_size")
"""config.json keys that mark a mixture-of-experts model: a dense model_type carrying one is
refused (it would otherwise be priced as a dense model)."""

TRANSFORMERS_SOURCE = "huggingface/transformers"

CONFIG_DEFAULTS: dict[str, dict[str, Any]] = {
    # Gemma3TextConfig.__init__ (src/transformers/models/gemma3/configuration_gemma3.py at
    # 008f5c8c29be84d4721dc6d1e0fcd72300580be4): Gemma-3 multimodal checkpoints write only the
    # fields that differ from these into text_config
    "gemma3": {"vocab_size": 262208, "num_attention_heads": 8, "num_key_value_heads": 4,
               "head_dim": 256, "sliding_window": 4096, "sliding_window_pattern": 6,
               "tie_word_embeddings": True},
    # Starcoder2Config (configuration_starcoder2.py at 008e574391258935f3ecc3035c882e73bbcac419)
    "starcoder2": {"use_bias": True, "tie_word_embeddings": True},
    # GPT2Config: n_inner None means 4h; tie_word_embeddings is PretrainedConfig's default (true)
    "gpt2": {"tie_word_embeddings": True},
    # Llama4TextConfig: every 4th layer is NoPE (global), the others use RoPE with chunked
    # attention of attention_chunk_size; moe_layers = range(step - 1, L, step)
    "llama4": {"interleave_moe_layer_step": 1, "no_rope_layer_interval": 4,
               "attention_chunk_size": 8192, "tie_word_embeddings": False},
}
"""Values a config.json may omit, per family, as the transformers configuration class sets them."""

_HF_KEYS = {
    "hidden_size": ("hidden_size", "n_embd", "d_model"),
    "num_layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "num_heads": ("num_attention_heads", "n_head"),
    "intermediate_size": ("intermediate_size", "n_inner"),
    "vocab_size": ("vocab_size",),
}


class _Config:
    """A config.json object with typed getters whose errors name the file and the field."""

    def __init__(self, raw: dict[str, Any], path: str, defaults: dict[str, Any]) -> None:
        self.raw, self.path, self.defaults = raw, path, defaults

    def has(self, key: str) -> bool:
        return self.raw.get(key) is not None

    def value(self, key: str) -> Any:
        if self.raw.get(key) is not None:
            return self.raw[key]
        return self.defaults.get(key)

    def int_(self, key: str, *, least: int = 1, default: int | None = None) -> int:
        value = self.value(key)
        if value is None:
            if default is not None:
                return default
            raise ConfigError(f"{self.path}: required field {key!r} is missing",
                              hint=f"add {key!r} to {self.path} (a Hugging Face config.json).")
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            kind = {1: "a positive integer", 0: "a non-negative integer"}.get(
                least, f"an integer >= {least}")
            raise ConfigError(f"{self.path}: field {key!r} must be {kind}, got {value!r}",
                              hint=f"fix {key!r} in {self.path}.")
        return value

    def opt_int(self, key: str, *, least: int = 1) -> int | None:
        return self.int_(key, least=least) if self.value(key) is not None else None

    def bool_(self, key: str, default: bool) -> bool:
        value = self.value(key)
        if value is None:
            return default
        return strict_bool(value, field=key, where=self.path, error=ConfigError)

    def int_list(self, key: str, *, length: int | None = None) -> list[int] | None:
        value = self.value(key)
        if value is None:
            return None
        if not isinstance(value, list) or any(
                isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in value):
            raise ConfigError(f"{self.path}: field {key!r} must be a list of integers >= 0, "
                              f"got {value!r}", hint=f"fix {key!r} in {self.path}.")
        if length is not None and len(value) != length:
            raise ConfigError(f"{self.path}: field {key!r} has {len(value)} entries for "
                              f"{length} layers", hint=f"give one entry per layer in {key!r}.")
        return list(value)

    def first_int(self, field_name: str) -> int:
        present = [k for k in _HF_KEYS[field_name] if self.has(k)]
        defaulted = [k for k in _HF_KEYS[field_name] if k in self.defaults]
        for key in present[:1] or defaulted[:1]:
            value = self.int_(key)
            if field_name in SHAPE_LIMITS:
                check_limit(SHAPE_LIMITS[field_name], value, field=key, where=self.path,
                            error=ConfigError)
            return value
        raise ConfigError(f"{self.path}: required field {_HF_KEYS[field_name][0]!r} is missing",
                          hint=f"add {_HF_KEYS[field_name][0]!r} to {self.path} "
                               "(a Hugging Face config.json).")


def _model_type(raw: dict[str, Any], path: str) -> str:
    if "model_type" not in raw:
        raise ConfigError(f"{path}: field 'model_type' is missing",
                          hint="add \"model_type\" (one of "
                               f"{', '.join(MODEL_TYPE_FAMILY)}) to {path}.")
    value = raw["model_type"]
    if not isinstance(value, str):
        raise ConfigError(f"{path}: field 'model_type' must be a string, got {value!r}",
                          hint=f"fix 'model_type' in {path}.")
    return value.lower()


def _unwrap(raw: dict[str, Any], path: str) -> tuple[dict[str, Any], str, str, str]:
    """(the text model's config, its model_type, the outer multimodal type or '', the path to
    name in errors)."""
    model_type = _model_type(raw, path)
    if model_type not in NESTED_TEXT_MODEL_TYPES:
        return raw, model_type, "", path
    text = raw.get("text_config")
    where = f"{path} (text_config)"
    if not isinstance(text, dict):
        raise ConfigError(f"{path}: model_type {model_type!r} is a multimodal checkpoint and its "
                          "'text_config' object is missing",
                          hint=f"give the text model's fields under \"text_config\" in {path}.")
    accepted = NESTED_TEXT_MODEL_TYPES[model_type]
    inner = text.get("model_type", accepted[0])
    if not isinstance(inner, str) or inner.lower() not in accepted:
        raise ConfigError(f"{where}: model_type {inner!r} is not the text model of a "
                          f"{model_type!r} checkpoint",
                          hint=f"use one of {', '.join(accepted)} in text_config.")
    return text, accepted[0], model_type, where


def _family(model_type: str, raw: dict[str, Any], path: str) -> str:
    """The family of a config's `model_type`; ConfigError (exit 2) for anything not modelled."""
    if model_type in UNSUPPORTED_MODEL_TYPES:
        raise ConfigError(f"{path}: model_type {model_type!r} is "
                          f"{UNSUPPORTED_MODEL_TYPES[model_type]}, which ShardMeter does not "
                          "model yet",
                          hint="use a config of one of the modelled types: "
                               f"{', '.join(MODEL_TYPE_FAMILY)}.")
    if model_type not in MODEL_TYPE_FAMILY:
        raise ConfigError(f"{path}: model_type {model_type!r} has no known parameter layout",
                          hint=f"use one of {', '.join(MODEL_TYPE_FAMILY)}, or add a catalog row "
                               "with an explicit shape.")
    family = MODEL_TYPE_FAMILY[model_type]
    if family not in MOE_FAMILIES:
        moe = [k for k in MOE_KEYS if raw.get(k)]
        if moe:
            raise ConfigError(f"{path}: model_type {model_type!r} is dense but the config has "
                              f"the mixture-of-experts field {moe[0]!r} = {raw[moe[0]]!r}, a "
                              "mixture-of-experts model ShardMeter would otherwise price as "
                              "dense",
                              hint="use the config's real mixture-of-experts model_type (e.g. "
                                   "mixtral, qwen2_moe, qwen3_moe, deepseek_v3) or remove "
                                   f"{moe[0]!r}.")
    return family


# ---- windows -------------------------------------------------------------------------------

_LAYER_TYPES = ("full_attention", "sliding_attention", "chunked_attention")


def _windows(c: _Config, family: str, num_layers: int) -> tuple[int, tuple[int, ...] | None]:
    """(sliding_window, sliding_layers) of a config: per-layer `layer_types` when given, else
    the family's rule."""
    layer_types = c.value("layer_types")
    if layer_types is not None:
        if (not isinstance(layer_types, list) or len(layer_types) != num_layers
                or any(t not in _LAYER_TYPES for t in layer_types)):
            raise ConfigError(f"{c.path}: field 'layer_types' must list one of "
                              f"{', '.join(_LAYER_TYPES)} per layer ({num_layers}), got "
                              f"{layer_types!r}", hint=f"fix 'layer_types' in {c.path}.")
        sizes = {"sliding_attention": c.opt_int("sliding_window") or 0,
                 "chunked_attention": c.opt_int("attention_chunk_size") or 0}
        used = {sizes[t] for t in layer_types if t != "full_attention"}
        if 0 in used:
            raise ConfigError(f"{c.path}: 'layer_types' has windowed layers but their size "
                              "('sliding_window' / 'attention_chunk_size') is missing",
                              hint=f"give the window size in {c.path}.")
        if len(used) > 1:
            raise ConfigError(f"{c.path}: windowed layers of different sizes {sorted(used)} are "
                              "not modelled", hint="use one window size.")
        if not used:
            return 0, None
        return used.pop(), tuple(i for i, t in enumerate(layer_types) if t != "full_attention")
    if family in ("mistral", "starcoder2", "mixtral"):
        window = c.opt_int("sliding_window")
        return (window, None) if window else (0, None)
    if family in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe"):
        # Qwen2Config: with use_sliding_window, layers from max_window_layers on are windowed
        # (the Qwen configuration classes default max_window_layers to 28)
        window = c.opt_int("sliding_window")
        if not c.bool_("use_sliding_window", False) or not window:
            return 0, None
        first = c.int_("max_window_layers", least=0, default=28)
        layers = tuple(range(first, num_layers))
        return (window, layers) if layers else (0, None)
    if family == "gemma3":
        key = next((k for k in ("sliding_window_pattern", "_sliding_window_pattern")
                    if c.has(k)), "sliding_window_pattern")
        pattern = c.value(key)
        if isinstance(pattern, bool) or not isinstance(pattern, int) or pattern < 1:
            raise ConfigError(f"{c.path}: field {key!r} must be a positive integer, got "
                              f"{pattern!r}", hint=f"fix {key!r} in {c.path}.")
        window = c.int_("sliding_window")
        # Gemma3: layer i is global when (i + 1) is a multiple of the pattern (5:1 for 6)
        return window, tuple(i for i in range(num_layers) if (i + 1) % pattern)
    if family == "llama4":
        given = c.int_list("no_rope_layers")
        interval = c.int_("no_rope_layer_interval")
        # [] means "not given" (transformers' backwards compatibility)
        rope = given or [int((i + 1) % interval != 0) for i in range(num_layers)]
        if len(rope) != num_layers:
            raise ConfigError(f"{c.path}: field 'no_rope_layers' has {len(rope)} entries for "
                              f"{num_layers} layers", hint="give one entry per layer.")
        chunk = c.int_("attention_chunk_size")
        # RoPE layers attend within chunks of attention_chunk_size; NoPE layers globally
        return chunk, tuple(i for i, r in enumerate(rope) if r)
    return 0, None


# ---- mixture of experts --------------------------------------------------------------------

def _moe(c: _Config, family: str, num_layers: int) -> tuple[MoeSpec, int]:
    """(the MoE layers, the width of the dense layers' MLP)."""
    if family == "mixtral":
        f = c.int_("intermediate_size")
        return MoeSpec(num_experts=c.int_("num_local_experts"),
                       experts_per_token=c.int_("num_experts_per_tok"),
                       expert_intermediate_size=f, moe_layers=tuple(range(num_layers))), f
    if family in ("qwen2_moe", "qwen3_moe"):
        skip = set(c.int_list("mlp_only_layers") or [])
        step = c.int_("decoder_sparse_step", default=1)
        layers = tuple(i for i in range(num_layers) if i not in skip and (i + 1) % step == 0)
        shared = c.int_("shared_expert_intermediate_size", least=0, default=0) \
            if family == "qwen2_moe" else 0
        return MoeSpec(num_experts=c.int_("num_experts"),
                       experts_per_token=c.int_("num_experts_per_tok"),
                       expert_intermediate_size=c.int_("moe_intermediate_size"), moe_layers=layers,
                       num_shared_experts=1 if shared else 0, shared_intermediate_size=shared,
                       shared_expert_gate=bool(shared)), c.int_("intermediate_size")
    if family == "deepseek_v3":
        first = c.int_("first_k_dense_replace", least=0, default=0)
        freq = c.int_("moe_layer_freq", default=1)
        f_e = c.int_("moe_intermediate_size")
        shared = c.int_("n_shared_experts", least=0, default=0)
        return MoeSpec(num_experts=c.int_("n_routed_experts"),
                       experts_per_token=c.int_("num_experts_per_tok"),
                       expert_intermediate_size=f_e,
                       moe_layers=tuple(i for i in range(first, num_layers) if i % freq == 0),
                       num_shared_experts=shared, shared_intermediate_size=f_e if shared else 0,
                       router_bias=True), c.int_("intermediate_size")
    if family == "llama4":
        f = c.int_("intermediate_size")
        step = c.int_("interleave_moe_layer_step")
        listed = c.int_list("moe_layers")
        moe_layers = tuple(listed) if listed is not None else tuple(
            range(step - 1, num_layers, step))
        return MoeSpec(num_experts=c.int_("num_local_experts"),
                       experts_per_token=c.int_("num_experts_per_tok"),
                       expert_intermediate_size=f, moe_layers=moe_layers, num_shared_experts=1,
                       shared_intermediate_size=f), c.int_("intermediate_size_mlp")
    if family == "gpt_oss":
        f = c.int_("intermediate_size")
        k = c.int_("num_experts_per_tok") if c.has("num_experts_per_tok") \
            else c.int_("experts_per_token")
        return MoeSpec(num_experts=c.int_("num_local_experts"), experts_per_token=k,
                       expert_intermediate_size=f, moe_layers=tuple(range(num_layers)),
                       router_bias=True, expert_bias=True), f
    raise ConfigError(f"{c.path}: family {family!r} has no mixture-of-experts layout",
                      hint="report a bug: MOE_FAMILIES and _moe disagree.")


def _mla(c: _Config) -> MlaSpec:
    return MlaSpec(q_lora_rank=c.opt_int("q_lora_rank") or 0,
                   kv_lora_rank=c.int_("kv_lora_rank"),
                   qk_nope_head_dim=c.int_("qk_nope_head_dim"),
                   qk_rope_head_dim=c.int_("qk_rope_head_dim"), v_head_dim=c.int_("v_head_dim"))


# ---- the spec ------------------------------------------------------------------------------

def spec_from_hf_config(config: dict[str, Any], *, name: str, path: str = "<config>") -> ModelSpec:
    """Build a ModelSpec from a Hugging Face config.json dict: an explicit layout per model_type
    (MODEL_TYPE_FAMILY); multimodal checkpoints through their text_config; state-space, unlisted
    mixture-of-experts and unknown types raise ConfigError."""
    raw, model_type, outer, where = _unwrap(config, path)
    family = _family(model_type, raw, where)
    c = _Config(raw, where, CONFIG_DEFAULTS.get(family, {}))
    layout = dict(FAMILY_LAYOUT[family] if family in FAMILY_LAYOUT
                  else CONFIG_FAMILY_LAYOUT[family])
    fields = {k: c.first_int(k) for k in _HF_KEYS if k != "intermediate_size"}
    if any(c.has(k) for k in _HF_KEYS["intermediate_size"]):
        fields["intermediate_size"] = c.first_int("intermediate_size")
    else:  # GPT-style configs (phi-msft, gpt2: n_inner null) default to 4h
        fields["intermediate_size"] = 4 * fields["hidden_size"]
    kv = c.int_("num_key_value_heads", default=fields["num_heads"])
    head_dim = c.int_("head_dim", least=0, default=0)
    if "tie_word_embeddings" in raw or "tie_word_embeddings" in c.defaults:
        layout["tie_word_embeddings"] = c.bool_("tie_word_embeddings",
                                                bool(layout.get("tie_word_embeddings", False)))
    if c.bool_("attention_bias", False):
        layout["qkv_bias"] = layout["out_bias"] = True
    if c.bool_("mlp_bias", False):
        layout["mlp_bias"] = True
    if family == "starcoder2":
        bias = c.bool_("use_bias", True)
        layout.update(qkv_bias=bias, out_bias=bias, mlp_bias=bias)
    extra: dict[str, Any] = {}
    if family == "gpt2":
        extra["position_embeddings"] = c.int_("n_positions", default=1024)
    if family == "llama4":
        c.bool_("use_qk_norm", True)  # checked only: Llama-4's q/k L2 norm has no weights
    window, windowed = _windows(c, family, fields["num_layers"])
    if window:
        extra.update(sliding_window=window, sliding_layers=windowed)
    if family in MOE_FAMILIES:
        moe, dense_width = _moe(c, family, fields["num_layers"])
        extra["moe"] = moe
        fields["intermediate_size"] = dense_width
    if family == "deepseek_v3":
        extra["mla"] = _mla(c)
        extra["mtp_layers"] = c.int_("num_nextn_predict_layers", least=0, default=0)
    try:
        return ModelSpec(name=name, family=family, hidden_size=fields["hidden_size"],
                         num_layers=fields["num_layers"], num_heads=fields["num_heads"],
                         num_kv_heads=kv, head_dim=head_dim,
                         intermediate_size=fields["intermediate_size"],
                         vocab_size=fields["vocab_size"], text_model_of=outer, **layout, **extra)
    except ConfigError as err:  # shape inconsistencies: name the file, not only the model
        raise ConfigError(f"{where}: {err.message}", hint=err.hint) from err


def load_hf_config(path: str | Path) -> ModelSpec:
    """Load a Hugging Face config.json file (malformed files raise ConfigError naming the file)."""
    p = Path(path)
    config = load_json(p, what="model config (a Hugging Face config.json)", error=ConfigError)
    if not isinstance(config, dict):
        raise ConfigError(f"{p}: expected a JSON object, got {type(config).__name__}",
                          hint="pass a Hugging Face config.json file.")
    name = p.stem if p.name != "config.json" else p.parent.name or str(p)
    return spec_from_hf_config(config, name=name, path=str(p))
