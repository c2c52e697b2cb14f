"""Discrete-event Monte Carlo of failures, checkpoints, restarts and preemptions (issue 28).

The closed forms (`perfmodel.spec.failure_model`: `daly_wall_factor`, `island_participation`) are
derived from the processes below; these simulations play the processes out event by event with
plain numpy random numbers and share no formula with them, so the tests can hold the closed
forms to the simulations' means (`tests/test_failures.py`: within 2 % on a grid of job sizes,
MTBFs and checkpoint costs).

Checkpointed job (FSDP, or a DiLoCo run of one island)
-------------------------------------------------------
`work_s` of compute is cut into segments of `interval_s` (the last one shorter). After each
segment the job stalls `stall_s` to snapshot its state; the snapshot becomes durable `write_s`
later (0: synchronous — the stall is the whole write), while the next segment computes; the next
snapshot waits for the previous write. Interruptions arrive as one Poisson process whose events are
of type t with probability `weights[t]` (failures, preemptions); any interruption — during compute,
stall, write or restart — rolls the job back to its last durable snapshot and starts a restart of
`restart_s[t]` seconds (its own type's). The job ends when its final snapshot is durable.

DiLoCo islands
--------------
Outer steps start every `period_s` on a fixed grid. Each island fails alone (Poisson rate, types
as above); it loses the outer step it fails in, restarts for `restart_s[t]` (not interrupted) and
rejoins at the first boundary after that. An outer step trains the sequences of the islands that
completed it; the run ends once `target_seqs` sequences are trained (the last step counted
fractionally).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from perfmodel.spec.errors import UserInputError


@dataclass(frozen=True, kw_only=True, slots=True)
class Interruptions:
    """A Poisson interruption process with typed events and their restart times."""

    rate_per_s: float
    """Total interruption rate (failures and preemptions together), per second."""
    weights: tuple[float, ...] = (1.0,)
    """Probability that an interruption is of each type (sums to 1)."""
    restart_s: tuple[float, ...] = (0.0,)
    """Restart time after an interruption of each type, seconds."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.rate_per_s) and self.rate_per_s >= 0):
            raise UserInputError(f"Interruptions.rate_per_s = {self.rate_per_s!r}",
                                 hint="give a finite rate >= 0 per second.")
        if len(self.weights) != len(self.restart_s) or not self.weights:
            raise UserInputError("Interruptions: weights and restart_s differ in length",
                                 hint="give one restart time per interruption type.")
        if (any(not math.isfinite(w) or w < 0 for w in self.weights)
                or abs(sum(self.weights) - 1.0) > 1e-9):
            raise UserInputError(f"Interruptions.weights = {self.weights!r}",
                                 hint="give probabilities >= 0 that sum to 1.")
        if any(not math.isfinite(r) or r < 0 for r in self.restart_s):
            raise UserInputError(f"Interruptions.restart_s = {self.restart_s!r}",
                                 hint="give restart times >= 0 in seconds.")


@dataclass(frozen=True, kw_only=True, slots=True)
class RunSample:
    """Wall times of simulated runs."""

    wall_time_s: np.ndarray
    """One wall time per run, seconds."""
    work_s: float
    """Useful compute of one run (the failure-free time), seconds."""

    @property
    def mean_wall_time_s(self) -> float:
        """Mean wall time over the runs."""
        return float(np.mean(self.wall_time_s))

    @property
    def goodput(self) -> float:
        """Useful time over mean wall time."""
        return self.work_s / self.mean_wall_time_s

    @property
    def standard_error_s(self) -> float:
        """Standard error of the mean wall time."""
        return float(np.std(self.wall_time_s, ddof=1) / math.sqrt(len(self.wall_time_s)))


def _restart(rng: np.random.Generator, t: float, process: Interruptions) -> tuple[float, float]:
    """Restart at `t` after an interruption; an interruption during a restart starts a new restart
    of its own type. Returns (time the job computes again, time of the next interruption)."""
    weights = np.asarray(process.weights)
    while True:
        kind = int(rng.choice(len(weights), p=weights))
        nxt = t + rng.exponential(1.0 / process.rate_per_s)
        done = t + process.restart_s[kind]
        if nxt >= done:
            return done, nxt
        t = nxt


def simulate_checkpointed_run(*, work_s: float, interval_s: float, stall_s: float,
                              write_s: float = 0.0, process: Interruptions, runs: int,
                              seed: int = 0) -> RunSample:
    """Wall times of `runs` checkpointed jobs (module docstring), one event at a time."""
    for name, value in (("work_s", work_s), ("interval_s", interval_s)):
        if not (math.isfinite(value) and value > 0):
            raise UserInputError(f"{name} = {value!r}", hint=f"give {name} > 0.")
    rng = np.random.default_rng(seed)
    full, rest = divmod(work_s, interval_s)
    segments = [interval_s] * int(full) + ([rest] if rest > 1e-12 * interval_s else [])
    total = len(segments)
    out = np.empty(runs)
    inf = math.inf
    for run in range(runs):
        t = 0.0
        nxt = rng.exponential(1.0 / process.rate_per_s) if process.rate_per_s > 0 else inf
        durable, taken, ready = 0, 0, -inf  # ready: when snapshot `taken` is durable
        while durable < total:
            pending = taken == durable + 1
            if taken == total:  # only the last write is outstanding
                end = ready
            else:
                start = t + segments[taken]
                if pending:
                    start = max(start, ready)  # a snapshot waits for the previous write
                end = start + stall_s
            if nxt >= end:
                t = end
                if taken == total:
                    durable = taken
                    continue
                if pending:
                    durable += 1
                taken += 1
                ready = end + write_s
                continue
            if pending and ready <= nxt:
                durable += 1
            taken = durable
            t, nxt = _restart(rng, nxt, process)
        out[run] = t
    return RunSample(wall_time_s=out, work_s=work_s)


@dataclass(frozen=True, kw_only=True, slots=True)
class IslandSpec:
    """One DiLoCo island of the simulation."""

    seqs_per_step: int
    """Sequences the island trains per inner step (b_i)."""
    process: Interruptions
    """Its failures and preemptions (restarts are not interrupted)."""


class _IslandClock:
    """One island's failures, drawn lazily: which outer steps it completes, chunk by chunk."""

    def __init__(self, rng: np.random.Generator, island: IslandSpec, period_s: float) -> None:
        self.rng = rng
        self.process = island.process
        self.period_s = period_s
        self.weights = np.asarray(self.process.weights)
        self.fail = (rng.exponential(1.0 / self.process.rate_per_s)
                     if self.process.rate_per_s > 0 else math.inf)
        self.down_until = 0  # steps before this index are already decided

    def steps(self, first: int, count: int) -> np.ndarray:
        """Completion flags of outer steps first..first+count-1 (called with consecutive
        ranges)."""
        up = np.ones(count, dtype=bool)
        up[: max(0, min(self.down_until - first, count))] = False
        end = (first + count) * self.period_s
        while self.fail < end:
            failed = int(self.fail // self.period_s)
            kind = int(self.rng.choice(len(self.weights), p=self.weights))
            back = self.fail + self.process.restart_s[kind]
            rejoin = max(failed + 1, math.ceil(back / self.period_s))
            up[max(failed - first, 0): max(0, min(rejoin - first, count))] = False
            self.down_until = rejoin
            self.fail = rejoin * self.period_s + self.rng.exponential(1.0 / self.process.rate_per_s)
        return up


def simulate_islands(*, islands: Sequence[IslandSpec], period_s: float, target_seqs: float,
                     runs: int, seed: int = 0) -> RunSample:
    """Wall times of `runs` DiLoCo runs that train `target_seqs` sequences (module docstring);
    `work_s` of the result is the failure-free time target/Σb·period."""
    rng = np.random.default_rng(seed)
    per_step = np.array([i.seqs_per_step for i in islands], dtype=float)
    free_steps = target_seqs / per_step.sum()
    chunk = max(8, int(free_steps) + 8)
    out = np.empty(runs)
    for run in range(runs):
        clocks = [_IslandClock(rng, island, period_s) for island in islands]
        trained, first = 0.0, 0
        while True:
            up = np.stack([clock.steps(first, chunk) for clock in clocks])
            cum = trained + np.cumsum(per_step @ up)
            if cum[-1] >= target_seqs:
                break
            trained, first = float(cum[-1]), first + chunk
        k = int(np.searchsorted(cum, target_seqs))
        before = cum[k - 1] if k > 0 else trained
        out[run] = period_s * (first + k + (target_seqs - before) / (cum[k] - before))
    return RunSample(wall_time_s=out, work_s=free_steps * period_s)
