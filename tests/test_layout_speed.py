"""The layout table's speed-ups change no answer (issue 25 item 4): the memory reduction keeps
every peak and largest micro-batch, the per-rank totals walk equals the phases summed as dicts,
the early stops say "does not fit" exactly where the full model does, compiled pipelines shared
by shape equal their own compilation, and an island's rows are the same with the cheap
rejections skipped and when islands are shared across clusters. (Whole tables and frontiers of
the shipped instances against the code before: benchmarks/compare_layout_tables.py.)"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd
import pytest

from perfmodel.costs import memory as mem
from perfmodel.profiles.profile import default_profile
from perfmodel.sim import pipeline as pipe
from perfmodel.sim.fsdp import resolve_recipe
from perfmodel.sim.graph import COMPUTE_KINDS
from perfmodel.sim.layouts import island_layout_rows
from perfmodel.spec.catalog import get_gpu, get_model
from perfmodel.spec.hardware import ClusterSpec, IslandSpec
from perfmodel.spec.layout import ParallelLayout
from perfmodel.spec.layout_space import LayoutSpace
from perfmodel.tables import build_layout_table

MODEL, SEQ = "small-llama", 256
GIB = 2**30


def _recipe(ac: str, **layout: object) -> object:
    return replace(resolve_recipe(None, ac), parallel=ParallelLayout(**layout))  # type: ignore


PIPELINES = [dict(pp=2), dict(pp=4, pp_schedule="gpipe"), dict(pp=2, tp=2),
             dict(pp=2, virtual_stages=2, pp_schedule="interleaved-1f1b")]


def _unreduced(model: object, world: int, recipe: object, k: int) -> mem.MemoryCoefficients:
    """The coefficients as the code before the speed-up built them: every phase of every rank
    (dicts), no reduction."""
    _, _, tokens, ranks = mem._pipeline_ranks(model, world, SEQ, recipe, k,  # type: ignore
                                              mem.DEFAULT_CONFIG, False)
    phases = [p for rank_phases, _, _ in ranks for p in rank_phases]
    return mem.MemoryCoefficients(
        fixed_bytes=tuple(float(sum(mem._component_bytes(p, 0).values())) for p in phases),
        per_sequence_bytes=tuple(float(sum(p.per_token.values())) * tokens for p in phases),
        reserve_bytes=mem.DEFAULT_CONFIG.reserve_bytes,
        reserve_fraction=mem.DEFAULT_CONFIG.reserve_fraction)


def test_reduction_keeps_every_peak_and_limit() -> None:
    """Random phases (negative slopes and ties included): dropping dominated phases changes no
    peak at m = 0..200 and no largest micro-batch at any budget."""
    rng = np.random.default_rng(7)
    for _ in range(50):
        n = int(rng.integers(1, 40))
        fixed = tuple(float(v) for v in rng.integers(0, 50, n) * 1e8)
        per = tuple(float(v) for v in rng.integers(-3, 30, n) * 1e7)
        full = mem.MemoryCoefficients(fixed_bytes=fixed, per_sequence_bytes=per,
                                      reserve_bytes=2**29, reserve_fraction=0.05)
        reduced = mem._coefficients_of(fixed, per, mem.DEFAULT_CONFIG)
        assert len(reduced.fixed_bytes) <= n
        m = np.arange(0, 201)
        assert np.array_equal(full.peak_bytes(m), reduced.peak_bytes(m))
        for budget in rng.integers(1, 12 * 10**9, 20):
            assert full.max_micro_batch(int(budget)) == reduced.max_micro_batch(int(budget))


@pytest.mark.parametrize("ac", ["none", "op-sac", "full"])
def test_totals_walk_equals_the_phases(ac: str) -> None:
    """Per pipeline recipe and k: the rank-by-rank totals walk gives, to the bit, the peaks and
    largest micro-batches of every phase summed as dicts."""
    model = get_model(MODEL)
    for layout in PIPELINES:
        recipe = _recipe(ac, **layout)
        k0 = 1 if layout.get("pp_schedule") == "gpipe" else int(layout["pp"])  # type: ignore
        for k in (k0, 2 * k0 + (layout.get("pp_schedule") == "gpipe")):
            mem._coefficients.cache_clear()
            fast = mem.memory_coefficients(model, num_gpus=8, seq_len=SEQ, recipe=recipe,
                                           accum_steps=k)
            slow = _unreduced(model, 8, recipe, k)
            m = np.arange(0, 300)
            assert np.array_equal(fast.peak_bytes(m), slow.peak_bytes(m)), (layout, k)
            for budget in (2**24, 2**27, 2**29, 2**31, 2**33):
                assert fast.max_micro_batch(budget) == slow.max_micro_batch(budget)


def test_memoised_answers_equal_fresh_ones() -> None:
    """A remembered result is the one a fresh computation gives (FSDP and pipeline)."""
    model = get_model(MODEL)
    for recipe in (_recipe("full"), _recipe("none", pp=2, pp_schedule="gpipe")):
        first = mem.memory_coefficients(model, num_gpus=8, seq_len=SEQ, recipe=recipe)
        again = mem.memory_coefficients(model, num_gpus=8, seq_len=SEQ, recipe=recipe)
        breakdown = mem.memory_breakdown(model, num_gpus=8, seq_len=SEQ, micro_batch=3,
                                         recipe=recipe)
        mem._coefficients.cache_clear()
        mem._breakdown.cache_clear()
        mem._pipeline_memory.cache_clear()
        fresh = mem.memory_coefficients(model, num_gpus=8, seq_len=SEQ, recipe=recipe)
        assert first is again and first == fresh
        assert breakdown == mem.memory_breakdown(model, num_gpus=8, seq_len=SEQ, micro_batch=3,
                                                 recipe=recipe)


def test_early_stops_agree_with_the_full_model() -> None:
    """`coefficients_unless_over` is None exactly where the largest micro-batch is 0 (else the
    full coefficients), and `pipeline_rank_fits` says what the full peak says, over budgets
    around each recipe's peaks."""
    model = get_model(MODEL)
    for layout in PIPELINES:
        for ac in ("none", "full"):
            recipe = _recipe(ac, **layout)
            k = 1 if layout.get("pp_schedule") == "gpipe" else int(layout["pp"])  # type: ignore
            full = _unreduced(model, 8, recipe, k)
            peaks = [int(full.peak_bytes(m)) for m in (1, 2, 5)]
            for budget in sorted({p + d for p in peaks for d in (-1, 0, 1)}):
                mem._coefficients.cache_clear()
                mem._rank_coefficients.cache_clear()
                got = mem.coefficients_unless_over(model, gpu_memory_bytes=budget, num_gpus=8,
                                                   seq_len=SEQ, recipe=recipe, accum_steps=k)
                largest = full.max_micro_batch(budget)
                while full.peak_bytes(largest + 1) <= budget:
                    largest += 1
                assert (got is None) == (largest == 0), (layout, ac, budget)
                if got is not None:
                    assert np.array_equal(got.peak_bytes(np.arange(50)),
                                          full.peak_bytes(np.arange(50)))
                for m in (1, 2, 5):
                    mem._rank_coefficients.cache_clear()
                    assert mem.pipeline_rank_fits(
                        model, gpu_memory_bytes=budget, num_gpus=8, seq_len=SEQ, recipe=recipe,
                        accum_steps=k, micro_batch=m) == (full.peak_bytes(m) <= budget)


def test_compiled_pipelines_shared_by_shape() -> None:
    """Layouts of one pipeline shape share a compilation equal to each one's own."""
    a = ParallelLayout(pp=4, tp=2, virtual_stages=2, pp_schedule="interleaved-1f1b")
    b = ParallelLayout(pp=4, dp_replicate=2, virtual_stages=2, pp_schedule="interleaved-1f1b")
    shared = pipe.compile_pipeline(a, 8, blocks=(2,) * 8)
    assert pipe.compile_pipeline(b, 8, blocks=(2,) * 8) is shared
    own = pipe._compile_shape.__wrapped__(a, 8, False, (2,) * 8)  # type: ignore[attr-defined]
    assert own == shared


def _island(gpu_name: str, nodes: int = 1) -> IslandSpec:
    gpu = get_gpu(gpu_name)
    return IslandSpec(gpu=gpu, num_nodes=nodes, gpus_per_node=8, intra_link=gpu.intra_node_link,
                      inter_link=gpu.inter_node_link, nics_per_node=gpu.nics_per_node)


def test_skipping_sure_rejections_keeps_the_rows() -> None:
    """Llama-3.1-8B at 8k on 8 A100-40GB with a 6-sequence batch: candidates rejected for the
    batch and for memory are skipped, and the rows are the same."""
    model, gpu = get_model("Llama-3.1-8B"), "A100-SXM4-40GB"
    space = LayoutSpace.parse({"max_tp": 2, "max_pp": 4}, ["none", "full"])
    kw = dict(seq_len=8192, space=space, recipe=resolve_recipe(None, None),
              global_batch_seqs=6, max_micro_batches=1)
    full = island_layout_rows(model, default_profile(gpu), _island(gpu), **kw)  # type: ignore
    mem._coefficients.cache_clear()
    mem._rank_coefficients.cache_clear()
    fast = island_layout_rows(model, default_profile(gpu), _island(gpu), skip_rejected=True,
                              **kw)  # type: ignore
    assert len(full.rejected) > 0 and len(fast.rejected) < len(full.rejected)
    assert not full.rows.empty
    pd.testing.assert_frame_equal(full.rows, fast.rows)


def test_islands_shared_across_clusters() -> None:
    """Two clusters of the same GPU and node counts at different prices: the second cluster's
    rows are the first's with its own name and price, and an option with no row is excluded
    under each cluster's name."""
    gpu = get_gpu("A100-SXM4-40GB")

    def cluster(name: str, price: float) -> ClusterSpec:
        return ClusterSpec(name=name, gpu=gpu, num_nodes=1, gpus_per_node=8,
                           allowed_gpus_per_node=(2, 8), usd_per_gpu_hour=price,
                           intra_link=gpu.intra_node_link, inter_link=gpu.inter_node_link,
                           nics_per_node=gpu.nics_per_node, wan_bw_bytes_per_s=1e9,
                           wan_latency_s=0.05)

    space = LayoutSpace.parse({"max_tp": 2, "max_pp": 2}, ["full"])
    table, excluded = build_layout_table(get_model("Llama-3.2-1B"), seq_len=8192,
                                         clusters=[cluster("a", 1.0), cluster("b", 2.0)],
                                         space=space, global_batch_seqs=4)
    a = table[table["cluster"] == "a"].reset_index(drop=True)
    b = table[table["cluster"] == "b"].reset_index(drop=True)
    assert not a.empty
    pd.testing.assert_frame_equal(a.drop(columns=["cluster", "usd_per_hour"]),
                                  b.drop(columns=["cluster", "usd_per_hour"]))
    assert np.allclose(b["usd_per_hour"], 2 * a["usd_per_hour"])
    by_cluster = {(e.cluster, e.gpus_per_node, e.reason) for e in excluded}
    assert {(c, g, r) for c, g, r in by_cluster if c == "b"} == {
        ("b", g, r) for c, g, r in by_cluster if c == "a"}


def test_dp_convolution_of_many_changes_equals_one_at_a_time() -> None:
    """The DP's class-table update with many changed entries (convolved row by row) gives the
    table the entry-by-entry update gives (random int64 tables with INF entries)."""
    from planner.solvers import dp

    rng = np.random.default_rng(3)
    for _ in range(20):
        m, b = int(rng.integers(2, 6)), int(rng.integers(60, 300))
        rest = rng.integers(0, 10**6, (m, b)).astype(np.int64)
        rest[rng.random((m, b)) < 0.3] = dp.INF
        table = rng.integers(0, 2 * 10**6, (m, b)).astype(np.int64)
        table[rng.random((m, b)) < 0.3] = dp.INF
        g = rng.integers(0, 10**6, (m, b)).astype(np.int64)
        rows, cols = np.nonzero(rng.random((m, b)) < 0.5)
        assert rows.size > dp.FEW   # the row-by-row path, with chunks past CHUNK entries
        slow = table.copy()
        for m1, b1 in zip(rows.tolist(), cols.tolist(), strict=True):
            view = slow[m1:, b1:]
            np.minimum(view, g[m1, b1] + rest[: m - m1, : b - b1], out=view)
        fast = table.copy()
        dp._convolve_changes(fast, rest, g, rows, cols)
        assert np.array_equal(np.minimum(slow, dp.INF), np.minimum(fast, dp.INF))


@pytest.mark.parametrize("ac", ["none", "full"])
def test_repeated_pipeline_actions_skipped_keep_every_moment(ac: str) -> None:
    """A rank's walk with repeated actions and states skipped gives the phases (names, terms,
    order) and in-flight counts of the walk that repeats them, both as phases and as totals, on
    every schedule, over k at and well past the steady state."""
    model = get_model(MODEL)
    layouts = [*PIPELINES, dict(pp=4)]
    for layout in layouts:
        recipe = mem.resolve_memory_recipe(_recipe(ac, **layout), None, None)  # type: ignore
        pp = int(layout["pp"])  # type: ignore
        for k in (pp, 3 * pp, 8 * pp):
            spec, _, tokens, _, z, boundary, resolved, stages = mem._pipeline_setup(
                model, 8, SEQ, recipe, k, mem.DEFAULT_CONFIG)
            for rank in range(pp):
                for totals in (False, True):
                    walks = [mem._rank_phases(stages, rank, spec, tokens, resolved, k, z,
                                              boundary, False, mem.DEFAULT_CONFIG,
                                              totals=totals, skip_repeats=skip)
                             for skip in (True, False)]
                    assert walks[0] == walks[1], (layout, k, rank, totals)


def _overlaps_by_scan(layout: ParallelLayout, k: int, replicate: bool,
                      blocks: tuple[int, ...]) -> tuple[Any, ...]:
    """The compiled overlaps as found before the speed-up: for each compute task, every
    collective (not a transfer) of its rank issued before it that is not among its ancestors."""
    plan = pipe.pipeline_plan(layout, k, replicate=replicate, blocks=blocks)
    compiled = pipe._compile_shape.__wrapped__(layout, k, replicate, blocks)  # type: ignore
    ancestors: list[set[int]] = []
    for pred in compiled.preds:
        ancestors.append(set().union(*(ancestors[p] | {p} for p in pred)))
    return tuple(
        tuple(j for j in range(i) if plan[j].rank == t.rank and plan[j].kind not in
              COMPUTE_KINDS and plan[j].stream != "p2p" and j not in ancestors[i])
        if t.kind in COMPUTE_KINDS else () for i, t in enumerate(plan))


@pytest.mark.parametrize(("schedule", "pp", "v"), [("gpipe", 2, 1), ("1f1b", 4, 1),
                                                   ("interleaved-1f1b", 2, 2),
                                                   ("interleaved-1f1b", 4, 2)])
def test_compiled_overlaps_equal_a_scan_of_every_collective(schedule: str, pp: int,
                                                            v: int) -> None:
    """The compiler keeps per compute stream only the collectives not yet its ancestors; the
    overlaps equal a scan of every earlier collective of the rank (FSDP and HSDP, blocks
    gathered one by one)."""
    layout = ParallelLayout(pp=pp, virtual_stages=v, pp_schedule=schedule)
    blocks = (2,) * (pp * v)
    for k in (pp, 2 * pp):
        for replicate in (False, True):
            compiled = pipe._compile_shape.__wrapped__(layout, k, replicate,  # type: ignore
                                                       blocks)
            assert any(compiled.overlaps)   # the case checks something
            assert compiled.overlaps == _overlaps_by_scan(layout, k, replicate, blocks)
