"""The rows of one island over layouts and checkpointing modes (perfmodel.sim.layouts): each row
is the step `predict` gives at its k, the exact reduction drops only rows another row beats at
every admissible k, layouts that fit nothing name the limit, and a schedule whose in-flight
micro-batches grow with k bounds k by what fits."""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd
import pytest

from perfmodel import api
from perfmodel.costs.memory import memory_breakdown
from perfmodel.profiles.profile import default_profile
from perfmodel.sim.fsdp import resolve_recipe
from perfmodel.sim.layouts import (
    _AccumLine,
    _admissible_floor,
    _PeakByAccum,
    _pipeline_max_accum,
    _tracked,
    drop_dominated,
    island_layout_rows,
    saturated_accum,
)
from perfmodel.spec.catalog import get_gpu, get_model
from perfmodel.spec.hardware import IslandSpec
from perfmodel.spec.layout import ParallelLayout
from perfmodel.spec.layout_space import LayoutSpace
from perfmodel.spec.pipeline import in_flight

MODEL, GPU, SEQ = "Llama-3.2-1B", "H100-SXM5-80GB", 2048


def _island(gpu_name: str = GPU, nodes: int = 1, gpn: int = 8) -> IslandSpec:
    gpu = get_gpu(gpu_name)
    return IslandSpec(gpu=gpu, num_nodes=nodes, gpus_per_node=gpn,
                      intra_link=gpu.intra_node_link, inter_link=gpu.inter_node_link,
                      nics_per_node=gpu.nics_per_node)


@pytest.fixture(scope="module")
def rows() -> pd.DataFrame:
    space = LayoutSpace.parse({"max_tp": 2, "max_pp": 2}, ["op-sac", "full"])
    return island_layout_rows(get_model(MODEL), default_profile(GPU), _island(), seq_len=SEQ,
                              space=space, recipe=resolve_recipe(None, None),
                              global_batch_seqs=64, max_micro_batches=2).rows


def test_rows_are_the_predicted_step_at_their_k(rows: pd.DataFrame) -> None:
    """A row's T(k) = step_fixed_s + k·microstep_s is what `predict` says for that layout, mode,
    micro-batch and k (pipelines at k = min_accum and a larger admissible k)."""
    assert set(rows["pp"]) == {1, 2} and set(rows["tp"]) == {1, 2}
    picks = rows.groupby(["pp", "tp", "ac"], sort=True).head(1)
    for row in picks.itertuples(index=False):
        layout = ParallelLayout(tp=int(row.tp), pp=int(row.pp), dp_replicate=int(row.dp_replicate),
                                virtual_stages=int(row.virtual_stages),
                                pp_schedule=row.pp_schedule or "1f1b",
                                sequence_parallel=bool(row.sequence_parallel) or int(row.tp) == 1)
        recipe = replace(resolve_recipe(None, str(row.ac)), parallel=layout)
        for k in (int(row.min_accum), int(row.min_accum) + int(row.accum_multiple)):
            got = api.predict(api.WorkloadSpec(model_name=MODEL, gpu_name=GPU, seq_len=SEQ,
                                               micro_batch=int(row.micro_batch), accum=k,
                                               recipe=recipe))
            assert got.record["step_time_s"] == pytest.approx(
                row.step_fixed_s + k * row.microstep_s, rel=1e-9), (row.layout, row.ac, k)


def test_the_reduction_drops_only_rows_beaten_at_every_k(rows: pd.DataFrame) -> None:
    """Brute force over k = 1..64: every removed row has a kept row with the same m·dp that is
    admissible at each of its k and no slower, no busier and no larger there."""
    kept = drop_dominated(rows)
    removed = rows.merge(kept, how="left", indicator=True).query("_merge == 'left_only'")
    assert len(kept) + len(removed) == len(rows)

    def admits(r: pd.Series, k: int) -> bool:
        hi = r["max_accum"] if r["max_accum"] > 0 else np.inf
        hi = hi if r["accum_fits"] else 1
        return bool(r["min_accum"] <= k <= hi and k % r["accum_multiple"] == 0)

    for _, gone in removed.iterrows():
        ks = [k for k in range(1, 65) if admits(gone, k)]
        same = kept[kept["micro_batch"] * kept["dp"] == gone["micro_batch"] * gone["dp"]]
        assert any(
            all(admits(other, k) for k in ks)
            and all(other["step_fixed_s"] + k * other["microstep_s"]
                    <= gone["step_fixed_s"] + k * gone["microstep_s"] + 1e-12 for k in ks)
            and other["memory_gib"] <= gone["memory_gib"]
            for _, other in same.iterrows()), gone["layout"]
    # and no kept row is beaten that way by another kept row
    for (_, a), (_, b) in itertools.permutations(kept.iterrows(), 2):
        if a["micro_batch"] * a["dp"] != b["micro_batch"] * b["dp"]:
            continue
        cols = ["step_fixed_s", "microstep_s", "compute_fixed_s", "compute_micro_s",
                "memory_gib", "memory_accum_gib"]
        same_k = (a["min_accum"], a["accum_multiple"], a["max_accum"], a["accum_fits"]) == (
            b["min_accum"], b["accum_multiple"], b["max_accum"], b["accum_fits"])
        assert not (same_k and all(a[c] <= b[c] for c in cols)
                    and any(a[c] < b[c] for c in cols)), (a["layout"], b["layout"])


def test_layouts_that_fit_nothing_name_the_limit() -> None:
    """Llama-3.1-70B on one 8-GPU node: every candidate's micro-batch 1 exceeds the usable
    memory, and each record says by how much."""
    space = LayoutSpace.parse({"max_tp": 8}, ["full"])
    out = island_layout_rows(get_model("Llama-3.1-70B"), default_profile(GPU), _island(),
                             seq_len=8192, space=space, recipe=resolve_recipe(None, None))
    assert out.rows.empty and len(out.rejected) == out.candidates > 0
    for r in out.rejected:
        assert r.over_bytes > 0 and "GiB over the" in r.reason


def test_interleaved_in_flight_grows_with_k_then_saturates() -> None:
    """Interleaved 1F1B (pp 4, V 2): rank 0 holds 8 micro-batch chunks at k = 4 and 12 from
    k = 8 on, so memory read at k = min_accum alone would understate larger k."""
    held = [sum(in_flight("interleaved-1f1b", 4, 2, k, 0).values()) for k in (4, 8, 12, 16)]
    assert held[0] < held[1] == held[2] == held[3]


@pytest.mark.parametrize(("schedule", "virtual"), [("1f1b", 1), ("interleaved-1f1b", 2),
                                                   ("gpipe", 1)])
def test_pipeline_rows_bound_k_by_memory(schedule: str, virtual: int) -> None:
    """Every pipeline row's max_accum is the largest admissible k that fits, checked against
    `memory_breakdown` one multiple above, or 0 when every k the global batch allows fits. A
    rank holds the receive buffers of all k micro-batches, so 1F1B's peak grows with k too:
    its rows used to be unbounded, and `layout` ranked Llama-3.1-70B at pp 8 x tp 4, k 512 on
    32 H100 as fitting while `predict` said 101.8 of 77.5 GiB."""
    batch = 1024
    model, island = get_model("Llama-3.1-8B"), _island("A100-SXM4-40GB", nodes=2)
    space = LayoutSpace.parse({"pp": 4, "tp": 2, "virtual_stages": virtual,
                               "schedules": [schedule]}, ["none"])
    out = island_layout_rows(model, default_profile("A100-SXM4-40GB"), island, seq_len=4096,
                             space=space, recipe=resolve_recipe(None, None),
                             global_batch_seqs=batch)
    assert not out.rows.empty
    usable = island.gpu.usable_memory_bytes
    layout = ParallelLayout(tp=2, pp=4, virtual_stages=virtual, pp_schedule=schedule)
    recipe = replace(resolve_recipe(None, "none"), parallel=layout)
    bounded = 0
    for row in out.rows.itertuples(index=False):
        m, step, first = int(row.micro_batch), int(row.accum_multiple), int(row.min_accum)

        def peak(k: int, m: int = m) -> float:
            return memory_breakdown(model, num_gpus=island.num_gpus, seq_len=4096,
                                    micro_batch=m, recipe=recipe, accum_steps=k).peak_bytes

        top = first + (batch // (m * int(row.dp)) - first) // step * step
        if row.max_accum == 0:
            assert top <= first or peak(top) <= usable
        else:
            bounded += 1
            assert first <= row.max_accum < top
            assert peak(int(row.max_accum)) <= usable < peak(int(row.max_accum) + step)
    assert bounded > 0  # the case exercises the bound (a larger micro-batch binds)


def test_gpipe_rows_admit_their_first_k_or_are_rejected_with_the_bound() -> None:
    """GPipe's affine step holds from k = pp on, and its memory grows with k: Llama-3.1-8B at
    S 5120 on 16 A100-40GB (pp 4, tp 2) fits micro-batch 1 at k = 1 but not at k = 4 without
    checkpointing, so that candidate is rejected naming the bound (it used to yield a row with
    max_accum 1 < min_accum 4, which the island-table validator refused with a traceback);
    with full checkpointing every row admits its first k and fits there."""
    model, island = get_model("Llama-3.1-8B"), _island("A100-SXM4-40GB", nodes=2)
    usable = island.gpu.usable_memory_bytes
    for ac, rows_expected in (("none", False), ("full", True)):
        space = LayoutSpace.parse({"pp": 4, "tp": 2, "schedules": ["gpipe"]}, [ac])
        out = island_layout_rows(model, default_profile("A100-SXM4-40GB"), island, seq_len=5120,
                                 space=space, recipe=resolve_recipe(None, None))
        assert (not out.rows.empty) is rows_expected
        if not rows_expected:
            (rejected,) = out.rejected
            assert rejected.reason.startswith("its schedule needs k >= 4 micro-batches")
            assert rejected.over_bytes > 0
        layout = ParallelLayout(tp=2, pp=4, pp_schedule="gpipe")
        recipe = replace(resolve_recipe(None, ac), parallel=layout)
        for row in out.rows.itertuples(index=False):
            assert row.min_accum <= row.max_accum
            assert memory_breakdown(model, num_gpus=island.num_gpus, seq_len=5120,
                                    micro_batch=int(row.micro_batch), recipe=recipe,
                                    accum_steps=int(row.max_accum)).peak_bytes <= usable


def _random_pipeline_cases(count: int, seed: int) -> list[tuple[Any, ...]]:
    """(model, island, seq_len, recipe, min_accum, multiple) of random pipeline layouts."""
    rng = np.random.default_rng(seed)
    cases: list[tuple[Any, ...]] = []
    while len(cases) < count:
        model = get_model(str(rng.choice(["Llama-3.2-1B", "Llama-3.1-8B", "Qwen2.5-7B"])))
        island = _island(str(rng.choice(["A100-SXM4-40GB", "H100-SXM5-80GB"])),
                         nodes=int(rng.integers(1, 3)))
        pp, tp = int(rng.choice([2, 4])), int(rng.choice([1, 2]))
        schedule, virtual = [("1f1b", 1), ("interleaved-1f1b", 2)][int(rng.integers(2))]
        layout = ParallelLayout(tp=tp, pp=pp, virtual_stages=virtual, pp_schedule=schedule)
        recipe = replace(resolve_recipe(None, str(rng.choice(["none", "op-sac", "full"]))),
                         parallel=layout)
        multiple = pp if schedule == "interleaved-1f1b" else 1
        cases.append((model, island, int(rng.choice([2048, 4096, 8192])), recipe, pp, multiple))
    return cases


def test_each_ranks_pipeline_memory_is_affine_in_k_past_saturation() -> None:
    """`_AccumLine`'s claim: from k = `saturated_accum` on, each pipeline rank's tracked peak
    at a micro-batch m moves by the same amount per unit of k (to rounding), on random models,
    layouts, checkpointing modes and micro-batches; below it, 1F1B's and interleaved 1F1B's
    in-flight counts may still grow (so the line is read only from there)."""
    for model, island, seq, recipe, min_accum, multiple in _random_pipeline_cases(10, seed=25):
        peaks = _PeakByAccum(model, island.num_gpus, seq, recipe)
        first = saturated_accum(recipe.parallel, min_accum, multiple)
        assert first is not None and first >= min_accum and (first - min_accum) % multiple == 0
        ks = [first + j * multiple for j in (0, 1, 2, 5)] + [2 * first]
        by_k = [peaks.rank_coefficients(k) for k in ks]
        for m in (1, 3, 8):
            for rank in range(recipe.parallel.pp):
                t = [_tracked(coefficients[rank], m) for coefficients in by_k if coefficients]
                slope = (t[1] - t[0]) / (ks[1] - ks[0])
                assert slope > 0
                for k, value in zip(ks[2:], t[2:], strict=True):
                    assert value == pytest.approx(t[0] + (k - ks[0]) * slope, rel=1e-12, abs=1.0)


def test_closed_form_max_accum_equals_the_search() -> None:
    """On random (model, layout, checkpointing, micro-batch) cases the k bound that starts from
    `_AccumLine`'s closed form equals the doubling-and-bisection search without it (both read
    `pipeline_rank_fits`), and the closed form itself is the answer wherever the saturated k
    fits (or, when every k up to the ceiling fits, the ceiling); some cases are bounded below
    the ceiling, so the guess is checked where it binds."""
    bounded = 0
    for model, island, seq, recipe, min_accum, multiple in _random_pipeline_cases(12, seed=4):
        usable = island.gpu.usable_memory_bytes
        peaks = _PeakByAccum(model, island.num_gpus, seq, recipe)
        largest = peaks.max_micro_batch(usable, min_accum)
        if largest < 1:
            continue
        saturated = saturated_accum(recipe.parallel, min_accum, multiple)
        assert saturated is not None
        line = _AccumLine.of(peaks, usable, saturated)
        assert line is not None
        ceiling = 192
        top = min_accum + (ceiling - min_accum) // multiple * multiple
        for m in sorted({1, largest, (1 + largest) // 2}):
            searched = _pipeline_max_accum(peaks, usable, m, min_accum, multiple, ceiling)
            if peaks.at(saturated).peak_bytes(m) > usable:
                assert searched < saturated   # (0 = unbounded is not below it)
                assert searched > 0 or searched == min_accum - 1
                continue
            guess = _admissible_floor(line.largest(m), min_accum, multiple, ceiling)
            assert _pipeline_max_accum(peaks, usable, m, min_accum, multiple, ceiling,
                                       guess=guess) == searched
            assert searched == (0 if guess == top else guess), (recipe.parallel.describe(), m)
            bounded += searched > 0
    assert bounded >= 3
