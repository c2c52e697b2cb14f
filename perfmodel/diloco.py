"""DiLoCo and Streaming DiLoCo graphs (paper §II-B, §III-C-1, §IV-D; DESIGN §2 and §3).

DiLoCo is a second graph level: each island is a stream whose tasks are whole inner steps (each
the makespan of that island's FSDP step graph). Every H inner steps all islands meet at a
blocking outer all_reduce of the pseudo-gradient; faster islands idle until the slowest is done.
Its duration is σ, `perfmodel.formulas.sync_time_s` (the one home of that formula).

Streaming DiLoCo (Douillard et al. 2025, arXiv:2501.18512, Algorithm 2) splits the blocks into F
fragments, consecutive (`contiguous`) or every F-th block (`strided`); the embedding goes with the
fragment holding block 0, final norm and LM head with the one holding the last block. Fragment f
is exchanged after inner steps s_f + k·H with s_f = ceil((f+1)·H/F), so every fragment is
synchronised once every H steps and H need not be a multiple of F. The merged fragment is needed
by step s + τ + 1 (τ = delay; τ = 0 blocks the next step).

Without backward overlap an exchange starts when its step has ended and must be done when the
needing step starts. With `overlap_backward` the exchange is pipelined per block as in the
published compute-utilisation simulations (op. cit. §3.1: a DAG with one node per layer, the
(outer) gradient reduction overlapped with the backward pass): the piece of block b starts as
soon as b's backward has produced its gradient in step s, and must be done when b's forward
starts in step s + τ + 1. Within a step, forward takes 1/3 and backward 2/3 of the time, split
over the blocks and the LM head by their forward FLOPs (backward = 2 × forward).

The outer optimizer (Nesterov SGD on an fp32 global copy and momentum) runs on the compute stream
right before a merged piece is needed; its time is `outer_optimizer_s` (memory-bound, at HBM
bandwidth). The compute stream blocks when an exchange is late; blocked time is compute-stream
idle time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from perfmodel import formulas
from perfmodel.arch import ModelSpec
from perfmodel.graph import Schedule, TaskGraph
from perfmodel.recipe import OuterRecipe

WAN_ISLAND = "wan"
"""Trace process of the blocking DiLoCo all_reduce."""
OUTER_STREAM = "outer"
"""Stream of outer (WAN) communication."""
STEP_STREAM = "steps"
"""Stream of an island's inner steps at the DiLoCo level."""
TRAIN_ISLAND = "train"
"""Trace process of a Streaming DiLoCo run (the slowest island's inner steps + the outer stream)."""
COMPUTE_STREAM = "compute"
"""Stream of the inner steps of a Streaming DiLoCo run."""
FRAGMENT_PATTERNS = ("contiguous", "strided")
"""Block-to-fragment assignments (`perfmodel.recipe.FRAGMENT_PATTERNS`)."""
OUTER_OPTIMIZER_BYTES_PER_PARAM = 24.0
"""HBM traffic of one Nesterov outer step per parameter: read the fp32 global copy, the fp32
momentum and the fp32 averaged pseudo-gradient (12 B), write momentum, global copy and the new
fp32 local parameters (12 B)."""
FORWARD_SHARE = 1.0 / 3.0
"""Share of an inner step spent in forward (backward costs twice the forward FLOPs)."""
DEFAULT_SEQ_LEN = 2048
"""Sequence length used to weigh blocks against the LM head when none is given."""


def pseudo_gradient_bytes(model: ModelSpec, dtype: str = "fp32") -> float:
    """Bytes of one full pseudo-gradient on the wire (`formulas.payload_bytes`, scales included)."""
    return float(formulas.payload_bytes(model.total_params, dtype))


def outer_optimizer_s(params: float, *, num_gpus: int, hbm_bytes_per_s: float) -> float:
    """Time of the Nesterov outer step over `params` parameters sharded over `num_gpus` GPUs."""
    if num_gpus < 1 or hbm_bytes_per_s <= 0 or params < 0:
        raise ValueError(
            f"need num_gpus >= 1, hbm bandwidth > 0, params >= 0; got {num_gpus}, "
            f"{hbm_bytes_per_s}, {params}"
        )
    return params / num_gpus * OUTER_OPTIMIZER_BYTES_PER_PARAM / hbm_bytes_per_s


# ---- DiLoCo -------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class DilocoResult:
    """A simulated DiLoCo run of `outer_rounds` outer steps."""

    schedule: Schedule
    """Island-level schedule: one stream per island, plus the WAN stream."""
    inner_steps: int
    """H."""
    outer_rounds: int
    """Outer steps simulated."""
    sync_s: float
    """σ, one blocking outer all_reduce."""
    outer_step_s: float
    """H·max island step + σ + outer optimizer step."""
    island_wait_s: dict[str, float]
    """Per island: time spent waiting for slower islands and the sync, per outer step."""

    @property
    def amortised_step_s(self) -> float:
        """Wall time per inner step, outer sync included (DESIGN §3: τ + σ/H)."""
        return self.outer_step_s / self.inner_steps

    @property
    def amortised_sync_s(self) -> float:
        return self.sync_s / self.inner_steps


def simulate_diloco(
    island_step_s: dict[str, float],
    *,
    inner_steps: int,
    sync_s: float,
    outer_rounds: int = 1,
    outer_opt_s: float = 0.0,
) -> DilocoResult:
    """Islands (name -> inner step time) run H inner steps, then a blocking outer all_reduce and
    the outer optimizer step (`outer_opt_s`, on every island)."""
    if not island_step_s or inner_steps < 1 or outer_rounds < 1 or outer_opt_s < 0:
        raise ValueError("need >= 1 island, inner_steps >= 1, outer_rounds >= 1, outer_opt_s >= 0")
    graph = TaskGraph()
    sync: int | None = None
    opts: dict[str, int | None] = dict.fromkeys(island_step_s)
    for r in range(outer_rounds):
        lasts = []
        for name, step_s in island_step_s.items():
            prev = opts[name] if opts[name] is not None else sync
            for h in range(inner_steps):
                prev = graph.add(
                    f"step {r * inner_steps + h + 1}",
                    island=name,
                    stream=STEP_STREAM,
                    kind="inner_step",
                    duration_s=step_s,
                    deps=[prev],
                )
            lasts.append(prev)
        sync = graph.add(
            f"outer all_reduce {r + 1}",
            island=WAN_ISLAND,
            stream=OUTER_STREAM,
            kind="outer_all_reduce",
            duration_s=sync_s,
            deps=lasts,
        )
        if outer_opt_s > 0:
            opts = {
                name: graph.add(
                    f"outer optimizer {r + 1}",
                    island=name,
                    stream=STEP_STREAM,
                    kind="optimizer",
                    duration_s=outer_opt_s,
                    deps=[sync],
                )
                for name in island_step_s
            }
    schedule = graph.simulate()
    outer = schedule.makespan_s / outer_rounds
    wait = {
        name: outer - inner_steps * step_s - outer_opt_s for name, step_s in island_step_s.items()
    }
    return DilocoResult(
        schedule=schedule,
        inner_steps=inner_steps,
        outer_rounds=outer_rounds,
        sync_s=sync_s,
        outer_step_s=outer,
        island_wait_s=wait,
    )


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
    """Start each block's exchange once its backward is done, need it at its forward (per-block
    pipelining, the published simulations); False: whole fragment after/before whole steps."""
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
    """Share of the needing step at which it must be merged (start of the block's forward)."""


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


# ---- Streaming DiLoCo: simulation ---------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class Exchange:
    """One fragment exchange (all its pieces) in a streaming run."""

    fragment: int
    """Fragment index (0 = embedding side)."""
    after_step: int
    """Inner step (1-based) whose result is exchanged."""
    needed_by_step: int
    """First inner step that needs the merged fragment (after_step + τ + 1)."""
    start_s: float
    """Start of the first piece's transfer."""
    end_s: float
    """End of the last piece's transfer."""
    blocked_s: float
    """How long the needing step waited for it (0 when in time or never needed)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StreamingResult:
    """A simulated Streaming DiLoCo run."""

    schedule: Schedule
    """Compute ('train') and outer-communication streams."""
    config: StreamingConfig
    """The fragment schedule."""
    num_steps: int
    """Inner steps simulated."""
    compute_s: float
    """Summed inner-step durations."""
    outer_optimizer_s: float
    """Summed outer optimizer steps (compute stream, not inner-step work)."""
    total_s: float
    """End of the last inner step."""
    exchanges: tuple[Exchange, ...]
    """Every exchange, in order."""
    step_end_s: tuple[float, ...]
    """End of each inner step."""
    step_compute_s: tuple[float, ...]
    """Duration of each inner step's work."""
    split_steps: bool
    """Whether some step was cut into pieces at exchange points (no nested FSDP detail then)."""
    period_load_s: float
    """Outer-stream busy time per H inner steps (every fragment exchanged once)."""

    @property
    def blocked_s(self) -> float:
        """Time the compute stream waited for late exchanges."""
        return max(0.0, self.total_s - self.compute_s - self.outer_optimizer_s)

    @property
    def period_compute_s(self) -> float:
        """Inner-step work per H steps (mean step time × H)."""
        return self.compute_s / self.num_steps * self.config.sync_every

    @property
    def link_bound(self) -> bool:
        """The outer stream cannot carry one pseudo-gradient per H steps: however long the delay,
        a backlog grows every period and training blocks in the long run."""
        return self.period_load_s > self.period_compute_s * (1 + 1e-12)

    @property
    def blocks(self) -> bool:
        """Blocking in the simulated steps, or bound to block later (`link_bound`)."""
        return self.blocked_s > 1e-12 * max(self.total_s, 1.0) or self.link_bound

    def utilisation(self, first_step: int = 1) -> float:
        """Compute utilisation of steps first_step..num_steps (inner-step work / wall time), capped
        by the long-run limit H·t / (outer load per period) when the link is the bottleneck (the
        outer stream then sets the pace; a finite simulation only shows the backlog starting)."""
        if not 1 <= first_step <= self.num_steps:
            raise ValueError(f"first_step must be within 1..{self.num_steps}, got {first_step}")
        begin = self.step_end_s[first_step - 2] if first_step > 1 else 0.0
        wall = self.step_end_s[-1] - begin
        window = sum(self.step_compute_s[first_step - 1 :]) / wall if wall > 0 else 1.0
        if self.link_bound:
            return min(window, self.period_compute_s / self.period_load_s)
        return window


def simulate_streaming(
    *,
    step_s: float | Sequence[float],
    exchange_s: Sequence[float | Sequence[float]],
    config: StreamingConfig,
    num_steps: int,
    pieces: Sequence[Sequence[Piece]] | None = None,
    outer_opt_s: Sequence[float | Sequence[float]] | None = None,
) -> StreamingResult:
    """Simulate `num_steps` inner steps of the slowest island.

    `exchange_s[f]` is fragment f's transfer time, or one time per piece of `pieces[f]` (pieces are
    required with `overlap_backward`; without it a fragment moves as one transfer after the step).
    `outer_opt_s` has the same shape (seconds of outer optimizer per fragment or piece).
    `step_s` is one inner-step time, or one per step.
    """
    steps = (
        [float(step_s)] * num_steps
        if isinstance(step_s, int | float)
        else [float(x) for x in step_s]
    )
    if num_steps < 1 or len(steps) != num_steps:
        raise ValueError(f"need num_steps >= 1 step durations, got {len(steps)} for {num_steps}")
    if len(exchange_s) != config.num_fragments:
        raise ValueError(
            f"need one exchange duration per fragment ({config.num_fragments}), got {len(exchange_s)}"
        )
    timing = _timing(config, exchange_s, pieces, outer_opt_s)
    graph = TaskGraph()
    pending: dict[
        int, list[tuple[int, float, float, int]]
    ] = {}  # step -> (task, need, opt, fragment)
    issued: list[tuple[int, int, list[int]]] = []  # fragment, after_step, piece task ids
    ends_ids: list[int] = []
    split = False
    for s in range(1, num_steps + 1):
        points = [(need, 0, task, opt, f) for task, need, opt, f in pending.pop(s, [])]
        sends = config.sends_after(s)
        points += [
            (ready, 1, p, dur, f) for f in sends for p, (ready, _, dur, _) in enumerate(timing[f])
        ]
        points.sort(key=lambda x: (x[0], x[1]))
        cur, last, deps, ids = 0.0, None, [], {f: [] for f in sends}
        for frac, is_ready, ref, value, f in points:
            if frac > cur and frac < 1.0:
                last = graph.add(
                    f"step {s}",
                    island=TRAIN_ISLAND,
                    stream=COMPUTE_STREAM,
                    kind="inner_step",
                    duration_s=(frac - cur) * steps[s - 1],
                    deps=deps,
                )
                cur, deps = frac, []
            if not is_ready:
                if value > 0:  # the outer optimizer step of this piece, then the work that needs it
                    deps = [
                        graph.add(
                            f"outer optimizer {f}",
                            island=TRAIN_ISLAND,
                            stream=COMPUTE_STREAM,
                            kind="optimizer",
                            duration_s=value,
                            deps=[ref],
                        )
                    ]
                else:
                    deps.append(ref)
                continue
            if frac >= 1.0:
                break
            ids[f].append(_send(graph, pending, f, s, config, timing[f][ref], value, last))
        split = split or cur > 0
        last = graph.add(
            f"step {s}",
            island=TRAIN_ISLAND,
            stream=COMPUTE_STREAM,
            kind="inner_step",
            duration_s=(1.0 - cur) * steps[s - 1],
            deps=deps,
        )
        ends_ids.append(last)
        for frac, is_ready, ref, value, f in points:
            if is_ready and frac >= 1.0:  # whole-step exchanges start when the step has ended
                ids[f].append(_send(graph, pending, f, s, config, timing[f][ref], value, last))
        issued += [(f, s, ids[f]) for f in sends]
    schedule = graph.simulate()
    load = sum(piece[2] for frag in timing for piece in frag)
    return _result(schedule, config, steps, ends_ids, issued, split, load)


def _send(
    graph: TaskGraph,
    pending: dict[int, list[tuple[int, float, float, int]]],
    fragment: int,
    step: int,
    config: StreamingConfig,
    piece: tuple[float, float, float, float],
    duration_s: float,
    after: int | None,
) -> int:
    """Add one transfer on the outer stream and register when it is needed."""
    ex = graph.add(
        f"fragment {fragment} (after step {step})",
        island=TRAIN_ISLAND,
        stream=OUTER_STREAM,
        kind="outer_all_reduce",
        duration_s=duration_s,
        deps=[after],
    )
    pending.setdefault(step + config.delay_steps + 1, []).append((ex, piece[1], piece[3], fragment))
    return ex


def _timing(
    config: StreamingConfig,
    exchange_s: Sequence[float | Sequence[float]],
    pieces: Sequence[Sequence[Piece]] | None,
    outer_opt_s: Sequence[float | Sequence[float]] | None,
) -> list[list[tuple[float, float, float, float]]]:
    """Per fragment, per transfer: (ready share, need share, duration, outer optimizer time)."""
    out = []
    for f in range(config.num_fragments):
        durs = (
            [float(exchange_s[f])]
            if isinstance(exchange_s[f], int | float)
            else [float(x) for x in exchange_s[f]]
        )
        opt_f = outer_opt_s[f] if outer_opt_s is not None else 0.0
        opts = [float(opt_f)] if isinstance(opt_f, int | float) else [float(x) for x in opt_f]
        if config.overlap_backward:
            if pieces is None or len(pieces[f]) != len(durs):
                raise ValueError(
                    "overlap_backward needs the fragment pieces and one duration per piece"
                )
            opts = opts * len(durs) if len(opts) == 1 and len(durs) > 1 else opts
            out.append(
                [
                    (p.ready_fraction, p.need_fraction, d, o)
                    for p, d, o in zip(pieces[f], durs, opts, strict=True)
                ]
            )
        else:
            out.append([(1.0, 0.0, sum(durs), sum(opts))])
    return out


def _result(
    schedule: Schedule,
    config: StreamingConfig,
    steps: list[float],
    ends_ids: list[int],
    issued: list[tuple[int, int, list[int]]],
    split: bool,
    load: float,
) -> StreamingResult:
    ivs = schedule.intervals
    step_end = tuple(ivs[i].end_s for i in ends_ids)
    opts = [(iv.start_s, iv.task.duration_s) for iv in ivs if iv.task.kind == "optimizer"]
    opt = sum(d for _, d in opts)
    exchanges = []
    for f, after, ids in issued:
        need = after + config.delay_steps + 1
        blocked = 0.0
        if need <= len(steps):
            # the needing step could have ended at the previous step's end + its own work
            prev_end = step_end[need - 2]
            blocked = max(
                0.0,
                step_end[need - 1]
                - prev_end
                - steps[need - 1]
                - _opt_in_step(opts, prev_end, step_end[need - 1]),
            )
        exchanges.append(
            Exchange(
                fragment=f,
                after_step=after,
                needed_by_step=need,
                start_s=ivs[ids[0]].start_s,
                end_s=ivs[ids[-1]].end_s,
                blocked_s=blocked,
            )
        )
    return StreamingResult(
        schedule=schedule,
        config=config,
        num_steps=len(steps),
        compute_s=sum(steps),
        outer_optimizer_s=opt,
        total_s=step_end[-1],
        exchanges=tuple(exchanges),
        step_end_s=step_end,
        step_compute_s=tuple(steps),
        split_steps=split,
        period_load_s=load,
    )


def _opt_in_step(opts: Sequence[tuple[float, float]], start_s: float, end_s: float) -> float:
    """Outer optimizer seconds of the (start, duration) list that start within [start_s, end_s)."""
    return sum(d for t, d in opts if start_s <= t < end_s)


def no_block_condition(
    *, step_s: float, exchange_s: Sequence[float], config: StreamingConfig
) -> bool:
    """Steady-state test with a constant step time and no backward overlap: every exchange fits
    in its window of τ steps and the outer stream keeps up with one exchange per H/F steps. Exact
    when τ <= H/F and F divides H (each exchange then starts on an idle outer stream)."""
    window = min(config.delay_steps, config.send_interval) * step_s
    return max(exchange_s) <= window


def fragment_exchange_s(
    model: ModelSpec,
    config: StreamingConfig | int,
    *,
    dtype: str,
    num_islands: int,
    bw_bytes_per_s: float,
    latency_s: float,
    seq_len: int = DEFAULT_SEQ_LEN,
) -> tuple[float | tuple[float, ...], ...]:
    """σ of each fragment's exchange. With backward overlap, one time per piece: its bandwidth
    share of σ, and the ring latency 2·(M−1)·lat once per fragment, on the piece sent first (the
    deepest block: the pieces of a fragment stream out behind it as one pipelined transfer)."""
    if isinstance(config, int):
        config = StreamingConfig(num_fragments=config, sync_every=config, delay_steps=0)
    if bw_bytes_per_s <= 0 or latency_s < 0 or num_islands < 1:
        raise ValueError(
            f"need num_islands >= 1, bandwidth > 0, latency >= 0; got {num_islands}, "
            f"{bw_bytes_per_s}, {latency_s}"
        )
    pieces = fragment_pieces(model, config.num_fragments, config.fragment_pattern, seq_len=seq_len)

    def sigma(params: float, latency: float) -> float:
        return float(
            formulas.sync_time_s(
                num_islands, formulas.payload_bytes(params, dtype), bw_bytes_per_s, latency
            )
        )

    if config.overlap_backward:
        return tuple(
            tuple(sigma(p.params, latency_s if p is frag[-1] else 0.0) for p in frag)
            for frag in pieces
        )
    return tuple(sigma(sum(p.params for p in frag), latency_s) for frag in pieces)
