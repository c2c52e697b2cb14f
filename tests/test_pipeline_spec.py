"""perfmodel.spec.pipeline: stage cuts, schedule orders and in-flight micro-batches (the
recorded torch orders are compared in tests/test_pipeline_order.py)."""

from __future__ import annotations

import itertools

import pytest

from perfmodel.spec.errors import UserInputError
from perfmodel.spec.pipeline import (
    Action,
    check_schedule,
    in_flight,
    rank_order,
    stage_blocks,
    stage_of_rank,
)


@pytest.mark.parametrize(("layers", "stages"), [
    (L, S) for L in (1, 2, 5, 16, 32, 61, 80, 126) for S in (1, 2, 3, 4, 7, 8, 16, 32) if S <= L])
def test_stage_cuts(layers: int, stages: int) -> None:
    cut = stage_blocks(layers, stages)
    assert sum(cut) == layers and len(cut) == stages
    assert max(cut) - min(cut) <= 1
    small = [s for s, n in enumerate(cut) if n < max(cut)]
    # the smaller stages are the ends first: last, first, second to last, second, ...
    ends = sorted(range(stages), key=lambda s: (min(s, stages - 1 - s), -s))
    assert small == sorted(ends[:len(small)])


def test_llama_405b_on_16_stages() -> None:
    assert stage_blocks(126, 16) == (7,) + (8,) * 14 + (7,)


def test_more_stages_than_blocks_is_a_user_error() -> None:
    with pytest.raises(UserInputError, match="hold none"):
        stage_blocks(4, 4, 2)


def _feasible(schedule: str, pp: int, v: int, k: int) -> bool:
    """Run every rank's order with blocking dependencies (F(s, m) after F(s-1, m); B(s, m) after
    B(s+1, m) and F(s, m)); True if all finish (no deadlock)."""
    stages = pp * v
    orders = [list(rank_order(schedule, pp, v, k, r)) for r in range(pp)]
    done: set[Action] = set()
    progress = True
    while progress:
        progress = False
        for order in orders:
            while order:
                a = order[0]
                need = ([Action(a.stage - 1, "F", a.micro)] if a.pass_ == "F" and a.stage
                        else [Action(a.stage, "F", a.micro)] + (
                            [Action(a.stage + 1, "B", a.micro)] if a.stage < stages - 1 else [])
                        if a.pass_ == "B" else [])
                if not all(n in done for n in need):
                    break
                done.add(order.pop(0))
                progress = True
    return all(not o for o in orders)


@pytest.mark.parametrize(("schedule", "pp", "v", "k"), [
    (s, pp, v, k) for s, v in (("gpipe", 1), ("1f1b", 1), ("interleaved-1f1b", 2),
                               ("interleaved-1f1b", 3))
    for pp, k in itertools.product((1, 2, 3, 4, 8), (1, 2, 4, 8, 16))
    if not (s == "1f1b" and k < pp) and not (s.startswith("inter") and k % max(1, k // pp))])
def test_every_order_runs_each_action_once_without_deadlock(schedule: str, pp: int, v: int,
                                                            k: int) -> None:
    for r in range(pp):
        order = rank_order(schedule, pp, v, k, r)
        expected = {Action(s, p, m) for s in stage_of_rank(r, pp, v) for p in "FB"
                    for m in range(k)}
        assert len(order) == len(expected) and set(order) == expected
        for s in stage_of_rank(r, pp, v):   # each stage takes its micro-batches in order
            for p in "FB":
                assert [a.micro for a in order if a.stage == s and a.pass_ == p] == list(range(k))
    assert _feasible(schedule, pp, v, k)


@pytest.mark.parametrize(("pp", "k"), [(2, 4), (4, 4), (4, 16), (8, 8), (16, 32)])
def test_in_flight_closed_forms(pp: int, k: int) -> None:
    for r in range(pp):
        assert in_flight("gpipe", pp, 1, k, r) == {r: k}
        assert in_flight("1f1b", pp, 1, k, r) == {r: min(k, pp - r)}


def test_interleaving_holds_more_in_flight_than_1f1b() -> None:
    one = in_flight("1f1b", 4, 1, 8, 0)[0]
    inter = in_flight("interleaved-1f1b", 4, 2, 8, 0)
    assert sum(inter.values()) > one


@pytest.mark.parametrize(("schedule", "pp", "v", "k", "fix"), [
    ("1f1b", 4, 1, 2, "--accum 4"), ("interleaved-1f1b", 4, 2, 9, "--accum 12"),
    ("gpipe", 2, 1, 0, "--accum >= 1")])
def test_schedules_that_cannot_run_name_the_fix(schedule: str, pp: int, v: int, k: int,
                                                fix: str) -> None:
    with pytest.raises(UserInputError) as err:
        check_schedule(schedule, pp, v, k)
    assert fix in err.value.hint
