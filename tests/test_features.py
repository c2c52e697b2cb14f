"""Static features: per-unit definition, whole-model sums, linearity in the micro-batch."""

from __future__ import annotations

import numpy as np
import pytest

from perfmodel.costs.features import (
    OPTIMIZER_FEATURES,
    PASS_FEATURES,
    model_features,
    phase_features,
    unit_feature_affine,
    unit_feature_matrix,
)
from perfmodel.spec.catalog import get_model

MODELS = ["Llama-3.2-1B", "Phi-1.5", "Gemma-2B", "tiny-gqa"]


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("phase", ["forward", "backward", "optimizer"])
def test_units_sum_to_model(name: str, phase: str) -> None:
    model = get_model(name)
    m = np.array([1, 3, 8])
    whole = unit_feature_matrix(model, 1024, m, "model", phase, num_shards=4)
    block = unit_feature_matrix(model, 1024, m, "block", phase, num_shards=4)
    root = unit_feature_matrix(model, 1024, m, "root", phase, num_shards=4)
    np.testing.assert_allclose(whole, model.num_layers * block + root, rtol=1e-12)
    # the same sum over ModelSpec.fsdp_units (L blocks and one root)
    units = model.fsdp_units(1024)
    summed = sum(block if u.name != "root" else root for u in units)
    np.testing.assert_allclose(whole, summed, rtol=1e-12)


@pytest.mark.parametrize("name", MODELS)
def test_forward_features_carry_the_flop_count(name: str) -> None:
    model = get_model(name)
    S, m = 2048, 2
    f = model_features(model, S, m)
    flops = 2 * f["tok_block_matmul"] + 2 * f["tok_lm_head"] + 4 * f["tok_attn"]
    assert flops == pytest.approx(m * S * model.forward_flops_per_token(S), rel=1e-12)
    assert f["layers"] == model.num_layers and f["const"] == 1
    assert f["tok_hidden"] == m * S * model.hidden_size * (model.num_layers + 1)


def test_linear_in_micro_batch_and_affine_form() -> None:
    model = get_model("Llama-3.2-1B")
    per_mb, const = unit_feature_affine(model, 512, "block", "backward")
    X = unit_feature_matrix(model, 512, np.arange(1, 6), "block", "backward")
    np.testing.assert_allclose(X, np.arange(1, 6)[:, None] * per_mb + const)
    assert X.shape == (5, len(PASS_FEATURES))


def test_optimizer_features_shard_and_ignore_micro_batch() -> None:
    model = get_model("Llama-3.2-1B")
    X = unit_feature_matrix(model, 512, 1, "model", "optimizer", num_shards=np.array([1, 2, 8]))
    assert X.shape == (3, len(OPTIMIZER_FEATURES))
    np.testing.assert_allclose(X[:, 0], model.total_params / np.array([1, 2, 8]))
    same = unit_feature_matrix(model, 512, np.array([1, 7]), "model", "optimizer")
    np.testing.assert_array_equal(same[0], same[1])


def test_bad_names() -> None:
    model = get_model("tiny-llama")
    with pytest.raises(ValueError, match="unit"):
        unit_feature_matrix(model, 64, 1, "layer")
    with pytest.raises(ValueError, match="phase"):
        phase_features("recompute")


@pytest.mark.parametrize("name", MODELS)
def test_parameter_count_features_do_not_grow_with_tokens(name: str) -> None:
    model = get_model(name)
    h, V = model.hidden_size, model.vocab_size
    root = dict(zip(PASS_FEATURES, unit_feature_matrix(model, 256, np.array([1, 8]), "root",
                                                       "backward").T, strict=True))
    block = dict(zip(PASS_FEATURES, unit_feature_matrix(model, 256, np.array([1, 8]), "block",
                                                        "backward").T, strict=True))
    for feats in (root, block):
        for name_ in ("gemm_fixed", "emb_grad", "tied_grad", "param_grads", "weight_read"):
            assert feats[name_][0] == feats[name_][1]  # per pass, not per token
    assert root["emb_grad"][0] == V * h and block["emb_grad"][0] == 0
    assert root["tied_grad"][0] == (V * h if model.tie_word_embeddings else 0)
    assert (
        root["param_grads"][0] == model.root_params
        and block["param_grads"][0] == model.block_params
    )
    assert root["weight_read"][0] == V * h
    assert block["weight_read"][0] == model.block_matmul_params
    assert block["gemm_fixed"][0] == pytest.approx(model.block_matmul_params / h)
    assert root["gemm_fixed"][0] == V


@pytest.mark.parametrize(("hidden", "ffn", "aligned_in_h", "aligned_ffn"), [
    (2048, 8192, True, True), (2048, 1008, True, False), (1984, 8192, False, True),
    (2112, 1056, False, False), (1536, 1008, False, False)])
def test_aligned_weight_grads_count_matrices_with_aligned_rows(
        hidden: int, ffn: int, aligned_in_h: bool, aligned_ffn: bool) -> None:
    from dataclasses import replace

    from perfmodel.costs.features import ALIGNED_WIDTH, REGRESSION_CANDIDATES

    model = replace(get_model("Phi-1.5"), hidden_size=hidden, intermediate_size=ffn,
                    num_heads=32, num_kv_heads=32)
    assert ALIGNED_WIDTH == 1024 and model.q_dim == hidden and not model.gated_mlp
    block = dict(zip(PASS_FEATURES, unit_feature_matrix(model, 64, np.array([1, 2]), "block",
                                                        "backward").T, strict=True))
    root = dict(zip(PASS_FEATURES, unit_feature_matrix(model, 64, np.array([1, 2]), "root",
                                                       "backward").T, strict=True))
    # q, k, v, o and the up projection have hidden-long rows, the down projection ffn-long ones
    expected = aligned_in_h * (4 * hidden * hidden + ffn * hidden) + aligned_ffn * ffn * hidden
    np.testing.assert_array_equal(block["aligned_weight_grads"], [expected, expected])
    np.testing.assert_array_equal(root["aligned_weight_grads"],
                                  [aligned_in_h * 2 * hidden * model.vocab_size] * 2)
    assert "aligned_weight_grads" in REGRESSION_CANDIDATES["backward"]
    assert "aligned_weight_grads" not in REGRESSION_CANDIDATES["forward"]
