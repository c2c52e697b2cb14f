"""Pipeline parallelism as data: which blocks each stage holds and in which order each pipeline
rank runs its stages' forward and backward passes (GPipe, 1F1B, interleaved 1F1B).

Stages. A layout with pp ranks and V virtual stages per rank cuts the L blocks into S = pp·V
stages of consecutive blocks; global stage s runs on pipeline rank s mod pp (torch's "loop"
placement: rank r holds stages r, r + pp, ..., as `torch.distributed.pipelining` and torchtitan
place them). `stage_blocks` gives every stage ⌊L/S⌋ or ⌈L/S⌉ blocks. Claim: the stages that get
the smaller count are the last and the first, then alternately inwards (last, first, second to
last, second, ...). Why: the first stage also runs the embedding and the last the final norm, the
LM head and the loss, so they are the stages the extra block would make slowest; a balanced cut
gives them the fewer blocks, as torchtitan's splitter does when it counts the embedding and the
head as layers. Llama-3.1-405B (126 blocks) at pp 16 gets 7 blocks on stages 0 and 15 and 8 on the
other 14. Checked by: tests/test_pipeline_spec.py (every L, S: counts sum to L, differ by at most
one, fewer blocks at the ends first).

Orders. `rank_order` is the list of (stage, pass, micro-batch) a pipeline rank executes in one
optimizer step of k micro-batches, pass 'F' (forward) or 'B' (backward, weights and inputs
together), exactly as torch 2.13's schedules execute them on each rank:

* GPipe: every forward of the rank's stage in micro-batch order, then every backward in the same
  order (ScheduleGPipe).
* 1F1B: rank r runs min(k, pp - 1 - r) warm-up forwards, then alternates one forward and one
  backward (the forward first) while forwards remain, then the remaining backwards (Schedule1F1B;
  its planned table `pipeline_order` is wrong for the last rank in torch 2.13 — the executed order
  is the one here, recorded on gloo).
* Interleaved 1F1B (V >= 2): torch's ScheduleInterleaved1F1B rule: with r_b = max(1, k // pp)
  rounds of m_r = k // r_b micro-batches, rank r runs w = min((V-1)·m_r + 2·(pp-1-r), V·k)
  warm-up forwards, then pairs (forward, backward), then w backwards; operation i's forward runs
  local stage (i // m_r) mod V and its backward local stage V-1 - ((i - w) // m_r) mod V; each
  stage takes its micro-batches in order. It needs k to be a multiple of r_b (torch's check);
  1F1B needs k >= pp (torch raises otherwise), interleaved 1F1B and GPipe run any k.

`in_flight` counts, per stage, the most micro-batches whose forward has run and whose backward has
not: the activations the stage holds at its peak (GPipe: k; 1F1B: min(k, pp - r) on rank r).
Checked by: tests/test_pipeline_order.py (orders equal the sequences recorded from torch's
schedules, catalogs/profiles/data/pp-order.csv: gloo pp 2 and the fake process group pp 2 and 4,
k 2 to 12, 1 to 4 virtual stages) and tests/test_pipeline_spec.py (dependency-feasibility of every
order for pp up to 8; in-flight counts against the closed forms).

Point-to-point. `p2p_order` lists the sends and receives a pipeline rank posts in one step, in
posting order, each as (kind, stage, micro-batch, peer rank): SEND_F / RECV_F carry stage s's
output activation to stage s + 1 (tagged with the sending / the receiving stage, as torch tags
them), SEND_B / RECV_B the gradient of stage s's input back to stage s - 1. Claim: a send is
posted right after the pass that produced it, on every schedule; a receive right before the pass
that consumes it for GPipe and 1F1B (ScheduleGPipe and Schedule1F1B are hand-written loops that
receive, compute, send), but as early as torch's schedule lowering puts it for interleaved 1F1B
(ScheduleInterleaved1F1B runs `pipeline_order_with_comms`: the compute orders with FSDP
bookkeeping actions added, then `_add_send_recv`, which walks the ranks round-robin one action
per rank per round and places the receiver's RECV when the sender's compute is placed);
`_lowered_orders` replays that lowering on these orders. Every boundary of a pp >= 2 pipeline
crosses ranks (loop placement), so each carries one transfer per micro-batch and direction:
`boundary_bytes` = micro-batch x sequence (/ cp) x hidden in the activation dtype, / tp under
sequence parallelism. Checked by: tests/test_pipeline_order.py (the posting order, peers, shapes,
dtypes and bytes recorded from torch 2.13 on 2 gloo ranks and, for pp 4, on the fake process
group, catalogs/profiles/data/pp-order.csv, and one live re-recording).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from perfmodel.spec.errors import UserInputError
from perfmodel.spec.formulas import dtype_bytes


@dataclass(frozen=True, slots=True, order=True)
class Action:
    """One compute action of a pipeline rank."""

    stage: int
    """Global stage index (0 = the embedding side)."""
    pass_: str
    """'F' (forward) or 'B' (backward)."""
    micro: int
    """Micro-batch index within the optimizer step."""

    def __str__(self) -> str:
        return f"{self.stage}{self.pass_}{self.micro}"


def stage_blocks(num_layers: int, pp: int, virtual_stages: int = 1) -> tuple[int, ...]:
    """Blocks held by each of the pp · virtual_stages stages, in stage order (module doc)."""
    stages = pp * virtual_stages
    if stages < 1 or num_layers < stages:
        raise UserInputError(
            f"{stages} pipeline stages for {num_layers} blocks: a stage would hold none",
            hint=f"use at most {num_layers} stages (pp x virtual_stages).")
    base, extra = divmod(num_layers, stages)
    if extra == 0:
        return (base,) * stages
    # the (stages - extra) smaller stages: last, first, second to last, second, ...
    ends: list[int] = []
    lo, hi = 0, stages - 1
    while len(ends) < stages - extra:
        ends.append(hi)
        hi -= 1
        if len(ends) < stages - extra:
            ends.append(lo)
            lo += 1
    small = set(ends)
    return tuple(base if s in small else base + 1 for s in range(stages))


def stage_of_rank(rank: int, pp: int, virtual_stages: int) -> tuple[int, ...]:
    """Global stages pipeline rank `rank` holds (loop placement)."""
    return tuple(rank + v * pp for v in range(virtual_stages))


def check_schedule(schedule: str, pp: int, virtual_stages: int, micro_batches: int) -> None:
    """UserInputError naming the rule a schedule breaks with k = `micro_batches` (and the
    nearest k that works)."""
    if micro_batches < 1:
        raise UserInputError(f"{micro_batches} micro-batches per step",
                             hint="use at least one micro-batch (--accum >= 1).")
    if schedule == "1f1b" and micro_batches < pp:
        raise UserInputError(
            f"{schedule} with pp {pp} needs at least pp micro-batches per step, got "
            f"{micro_batches}",
            hint=f"use --accum {pp} or more (micro-batches per step), or pp_schedule gpipe.")
    if schedule == "interleaved-1f1b":
        rounds = max(1, micro_batches // pp)
        if micro_batches % rounds:
            up = -(-micro_batches // pp) * pp
            raise UserInputError(
                f"interleaved-1f1b with pp {pp} needs a number of micro-batches that is a "
                f"multiple of max(1, k // pp) = {rounds}, got {micro_batches}",
                hint=f"use --accum {up} (a multiple of pp) or {micro_batches // rounds * rounds}.")


@lru_cache(maxsize=512)
def rank_order(schedule: str, pp: int, virtual_stages: int, micro_batches: int,
               rank: int) -> tuple[Action, ...]:
    """The compute actions pipeline rank `rank` executes in one step (module doc)."""
    check_schedule(schedule, pp, virtual_stages, micro_batches)
    k = micro_batches
    if schedule == "gpipe":
        stage = rank
        return (tuple(Action(stage, "F", m) for m in range(k))
                + tuple(Action(stage, "B", m) for m in range(k)))
    if schedule == "1f1b":
        stage = rank
        warmup = min(k, pp - 1 - rank)
        out = [Action(stage, "F", m) for m in range(warmup)]
        f, b = warmup, 0
        while f < k:
            out += [Action(stage, "F", f), Action(stage, "B", b)]
            f, b = f + 1, b + 1
        out += [Action(stage, "B", m) for m in range(b, k)]
        return tuple(out)
    if schedule == "interleaved-1f1b":
        return _interleaved(pp, virtual_stages, k, rank)
    raise UserInputError(f"unknown pipeline schedule {schedule!r}",
                         hint="use gpipe, 1f1b or interleaved-1f1b.")


def _interleaved(pp: int, v: int, k: int, rank: int) -> tuple[Action, ...]:
    rounds = max(1, k // pp)
    per_round = k // rounds
    warmup = min((v - 1) * per_round + 2 * (pp - 1 - rank), v * k)
    steady = v * k - warmup
    next_f = [0] * v
    next_b = [0] * v

    def forward(op: int) -> Action:
        local = (op // per_round) % v
        action = Action(local * pp + rank, "F", next_f[local])
        next_f[local] += 1
        return action

    def backward(op: int) -> Action:
        local = v - 1 - ((op - warmup) // per_round) % v
        action = Action(local * pp + rank, "B", next_b[local])
        next_b[local] += 1
        return action

    out: list[Action] = []
    for op in range(warmup + steady + warmup):
        if op < warmup:
            out.append(forward(op))
        elif op < warmup + steady:
            out += [forward(op), backward(op)]
        else:
            out.append(backward(op))
    return tuple(out)


def in_flight(schedule: str, pp: int, virtual_stages: int, micro_batches: int,
              rank: int) -> dict[int, int]:
    """Per stage of `rank`: the most micro-batches held between their forward and backward."""
    held: dict[int, int] = {}
    peak: dict[int, int] = {}
    for action in rank_order(schedule, pp, virtual_stages, micro_batches, rank):
        held[action.stage] = held.get(action.stage, 0) + (1 if action.pass_ == "F" else -1)
        peak[action.stage] = max(peak.get(action.stage, 0), held[action.stage])
    return peak


# ---- many micro-batches: the steady state in closed form --------------------------------------

GPIPE_STEADY_ACCUM = 32
"""GPipe's first closed-form point: it has no steady phase of (forward, backward) pairs, so
`closed_form_accums` starts its four checked points here (module doc of that function)."""
EXACT_ACCUM_MAX = 4096
"""The most micro-batches a pipeline step is walked (simulated, its memory tracked) one by one
where the closed form does not hold; beyond, a UserInputError names the rule (every walk is
O(k), about 3 s per 1,000 micro-batches of an 8-rank pipeline on a 2-core machine)."""


def steady_accum(schedule: str, pp: int, virtual_stages: int) -> int | None:
    """The smallest admissible k from which every rank's schedule (`rank_order`) runs at least
    three whole periods of its steady phase (None: GPipe, which has none): 1F1B warms up with
    at most pp - 1 forwards and its period is one (forward, backward) pair; interleaved 1F1B
    (k a multiple of pp, so each round holds pp micro-batches) warms up with at most
    (V-1)·pp + 2·(pp-1) forwards and its period is V·pp pairs, V·k operations in all."""
    if schedule == "1f1b":
        return pp + 2
    if schedule == "interleaved-1f1b":
        warm = (virtual_stages - 1) * pp + 2 * (pp - 1)
        k = 3 * pp + -(-warm // virtual_stages)   # V·k - warm >= 3·V·pp
        return -(-k // pp) * pp
    return None


def closed_form_accums(schedule: str, pp: int, virtual_stages: int, micro_batches: int, *,
                       timed: bool = False) -> tuple[int, int, int, int] | None:
    """The micro-batch counts (b, b + P, b + 2P, b + 3P) a step of k = `micro_batches` is
    extended from in closed form, or None: walk k itself (k at most the four points' sum, a
    walk no dearer than the four, or an interleaved k off its line). For memory (`timed`
    False) b = K and P = s, the schedule's step in k (pp for interleaved 1F1B, else 1); for
    step times (`timed`) P = pp·V, a whole turn of the pipeline, and b = K + ((k - K) mod P),
    so that k lies on the points' line in steps of P.

    Claim: for admissible k >= K a pipeline rank's schedule repeats whole periods of the same
    actions, so what depends only on the order (each rank's peak memory by component, its
    in-flight counts) is affine in k, and the step's times grow by the same amount every P
    micro-batches; callers extend only where the values at the four points lie on one line (to
    rounding) and walk k otherwise.
    Why: past K = `steady_accum` every rank runs a fixed warm-up, whole periods that each add
    the same actions, and a fixed cool-down (`perfmodel.sim.layouts._AccumLine` gives the
    memory argument: the set of distinct moments is the same for every such k, and only the
    step-long token ids, labels and receive buffers move, by the same bytes per micro-batch in
    every moment). Times are a max-plus (longest-path) system of the same structure, which after
    a transient repeats with some cyclicity c: T(k + c) = T(k) + c·λ. It need not be 1: a
    Megatron-like 145.6B layout (dp_replicate 24 x pp 8 x tp 8, 1F1B) grows by 0.240584,
    0.238146 and six times 0.240117 s per micro-batch, period pp, so four consecutive points
    can lie on a line that misses k = 96 by 0.2 %; points a turn apart step over every period
    that divides pp·V, and a cyclicity that does not shows as points off one line.
    Interleaved 1F1B's line holds for multiples of pp (rounds of pp micro-batches; every
    admissible k >= pp² is one). GPipe has no periods (every forward, then every backward):
    its peak is the moment that holds all k micro-batches, which the check confirms from K =
    GPIPE_STEADY_ACCUM on instead of a proof.
    Checked by: tests/test_pipeline_closed_form.py (the extended step and memory equal the walk
    at k for every schedule; uniform stages with transfers at 5 % of a forward, whose step
    repeats every pp micro-batches, are extended a turn at a time; a transfer-paced pipeline is
    walked)."""
    steady = steady_accum(schedule, pp, virtual_stages)
    k0 = GPIPE_STEADY_ACCUM if steady is None else steady
    step = pp if schedule == "interleaved-1f1b" else 1
    if micro_batches % step:
        return None
    spacing = pp * virtual_stages if timed else step
    base = k0 + (micro_batches - k0) % spacing
    points = (base, base + spacing, base + 2 * spacing, base + 3 * spacing)
    # four walks cost about as much as one of their summed length: below that, walk k itself
    if micro_batches <= sum(points):
        return None
    return points


LINE_RTOL = 1e-9
"""Relative tolerance of `on_line`: a walk's floating-point sums of thousands of terms round by
about 1e-15 of the value per term, differently at each point."""


def on_line(values: Sequence[float], points: Sequence[int]) -> bool:
    """Whether finite values at `points` lie on one line, to rounding: the slope of each later
    interval equals the first one's."""
    v = [float(x) for x in values]
    scale = max(max(abs(x) for x in v), 1e-12)
    if not math.isfinite(sum(v)):
        return False
    slope = (v[1] - v[0]) / (points[1] - points[0])
    return all(abs((v[i + 1] - v[i]) - slope * (points[i + 1] - points[i])) <= LINE_RTOL * scale
               for i in range(1, len(v) - 1))


def extend_line(values: Sequence[float], points: Sequence[int], micro_batches: int) -> float:
    """The value at k = `micro_batches` on the line through `values` at `points` (read from
    the last two)."""
    return float(values[-1] + (micro_batches - points[-1]) * (values[-1] - values[-2])
                 / (points[-1] - points[-2]))


def check_exact_accum(micro_batches: int, schedule: str, what: str) -> None:
    """UserInputError when `micro_batches` would be walked one by one beyond EXACT_ACCUM_MAX."""
    if micro_batches > EXACT_ACCUM_MAX:
        raise UserInputError(
            f"{what}: {micro_batches} micro-batches per step of a {schedule} pipeline, with no "
            f"closed form past {EXACT_ACCUM_MAX} for this layout",
            hint=f"use --accum {EXACT_ACCUM_MAX} or fewer (a larger micro-batch carries the same "
                 "batch); an interleaved schedule needs a multiple of pp for its closed form, and "
                 "a pipeline paced by its transfers has none (a faster link between stages).")


# ---- point-to-point ----------------------------------------------------------------------------

P2P_KINDS = ("SEND_F", "RECV_F", "SEND_B", "RECV_B")
"""Transfers of a pipeline rank: activation send / receive, gradient send / receive."""


@dataclass(frozen=True, slots=True, order=True)
class Transfer:
    """One point-to-point operation a pipeline rank posts."""

    kind: str
    """One of P2P_KINDS."""
    stage: int
    """The local stage posting it: the sender of SEND_*, the receiver of RECV_* (torch's tags)."""
    micro: int
    """Micro-batch index."""
    peer: int
    """Pipeline rank at the other end."""

    def __str__(self) -> str:
        return f"{self.stage}{self.kind}{self.micro}"


def _peer_stage(kind: str, stage: int) -> int:
    return stage + 1 if kind in ("SEND_F", "RECV_B") else stage - 1


def transfers_of(action: Action, num_stages: int,
                 pp: int) -> tuple[Transfer | None, Transfer | None]:
    """(the receive that `action` consumes, the send it produces), None where the stage is an
    end of the pipeline (or its neighbour is on the same rank)."""
    if action.pass_ == "F":
        recv_kind, send_kind = "RECV_F", "SEND_F"
        has_recv, has_send = action.stage > 0, action.stage < num_stages - 1
    else:
        recv_kind, send_kind = "RECV_B", "SEND_B"
        has_recv, has_send = action.stage < num_stages - 1, action.stage > 0

    def make(kind: str, present: bool) -> Transfer | None:
        peer = _peer_stage(kind, action.stage) % pp
        if not present or peer == action.stage % pp:
            return None
        return Transfer(kind, action.stage, action.micro, peer)

    return make(recv_kind, has_recv), make(send_kind, has_send)


@lru_cache(maxsize=256)
def posting_order(schedule: str, pp: int, virtual_stages: int, micro_batches: int,
                  rank: int) -> tuple[Action | Transfer, ...]:
    """Pipeline rank `rank`'s compute actions and the transfers it posts, in one sequence, in
    the order torch 2.13 issues them (module doc)."""
    if schedule == "interleaved-1f1b":
        lowered = _lowered_orders(pp, virtual_stages, micro_batches)[rank]
        return tuple(item for item in lowered if isinstance(item, Action | Transfer))
    stages = pp * virtual_stages
    out: list[Action | Transfer] = []
    for action in rank_order(schedule, pp, virtual_stages, micro_batches, rank):
        recv, send = transfers_of(action, stages, pp)
        out += [t for t in (recv, action, send) if t is not None]
    return tuple(out)


def p2p_order(schedule: str, pp: int, virtual_stages: int, micro_batches: int,
              rank: int) -> tuple[Transfer, ...]:
    """The sends and receives pipeline rank `rank` posts in one step, in posting order (module
    doc): `posting_order` without the compute actions."""
    return tuple(item for item in posting_order(schedule, pp, virtual_stages, micro_batches, rank)
                 if isinstance(item, Transfer))


@dataclass(frozen=True, slots=True)
class _Bookkeeping:
    """An FSDP action of torch's lowered schedule (UNSHARD, RESHARD, REDUCE_GRAD): no transfer,
    but one slot of the round-robin walk that places the receives."""

    kind: str
    stage: int


_Lowered = Action | Transfer | _Bookkeeping


def _unshard_reshard(actions: list[Action], max_active: int = 3) -> list[Action | _Bookkeeping]:
    """torch's `_add_unshard_reshard`: before each action, unshard the next `max_active`
    distinct stages not yet unsharded, resharding the active ones not among them first."""
    active: set[int] = set()
    out: list[Action | _Bookkeeping] = []
    for i, action in enumerate(actions):
        upcoming: list[int] = []
        for later in actions[i:]:
            if later.stage not in upcoming:
                upcoming.append(later.stage)
                if len(upcoming) == max_active:
                    break
        fetch = [s for s in upcoming if s not in active]
        for s in [s for s in active if s not in upcoming]:   # set order, as torch iterates it
            active.remove(s)
            out.append(_Bookkeeping("RESHARD", s))
        for s in fetch:
            active.add(s)
            out.append(_Bookkeeping("UNSHARD", s))
        out.append(action)
    out += [_Bookkeeping("RESHARD", s) for s in list(active)]
    return out


def _reduce_grad(actions: list[Action | _Bookkeeping],
                 micro_batches: int) -> list[Action | _Bookkeeping]:
    """torch's `_add_reduce_grad`: REDUCE_GRAD right after each stage's last backward."""
    out: list[Action | _Bookkeeping] = []
    backwards: dict[int, int] = {}
    for action in actions:
        out.append(action)
        if isinstance(action, Action) and action.pass_ == "B":
            backwards[action.stage] = backwards.get(action.stage, 0) + 1
            if backwards[action.stage] == micro_batches:
                out.append(_Bookkeeping("REDUCE_GRAD", action.stage))
    return out


@lru_cache(maxsize=64)
def _lowered_orders(pp: int, virtual_stages: int,
                    micro_batches: int) -> dict[int, tuple[_Lowered, ...]]:
    """Every rank's `pipeline_order_with_comms` of torch 2.13's ScheduleInterleaved1F1B: the
    compute orders with FSDP bookkeeping, then `_add_send_recv` (module doc)."""
    stages = pp * virtual_stages
    pending = {r: _reduce_grad(_unshard_reshard(list(rank_order(
        "interleaved-1f1b", pp, virtual_stages, micro_batches, r))), micro_batches)
        for r in range(pp)}
    placed: dict[int, list[_Lowered]] = {r: [] for r in range(pp)}
    seen: dict[int, set[_Lowered]] = {r: set() for r in range(pp)}

    def ready(rank: int, item: Action | _Bookkeeping) -> bool:
        if not isinstance(item, Action):
            return True
        if item.pass_ == "F" and item.stage > 0:
            return (Transfer("RECV_F", item.stage, item.micro, (item.stage - 1) % pp)
                    in seen[rank] or Action(item.stage - 1, "F", item.micro) in seen[rank])
        if item.pass_ == "B" and item.stage < stages - 1:
            return (Transfer("RECV_B", item.stage, item.micro, (item.stage + 1) % pp)
                    in seen[rank] or Action(item.stage + 1, "B", item.micro) in seen[rank])
        return True

    while pending:
        progress = False
        for rank in sorted(pending):
            item = pending[rank][0]
            if not ready(rank, item):
                continue
            placed[rank].append(item)
            seen[rank].add(item)
            if isinstance(item, Action):
                _, send = transfers_of(item, stages, pp)
                if send is not None:
                    placed[rank].append(send)
                    seen[rank].add(send)
                    to = _peer_stage(send.kind, send.stage)
                    recv = Transfer("RECV_F" if send.kind == "SEND_F" else "RECV_B", to,
                                    send.micro, rank)
                    placed[send.peer].append(recv)
                    seen[send.peer].add(recv)
            pending[rank].pop(0)
            if not pending[rank]:
                del pending[rank]
            progress = True
        if not progress:  # the orders of rank_order never deadlock (tests/test_pipeline_spec.py)
            raise RuntimeError("pipeline orders deadlock: no rank can proceed")
    return {r: tuple(items) for r, items in placed.items()}


def boundary_bytes(micro_batch: float, seq_len: int, hidden_size: int, dtype: str, *,
                   tp: int = 1, cp: int = 1, sequence_parallel: bool = True) -> float:
    """Bytes of one stage-boundary transfer (module doc): a micro-batch's hidden states (or their
    gradient) of one tensor/context-parallel rank, in the activation dtype."""
    split = tp if tp > 1 and sequence_parallel else 1
    return float(micro_batch * (seq_len / cp) * hidden_size * dtype_bytes(dtype) / split)
