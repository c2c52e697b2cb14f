"""Streaming DiLoCo runs: exchanges of fragments overlapping inner steps (paper §IV-D; DESIGN §2).

The fragment schedule and the fragments (`StreamingConfig`, `fragment_pieces`) are
`perfmodel.diloco.fragments`; `perfmodel.diloco.graph` re-exports both modules.

Without backward overlap an exchange starts when its step has ended and must be done when the
needing step starts. With `overlap_backward` the exchange is pipelined per block as in the
published compute-utilisation simulations (Douillard et al. 2025, §3.1: a DAG with one node per
layer, the (outer) gradient reduction overlapped with the backward pass): the piece of block b
starts as soon as b's backward has produced its gradient in step s, and must be done when b's
forward starts in step s + τ + 1. Within a step, forward takes 1/3 and backward 2/3 of the time,
split over the blocks and the LM head by their forward FLOPs (backward = 2 × forward).

The outer optimizer (Nesterov SGD on an fp32 global copy and momentum) runs on the compute stream
right before a merged piece is needed; its time is `perfmodel.diloco.graph.outer_optimizer_s`
(memory-bound, at HBM bandwidth). The compute stream blocks when an exchange is late; blocked
time is compute-stream idle time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from perfmodel.diloco.fragments import DEFAULT_SEQ_LEN, Piece, StreamingConfig, fragment_pieces
from perfmodel.sim.graph import Schedule, TaskGraph
from perfmodel.spec import formulas
from perfmodel.spec.arch import ModelSpec

OUTER_STREAM = "outer"
"""Stream of outer (WAN) communication (also of the blocking DiLoCo all_reduce)."""
TRAIN_ISLAND = "train"
"""Trace process of a Streaming DiLoCo run (the slowest island's inner steps + the outer stream)."""
COMPUTE_STREAM = "compute"
"""Stream of the inner steps of a Streaming DiLoCo run."""


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
            f"need one exchange duration per fragment ({config.num_fragments}), got "
            f"{len(exchange_s)}"
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
        cur, last = 0.0, None
        deps: list[int] = []
        ids: dict[int, list[int]] = {f: [] for f in sends}
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
        ex_f = exchange_s[f]
        durs = [float(ex_f)] if isinstance(ex_f, int | float) else [float(x) for x in ex_f]
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
