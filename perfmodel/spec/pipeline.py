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
other 14. Checked by: tests/test_pipeline.py (every L, S: counts sum to L, differ by at most one,
fewer blocks at the ends first).

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
Checked by: tests/test_pipeline.py (orders equal the sequences recorded from torch's schedules on
gloo for pp 2, k 2 and 4, catalogs/profiles/data/pp-order.csv; dependency-feasibility of every
order for pp up to 8; in-flight counts against the closed forms).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from perfmodel.spec.errors import UserInputError


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
