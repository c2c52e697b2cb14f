"""Streaming DiLoCo's fragment schedule and fragments (paper §III-C-1, §IV-D; DESIGN §2 and §3).

Streaming DiLoCo (Douillard et al. 2025, arXiv:2501.18512, Algorithm 2) splits the blocks into F
fragments, consecutive (`contiguous`) or every F-th block (`strided`); the embedding goes with the
fragment holding block 0, final norm and LM head with the one holding the last block. Fragment f
is exchanged after inner steps s_f + k·H with s_f = ceil((f+1)·H/F), so every fragment is
synchronised once every H steps and H need not be a multiple of F. The merged fragment is needed
by step s + τ + 1 (τ = delay), and there only by the forward of its own layers: the blocks before
its first block compute meanwhile, as in the paper's simulator (§3.1: a DAG with one node per
layer and per pass; appendix, Figure 14: the strided pattern lets the first layers' forward of the
next step overlap the exchange). τ = 0 therefore gates the next step from the fragment's first
block on, not from its start (`Piece.need_fraction`).

The simulation of a streaming run, and its closed form, are `perfmodel.diloco.streaming`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from perfmodel.spec.arch import ModelSpec
from perfmodel.spec.recipe import OuterRecipe

FRAGMENT_PATTERNS = ("contiguous", "strided")
"""Block-to-fragment assignments (`perfmodel.spec.recipe.FRAGMENT_PATTERNS`)."""
FORWARD_SHARE = 1.0 / 3.0
"""Share of an inner step spent in forward (backward costs twice the forward FLOPs)."""
DEFAULT_SEQ_LEN = 2048
"""Sequence length used to weigh blocks against the LM head when none is given."""


# ---- Streaming DiLoCo: schedule -----------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class StreamingConfig:
    """Fragment schedule of Streaming DiLoCo (the `OuterRecipe` settings the simulator needs)."""

    num_fragments: int
    """F: block groups exchanged separately."""
    sync_every: int
    """H: inner steps between two synchronisations of the same fragment (any H >= 1)."""
    delay_steps: int
    """τ: inner steps that overlap a fragment's exchange before the merged fragment is needed."""
    overlap_backward: bool = False
    """Start each block's exchange once its backward is done (per-block pipelining, the published
    simulations); False: the whole fragment once the step has ended. Either way a block is needed
    when the forward of the needing step reaches it."""
    fragment_pattern: str = "contiguous"
    """contiguous (consecutive blocks) or strided (block b in fragment b mod F)."""

    def __post_init__(self) -> None:
        if self.num_fragments < 1 or self.sync_every < 1 or self.delay_steps < 0:
            raise ValueError(
                f"need fragments >= 1, sync_every >= 1, delay >= 0; got "
                f"{self.num_fragments}, {self.sync_every}, {self.delay_steps}"
            )
        if self.fragment_pattern not in FRAGMENT_PATTERNS:
            raise ValueError(
                f"fragment_pattern must be one of {FRAGMENT_PATTERNS}, "
                f"got {self.fragment_pattern!r}"
            )

    @classmethod
    def from_recipe(cls, outer: OuterRecipe) -> StreamingConfig:
        """The schedule of an `OuterRecipe`."""
        return cls(
            num_fragments=outer.num_fragments,
            sync_every=outer.inner_steps,
            delay_steps=outer.delay_steps,
            overlap_backward=outer.overlap_backward,
            fragment_pattern=outer.fragment_pattern,
        )

    @property
    def send_interval(self) -> float:
        """Mean inner steps between two fragment exchanges (H/F)."""
        return self.sync_every / self.num_fragments

    def first_send_step(self, fragment: int) -> int:
        """s_f: first inner step after which fragment f is exchanged (then every H steps)."""
        return max(1, math.ceil((fragment + 1) * self.sync_every / self.num_fragments))

    def sends_after(self, step: int) -> list[int]:
        """Fragments exchanged after inner step `step` (1-based)."""
        return [
            f
            for f in range(self.num_fragments)
            if step >= self.first_send_step(f)
            and (step - self.first_send_step(f)) % self.sync_every == 0
        ]

    @property
    def min_send_spacing(self) -> int:
        """Fewest inner steps between two exchanges, the wrap into the next period included (0
        when two fragments are exchanged after the same step, F > H)."""
        steps = [self.first_send_step(f) for f in range(self.num_fragments)]
        cyclic = [*steps, steps[0] + self.sync_every]
        return min(b - a for a, b in zip(cyclic, cyclic[1:], strict=False))


def streaming_steps_to_simulate(config: StreamingConfig) -> int:
    """Enough inner steps to see every fragment exchanged twice and its need."""
    return 2 * config.sync_every + config.delay_steps + 1


def utilisation_steps(config: StreamingConfig) -> tuple[int, int]:
    """(steps to simulate, first measured step): two warm-up periods of H steps plus τ + 1, then
    one period of H steps measured in steady state."""
    warm = 2 * config.sync_every + config.delay_steps + 1
    return warm + config.sync_every, warm + 1


# ---- Streaming DiLoCo: fragments and their pieces -----------------------------------------


def fragment_blocks(
    num_layers: int, num_fragments: int, pattern: str = "contiguous"
) -> tuple[tuple[int, ...], ...]:
    """Blocks of each fragment: contiguous groups (sizes differ by at most one, larger first) or
    strided (block b in fragment b mod F)."""
    if not 1 <= num_fragments <= num_layers:
        raise ValueError(
            f"fragments must be within 1..{num_layers} (one block group each), got {num_fragments}"
        )
    if pattern == "strided":
        return tuple(tuple(range(f, num_layers, num_fragments)) for f in range(num_fragments))
    if pattern != "contiguous":
        raise ValueError(f"fragment pattern must be one of {FRAGMENT_PATTERNS}, got {pattern!r}")
    base, extra = divmod(num_layers, num_fragments)
    out, start = [], 0
    for f in range(num_fragments):
        size = base + (1 if f < extra else 0)
        out.append(tuple(range(start, start + size)))
        start += size
    return tuple(out)


def fragment_params(
    model: ModelSpec, num_fragments: int, pattern: str = "contiguous"
) -> tuple[int, ...]:
    """Parameters per fragment: its blocks, plus the embedding with the fragment holding block 0
    and final norm + LM head with the fragment holding the last block."""
    return tuple(
        sum(p.params for p in pieces) for pieces in fragment_pieces(model, num_fragments, pattern)
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class Piece:
    """One block's share of a fragment: what is exchanged, when it exists, when it is needed."""

    fragment: int
    """Fragment index."""
    block: int
    """Block index (0 = embedding side)."""
    params: int
    """Parameters exchanged (the block, plus the embedding / final norm and LM head if attached)."""
    ready_fraction: float
    """Share of the producing step after which its gradient exists (end of the block's backward)."""
    need_fraction: float
    """Share of the needing step at which it must be merged (start of the block's forward); the
    smallest of a fragment's is where a whole-fragment exchange gates the needing step."""


def _block_times(model: ModelSpec, seq_len: int) -> tuple[list[float], list[float]]:
    """(forward start, backward end) of each block as shares of the step."""
    block = model.block_forward_flops_per_token(seq_len)
    head = model.root_forward_flops_per_token()
    forward = model.num_layers * block + head
    total = forward / FORWARD_SHARE
    starts = [b * block / total for b in range(model.num_layers)]
    # backward runs LM head first, then blocks L-1 .. 0; block b's gradient exists when it ends
    ends = [
        (forward + 2 * head + 2 * (model.num_layers - b) * block) / total
        for b in range(model.num_layers)
    ]
    return starts, ends


def fragment_pieces(
    model: ModelSpec,
    num_fragments: int,
    pattern: str = "contiguous",
    *,
    seq_len: int = DEFAULT_SEQ_LEN,
) -> tuple[tuple[Piece, ...], ...]:
    """Per fragment, one piece per block in forward order (the root's parameters ride with
    blocks 0 and L-1; the embedding's gradient exists only at the very end of backward)."""
    starts, ends = _block_times(model, seq_len)
    last = model.num_layers - 1
    out = []
    for f, blocks in enumerate(fragment_blocks(model.num_layers, num_fragments, pattern)):
        pieces = []
        for b in blocks:
            params = model.block_params
            if b == 0:
                params += model.embedding_params
            if b == last:
                params += model.norm_params + model.lm_head_params
            pieces.append(
                Piece(
                    fragment=f,
                    block=b,
                    params=params,
                    ready_fraction=1.0 if b == 0 else ends[b],
                    need_fraction=0.0 if b == 0 else starts[b],
                )
            )
        out.append(tuple(pieces))
    return tuple(out)
