"""Issue 26 (part 1): today's Hugging Face configs and mixture-of-experts models.

* parsed parameter counts against the shipped, sourced table catalogs/published/parameter-counts.csv
  (within 1 % on every row);
* each layout's arithmetic by hand (q/k norms, learned positions, window patterns, MLA, experts);
* windowed attention FLOPs and MoE FLOPs from the active parameters;
* dense models keep their FLOPs bit for bit (the pre-issue formula);
* every modelled mixture-of-experts type is priced from its experts (active FLOPs, every expert
  gathered and sharded), never as a dense model; DeepSeek-V3 (MLA attention, not modelled) is
  refused by predict / simulate / sweep / memory / the island table / the FSDP units;
* booleans must be JSON booleans; nested multimodal configs are read as their text model.
"""

from __future__ import annotations

import csv
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from perfmodel import api
from perfmodel.costs.features import unit_feature_affine
from perfmodel.costs.memory import memory_breakdown
from perfmodel.spec.arch import ModelSpec
from perfmodel.spec.catalog import get_model, load_models
from perfmodel.spec.errors import ConfigError, UserInputError
from perfmodel.spec.hf_config import load_hf_config
from perfmodel.spec.paths import catalog_dir
from perfmodel.tables import ClusterRequest, island_table_for

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = Path(__file__).parent / "data" / "configs"
TABLE = catalog_dir() / "published" / "parameter-counts.csv"
TOLERANCE = 0.01

MOE = {"mixtral": "mixtral_8x7b", "qwen2_moe": "qwen1_5_moe_a2_7b", "qwen3_moe": "qwen3_30b_a3b",
       "deepseek_v3": "deepseek_v3", "llama4": "llama4_maverick", "gpt_oss": "gpt_oss_20b"}
"""One fixture per mixture-of-experts model type."""


def _rows() -> list[dict[str, str]]:
    with TABLE.open(newline="") as fh:
        return list(csv.DictReader(fh))


def _load(name: str) -> ModelSpec:
    return load_hf_config(CONFIGS / name / "config.json")


def _parsed(spec: ModelSpec, quantity: str, convention: str) -> int:
    if quantity == "total":
        return spec.total_params
    if quantity == "mtp":
        assert convention == "mtp_unique"
        return spec.mtp_params
    assert quantity == "active"
    if convention == "no_input_embedding":
        return spec.active_params - spec.embedding_params
    assert convention == "all"
    return spec.active_params


# ---- the sourced table ---------------------------------------------------------------------

@pytest.mark.parametrize("row", _rows(), ids=lambda r: f"{r['model']}-{r['quantity']}")
def test_parsed_counts_within_1pct_of_published(row: dict[str, str]) -> None:
    spec = load_hf_config(ROOT / row["config"])
    parsed = _parsed(spec, row["quantity"], row["convention"])
    published = float(row["published_params"])
    assert abs(parsed - published) / published < TOLERANCE, (row["model"], parsed, published)


def test_table_keeps_its_sources() -> None:
    rows = _rows()
    for row in rows:
        assert row["source_url"].startswith("https://"), row
        assert row["source_note"] and row["published_as"], row
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", row["as_of"]), row
        assert (ROOT / row["config"]).is_file(), row
    # every listed model type has a fixture and a row; every MoE type an active (or MTP) row
    types = {load_hf_config(ROOT / r["config"]).family for r in rows}
    nested = {load_hf_config(ROOT / r["config"]).text_model_of for r in rows}
    assert {"qwen3", "gemma3", "olmo2", "gpt2", "gpt_neox", "starcoder2", "granite", "mistral",
            *MOE} <= types
    assert {"gemma3", "llama4"} <= nested
    assert {"total", "active", "mtp"} == {r["quantity"] for r in rows}


def test_deepseek_v3_total_excludes_its_mtp_module() -> None:
    spec = _load("deepseek_v3")
    assert spec.mtp_layers == 1
    # 671B without the module; the module (one more MoE layer, eh_proj, three norms) apart
    assert abs(spec.total_params - 671e9) / 671e9 < TOLERANCE
    assert spec.mtp_params == spec.layer_params(60) + 2 * 7168 * 7168 + 3 * 7168
    assert spec.total_params + spec.mtp_params > 682e9


# ---- layouts by hand -------------------------------------------------------------------------

def test_qwen3_per_head_qk_norm() -> None:
    spec = _load("qwen3_8b")
    h, d, L = 4096, 128, 36
    attn = h * 32 * d + 2 * h * 8 * d + 32 * d * h + 2 * d        # q, k, v, o + q_norm, k_norm
    block = attn + 3 * h * 12288 + 2 * h
    root = 2 * 151936 * h + h
    assert spec.qk_norm == "head" and spec.total_params == L * block + root == 8_190_735_360


def test_olmo2_full_width_qk_norm() -> None:
    spec = _load("olmo2_7b")
    h = 4096
    block = 4 * h * h + (h + h) + 3 * h * 11008 + 2 * h          # q_norm over a·d, k_norm a_kv·d
    assert spec.qk_norm == "full"
    assert spec.total_params == 32 * block + 2 * 100352 * h + h == 7_298_617_344


def test_gpt2_learned_positions_biases_tied() -> None:
    spec = _load("gpt2_large")
    h, L = 1280, 36
    block = (h * 3 * h + 3 * h) + (h * h + h) + 2 * 2 * h + (h * 4 * h + 4 * h) + (4 * h * h + h)
    root = 50257 * h + 1024 * h + 2 * h                           # wte, wpe, ln_f (tied head)
    assert spec.position_embeddings == 1024 and spec.tie_word_embeddings
    assert spec.total_params == L * block + root == 774_030_080


def test_gemma3_five_local_to_one_global() -> None:
    spec = _load("gemma3_1b")
    assert spec.sliding_window == 512
    globals_ = [i for i in range(spec.num_layers) if spec.layer_window(i) == 0]
    assert globals_ == [5, 11, 17, 23]
    assert spec.attention_pattern == "sliding 512 x 22 + global x 4"
    nested = _load("gemma3_12b")
    assert nested.text_model_of == "gemma3" and nested.num_sliding_layers == 40
    assert nested.num_layers - nested.num_sliding_layers == 8


def test_gemma3_multimodal_config_takes_text_defaults(tmp_path: Path) -> None:
    # The official sparse form: text_config without vocab_size / head_dim / window pattern.
    raw = json.loads((CONFIGS / "gemma3_12b" / "config.json").read_text())
    keep = ("hidden_size", "intermediate_size", "model_type", "num_attention_heads",
            "num_hidden_layers", "num_key_value_heads", "sliding_window")
    raw["text_config"] = {k: raw["text_config"][k] for k in keep}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    sparse, full = load_hf_config(path), _load("gemma3_12b")
    assert sparse.total_params == full.total_params           # Gemma3TextConfig defaults
    assert sparse.attention_pattern == full.attention_pattern


def test_mixtral_experts_by_hand() -> None:
    spec = _load("mixtral_8x7b")
    h, f, E, k = 4096, 14336, 8, 2
    attn = 2 * h * h + 2 * h * 1024
    expert = 3 * h * f
    layer = attn + E * expert + h * E + 2 * h
    root = 2 * 32000 * h + h
    assert spec.total_params == 32 * layer + root == 46_702_792_704
    assert spec.active_params == spec.total_params - 32 * (E - k) * expert
    s = 2048
    forward = 2 * (32 * (attn + k * expert + h * E) + 32000 * h) + 32 * 4 * s * 32 * 128
    assert spec.forward_flops_per_token(s) == forward
    assert spec.model_flops_per_token(s) == 3 * forward


def test_qwen2_moe_shared_expert_and_gate() -> None:
    spec = _load("qwen1_5_moe_a2_7b")
    moe = spec.moe
    assert moe is not None and moe.shared_expert_gate and moe.num_shared_experts == 1
    h = 2048
    assert spec.router_params == h * 60 + h                       # router + shared-expert gate
    assert spec.shared_expert_params == 3 * h * 5632
    assert spec.total_params == 14_315_784_192                   # keras-hub's exact count


def test_deepseek_v3_mla_and_dense_first_layers() -> None:
    spec = _load("deepseek_v3")
    h, a = 7168, 128
    mla = (h * 1536 + 1536 * a * 192 + h * (512 + 64) + 512 * a * (128 + 128) + a * 128 * h
           + 1536 + 512)                                           # + q_a / kv_a layernorms
    assert spec.attention_params == mla
    assert [spec.is_moe_layer(i) for i in range(4)] == [False, False, False, True]
    assert spec.num_dense_layers == 3 and spec.intermediate_size == 18432
    assert spec.router_params == h * 256 + 256                    # e_score_correction_bias
    # QKᵀ at 192 per head, AV at 128
    assert spec.attention_flops_per_token(1000) == 2.0 * 1000 * a * (192 + 128)


def test_llama4_interleaved_moe_and_chunked_rope_layers() -> None:
    spec = _load("llama4_maverick")
    assert spec.text_model_of == "llama4"
    assert spec.moe is not None and spec.moe.moe_layers == tuple(range(1, 48, 2))
    assert spec.num_dense_layers == 24 and spec.intermediate_size == 16384
    assert spec.moe.num_shared_experts == 1 and spec.moe.experts_per_token == 1
    # every 4th layer is NoPE (global); the RoPE layers attend in chunks of 8192
    assert [spec.layer_window(i) for i in range(4)] == [8192, 8192, 8192, 0]


def test_gpt_oss_sinks_biases_alternating_window() -> None:
    spec = _load("gpt_oss_20b")
    h, a, kv, d, E, f = 2880, 64, 8, 64, 32, 2880
    attn = h * a * d + a * d + 2 * (h * kv * d + kv * d) + a * d * h + h + a    # + sinks
    expert = h * 2 * f + 2 * f + f * h + h
    assert spec.attention_params == attn and spec.expert_params == expert
    assert spec.router_params == h * E + E
    assert [spec.layer_window(i) for i in range(4)] == [128, 0, 128, 0]


# ---- FLOPs -----------------------------------------------------------------------------------

def test_windowed_attention_flops_use_the_window() -> None:
    spec = _load("gemma3_1b")
    a, d, L = 4, 256, 26
    for s in (256, 512):  # within the window every layer sees S keys
        assert spec.attention_context(s) == s
    s = 8192
    context = (22 * 512 + 4 * 8192) / 26
    assert spec.attention_context(s) == pytest.approx(context)
    forward = L * (2 * spec.block_matmul_params + 4 * context * a * d) + 2 * 262144 * 1152
    assert spec.forward_flops_per_token(s) == pytest.approx(forward, rel=1e-12)
    per_tok, _ = unit_feature_affine(spec, s, "model", "forward")
    assert per_tok[1] / s == pytest.approx(L * context * a * d)   # tok_attn feature
    mistral = load_hf_config(CONFIGS / "mistral_7b.json")
    assert mistral.attention_context(8192) == 4096 and mistral.attention_context(2048) == 2048


@pytest.mark.parametrize("name", sorted(s.name for s in load_models().values()))
def test_dense_catalog_flops_bit_identical(name: str) -> None:
    # the pre-issue formula: L (2 block linears + 4 S a d) + 2 V h, and S a d for tok_attn
    spec = get_model(name)
    for s in (128, 2048, 8192):
        block = 2.0 * spec.block_matmul_params + 4.0 * s * spec.num_heads * spec.d
        assert spec.forward_flops_per_token(s) == spec.num_layers * block + (
            2.0 * spec.vocab_size * spec.hidden_size)
        assert spec.active_params == spec.total_params
        per_tok, _ = unit_feature_affine(spec, s, "block", "forward")
        assert per_tok[1] == s * (s * spec.num_heads * spec.d)


def test_moe_flops_come_from_active_parameters() -> None:
    for name in MOE.values():
        spec = _load(name)
        s = 1024
        layers = sum(spec.layer_active_matmul_params(i) for i in range(spec.num_layers))
        assert spec.forward_flops_per_token(s) == pytest.approx(
            2 * (layers + spec.vocab_size * spec.hidden_size)
            + spec.num_layers * spec.attention_flops_per_token(s))
        assert spec.matmul_params < spec.active_params < spec.total_params


# ---- mixture of experts is never dense -------------------------------------------------------

def _mla_refusal(err: pytest.ExceptionInfo[UserInputError], spec: ModelSpec) -> None:
    text = str(err.value)
    moe = spec.moe
    assert moe is not None
    assert "multi-head latent attention" in text
    assert f"a mixture of {moe.num_experts} experts, {moe.experts_per_token} active" in text
    assert "not modelled yet" in text and "To fix:" in text


def test_mla_moe_refused_by_every_step_entry() -> None:
    """DeepSeek-V3's MoE step would be priced, but its MLA attention is not modelled: every
    entry refuses it rather than price it as q/k/v/o attention."""
    path = str(CONFIGS / MOE["deepseek_v3"] / "config.json")
    spec = load_hf_config(path)
    assert spec.family == "deepseek_v3" and spec.is_moe and spec.mla is not None
    workload = api.WorkloadSpec(model_name=path, gpu_name="H100-SXM5-80GB", seq_len=1024)
    for call in (lambda: api.predict(workload), lambda: api.simulate(workload),
                 lambda: api.sweep([path], gpu_name="H100-SXM5-80GB", nodes=[1],
                                   gpus_per_node=[8], seq_len=1024, micro_batches=[1])):
        with pytest.raises(UserInputError) as err:
            call()
        _mla_refusal(err, spec)
    with pytest.raises(UserInputError) as err:
        memory_breakdown(spec, num_gpus=8, seq_len=1024, micro_batch=1)
    _mla_refusal(err, spec)
    with pytest.raises(UserInputError) as err:
        island_table_for(path, seq_len=1024, clusters=[ClusterRequest(
            name="A", gpu="H100-SXM5-80GB", num_nodes=1, gpus_per_node=8,
            allowed_gpus_per_node=(8,), usd_per_gpu_hour=2.0, wan_bw_bytes_per_s=1e9,
            wan_latency_s=0.01)])
    _mla_refusal(err, spec)
    for dense_only in (lambda: spec.fsdp_units(1024), lambda: spec.block_params):
        with pytest.raises(UserInputError):
            dense_only()


@pytest.mark.parametrize("model_type", sorted(set(MOE) - {"deepseek_v3"}))
def test_moe_type_priced_never_dense(model_type: str) -> None:
    """Each modelled MoE type's step is priced from its experts, never as a dense model: the
    step's FLOPs are the active ones, FSDP gathers every expert, the memory's sharded states
    hold the total parameters (not the dense MLP's)."""
    path = str(CONFIGS / MOE[model_type] / "config.json")
    spec = load_hf_config(path)
    assert spec.family == model_type and spec.is_moe
    units = spec.fsdp_units(1024)
    L = spec.num_layers
    assert sum(u.params for u in units) == pytest.approx(spec.total_params, abs=L)
    assert sum(u.forward_flops_per_token for u in units) == pytest.approx(
        spec.forward_flops_per_token(1024), rel=1e-9)
    dense_twin = replace(spec, moe=None, published_params=None)
    assert spec.total_params > dense_twin.total_params or model_type == "gpt_oss"
    workload = api.WorkloadSpec(model_name=path, gpu_name="H100-SXM5-80GB", seq_len=1024)
    prediction = api.predict(workload)
    record = prediction.record
    assert record["total_params"] == spec.total_params
    assert record["active_params"] == spec.active_params < spec.total_params
    memory = memory_breakdown(spec, num_gpus=8, seq_len=1024, micro_batch=1)
    # fp32 master shards: 4 bytes per parameter over 8 ranks (FSDP2 padding: a little more)
    assert memory.sharded_params_bytes == pytest.approx(4 * spec.total_params / 8, rel=0.01)


def test_moe_predicted_on_the_cli_and_reported(run_cli: Any) -> None:
    path = str(CONFIGS / "qwen3_30b_a3b" / "config.json")
    spec = load_hf_config(path)
    for command in (("predict", path), ("memory", path)):
        result = run_cli(*command, "--gpu", "H100-SXM5-80GB", "--seq-len", "2048", "--ep", "4",
                         "--format", "json", "--allow-oom")
        assert result.code == 0 and "Traceback" not in result.err, result.err
        record = json.loads(result.out)
        assert record["total_params"] == spec.total_params == 30_532_122_624
        assert record["active_params"] == spec.active_params
        assert record["model_family"] == "qwen3_moe"
    report = run_cli("catalog", "models", "--config", path, "--format", "json")
    assert report.code == 0, report.err
    record = json.loads(report.out)
    assert record["model_family"] == "qwen3_moe"
    assert record["total_params"] == spec.total_params
    assert record["active_params"] == spec.active_params
    assert record["step_modelled"] is True and record["num_experts"] == 128
    parts = [v for k, v in record.items() if k.endswith("_params") and k not in (
        "total_params", "active_params", "mtp_params", "router_params_per_layer")]
    assert sum(parts) == record["total_params"]
    dense = run_cli("predict", str(CONFIGS.parent / "configs" / "llama3_8b.json"), "--gpu",
                    "H100-SXM5-80GB", "--seq-len", "2048", "--ep", "2")
    assert dense.code == 2 and "dense model" in dense.err and "To fix:" in dense.err


def test_cli_prints_family_total_and_active(run_cli: Any) -> None:
    path = str(CONFIGS / "gemma3_1b" / "config.json")
    spec = load_hf_config(path)
    predicted = json.loads(run_cli("predict", path, "--gpu", "H100-SXM5-80GB", "--seq-len",
                                   "1024", "--format", "json").out)
    memory = json.loads(run_cli("memory", path, "--gpu", "H100-SXM5-80GB", "--seq-len", "1024",
                                "--format", "json").out)
    listed = {r["name"]: r for r in json.loads(run_cli("catalog", "models", "--format",
                                                        "json").out)}
    for record in (predicted, memory):
        assert record["model_family"] == "gemma3"
        assert record["total_params"] == record["active_params"] == spec.total_params
    llama = listed["Llama-3-8B"]
    assert llama["model_family"] == "llama"
    assert llama["total_params"] == llama["active_params"] == get_model("Llama-3-8B").total_params
    nested = json.loads(run_cli("catalog", "models", "--config",
                                str(CONFIGS / "gemma3_12b" / "config.json"), "--format",
                                "json").out)
    assert nested["text_model_of"].startswith("gemma3 (the text model")


# ---- config hygiene ----------------------------------------------------------------------------

@pytest.mark.parametrize("field", ["tie_word_embeddings", "attention_bias", "use_sliding_window"])
def test_string_boolean_is_refused(tmp_path: Path, field: str) -> None:
    raw = json.loads((CONFIGS / "qwen3_8b" / "config.json").read_text())
    raw[field] = "false"
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(ConfigError) as err:
        load_hf_config(path)
    text = str(err.value)
    assert str(path) in text and repr(field) in text and "'false'" in text and "To fix:" in text


def test_unlisted_moe_type_and_bad_nested_config_refused(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "olmoe", "hidden_size": 2048}))
    with pytest.raises(ConfigError, match="mixture-of-experts model, which ShardMeter does not"):
        load_hf_config(path)
    path.write_text(json.dumps({"model_type": "gemma3", "vision_config": {}}))
    with pytest.raises(ConfigError, match="'text_config' object is missing"):
        load_hf_config(path)
    path.write_text(json.dumps({"model_type": "llama4", "text_config": {"model_type": "mllama"}}))
    with pytest.raises(ConfigError, match="not the text model"):
        load_hf_config(path)


def test_window_patterns_from_layer_types_and_qwen_switch(tmp_path: Path) -> None:
    # transformers >= 4.53 writes the pattern as layer_types: the same windows as the pattern
    raw = json.loads((CONFIGS / "gemma3_1b" / "config.json").read_text())
    pattern = raw.pop("sliding_window_pattern")
    raw["layer_types"] = ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention"
                          for i in range(raw["num_hidden_layers"])]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    assert load_hf_config(path).sliding_layers == _load("gemma3_1b").sliding_layers
    raw["layer_types"] = raw["layer_types"][:-1]
    path.write_text(json.dumps(raw))
    with pytest.raises(ConfigError, match="'layer_types'"):
        load_hf_config(path)
    # Qwen: sliding_window is written but off unless use_sliding_window is true
    raw = json.loads((CONFIGS / "qwen3_8b" / "config.json").read_text())
    raw.update(sliding_window=4096)
    path.write_text(json.dumps(raw))
    assert load_hf_config(path).sliding_window == 0
    raw.update(use_sliding_window=True, max_window_layers=30)
    path.write_text(json.dumps(raw))
    spec = load_hf_config(path)
    assert spec.sliding_layers == tuple(range(30, 36)) and spec.sliding_window == 4096
