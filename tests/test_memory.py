"""Memory model: every component against a hand computation, and the largest micro-batch."""

from __future__ import annotations

import numpy as np
import pytest

from perfmodel import memory as mem
from perfmodel.arch import ModelSpec
from perfmodel.catalog import get_gpu, get_model
from perfmodel.errors import UserInputError
from perfmodel.hardware import GIB
from perfmodel.memory import MemoryConfig, max_micro_batch, memory_breakdown

RESERVE = 12_345
CONFIG = MemoryConfig(reserve_bytes=RESERVE)


# ---- tiny-llama: h=64, L=2, a=4, a_kv=2, d=16, f=176 (SwiGLU), V=512, untied --------------
# params: block = (64·64 + 2·64·32 + 64·64) + 3·64·176 + 2·64 = 46,208
#         root  = 512·64 (embedding) + 64 (final norm) + 512·64 (LM head) = 65,600
#         total = 2·46,208 + 65,600 = 158,016; largest FSDP unit = root = 65,600
# G = 5 GPUs -> shard = ceil(158,016 / 5) = 31,604 params; S = 32, m = 2 -> 64 tokens.

def _tiny_llama(ac: str) -> mem.MemoryBreakdown:
    return memory_breakdown(get_model("tiny-llama"), num_gpus=5, seq_len=32, micro_batch=2,
                            ac=ac, config=CONFIG)


def test_tiny_llama_fixed_components() -> None:
    b = _tiny_llama("none")
    assert b.master_params_bytes == 31_604 * 4 == 126_416
    assert b.grads_bytes == 31_604 * 4
    assert b.optimizer_states_bytes == 31_604 * 8 == 252_832
    assert b.unsharded_params_bytes == 2 * 65_600 * 2 == 262_400     # current + prefetched, bf16
    assert b.reduce_scatter_bytes == 65_600 * 2 == 131_200           # one unit's bf16 grads
    assert b.reserve_bytes == RESERVE


# Activations per token per layer (bytes, bf16):
#   norms 2 x (64 in + 64 out) x 2 B           = 512
#   attention Q 64 + K 32 + V 32 + O-in 64 = 192 elements x 2 B = 384
#   scores a·S = 4·32 = 128 elements x 2 B     = 256
#   SwiGLU gate, up, act, product 4·176 x 2 B  = 1,408
#   layer total                                = 2,560
# Outside the blocks: final-norm input + LM-head input = 2·64·2 = 256 per token.

def test_tiny_llama_activations_none() -> None:
    b = _tiny_llama("none")
    assert b.activations_bytes == (2 * 2_560 + 256) * 64 == 344_064
    assert b.recompute_bytes == 0


def test_tiny_llama_activations_selective() -> None:
    b = _tiny_llama("selective")
    assert b.activations_bytes == (2 * (2_560 - 256) + 256) * 64 == 311_296
    assert b.recompute_bytes == 256 * 64         # one layer's scores while recomputed


def test_tiny_llama_activations_full() -> None:
    b = _tiny_llama("full")
    assert b.activations_bytes == (2 * 64 * 2 + 256) * 64 == 32_768   # block inputs only
    assert b.recompute_bytes == 2_560 * 64       # one layer's full working set


def test_tiny_llama_logits_and_peak() -> None:
    b = _tiny_llama("none")
    assert b.logits_bytes == 64 * 512 * (2 + 4 + 4) == 327_680     # bf16 + fp32 + fp32 grad
    total = 126_416 * 2 + 252_832 + 262_400 + 131_200 + 344_064 + 0 + 327_680 + RESERVE
    assert b.peak_bytes == total
    gib = b.as_gib()
    assert gib["peak"] == pytest.approx(total / GIB)
    assert gib["logits"] == pytest.approx(327_680 / GIB)


# ---- tiny-phi: h=64, L=2, a=a_kv=4, f=256 plain GELU MLP, one LayerNorm per block, V=512 -----
# params: block 49,856, root 66,176 (embedding, LN, LM head + bias), total 165,888.
# G = 2 -> shard 82,944; S = 16, m = 3 -> 48 tokens.
# per layer per token: norm 1 x (64+64) x 2 = 256; attention (64+64+64+64) x 2 = 512;
#   scores 4·16 x 2 = 128; MLP act-in + act-out 2·256 x 2 = 1,024 -> 1,920.

def test_tiny_phi_all_components() -> None:
    b = memory_breakdown(get_model("tiny-phi"), num_gpus=2, seq_len=16, micro_batch=3,
                         ac="none", config=CONFIG)
    assert b.master_params_bytes == 82_944 * 4
    assert b.optimizer_states_bytes == 82_944 * 8
    assert b.unsharded_params_bytes == 2 * 66_176 * 2
    assert b.reduce_scatter_bytes == 66_176 * 2
    assert b.activations_bytes == (2 * 1_920 + 256) * 48 == 196_608
    assert b.logits_bytes == 48 * 512 * 10


def test_largest_unit_can_be_a_block() -> None:
    # tiny-gqa: h=128, a=8, a_kv=2 (d=16), f=344, V=1024, tied.
    # block = (128·128 + 2·128·32 + 128·128) + 3·128·344 + 2·128 = 173,312
    # root  = 1024·128 + 128 = 131,200 (tied: no separate LM head) -> the block is largest
    b = memory_breakdown(get_model("tiny-gqa"), num_gpus=1, seq_len=8, micro_batch=1, config=CONFIG)
    assert b.unsharded_params_bytes == 2 * 173_312 * 2
    assert b.reduce_scatter_bytes == 173_312 * 2
    assert b.master_params_bytes == (2 * 173_312 + 131_200) * 4


def test_matches_korthikanti_without_dropout() -> None:
    # MHA, f = 4h, plain MLP, two norms: Korthikanti et al. give 34·s·b·h + 5·a·s²·b bytes per
    # layer; without dropout masks (2sbh + as²b) and the separate dropout output (2as²b):
    # 32·h + 2·a·S bytes per token per layer.
    h, a, seq_len = 96, 6, 40
    spec = ModelSpec(name="k", hidden_size=h, num_layers=3, num_heads=a, num_kv_heads=a,
                     intermediate_size=4 * h, vocab_size=100, gated_mlp=False, norm="layer")
    saved, recompute = mem.activation_bytes_per_token(spec, seq_len, "none")
    assert saved == 3 * (32 * h + 2 * a * seq_len) + 2 * h * 2
    assert recompute == 0


def test_gqa_and_head_dim_in_attention_term() -> None:
    # d = 48 != h/a: Q and attention output 2·48 = 96 wide, K and V 1·48 wide.
    spec = ModelSpec(name="g", hidden_size=64, num_layers=1, num_heads=2, num_kv_heads=1,
                     head_dim=48, intermediate_size=128, vocab_size=10)
    terms = mem.layer_activation_elements(spec, seq_len=10)
    assert terms["attention"] == 96 + 48 + 48 + 96
    assert terms["scores"] == 2 * 10


def test_memory_config_scales_components() -> None:
    spec = get_model("tiny-llama")
    base = memory_breakdown(spec, num_gpus=5, seq_len=32, micro_batch=2, config=CONFIG)
    fp32 = memory_breakdown(spec, num_gpus=5, seq_len=32, micro_batch=2,
                            config=MemoryConfig(reserve_bytes=RESERVE, activation_bytes=4,
                                                optimizer_state_bytes=0, gathered_units=3))
    assert fp32.activations_bytes == 2 * base.activations_bytes
    assert fp32.optimizer_states_bytes == 0
    assert fp32.unsharded_params_bytes == 3 * 65_600 * 2


def test_default_reserve_is_one_gib() -> None:
    assert MemoryConfig().reserve_bytes == GIB


def test_coefficients_match_breakdown_for_many_micro_batches() -> None:
    spec = get_model("Llama-3-8B")
    coeffs = mem.memory_coefficients(spec, num_gpus=16, seq_len=2048, ac="selective")
    micro = np.arange(1, 40)
    expected = [memory_breakdown(spec, num_gpus=16, seq_len=2048, micro_batch=int(m),
                                 ac="selective").peak_bytes for m in micro]
    assert coeffs.peak_bytes(micro).tolist() == expected


# ---- largest micro-batch ----------------------------------------------------------------------

def _peak(spec: ModelSpec, m: int, **kw) -> int:
    return memory_breakdown(spec, micro_batch=m, **kw).peak_bytes


@pytest.mark.parametrize("ac", mem.AC_MODES)
@pytest.mark.parametrize("scale", [1, 10])   # the card, and a fictitious 10x bigger one
def test_max_micro_batch_is_largest_that_fits(ac: str, scale: int) -> None:
    spec = get_model("Llama-3-8B")
    memory = scale * get_gpu("H100-SXM5-80GB").usable_memory_bytes
    kw = {"num_gpus": 8, "seq_len": 4096, "ac": ac}
    m = max_micro_batch(spec, gpu_memory_bytes=memory, **kw)
    assert _peak(spec, m + 1, **kw) > memory
    if m > 0:
        assert _peak(spec, m, **kw) <= memory


def test_beyond_the_card() -> None:
    spec = get_model("Llama-3-8B")
    kw = {"num_gpus": 8, "seq_len": 4096, "ac": "full"}
    usable = get_gpu("H100-SXM5-80GB").usable_memory_bytes
    on_card = max_micro_batch(spec, gpu_memory_bytes=usable, **kw)
    bigger = max_micro_batch(spec, gpu_memory_bytes=8 * usable, **kw)
    assert on_card >= 1 and bigger > 8 * on_card
    assert _peak(spec, bigger, **kw) > usable


def test_max_micro_batch_at_exact_boundary() -> None:
    spec = get_model("small-llama")
    kw = {"num_gpus": 4, "seq_len": 512, "ac": "selective", "config": CONFIG}
    exact = _peak(spec, 1000, **kw)
    assert max_micro_batch(spec, gpu_memory_bytes=exact, **kw) == 1000
    assert max_micro_batch(spec, gpu_memory_bytes=exact - 1, **kw) == 999


def test_zero_when_nothing_fits() -> None:
    spec = get_model("Llama-3.1-70B")
    kw = {"num_gpus": 1, "seq_len": 8192, "ac": "full"}
    memory = get_gpu("RTX-4090").usable_memory_bytes
    assert _peak(spec, 1, **kw) > memory
    assert max_micro_batch(spec, gpu_memory_bytes=memory, **kw) == 0


@pytest.mark.parametrize("factor", [0.5, 2.0])
def test_search_corrects_a_wrong_closed_form(monkeypatch: pytest.MonkeyPatch, factor: float) -> None:
    true_coefficients = mem.memory_coefficients

    def skewed(*args, **kwargs) -> mem.MemoryCoefficients:
        c = true_coefficients(*args, **kwargs)
        return mem.MemoryCoefficients(fixed_bytes=c.fixed_bytes,
                                      per_sequence_bytes=int(c.per_sequence_bytes * factor))

    spec = get_model("small-llama")
    kw = {"num_gpus": 2, "seq_len": 256, "ac": "none", "config": CONFIG}
    memory = _peak(spec, 37, **kw) + 5
    monkeypatch.setattr(mem, "memory_coefficients", skewed)
    assert max_micro_batch(spec, gpu_memory_bytes=memory, **kw) == 37


# ---- bad input -----------------------------------------------------------------------------

@pytest.mark.parametrize(("field", "value"), [
    ("num_gpus", 0), ("seq_len", -8), ("micro_batch", 0), ("micro_batch", 1.5), ("num_gpus", True),
])
def test_bad_sizes_raise(field: str, value: object) -> None:
    kw: dict[str, object] = {"num_gpus": 8, "seq_len": 128, "micro_batch": 1}
    kw[field] = value
    with pytest.raises(UserInputError, match=field):
        memory_breakdown(get_model("tiny-llama"), **kw)  # type: ignore[arg-type]


def test_bad_ac_and_memory_raise() -> None:
    spec = get_model("tiny-llama")
    with pytest.raises(UserInputError, match="partial"):
        memory_breakdown(spec, num_gpus=1, seq_len=8, micro_batch=1, ac="partial")
    with pytest.raises(ValueError, match="gpu_memory_bytes"):
        max_micro_batch(spec, gpu_memory_bytes=0, num_gpus=1, seq_len=8, ac="none")


@pytest.mark.parametrize("field", ["activation_bytes", "reserve_bytes", "gathered_units"])
def test_memory_config_rejects_negative(field: str) -> None:
    with pytest.raises(UserInputError, match=field):
        MemoryConfig(**{field: -1})
