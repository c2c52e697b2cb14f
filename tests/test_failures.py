"""The failure model's closed forms against the discrete-event Monte Carlo (issue 28).

`perfmodel.spec.formulas` gives Daly's exact expected wall time of a checkpointed job and the
participation of a DiLoCo island that fails alone; `perfmodel.sim.failures` plays the same
processes out event by event (no shared formula). Claims checked here:

* the closed forms match the simulations' means within 2 % on a grid of job sizes, MTBFs,
  checkpoint costs, sync/async writes and two interruption types (failures and preemptions);
* the first-order (Young) estimate misses the same simulations by more than 2 % somewhere on the
  grid (so the grid is demanding enough to tell them apart);
* Daly's optimum is the argmin of his cost and reproduces the optima his paper prints;
* an island's participation falls with the outer-step period (the planner's exactness uses it).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from perfmodel.sim.failures import (
    Interruptions,
    IslandSpec,
    simulate_checkpointed_run,
    simulate_islands,
)
from perfmodel.spec import failure_model as formulas
from perfmodel.spec.errors import UserInputError
from planner.executor import run_tasks

HOUR = 3600.0
TOLERANCE = 0.02
"""The issue's bound on |closed form / simulated mean − 1|."""
RESTARTS = (600.0, 3600.0)
"""Failure restart 10 min; preemption restart 1 h (restart + capacity wait)."""
WEIGHTS = (0.7, 0.3)
"""Share of failures and preemptions among interruptions."""
ASYNC_STALL = 1.0 / 20.0
"""Snapshot stall of the async grid points as a fraction of the write (a grid input)."""


def _closed_form(work_s: float, rate: float, write_s: float, mode: str) -> tuple[float, float]:
    """(Daly expected wall time, Young first-order wall time) at the optimal interval."""
    stall, lag = (write_s, 0.0) if mode == "sync" else (write_s * ASYNC_STALL, write_s)
    factor, interval = formulas.checkpointed_wall_factor(
        rate_per_s=rate, stall_s=stall, write_lag_s=lag, restart_s=list(RESTARTS),
        weights=list(WEIGHTS))
    mean_restart = sum(w * r for w, r in zip(WEIGHTS, RESTARTS, strict=True))
    first_order = work_s * (1 + stall / interval + rate * (interval / 2 + mean_restart + lag))
    return work_s * factor, first_order


GRID = list(itertools.product((50.0, 200.0), (1.0, 6.0, 24.0), (60.0, 600.0), ("sync", "async")))
"""(job hours, MTBF hours, checkpoint write s, mode)."""


def _simulate(work_h: float, mtbf_h: float, write_s: float, mode: str, runs: int) -> float:
    rate = 1.0 / (mtbf_h * HOUR)
    stall, lag = (write_s, 0.0) if mode == "sync" else (write_s * ASYNC_STALL, write_s)
    _, interval = formulas.checkpointed_wall_factor(
        rate_per_s=rate, stall_s=stall, write_lag_s=lag, restart_s=list(RESTARTS),
        weights=list(WEIGHTS))
    sample = simulate_checkpointed_run(
        work_s=work_h * HOUR, interval_s=interval, stall_s=stall, write_s=lag,
        process=Interruptions(rate_per_s=rate, weights=WEIGHTS, restart_s=RESTARTS), runs=runs,
        seed=7)
    return sample.mean_wall_time_s


def test_daly_closed_form_matches_the_simulation_within_2_percent_and_young_does_not() -> None:
    """The grid's simulations run as one task each on the default executor (the local process
    pool, `planner.executor`); each has its own seed, so the means are those of a serial run."""
    worst_daly, worst_young = 0.0, 0.0
    means = run_tasks(_simulate, [(*point, 120) for point in GRID])
    for (work_h, mtbf_h, write_s, mode), simulated in zip(GRID, means, strict=True):
        daly, young = _closed_form(work_h * HOUR, 1.0 / (mtbf_h * HOUR), write_s, mode)
        error = abs(daly / simulated - 1.0)
        assert error < TOLERANCE, (work_h, mtbf_h, write_s, mode, daly, simulated)
        worst_daly = max(worst_daly, error)
        worst_young = max(worst_young, abs(young / simulated - 1.0))
    assert worst_young > TOLERANCE > worst_daly


def test_daly_interval_is_the_argmin_and_reproduces_dalys_published_optima() -> None:
    # Daly 2006, figures 3-5: M = 24 h, 6 h, 15 min with delta = 5 min give 117, 57, 9.1 min
    for mtbf_min, printed in ((24 * 60, 117.0), (6 * 60, 57.0), (15, 9.1)):
        tau = formulas.daly_interval_s(mtbf_min * 60.0, 300.0) / 60.0
        assert tau == pytest.approx(printed, abs=0.5)
    m, delta = 11_135.0, 2.4
    tau = formulas.daly_interval_s(m, delta)
    cost = [formulas.daly_wall_factor(1 / m, t, delta, 1.0) for t in (tau * 0.99, tau, tau * 1.01)]
    assert cost[1] < cost[0] and cost[1] < cost[2]
    # Young's sqrt(2 delta M) is its first-order term
    assert formulas.young_interval_s(1e9, 1.0) / formulas.daly_interval_s(1e9, 1.0) == \
        pytest.approx(1.0, rel=1e-3)
    assert np.allclose(formulas.daly_interval_s(np.array([m, 2 * m]), delta),
                       [tau, formulas.daly_interval_s(2 * m, delta)])


def test_whole_step_intervals_and_async_writes() -> None:
    rate, step = 1 / 10_000.0, 700.0
    factor, interval = formulas.checkpointed_wall_factor(
        rate_per_s=rate, stall_s=2.0, write_lag_s=0.0, restart_s=[300.0], weights=[1.0],
        step_s=step)
    assert interval % step == 0 and interval >= step
    free, _ = formulas.checkpointed_wall_factor(rate_per_s=rate, stall_s=2.0, write_lag_s=0.0,
                                                restart_s=[300.0], weights=[1.0])
    assert factor >= free  # a coarser grid of intervals cannot do better
    _, interval = formulas.checkpointed_wall_factor(
        rate_per_s=rate, stall_s=0.1, write_lag_s=1500.0, restart_s=[300.0], weights=[1.0],
        step_s=step)
    assert interval >= 1500.0  # a snapshot waits for the previous write
    assert formulas.checkpointed_wall_factor(rate_per_s=0.0, stall_s=1.0, write_lag_s=0.0,
                                             restart_s=[1.0], weights=[1.0])[0] == 1.0


ISLAND_GRID = list(itertools.product((300.0, 1800.0), (2.0, 10.0, 50.0)))
"""(outer-step period s, MTBF hours of the reference island)."""


def _islands(mtbf_h: float) -> list[tuple[int, float, tuple[float, ...], tuple[float, ...]]]:
    """Three islands: (sequences per step, rate, restarts, weights)."""
    base = 1.0 / (mtbf_h * HOUR)
    return [(64, base, (600.0,), (1.0,)), (32, 2 * base, (600.0, 7200.0), (0.5, 0.5)),
            (16, 0.5 * base, (60.0,), (1.0,))]


@pytest.mark.parametrize(("period", "mtbf_h"), ISLAND_GRID)
def test_island_participation_matches_the_simulation_within_2_percent(period: float,
                                                                     mtbf_h: float) -> None:
    islands = _islands(mtbf_h)
    share = [formulas.island_participation(rate, period, restarts, weights)
             for _, rate, restarts, weights in islands]
    total = sum(b for b, *_ in islands)
    sample = simulate_islands(
        islands=[IslandSpec(seqs_per_step=b, process=Interruptions(rate_per_s=r, weights=w,
                                                                    restart_s=rs))
                 for b, r, rs, w in islands],
        period_s=period, target_seqs=total * 1000, runs=40, seed=3)
    closed = sample.work_s * total / sum(a * b for a, (b, *_) in zip(share, islands, strict=True))
    assert closed / sample.mean_wall_time_s == pytest.approx(1.0, abs=TOLERANCE)
    assert min(share) < 0.99  # the grid's islands do lose steps


def test_participation_falls_with_the_period_and_the_rate() -> None:
    periods = np.linspace(10.0, 20_000.0, 400)
    values = [formulas.island_participation(1e-4, t, [900.0, 4000.0], [0.6, 0.4])
              for t in periods]
    assert all(b <= a + 1e-15 for a, b in zip(values, values[1:], strict=False))
    assert formulas.island_participation(2e-4, 600.0, [900.0], [1.0]) < \
        formulas.island_participation(1e-4, 600.0, [900.0], [1.0])
    assert formulas.island_participation(0.0, 600.0, [900.0], [1.0]) == 1.0


def test_checkpoint_bytes_are_master_weights_and_adam_moments() -> None:
    assert formulas.checkpoint_bytes(1e9) == pytest.approx(12e9)
    assert formulas.checkpoint_bytes(1e9, "bf16") == pytest.approx(10e9)


def test_interruption_processes_are_validated() -> None:
    with pytest.raises(UserInputError, match="To fix"):
        Interruptions(rate_per_s=math.nan)
    with pytest.raises(UserInputError):
        Interruptions(rate_per_s=1.0, weights=(0.5, 0.4), restart_s=(1.0, 2.0))
    with pytest.raises(UserInputError):
        Interruptions(rate_per_s=1.0, weights=(1.0,), restart_s=(1.0, 2.0))
    with pytest.raises(UserInputError):
        simulate_checkpointed_run(work_s=0.0, interval_s=1.0, stall_s=0.0,
                                  process=Interruptions(rate_per_s=0.0), runs=1)


def test_a_run_without_interruptions_takes_its_work_and_stalls() -> None:
    sample = simulate_checkpointed_run(work_s=1000.0, interval_s=300.0, stall_s=5.0,
                                       process=Interruptions(rate_per_s=0.0), runs=3)
    assert list(sample.wall_time_s) == [1000.0 + 4 * 5.0] * 3  # 300+300+300+100, four snapshots
    assert sample.goodput == pytest.approx(1000.0 / 1020.0)
