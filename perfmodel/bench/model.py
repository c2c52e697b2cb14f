"""A real decoder-only transformer in plain torch, built from a `ModelSpec`.

The layout follows the spec's family flags (`perfmodel.spec.arch.FAMILY_LAYOUT`): RMSNorm or
LayerNorm
(with bias), GQA attention through `scaled_dot_product_attention` (causal), a gated (SwiGLU/GeGLU,
3 matrices) or plain (2 matrices) MLP, biases where the family has them, a tied or untied LM head
and a cross-entropy loss. Phi's parallel block (one norm feeding attention and MLP) is kept.
RoPE is applied to the whole head (Phi rotates half of it; same cost class, no parameters).
The parameter count equals `ModelSpec.total_params` (tests check it).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from perfmodel.spec.arch import ModelSpec
from perfmodel.spec.errors import UserInputError

_GELU_FAMILIES = ("phi", "gemma", "gemma2")


def _norm(spec: ModelSpec) -> nn.Module:
    if spec.norm == "layer":
        return nn.LayerNorm(spec.hidden_size, bias=True)
    return nn.RMSNorm(spec.hidden_size)


def _activation(spec: ModelSpec) -> nn.Module:
    return nn.GELU(approximate="tanh") if spec.family in _GELU_FAMILIES else nn.SiLU()


def rope_tables(seq_len: int, head_dim: int, *, device: torch.device | str | None = None,
                dtype: torch.dtype = torch.float32,
                base: float = 10_000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables of shape (seq_len, head_dim) for rotary position embeddings."""
    half = head_dim // 2
    exponents = torch.arange(0, half, device=device, dtype=torch.float32) / max(half, 1)
    inv_freq = 1.0 / (base ** exponents)
    angles = torch.outer(torch.arange(seq_len, device=device, dtype=torch.float32), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    cos, sin = angles.cos(), angles.sin()
    if head_dim % 2:  # odd head_dim: identity on the last channel
        cos = torch.cat([cos, torch.ones(seq_len, 1, device=device)], dim=-1)
        sin = torch.cat([sin, torch.zeros(seq_len, 1, device=device)], dim=-1)
    return cos.to(dtype), sin.to(dtype)


def _apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:2 * half], x[..., :half]], dim=-1)
    if x.shape[-1] % 2:  # odd head_dim: the last channel is left unrotated
        rotated = torch.cat([rotated, x[..., -1:]], dim=-1)
    return x * cos + rotated * sin


class Attention(nn.Module):
    """Causal grouped-query self-attention (q/k/v/o projections, RoPE, SDPA)."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        h, d = spec.hidden_size, spec.d
        self.num_heads, self.num_kv_heads, self.head_dim = spec.num_heads, spec.num_kv_heads, d
        self.q_proj = nn.Linear(h, spec.q_dim, bias=spec.qkv_bias)
        self.k_proj = nn.Linear(h, spec.kv_dim, bias=spec.qkv_bias)
        self.v_proj = nn.Linear(h, spec.kv_dim, bias=spec.qkv_bias)
        self.o_proj = nn.Linear(spec.q_dim, h, bias=spec.out_bias)
        self.q_norm: nn.Module | None = None
        """Per-head norm of the queries before RoPE (None here; Qwen3's RMSNorm in
        `perfmodel.bench.moe.QkNormAttention`)."""
        self.k_norm: nn.Module | None = None
        """Per-head norm of the keys before RoPE (as `q_norm`)."""
        self.checkpoint_core = False
        """Recompute the attention core (SDPA) in backward instead of keeping what it saves
        (the `attn` checkpointing policy, Megatron's selective recompute)."""

    def _core(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, enable_gqa=self.num_kv_heads != self.num_heads)
        return out

    def _heads(self, x: torch.Tensor, proj: nn.Module, norm: nn.Module | None) -> torch.Tensor:
        """(b, heads, s, d) of one projection of x, normed per head first when `norm` is set."""
        b, s, _ = x.shape
        # -1 heads: under tensor parallelism (perfmodel.bench.parallel) the column-parallel
        # projections return this rank's heads only (x is then a replicated DTensor whose shape
        # is the global one)
        heads: torch.Tensor = proj(x).view(b, s, -1, self.head_dim)
        if norm is not None:
            heads = norm(heads)
        return heads.transpose(1, 2)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self._heads(x, self.q_proj, self.q_norm)
        k = self._heads(x, self.k_proj, self.k_norm)
        v = self._heads(x, self.v_proj, None)
        q, k = _apply_rope(q, cos, sin), _apply_rope(k, cos, sin)
        if self.checkpoint_core:
            out = checkpoint(self._core, q, k, v, use_reentrant=False, preserve_rng_state=False)
        else:
            out = self._core(q, k, v)
        result: torch.Tensor = self.o_proj(out.transpose(1, 2).reshape(b, s, -1))
        return result


class Mlp(nn.Module):
    """Gated (gate/up/down) or plain (fc1/fc2) feed-forward network."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        h, f, bias = spec.hidden_size, spec.intermediate_size, spec.mlp_bias
        self.gated = spec.gated_mlp
        self.up = nn.Linear(h, f, bias=bias)
        self.gate = nn.Linear(h, f, bias=bias) if self.gated else None
        self.down = nn.Linear(f, h, bias=bias)
        self.act = _activation(spec)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gate is not None:
            gated: torch.Tensor = self.down(self.act(self.gate(x)) * self.up(x))
            return gated
        plain: torch.Tensor = self.down(self.act(self.up(x)))
        return plain


class Block(nn.Module):
    """One transformer block: pre-norm sequential (2 norms), Gemma-2's sandwich (4 norms: also
    after attention and after the MLP) or Phi-style parallel (1 norm)."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.parallel = spec.norms_per_block == 1
        self.attn_norm = _norm(spec)
        self.mlp_norm = None if self.parallel else _norm(spec)
        sandwich = spec.norms_per_block == 4
        self.post_attn_norm = _norm(spec) if sandwich else None
        self.post_mlp_norm = _norm(spec) if sandwich else None
        self.attn = Attention(spec)
        self.mlp = Mlp(spec)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        if self.mlp_norm is None:
            normed = self.attn_norm(x)
            parallel: torch.Tensor = x + self.attn(normed, cos, sin) + self.mlp(normed)
            return parallel
        attn = self.attn(self.attn_norm(x), cos, sin)
        x = x + (attn if self.post_attn_norm is None else self.post_attn_norm(attn))
        mlp = self.mlp(self.mlp_norm(x))
        result: torch.Tensor = x + (mlp if self.post_mlp_norm is None else self.post_mlp_norm(mlp))
        return result


def _check_buildable(spec: ModelSpec) -> None:
    """Refuse a spec with layout features this module does not build (a benchmark would
    otherwise measure a different model than the one named)."""
    spec.check_step_modelled("a benchmark model")
    missing = [what for what, present in (
        ("q/k norms", spec.qk_norm != "none"), ("learned positions", spec.position_embeddings > 0),
        ("sliding-window attention", spec.sliding_window > 0),
        ("attention sinks", spec.attention_sinks),
        ("mixture-of-experts layers", spec.moe is not None)) if present]
    if missing:
        raise UserInputError(
            f"{spec.name}: the torch benchmark model does not build {', '.join(missing)} "
            f"(the {spec.family} layout)",
            hint="benchmark a family of perfmodel.spec.arch.FAMILY_LAYOUT (the parameter counts "
                 "and FLOPs of this model are reported by `shardmeter catalog models --config`).")


class Transformer(nn.Module):
    """Decoder-only language model; `forward(tokens)` returns the mean next-token cross-entropy."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        _check_buildable(spec)
        self.spec = spec
        self.embed = nn.Embedding(spec.vocab_size, spec.hidden_size)
        self.layers = nn.ModuleList(Block(spec) for _ in range(spec.num_layers))
        self.final_norm = _norm(spec)
        self.lm_head = nn.Linear(spec.hidden_size, spec.vocab_size, bias=spec.lm_head_bias)
        if spec.tie_word_embeddings:
            self.lm_head.weight = self.embed.weight
        self._rope: tuple[int, torch.Tensor, torch.Tensor] | None = None

    def _rope_for(self, seq_len: int, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self._rope is None or self._rope[0] != seq_len or self._rope[1].device != like.device:
            cos, sin = rope_tables(seq_len, self.spec.d, device=like.device, dtype=like.dtype)
            self._rope = (seq_len, cos, sin)
        return self._rope[1], self._rope[2]

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Loss of predicting tokens[:, 1:] from tokens[:, :-1] (inputs and labels share the
        batch)."""
        x = self.embed(tokens)
        cos, sin = self._rope_for(tokens.shape[1], x)
        for layer in self.layers:
            x = layer(x, cos, sin)
        logits = self.lm_head(self.final_norm(x))
        labels = torch.roll(tokens, shifts=-1, dims=1)
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), labels.view(-1))


def build_model(spec: ModelSpec, *, device: str | torch.device = "cpu",
                dtype: torch.dtype = torch.float32, seed: int = 0) -> Transformer:
    """Instantiate `spec` on `device` in `dtype` with a seeded small-normal initialisation."""
    torch.manual_seed(seed)
    with torch.device(device):
        model = Transformer(spec)
    std = 0.02
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("bias"):
                param.zero_()
            elif param.dim() >= 2:
                param.normal_(0.0, std)
    # Skip a no-op cast: under FakeTensorMode `.to` would try to swap tensors it cannot swap.
    if any(p.dtype != dtype for p in model.parameters()):
        model = model.to(dtype=dtype)
    return model


def count_parameters(model: nn.Module) -> int:
    """Distinct parameters (a tied LM head is counted once)."""
    return sum(p.numel() for p in model.parameters())


def random_tokens(spec: ModelSpec, micro_batch: int, seq_len: int, *,
                  device: str | torch.device = "cpu", seed: int = 0) -> torch.Tensor:
    """A reproducible batch of token ids of shape (micro_batch, seq_len)."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randint(0, spec.vocab_size, (micro_batch, seq_len), generator=gen).to(device)
