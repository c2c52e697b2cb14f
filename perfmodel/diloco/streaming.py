"""Streaming DiLoCo runs: exchanges of fragments overlapping inner steps (paper §IV-D; DESIGN §2).

The fragment schedule and the fragments (`StreamingConfig`, `fragment_pieces`) are
`perfmodel.diloco.fragments`.

An exchange gates only the forward of its own layers in the needing step s + τ + 1, as in the
published compute-utilisation simulator (Douillard et al. 2025, §3.1: a DAG with one node per
layer and pass, the (outer) gradient reduction a node of its layer): the blocks before the
fragment's first block compute meanwhile, for τ = 0 as for any τ. Without backward overlap the
whole fragment is sent when its step has ended and must be merged when the forward of the needing
step reaches the fragment's first block (the start of the step only for the fragment holding
block 0, or when no pieces are given). With `overlap_backward` the exchange is pipelined per
block: the piece of block b starts as soon as b's backward has produced its gradient in step s,
and must be done when b's forward starts in step s + τ + 1. Within a step, forward takes 1/3 and
backward 2/3 of the time, split over the blocks and the LM head by their forward FLOPs
(backward = 2 × forward).

`steady_state` is the closed form of one period of H steps (exact while exchanges are at least
τ + 1 steps apart, so none waits for another); `no_block_condition` its blocking test without
backward overlap. tests/test_streaming_agreement.py checks both against the simulation, the tuner
and `shardmeter streaming --bandwidth-for-utilisation`.

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
    required with `overlap_backward`; without it a fragment moves as one transfer after the step
    and is needed at the smallest `need_fraction` of its pieces, at the needing step's start when
    no pieces are given). `outer_opt_s` has the same shape (seconds of outer optimizer per
    fragment or piece). `step_s` is one inner-step time, or one per step.
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
            # the whole fragment after the step, needed where the forward reaches its first block
            need = 0.0 if pieces is None else min(p.need_fraction for p in pieces[f])
            out.append([(1.0, need, sum(durs), sum(opts))])
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
    *,
    step_s: float,
    exchange_s: Sequence[float],
    config: StreamingConfig,
    need_fractions: Sequence[float] | None = None,
) -> bool:
    """Steady-state test with a constant step time and no backward overlap: exchange f, sent when
    its step ends, is merged before the forward of the needing step reaches the fragment's first
    block ((τ + n_f)·t after, n_f = `need_fractions[f]`, 0 when not given), and the outer stream
    keeps up with one exchange per H/F steps. Exact when F divides H and τ + n_f <= H/F for every
    fragment (each exchange then starts on an idle outer stream); sufficient otherwise.

    Checked against the simulation by tests/test_diloco.py (both sides of the boundary)."""
    needs = [0.0] * config.num_fragments if need_fractions is None else list(need_fractions)
    if len(needs) != len(exchange_s) or len(needs) != config.num_fragments:
        raise ValueError(
            f"need one exchange time and one need fraction per fragment ({config.num_fragments})"
        )
    return all(
        x <= min(config.delay_steps + n, config.send_interval) * step_s
        for x, n in zip(exchange_s, needs, strict=True)
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class SteadyState:
    """Closed-form steady state of a fragment schedule: one period of H inner steps."""

    step_s: float
    """Inner-step work t (constant)."""
    config: StreamingConfig
    """The fragment schedule."""
    blocked_s: tuple[float, ...]
    """Per fragment: how long its exchange holds the needing step back, once per period."""
    outer_optimizer_s: float
    """Outer optimizer seconds per period (compute stream, all fragments)."""
    period_load_s: float
    """Outer-stream busy time per period (every fragment exchanged once)."""

    @property
    def period_compute_s(self) -> float:
        """Inner-step work per period (H·t)."""
        return self.config.sync_every * self.step_s

    @property
    def period_s(self) -> float:
        """Wall time of a period: H·t, the blocked time and the outer optimizer steps."""
        return self.period_compute_s + sum(self.blocked_s) + self.outer_optimizer_s

    @property
    def utilisation(self) -> float:
        """H·t / period wall time (the outer stream, busy `period_load_s`, never sets the pace
        here: every exchange is merged before the next one starts)."""
        return self.period_compute_s / self.period_s

    @property
    def blocks(self) -> bool:
        """Some exchange holds its needing step back."""
        return any(b > 1e-12 * max(self.period_s, 1.0) for b in self.blocked_s)


def steady_state(
    *,
    step_s: float,
    exchange_s: Sequence[float | Sequence[float]],
    config: StreamingConfig,
    pieces: Sequence[Sequence[Piece]] | None = None,
    outer_opt_s: Sequence[float | Sequence[float]] | None = None,
) -> SteadyState:
    """The steady state of `simulate_streaming`'s inputs in closed form (constant step time t).

    Claim: when every two exchanges are at least τ + 1 steps apart (`min_send_spacing`), each
    period of H steps lasts H·t + Σ_f b_f + Σ(outer optimizer), with b_f the hold-up of fragment
    f's exchange alone. Why: exchange f is sent in step s and merged in step s + τ + 1, and the
    next exchange is sent no earlier than that step, after the forward that holds every need
    point, so no two exchanges share the outer stream or a hold-up. With its transfers in the
    order their gradients exist (ready shares r_k, durations d_k, times from the start of step
    s), e_k = max(r_k·t, e_(k-1)) + d_k; the needing step starts at (τ + 1)·t and, taking the
    need shares n_k in increasing order, waits at each: c <- max(c + (n_k − n_(k-1))·t, e_k) +
    (outer optimizer of that transfer); b_f is the step's end minus t, its start and the outer
    optimizer. A whole-fragment exchange is one transfer (r = 1, n = its first block's share).
    Checked against the simulated run, the tuner and the CLI by tests/test_streaming_agreement.py.
    """
    if not step_s > 0:
        raise ValueError(f"need step_s > 0, got {step_s}")
    if len(exchange_s) != config.num_fragments:
        raise ValueError(
            f"need one exchange duration per fragment ({config.num_fragments}), got "
            f"{len(exchange_s)}"
        )
    if config.min_send_spacing < config.delay_steps + 1:
        raise ValueError(
            f"the closed form needs exchanges at least τ + 1 = {config.delay_steps + 1} steps "
            f"apart; H={config.sync_every}, F={config.num_fragments} sends one every "
            f"{config.min_send_spacing} at least (simulate_streaming covers any schedule)"
        )
    timing = _timing(config, exchange_s, pieces, outer_opt_s)
    blocked, opt_total, load = [], 0.0, 0.0
    start = (config.delay_steps + 1) * step_s
    for transfers in timing:
        end, arrivals = 0.0, []
        for ready, need, dur, opt in sorted(transfers, key=lambda x: x[0]):
            end = max(ready * step_s, end) + dur
            arrivals.append((need, end, opt))
            load += dur
        cur, at, opt_f = start, 0.0, 0.0
        for need, arrive, opt in sorted(arrivals, key=lambda x: x[0]):
            cur = max(cur + (need - at) * step_s, arrive) + opt
            at, opt_f = need, opt_f + opt
        cur += (1.0 - at) * step_s
        blocked.append(max(0.0, cur - start - step_s - opt_f))
        opt_total += opt_f
    return SteadyState(
        step_s=step_s,
        config=config,
        blocked_s=tuple(blocked),
        outer_optimizer_s=opt_total,
        period_load_s=load,
    )


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
