"""Architecture arithmetic: parameter counts, HF config loading, FLOPs, FSDP units."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfmodel.spec.arch import ModelSpec
from perfmodel.spec.catalog import get_model
from perfmodel.spec.errors import ConfigError
from perfmodel.spec.hf_config import load_hf_config

CONFIGS = Path(__file__).parent / "data" / "configs"

# Published totals (model cards / HF safetensors metadata), in parameters.
PUBLISHED = {
    "Llama-3-8B": 8.03e9,
    "Llama-3.1-70B": 70.6e9,
    "Llama-3.1-405B": 405.9e9,
    "Mistral-7B-v0.1": 7.24e9,
    "Qwen2.5-7B": 7.62e9,
    "Gemma-2B": 2.51e9,
    "Phi-1.5": 1.42e9,
    "SmolLM-360M": 0.362e9,
    "Llama-3.2-1B": 1.24e9,
}


@pytest.mark.parametrize(("name", "published"), PUBLISHED.items())
def test_params_match_published_within_1pct(name: str, published: float) -> None:
    params = get_model(name).total_params
    assert abs(params - published) / published < 0.01, (name, params, published)


# config.json fixture -> catalog row with the same shape
CONFIG_TO_CATALOG = {
    "llama3_8b.json": "Llama-3-8B",
    "llama32_1b.json": "Llama-3.2-1B",
    "mistral_7b.json": "Mistral-7B-v0.1",
    "qwen25_7b.json": "Qwen2.5-7B",
    "gemma_2b.json": "Gemma-2B",
    "phi15.json": "Phi-1.5",
    "phi15_msft.json": "Phi-1.5",
    "smollm_360m.json": "SmolLM-360M",
}
SHAPE_FIELDS = ("family", "hidden_size", "num_layers", "num_heads", "num_kv_heads", "d",
                "intermediate_size", "vocab_size", "tie_word_embeddings", "gated_mlp",
                "qkv_bias", "out_bias", "mlp_bias", "norm", "norms_per_block", "lm_head_bias")


@pytest.mark.parametrize(("filename", "catalog_name"), CONFIG_TO_CATALOG.items())
def test_hf_config_matches_catalog_row(filename: str, catalog_name: str) -> None:
    from_config = load_hf_config(CONFIGS / filename)
    from_catalog = get_model(catalog_name)
    assert from_config.total_params == from_catalog.total_params
    for field in SHAPE_FIELDS:
        assert getattr(from_config, field) == getattr(from_catalog, field), field


def test_hf_config_name_is_file_stem() -> None:
    assert load_hf_config(CONFIGS / "llama3_8b.json").name == "llama3_8b"


def test_tiny_llama_params_by_hand() -> None:
    # tiny-llama: h=64, L=2, a=4, a_kv=2 (d=16, kv width 32), f=176, V=512, untied, RMSNorm.
    spec = get_model("tiny-llama")
    attn = 64 * 64 + 2 * 64 * 32 + 64 * 64          # q, k, v, o
    mlp = 3 * 64 * 176                              # gate, up, down
    block = attn + mlp + 2 * 64                     # two RMSNorm weights
    root = 512 * 64 + 64 + 512 * 64                 # embedding, final norm, LM head
    assert spec.block_params == block
    assert spec.total_params == 2 * block + root == 158_016


def test_tiny_phi_params_by_hand() -> None:
    # tiny-phi: h=64, L=2, a=4 (MHA), f=256, V=512; plain MLP, LayerNorm, biases everywhere,
    # one norm per (parallel) block, LM-head bias.
    spec = get_model("tiny-phi")
    attn = 4 * 64 * 64 + 3 * 64 + 64                # q, k, v, dense weights + qkv and dense biases
    mlp = 2 * 64 * 256 + 256 + 64                   # fc1, fc2 weights + biases
    block = attn + mlp + 2 * 64                     # one LayerNorm (weight + bias)
    root = 512 * 64 + 2 * 64 + 512 * 64 + 512       # embedding, final LN, LM head + bias
    assert spec.total_params == 2 * block + root == 165_888


def test_tied_embedding_counted_once() -> None:
    untied = get_model("tiny-gqa")
    assert untied.tie_word_embeddings
    # tiny-gqa: V=1024, h=128 -> the root is embedding + final norm only
    assert untied.root_params == 1024 * 128 + 128


def test_forward_flops_per_token_by_hand() -> None:
    # tiny-llama at S=128: per layer 2 x block matmul params + 2·2·S·a·d; plus the LM head.
    spec = get_model("tiny-llama")
    seq_len = 128
    block_matmul = (64 * 64 + 2 * 64 * 32 + 64 * 64) + 3 * 64 * 176   # 46,080
    attention = 2 * 2 * 128 * 4 * 16                                    # QKᵀ and AV: 32,768
    lm_head = 2 * 512 * 64
    forward = 2 * (2 * block_matmul + attention) + lm_head
    assert forward == 315_392
    assert spec.forward_flops_per_token(seq_len) == forward
    assert spec.backward_flops_per_token(seq_len) == 2 * forward
    assert spec.train_flops_per_token(seq_len) == 3 * forward
    full = 3 * forward + 2 * (2 * block_matmul + attention)           # blocks recomputed
    assert spec.train_flops_per_token(seq_len, "full") == full
    assert spec.train_flops_per_token(seq_len, "attn") == 3 * forward + 2 * attention
    # op-sac recomputes the 2nd, 4th, 6th linear of the forward order q, k, v, o, gate, up, down
    k_o_up = 64 * 32 + 64 * 64 + 64 * 176
    assert spec.train_flops_per_token(seq_len, "op-sac") == 3 * forward + 2 * 2 * k_o_up
    assert spec.train_flops_per_token(seq_len, "selective") == spec.train_flops_per_token(
        seq_len, "op-sac")  # the old name reads as torchtitan's default
    assert spec.train_flops_per_token(seq_len, "layer:2") == 3 * forward + (2 * block_matmul
                                                                           + attention)
    assert spec.train_flops_per_token(seq_len, "layer:3") == 3 * forward
    assert spec.model_flops_per_token(seq_len) == 3 * forward


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-phi", "Gemma-2B", "Llama-3.1-70B"])
def test_fsdp_units_sum_to_total(name: str) -> None:
    spec = get_model(name)
    units = spec.fsdp_units(seq_len=256)
    assert len(units) == spec.num_layers + 1
    assert sum(u.params for u in units) == spec.total_params
    flops = sum(u.forward_flops_per_token for u in units)
    assert flops == pytest.approx(spec.forward_flops_per_token(256))


def test_explicit_head_dim_changes_widths() -> None:
    # head_dim given explicitly and different from h/a = 32: q width a·d = 96, kv width 48.
    spec = ModelSpec(name="x", hidden_size=64, num_layers=1, num_heads=2, num_kv_heads=1,
                     head_dim=48, intermediate_size=128, vocab_size=10)
    assert (spec.q_dim, spec.kv_dim) == (96, 48)
    assert spec.attn_matmul_params == 64 * 96 + 2 * 64 * 48 + 96 * 64


@pytest.mark.parametrize(("field", "value"), [
    ("hidden_size", 0), ("num_layers", -1), ("num_heads", 2.5), ("vocab_size", True),
])
def test_model_spec_rejects_bad_sizes(field: str, value: object) -> None:
    shape = dict(name="x", hidden_size=64, num_layers=1, num_heads=2, num_kv_heads=1,
                 intermediate_size=128, vocab_size=10)
    shape[field] = value
    with pytest.raises(ConfigError, match=field):
        ModelSpec(**shape)  # type: ignore[arg-type]


@pytest.mark.parametrize(("filename", "needles"), [
    ("bad_json.json", ["bad_json.json", "not valid JSON"]),
    ("missing_field.json", ["missing_field.json", "hidden_size", "missing"]),
    ("negative_value.json", ["negative_value.json", "num_hidden_layers", "-32"]),
    ("wrong_type.json", ["wrong_type.json", "hidden_size", "'4096'"]),
    ("zero_kv_heads.json", ["zero_kv_heads.json", "num_key_value_heads", "0"]),
    ("bad_heads.json", ["bad_heads.json", "num_key_value_heads 6"]),
    ("not_object.json", ["not_object.json", "JSON object"]),
])
def test_malformed_configs_raise_config_error(filename: str, needles: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        load_hf_config(CONFIGS / filename)
    for needle in needles:
        assert needle in str(info.value)
    assert "To fix:" in str(info.value)


# Published totals of models loaded from their config.json (tests/data/configs/README.md).
PUBLISHED_FROM_CONFIG = {"phi3_mini_4k.json": 3.82e9, "gemma2_2b.json": 2.61e9}


@pytest.mark.parametrize(("filename", "published"), PUBLISHED_FROM_CONFIG.items())
def test_config_totals_match_published(filename: str, published: float) -> None:
    spec = load_hf_config(CONFIGS / filename)
    assert abs(spec.total_params - published) / published < 0.005, (filename, spec.total_params)


def test_phi3_is_not_the_phi2_layout() -> None:
    spec = load_hf_config(CONFIGS / "phi3_mini_4k.json")
    assert (
        spec.family == "phi3"
        and spec.gated_mlp
        and spec.norm == "rms"
        and spec.norms_per_block == 2
    )
    assert not (
        spec.qkv_bias
        or spec.out_bias
        or spec.mlp_bias
        or spec.lm_head_bias
        or spec.tie_word_embeddings
    )
    # by hand: per block q, k, v, o (3072²) + gate, up, down (3072·8192) + two RMSNorm weights
    block = 4 * 3072**2 + 3 * 3072 * 8192 + 2 * 3072
    assert spec.total_params == 32 * block + 2 * 32064 * 3072 + 3072 == 3_821_079_552


def test_gemma2_has_four_norms_per_block() -> None:
    spec = load_hf_config(CONFIGS / "gemma2_2b.json")
    assert spec.family == "gemma2" and spec.norms_per_block == 4 and spec.tie_word_embeddings
    attn = 2304 * 8 * 256 + 2 * 2304 * 4 * 256 + 8 * 256 * 2304
    block = attn + 3 * 2304 * 9216 + 4 * 2304
    assert spec.total_params == 26 * block + 256000 * 2304 + 2304 == 2_614_341_888


@pytest.mark.parametrize(("filename", "needles"), [
    ("mamba_2_8b.json", ["mamba", "state-space", "does not model"]),
    ("moe_as_llama.json", ["mixture-of-experts", "num_local_experts", "dense"]),
])
def test_unsupported_architectures_raise_config_error(filename: str, needles: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        load_hf_config(CONFIGS / filename)
    for needle in needles:
        assert needle in str(info.value)
    assert "To fix:" in str(info.value)


def test_unknown_or_missing_model_type_is_refused(tmp_path: Path) -> None:
    import json

    base = json.loads((CONFIGS / "llama3_8b.json").read_text())
    for model_type, needle in (
        ("gpt_bigcode", "no known parameter layout"),
        (None, "'model_type' is missing"),
    ):
        cfg = dict(base)
        if model_type is None:
            cfg.pop("model_type")
        else:
            cfg["model_type"] = model_type
        path = tmp_path / "c.json"
        path.write_text(json.dumps(cfg))
        with pytest.raises(ConfigError, match=needle):
            load_hf_config(path)


def test_unsupported_config_exits_2_on_the_cli(run_cli) -> None:
    result = run_cli(
        "predict", str(CONFIGS / "mamba_2_8b.json"), "--gpu", "A100-PCIe-80GB", "--seq-len", "512"
    )
    assert result.code == 2 and "To fix:" in result.err and "Traceback" not in result.err
