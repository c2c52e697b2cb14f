"""The torch MoE bench model (perfmodel/bench/moe.py): parameter count, a dense loop-over-experts
reference, fixed-capacity dropping, and expert parallelism on 2 gloo ranks against one rank."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from perfmodel.bench.model import Attention, _apply_rope, rope_tables
from perfmodel.bench.moe import (
    MoeBlock,
    QkNormAttention,
    build_moe_model,
    check_moe_buildable,
    dense_reference,
    expert_capacity,
    moe_blocks,
)
from perfmodel.spec.arch import ModelSpec, MoeSpec
from perfmodel.spec.errors import UserInputError

SPEC = ModelSpec(name="tiny-moe", family="qwen3_moe", hidden_size=32, num_layers=2, num_heads=4,
                 num_kv_heads=2, intermediate_size=64, vocab_size=128, qk_norm="head",
                 moe=MoeSpec(num_experts=4, experts_per_token=2, expert_intermediate_size=16,
                             moe_layers=(1,), num_shared_experts=1, shared_intermediate_size=24,
                             shared_expert_gate=True))


def _block(capacity_factor: float) -> MoeBlock:
    model = build_moe_model(SPEC, capacity_factor=capacity_factor, seed=3)
    return next(moe_blocks(model))[1]


def test_parameter_count_equals_spec() -> None:
    model = build_moe_model(SPEC)
    assert sum(p.numel() for p in model.parameters()) == SPEC.total_params
    assert [i for i, _ in moe_blocks(model)] == [1]


def test_qk_norms_run_in_the_dense_attention_forward() -> None:
    """QkNormAttention has no forward of its own: the dense Attention's applies its per-head
    q/k RMSNorms (before RoPE). It equals the attention composed by hand with the norms, and
    differs from the same projections without them (a forward that skipped them fails)."""
    torch.manual_seed(0)
    attn = QkNormAttention(SPEC)
    q_norm, k_norm = attn.q_norm, attn.k_norm
    assert isinstance(q_norm, torch.nn.RMSNorm) and isinstance(k_norm, torch.nn.RMSNorm)
    with torch.no_grad():
        q_norm.weight.uniform_(0.5, 2.0)
        k_norm.weight.uniform_(0.5, 2.0)
    plain = Attention(SPEC)
    plain.load_state_dict({k: v for k, v in attn.state_dict().items() if "norm" not in k})
    b, s, d = 2, 8, SPEC.d
    x = torch.randn(b, s, SPEC.hidden_size)
    cos, sin = rope_tables(s, d)

    def heads(proj: torch.nn.Module, weight: torch.Tensor | None) -> torch.Tensor:
        out: torch.Tensor = proj(x).view(b, s, -1, d)
        if weight is not None:
            out = F.rms_norm(out, (d,), weight)
        return out.transpose(1, 2)

    with torch.no_grad():
        q = _apply_rope(heads(attn.q_proj, q_norm.weight), cos, sin)
        k = _apply_rope(heads(attn.k_proj, k_norm.weight), cos, sin)
        core = F.scaled_dot_product_attention(q, k, heads(attn.v_proj, None), is_causal=True,
                                              enable_gqa=True)
        expected = attn.o_proj(core.transpose(1, 2).reshape(b, s, -1))
        assert torch.allclose(attn(x, cos, sin), expected, atol=1e-6)
        assert not torch.allclose(plain(x, cos, sin), expected, atol=1e-3)


def test_matches_dense_reference_when_nothing_is_dropped() -> None:
    # capacity_factor E / k: C = T, more slots than any expert can be sent
    block = _block(SPEC.moe.num_experts / SPEC.moe.experts_per_token)  # type: ignore[union-attr]
    x = torch.randn(2, 8, 32, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    out: torch.Tensor = block(x)
    ref = dense_reference(block, x_ref)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
    weights = torch.randn_like(out)
    (out * weights).sum().backward()  # type: ignore[no-untyped-call]  # untyped torch
    expert_grad = block.experts.w1.grad.clone()  # type: ignore[union-attr]
    block.zero_grad()
    (ref * weights).sum().backward()  # type: ignore[no-untyped-call]  # untyped torch
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(expert_grad, block.experts.w1.grad, rtol=1e-5, atol=1e-6)


def _kept_reference(block: MoeBlock, flat: torch.Tensor, capacity: int) -> torch.Tensor:
    """Loop reference of fixed capacity: assignments choice-major (all first choices in token
    order, then all second choices), an expert's (C+1)-th and later assignment dropped."""
    moe = block.moe
    scores = torch.softmax(block.router(flat).float(), dim=-1)
    weights, chosen = torch.topk(scores, moe.experts_per_token, dim=-1)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    filled = [0] * moe.num_experts
    out = torch.zeros_like(flat)
    ex = block.experts
    for choice in range(moe.experts_per_token):
        for t in range(flat.shape[0]):
            e = int(chosen[t, choice])
            if filled[e] >= capacity:
                continue
            filled[e] += 1
            hidden = ex.act(flat[t] @ ex.w1[e]) * (flat[t] @ ex.w3[e])
            out[t] = out[t] + weights[t, choice] * (hidden @ ex.w2[e])
    assert block.shared is not None and block.shared_gate is not None
    shared: torch.Tensor = torch.sigmoid(block.shared_gate(flat)) * block.shared(flat)
    return out + shared


def test_fixed_capacity_drops_as_specified() -> None:
    block = _block(0.5)
    x = torch.randn(3, 8, 32)
    flat = x.reshape(-1, 32)
    capacity = expert_capacity(24, block.moe, 0.5)
    assert capacity == math.ceil(24 * 2 / 4 * 0.5) == 6
    slot, slot_token, _ = block.route(flat)
    dropped = int((slot == block.moe.num_experts * capacity).sum())
    assert dropped >= 48 - 4 * capacity   # 48 assignments, at most E C kept
    assert slot_token.shape == (block.moe.num_experts * capacity,)
    with torch.no_grad():
        torch.testing.assert_close(block(x).reshape(-1, 32), _kept_reference(block, flat, capacity),
                                   rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("ep", "factor", "words"), [
    (3, 1.0, "divisor"), (0, 1.0, "divisor"), (2, float("nan"), "capacity_factor"),
    (2, -1.0, "capacity_factor")])
def test_unbuildable_cases_are_refused(ep: int, factor: float, words: str) -> None:
    with pytest.raises(UserInputError, match=words):
        check_moe_buildable(SPEC, ep, factor)


def _ep_rank(rank: int, port: int, out: str) -> None:
    import torch.distributed as dist

    from perfmodel.bench.model import random_tokens
    from perfmodel.bench.moe import moe_meshes, shard_experts

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2)
    try:
        tokens = random_tokens(SPEC, 2, 16, seed=rank)
        full = build_moe_model(SPEC, capacity_factor=1.25, seed=0)
        full_loss = full(tokens)
        full_loss.backward()
        grads = {n: p.grad.detach().clone() for n, p in full.named_parameters()
                 if p.grad is not None}
        _, sparse = moe_meshes(2, 2)
        ep_model = shard_experts(build_moe_model(SPEC, capacity_factor=1.25, seed=0), sparse)
        ep_loss = ep_model(tokens)
        ep_loss.backward()
        worst = {"loss": abs(float(ep_loss) - float(full_loss))}
        local = SPEC.moe.num_experts // 2  # type: ignore[union-attr]
        for name, param in ep_model.named_parameters():
            assert param.grad is not None
            if ".experts.w" in name:
                total = grads[name].clone()
                dist.all_reduce(total)   # every rank's tokens reach this rank's experts
                want = total[rank * local:(rank + 1) * local]
            else:
                want = grads[name]
            worst[name] = float((param.grad - want).abs().max())
        Path(out.format(rank)).write_text(json.dumps(worst))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_expert_parallel_equals_one_rank_on_gloo(tmp_path: Path) -> None:
    import torch.multiprocessing as tmp

    from perfmodel.bench.memory_real import _free_port

    out = str(tmp_path / "rank{}.json")
    tmp.spawn(_ep_rank, args=(_free_port(), out), nprocs=2, join=True)  # type: ignore[attr-defined,no-untyped-call]
    for rank in range(2):
        worst = json.loads(Path(out.format(rank)).read_text())
        assert any(".experts.w1" in n for n in worst)
        assert max(worst.values()) < 1e-5, worst
