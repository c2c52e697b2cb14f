"""The heuristic baseline's granule-by-granule refinement (`planner.solvers.baselines._refine`):
its heap picks against the scan the paper describes (every island considered at every move),
on random island rows with ties, granules and bounds."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from planner.model.problem import IslandPair
from planner.solvers.baselines import _refine


def _scan(batch: int, pairs: list[Any], ks: list[int]) -> list[int] | None:
    """The refinement as a scan over every island per move (the heuristic before its heaps)."""
    total = sum(k * p.seqs_per_accum_step for k, p in zip(ks, pairs, strict=True))
    while total > batch:
        down = [i for i, k in enumerate(ks)
                if k - pairs[i].accum_multiple >= pairs[i].min_accum_steps]
        if not down:
            return None
        i = max(down, key=lambda i: (pairs[i].step_time_s(ks[i]), -i))
        ks[i] -= pairs[i].accum_multiple
        total -= pairs[i].accum_multiple * pairs[i].seqs_per_accum_step
    while total < batch:
        up = [i for i, p in enumerate(pairs)
              if p.accum_multiple * p.seqs_per_accum_step <= batch - total
              and ks[i] + p.accum_multiple <= p.max_accum_steps]
        if not up:
            return None
        i = min(up, key=lambda i: (pairs[i].step_time_s(ks[i] + pairs[i].accum_multiple), i))
        ks[i] += pairs[i].accum_multiple
        total += pairs[i].accum_multiple * pairs[i].seqs_per_accum_step
    return ks


_ROW = st.tuples(st.sampled_from([0.5, 1.0, 2.0]),      # microstep_s: few values, many ties
                 st.sampled_from([0.0, 1.0]),           # step_fixed_s
                 st.integers(1, 6),                     # seqs_per_accum_step
                 st.sampled_from([1, 2, 4]),            # accum_multiple
                 st.integers(0, 3),                     # min_accum_steps in granules
                 st.integers(0, 12))                    # max_accum_steps above min, granules


@settings(max_examples=400, deadline=None)
@given(rows=st.lists(_ROW, min_size=1, max_size=6), batch=st.integers(1, 120),
       start=st.lists(st.integers(0, 15), min_size=6, max_size=6))
def test_heap_refinement_equals_the_scan(rows: list[tuple[Any, ...]], batch: int,
                                         start: list[int]) -> None:
    pairs = []
    ks = []
    for i, (micro, fixed, seqs, q, lo, span) in enumerate(rows):
        lowest = max(q, lo * q)
        pairs.append(IslandPair(option_index=i, micro_batch=1, microstep_s=micro,
                                step_fixed_s=fixed, max_accum_steps=lowest + span * q,
                                seqs_per_accum_step=seqs, min_accum_steps=lowest,
                                accum_multiple=q))
        ks.append(lowest + (start[i] % (span + 1)) * q)
    assert _refine(batch, pairs, list(ks)) == _scan(batch, pairs, list(ks))
