"""One checkpointing policy (`perfmodel.spec.recipe.CheckpointPolicy`) for the time model, the
memory model and the torch workers: PyTorch's own FLOP counter, on real checkpointed training
steps of the project's torch model, recomputes exactly the FLOPs the time model charges.

Recomputed FLOPs = backward FLOPs with the policy − backward FLOPs without checkpointing
(FlopCounterMode counts matmuls and attention kernels; a recompute shows up inside backward).
FlopCounterMode has no formula for PyTorch's CPU attention kernel (it would count 0, and op-sac
and attn could not be told apart), so it gets torch's own SDPA formulas through
`custom_mapping` — the convention of the time model too (non-causal QKᵀ and AV FLOPs).
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from perfmodel.spec.arch import ModelSpec
from perfmodel.spec.errors import UserInputError
from perfmodel.spec.recipe import AC_ALIASES, CheckpointPolicy, TrainingRecipe

TOLERANCE = 0.02
"""The issue's bound on |counted − modelled| / modelled recompute FLOPs."""

SPECS = {
    "gqa-swiglu": ModelSpec(name="gqa-swiglu", hidden_size=64, num_layers=4, num_heads=4,
                            num_kv_heads=2, intermediate_size=176, vocab_size=128),
    "mha-plain-bias": ModelSpec(name="mha-plain-bias", hidden_size=48, num_layers=4, num_heads=3,
                                num_kv_heads=3, intermediate_size=192, vocab_size=96,
                                gated_mlp=False, qkv_bias=True, out_bias=True, mlp_bias=True,
                                norm="layer", family="phi"),
}
POLICIES = ("full", "op-sac", "attn", "layer:2", "layer:3")


def _counted_backward_flops(spec: ModelSpec, ac: str, *, micro_batch: int, seq_len: int) -> int:
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import (
        FlopCounterMode,
        sdpa_backward_flop_count,
        sdpa_flop_count,
    )

    from perfmodel.bench.model import build_model, random_tokens
    from perfmodel.bench.recipe_wrap import apply_activation_checkpointing

    def forward_flops(query: Any, key: Any, value: Any, *args: Any, **kwargs: Any) -> int:
        return int(sdpa_flop_count(query, key, value))

    def backward_flops(grad_out: Any, query: Any, key: Any, value: Any, *args: Any,
                       **kwargs: Any) -> int:
        return int(sdpa_backward_flop_count(grad_out, query, key, value))

    aten = torch.ops.aten
    mapping = {aten._scaled_dot_product_flash_attention_for_cpu: forward_flops,
               aten._scaled_dot_product_flash_attention_for_cpu_backward: backward_flops}
    model = apply_activation_checkpointing(build_model(spec), ac)
    tokens = random_tokens(spec, micro_batch, seq_len)
    loss = model(tokens)
    counter = FlopCounterMode(display=False, custom_mapping=mapping)
    with counter:
        loss.backward()
    return int(counter.get_total_flops())


@pytest.mark.torch
@pytest.mark.parametrize("name", list(SPECS))
@pytest.mark.parametrize("ac", POLICIES)
def test_recomputed_flops_match_pytorchs_count(name: str, ac: str) -> None:
    spec, micro_batch, seq_len = SPECS[name], 2, 32
    tokens = micro_batch * seq_len
    none = _counted_backward_flops(spec, "none", micro_batch=micro_batch, seq_len=seq_len)
    counted = _counted_backward_flops(spec, ac, micro_batch=micro_batch, seq_len=seq_len) - none
    modelled = tokens * spec.recompute_flops_per_token(seq_len, ac)
    assert counted > 0
    assert abs(counted - modelled) <= TOLERANCE * modelled, (counted, modelled)


@pytest.mark.torch
def test_modes_differ_as_the_time_model_says() -> None:
    """op-sac and attn recompute different ops (op-sac never the attention kernel), so with the
    CPU attention formula mapped the counts tell them apart."""
    spec = SPECS["gqa-swiglu"]
    counts = {ac: _counted_backward_flops(spec, ac, micro_batch=1, seq_len=64)
              for ac in ("none", "op-sac", "attn", "full")}
    assert counts["none"] < counts["attn"] < counts["full"]
    assert counts["none"] < counts["op-sac"] < counts["full"]
    assert counts["op-sac"] != counts["attn"]


def test_policy_names_round_trip_and_aliases(caplog: pytest.LogCaptureFixture) -> None:
    for name in ("none", "full", "op-sac", "attn", "layer:1", "layer:4"):
        assert CheckpointPolicy.parse(name).name == name
        assert TrainingRecipe(ac=name).ac == name
    with caplog.at_level(logging.WARNING):
        assert TrainingRecipe(ac="selective").ac == AC_ALIASES["selective"] == "op-sac"
    policy = CheckpointPolicy.parse("layer:3")
    assert [policy.checkpointed(i) for i in range(7)] == [False, False, True, False, False, True,
                                                        False]
    assert policy.checkpointed_blocks(7) == 2


@pytest.mark.parametrize("bad", ["layer:0", "layer:x", "layer:", "selectiv", "", "LAYER:2", 3])
def test_bad_policies_are_user_errors(bad: object) -> None:
    with pytest.raises(UserInputError, match="To fix"):
        TrainingRecipe(ac=bad)  # type: ignore[arg-type]
