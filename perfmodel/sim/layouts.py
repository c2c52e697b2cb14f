"""Every layout of one island at once: the rows a layout-aware island table and `shardmeter
layout` are made of (issue 25).

For an island (n nodes of g GPUs), a `LayoutSpace` and a recipe, `island_layout_rows` returns one
row per (layout, checkpointing mode, micro-batch m) that fits the GPU's memory, with the exact
affine form of its step in k (micro-batches per optimizer step): T(k) = step_fixed_s +
k·microstep_s, compute busy C(k) and communication X(k) alike, the admissible k (min_accum <= k
<= max_accum, a multiple of accum_multiple) and the peak memory of its worst GPU.

Claim and why, per kind of layout:
  * pp = 1: the FSDP step graph (`perfmodel.sim.fsdp`) with the layout's in-stage parallelism,
    evaluated by its compiled fast path (`perfmodel.sim.fastpath`), exact for every k >= 1;
    memory: `perfmodel.costs.memory.memory_coefficients` at k = 1 and at k >= 2 (the same for
    every k >= 2), so k is unbounded unless the k >= 2 peak does not fit (then k = 1 only);
  * pp > 1: the pipeline graph (`perfmodel.sim.pipeline`) read at its two affine points, exact
    for every admissible k where the step grows by the same time every micro-batch
    (tests/test_pipeline.py); a step that repeats only every pp micro-batches (a max-plus
    cyclicity pp: `perfmodel.spec.pipeline.closed_form_accums`) is exact at every multiple of
    pp, where the form is read, and within the repetition's spread between them
    (`perfmodel.sim.pipeline.affine_points`; tests/test_pipeline_closed_form.py); min_accum = pp
    (1F1B, interleaved: a multiple of pp), GPipe any k >= 1; the memory of the worst pipeline
    rank at k = min_accum;
    max_accum = the largest admissible k that fits, for every schedule: a pipeline rank holds
    the token ids, labels and receive buffers of all k micro-batches for the whole step
    (`perfmodel.costs.memory._rank_phases`, checked against torch's tracker), so its peak
    grows with k under 1F1B too, not only under GPipe (all k in flight) or interleaved 1F1B's
    warm-up; memory is non-decreasing in k, so doubling then bisection finds it, started from
    the closed form of each rank's peak, affine in k once the schedule's steady phase repeats
    (`_AccumLine`); max_accum 0 when every k the global batch allows fits
    (tests/test_layout_rows.py).
Rows are then reduced exactly (`drop_dominated`): a row is removed when another row of the same
island and the same sequences per micro-step (m·dp) admits every k it admits and is no slower,
no busier (energy) and no larger in memory at every such k.
Layouts that fit nothing are returned as `Rejected` records with the binding limit (the GPU's
usable memory at m = 1, or the global batch) so that callers can say why an island has no row.
Checked by: tests/test_layout_rows.py (rows equal `predict` at their k; the reduction against
brute force; rejected layouts name the limit).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from perfmodel import progress
from perfmodel.costs.memory import (
    DEFAULT_CONFIG,
    MemoryCoefficients,
    _rank_coefficients,
    coefficients_unless_over,
    max_micro_batch,
    memory_breakdown,
    memory_coefficients,
    pipeline_rank_fits,
    resolve_memory_recipe,
)
from perfmodel.costs.model import CostModel
from perfmodel.costs.precision import supports
from perfmodel.sim.analysis import classify_regime
from perfmodel.sim.fastpath import fast_step, model_fast_costs
from perfmodel.sim.pipeline import pipeline_costs, pipeline_decomposition
from perfmodel.spec import pipeline
from perfmodel.spec.arch import ModelSpec
from perfmodel.spec.formulas import GIB
from perfmodel.spec.hardware import IslandSpec
from perfmodel.spec.layout import ParallelLayout
from perfmodel.spec.layout_space import LayoutSpace
from perfmodel.spec.recipe import TrainingRecipe

LAYOUT_COLUMNS = ("tp", "pp", "cp", "dp_replicate", "dp_shard", "virtual_stages", "pp_schedule",
                  "sequence_parallel", "async_tp", "ep", "ac", "layout", "dp", "min_accum",
                  "accum_multiple", "max_accum")
"""What a row adds to an island table row (`perfmodel.tables.TABLE_COLUMNS`): the layout's
fields, the checkpointing mode, its display string, the data-parallel ranks dp (a micro-step
takes m·dp sequences), and the admissible k (max_accum 0: unbounded)."""
ROW_COLUMNS = (*LAYOUT_COLUMNS, "micro_batch", "microstep_s", "step_fixed_s", "compute_fixed_s",
               "compute_micro_s", "comm_only_fixed_s", "comm_only_micro_s", "memory_gib",
               "memory_accum_gib", "accum_fits", "bound", "worst_stage")

MAX_GPIPE_ACCUM = 4096
"""Search ceiling of a pipeline's memory-bound k when no global batch bounds it."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Rejected:
    """A (layout, checkpointing) of an island that contributes no row, and why."""

    layout: ParallelLayout
    """The resolved layout."""
    ac: str
    """Checkpointing mode."""
    reason: str
    """The binding limit, in words (with the numbers)."""
    over_bytes: float
    """Bytes by which micro-batch 1 exceeds the GPU's usable memory (0: memory is not what
    binds)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class IslandLayouts:
    """The rows and the rejected layouts of one island."""

    rows: pd.DataFrame
    """ROW_COLUMNS, one row per (layout, ac, micro-batch)."""
    rejected: tuple[Rejected, ...]
    """Candidates that fit no micro-batch (or whose smallest step exceeds the batch)."""
    candidates: int
    """(layout, ac) pairs considered."""


def _recipes(space: LayoutSpace, recipe: TrainingRecipe, model: ModelSpec, seq_len: int,
             island: IslandSpec) -> list[TrainingRecipe]:
    layouts = space.candidates(num_layers=model.num_layers, num_heads=model.num_heads,
                               num_kv_heads=model.num_kv_heads,
                               intermediate_size=model.intermediate_size, seq_len=seq_len,
                               nodes=island.num_nodes, gpus_per_node=island.gpus_per_node,
                               num_experts=model.num_experts)
    modes = space.checkpointing or (recipe.ac,)
    dtypes = space.compute_dtypes or (recipe.compute_dtype,)
    if len(dtypes) > 1:  # a choice: leave out what this GPU cannot run (one pinned: refused)
        dtypes = tuple(d for d in dtypes if supports(
            replace(recipe, compute_dtype=d, fp8_all_gather=False), island.gpu))
    return [replace(recipe, parallel=layout, ac=ac, compute_dtype=dtype,
                    fp8_all_gather=recipe.fp8_all_gather and dtype != "bf16")
            for layout in layouts for ac in modes for dtype in dtypes]


def layout_label(recipe: TrainingRecipe) -> str:
    """The `layout` column of a row: the layout, and the compute dtype when it is not bf16 (so
    rows that differ only in it keep distinct keys)."""
    text = recipe.parallel.describe()
    return text if recipe.compute_dtype == "bf16" else f"{text}, {recipe.compute_dtype}"


def island_layout_rows(model: ModelSpec, profile: CostModel, island: IslandSpec, *,
                       seq_len: int, space: LayoutSpace, recipe: TrainingRecipe,
                       global_batch_seqs: int | None = None,
                       max_micro_batches: int | None = None,
                       skip_rejected: bool = False) -> IslandLayouts:
    """The rows of one island (module doc); `global_batch_seqs` leaves out micro-batches with
    m·dp above it, `max_micro_batches` caps m (None: what memory allows).

    `skip_rejected`: a (layout, mode) that surely has no row is left out without a `Rejected`
    record, found cheaply: its smallest step (k0 x 1 x dp sequences) exceeds the global batch
    (before its memory is computed), or, for a pipeline, one rank's walk proves that
    micro-batch 1 does not fit (`perfmodel.costs.memory.coefficients_unless_over`, before the
    other ranks are walked). Claim: the rows are the same. Why: such a candidate has no row
    whatever the rest of its memory (the batch test does not read memory; a largest
    micro-batch of 0 is a rejection), so only its record, which says what binds and by how
    much, is lost; a caller that needs every record (an island with no row: its exclusion
    reason) asks again without the flag. For a 16k-GPU island most pipeline layouts are such
    (k0 = pp: pp·dp = GPUs/(tp·cp) sequences, or an 8k-token micro-batch over the memory), and
    their pipeline memory walks were most of the table's time.
    Checked by: tests/test_layout_speed.py (rows equal with and without the flag)."""
    world = island.num_gpus
    usable = island.gpu.usable_memory_bytes
    frames: list[pd.DataFrame] = []
    rejected: list[Rejected] = []
    recipes = _recipes(space, recipe, model, seq_len, island)
    for r in progress.track(recipes, f"layouts of {island.num_nodes}x{island.gpus_per_node} "
                                     f"{island.gpu.name}"):
        layout = r.parallel
        k0 = layout.pp if layout.pp > 1 and layout.pp_schedule != "gpipe" else 1
        if skip_rejected and global_batch_seqs is not None and (
                global_batch_seqs // layout.dp < 1 or k0 * layout.dp > global_batch_seqs):
            continue
        if skip_rejected and layout.pp > 1 and coefficients_unless_over(
                model, gpu_memory_bytes=usable, num_gpus=world, seq_len=seq_len, recipe=r,
                accum_steps=k0) is None:
            continue   # (otherwise remembered: `peaks.at(k0)` below finds them)
        peaks = _PeakByAccum(model, world, seq_len, r) if layout.pp > 1 else None
        largest = (peaks.max_micro_batch(usable, k0) if peaks is not None
                   else max_micro_batch(model, gpu_memory_bytes=usable, num_gpus=world,
                                        seq_len=seq_len, recipe=r, accum_steps=k0))
        if largest < 1:
            peak = (int(peaks.at(k0).peak_bytes(1)) if peaks is not None
                    else memory_breakdown(model, num_gpus=world, seq_len=seq_len, micro_batch=1,
                                          recipe=r, accum_steps=k0).peak_bytes)
            rejected.append(Rejected(
                layout=layout, ac=r.ac, over_bytes=peak - usable,
                reason=f"micro-batch 1 needs {peak / GIB:.1f} GiB per GPU, "
                       f"{(peak - usable) / GIB:.1f} GiB over the {usable / GIB:.1f} GiB usable"))
            continue
        if global_batch_seqs is not None:
            largest = min(largest, global_batch_seqs // layout.dp)
            if largest < 1 or k0 * layout.dp > global_batch_seqs:
                rejected.append(Rejected(
                    layout=layout, ac=r.ac, over_bytes=0.0,
                    reason=f"its smallest step ({k0} x 1 x {layout.dp} data-parallel ranks = "
                           f"{k0 * layout.dp} sequences) exceeds the global batch of "
                           f"{global_batch_seqs}"))
                continue
        if max_micro_batches is not None:
            largest = min(largest, max_micro_batches)
        mb = np.arange(1, largest + 1)
        frame = _rows(model, profile, island, seq_len, r, mb, peaks, global_batch_seqs)
        # a schedule's affine step holds from min_accum on (GPipe: k >= pp); a micro-batch whose
        # memory bound on k (max_accum, 0 = none) stops below the first admissible k has no row
        first = -(-frame["min_accum"] // frame["accum_multiple"]) * frame["accum_multiple"]
        admits = (frame["max_accum"] == 0) | (first <= frame["max_accum"])
        if not admits.any():
            k = int(first.iloc[0])
            peak = (int(peaks.at(k).peak_bytes(1)) if peaks is not None   # pipelines bound k
                    else memory_breakdown(model, num_gpus=world, seq_len=seq_len, micro_batch=1,
                                          recipe=r, accum_steps=k).peak_bytes)
            rejected.append(Rejected(
                layout=layout, ac=r.ac, over_bytes=peak - usable,
                reason=f"its schedule needs k >= {k} micro-batches per step, and micro-batch 1 "
                       f"then needs {peak / GIB:.1f} GiB per GPU, {(peak - usable) / GIB:.1f} "
                       f"GiB over the {usable / GIB:.1f} GiB usable"))
            continue
        frames.append(frame.loc[admits].reset_index(drop=True))
    rows = (pd.concat(frames, ignore_index=True) if frames
            else pd.DataFrame({c: [] for c in ROW_COLUMNS}))
    return IslandLayouts(rows=rows, rejected=tuple(rejected), candidates=len(recipes))


def _rows(model: ModelSpec, profile: CostModel, island: IslandSpec, seq_len: int,
          recipe: TrainingRecipe, mb: np.ndarray, peaks: _PeakByAccum | None,
          global_batch_seqs: int | None = None) -> pd.DataFrame:
    """The rows of one (layout, checkpointing mode) at the micro-batches `mb`; `peaks` is the
    pipeline's memory by k (None when pp = 1); `global_batch_seqs` bounds the k a pipeline's
    memory bound is searched up to (no step takes more than the batch)."""
    layout = recipe.parallel
    world = island.num_gpus
    usable = island.gpu.usable_memory_bytes
    worst = ""
    if layout.pp == 1:
        step = fast_step(model_fast_costs(model, profile, island, seq_len=seq_len,
                                          micro_batches=mb, recipe=recipe))
        fixed, micro = step.step_fixed_s, step.microstep_s
        c_fixed, c_micro = step.step_fixed_compute_s, step.microstep_compute_s
        min_accum, multiple, max_accum = 1, 1, 0
        peak = memory_coefficients(model, num_gpus=world, seq_len=seq_len,
                                   recipe=recipe).peak_bytes(mb)
        accum_peak = memory_coefficients(model, num_gpus=world, seq_len=seq_len, recipe=recipe,
                                         accum_steps=2).peak_bytes(mb)
        comm_t1 = step.comm_busy_s(1)
    else:
        costs = pipeline_costs(model, profile, island, seq_len=seq_len, micro_batch=mb,
                               recipe=recipe)
        form = pipeline_decomposition(costs)
        fixed, micro = form.step_fixed_s, form.microstep_s
        c_fixed, c_micro = form.compute_fixed_s, form.compute_micro_s
        min_accum, multiple = form.min_accum, form.accum_multiple
        worst = costs.worst_label()
        if peaks is None:
            peaks = _PeakByAccum(model, world, seq_len, recipe)
        peak = peaks.at(min_accum).peak_bytes(mb)
        accum_peak = peak
        max_accum = 0
        comm_t1 = form.comm_fixed_s + min_accum * form.comm_micro_s
    t_min = fixed + min_accum * micro
    frame = pd.DataFrame({
        "tp": layout.tp, "pp": layout.pp, "cp": layout.cp, "dp_replicate": layout.dp_replicate,
        "dp_shard": layout.dp_shard, "virtual_stages": layout.virtual_stages,
        "pp_schedule": layout.pp_schedule if layout.pp > 1 else "",
        "sequence_parallel": bool(layout.sequence_parallel and layout.tp > 1),
        "async_tp": layout.async_tp, "ep": layout.ep, "ac": recipe.ac,
        "layout": layout_label(recipe),
        "dp": layout.dp, "min_accum": min_accum, "accum_multiple": multiple,
        "max_accum": max_accum, "micro_batch": mb, "microstep_s": micro, "step_fixed_s": fixed,
        "compute_fixed_s": c_fixed, "compute_micro_s": c_micro,
        "comm_only_fixed_s": fixed - c_fixed, "comm_only_micro_s": micro - c_micro,
        "memory_gib": np.asarray(peak) / GIB, "memory_accum_gib": np.asarray(accum_peak) / GIB,
        "accum_fits": np.asarray(accum_peak) <= usable,
        "bound": classify_regime(t_min, c_fixed + min_accum * c_micro, comm_t1),
        "worst_stage": worst,
    })
    if peaks is not None:
        # every schedule's bound on k, per m (a smaller m allows at least as many)
        frame["max_accum"] = _pipeline_max_accums(
            peaks, usable, [int(m) for m in mb], min_accum, multiple,
            [MAX_GPIPE_ACCUM if global_batch_seqs is None
             else global_batch_seqs // (int(m) * layout.dp) for m in mb])
    return frame.loc[:, list(ROW_COLUMNS)]


class _PeakByAccum:
    """The worst pipeline rank's peak as a function of (k, m): one `memory_coefficients` per k
    (the maximum over every moment of every rank of affine functions of m, equal to
    `memory_breakdown`'s peak at every m: tests/test_memory_pipeline.py), kept once computed.

    Why: the bounds on k below bisect over k for every micro-batch of a row; the coefficient set
    of one k answers every m, so a row costs one pipeline memory walk per distinct k instead of
    one per (k, m) probe (the layout tables' dominant cost; benchmarks/bench_layout_instances)."""

    __slots__ = ("_model", "_world", "_seq_len", "_recipe", "_by_k")

    def __init__(self, model: ModelSpec, world: int, seq_len: int,
                 recipe: TrainingRecipe) -> None:
        self._model, self._world, self._seq_len, self._recipe = model, world, seq_len, recipe
        self._by_k: dict[int, MemoryCoefficients] = {}

    def at(self, accum_steps: int) -> MemoryCoefficients:
        """The coefficients at k = accum_steps."""
        if accum_steps not in self._by_k:
            self._by_k[accum_steps] = memory_coefficients(
                self._model, num_gpus=self._world, seq_len=self._seq_len, recipe=self._recipe,
                accum_steps=accum_steps)
        return self._by_k[accum_steps]

    def rank_coefficients(self, accum_steps: int) -> list[MemoryCoefficients] | None:
        """Each pipeline rank's own coefficients at k = accum_steps, in rank order (the walks
        `at` and `pipeline_rank_fits` remember); None when a rank's per-token bytes are not
        finite."""
        self.at(accum_steps)
        recipe = resolve_memory_recipe(self._recipe, None, None)
        out = []
        for rank in range(self.layout.resolve(self._world).pp):
            mine = _rank_coefficients(self._model, self._world, self._seq_len, recipe,
                                      accum_steps, False, DEFAULT_CONFIG, rank)
            if mine is None:
                return None
            out.append(mine)
        return out

    @property
    def layout(self) -> ParallelLayout:
        """The recipe's layout."""
        return self._recipe.parallel

    def max_micro_batch(self, usable: int, accum_steps: int) -> int:
        """Largest m >= 0 whose peak at k = accum_steps fits `usable` bytes: the closed form,
        confirmed on the exact integer peaks (`peak_bytes`) and walked where they differ."""
        coefficients = self.at(accum_steps)
        m = coefficients.max_micro_batch(usable)
        while m > 0 and coefficients.peak_bytes(m) > usable:
            m -= 1
        while coefficients.peak_bytes(m + 1) <= usable:
            m += 1
        return m

    def fits_at(self, usable: int, micro_batch: int) -> Callable[[int], bool]:
        """Whether the worst rank's peak at k micro-batches per step fits the usable memory
        (`pipeline_rank_fits`: the ranks walked one at a time, stopping at one that does not
        fit; the same answer as `at(k)`).

        A k that fits had every rank walked, so its coefficients are kept (`at`, from the
        remembered walks), and a k at most a kept k' whose peak at this m fits is answered
        without a walk. Claim: the same answer. Why: memory is non-decreasing in k (module
        doc; the search's own premise). A row's micro-batches are searched in ascending m and
        a larger m's ceiling on k is lower, so the walk at a smaller m's ceiling (its largest
        k) often answers a larger m's ceiling: the probes at the ceiling, each a walk of every
        rank over k micro-batches, were most of the bound's time once `_AccumLine` gave the
        answer. Checked by: tests/test_layout_rows.py (bounds against `memory_breakdown`),
        benchmarks/compare_layout_tables.py (tables SAME)."""
        def fits(k: int) -> bool:
            if k in self._by_k:
                return bool(self._by_k[k].peak_bytes(micro_batch) <= usable)
            if any(j >= k and c.peak_bytes(micro_batch) <= usable
                   for j, c in self._by_k.items()):
                return True
            if pipeline_rank_fits(self._model, gpu_memory_bytes=usable, num_gpus=self._world,
                                  seq_len=self._seq_len, recipe=self._recipe, accum_steps=k,
                                  micro_batch=micro_batch):
                self.at(k)
                return True
            return False
        return fits


def _last_fitting(fits: Callable[[int], bool], lo: int, hi: int, step: int) -> int:
    """Bisection over the multiples of `step` from lo to hi, given fits(lo) and not fits(hi)
    (memory is non-decreasing in k): the largest that fits."""
    while hi - lo > step:
        mid = lo + (hi - lo) // (2 * step) * step
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def saturated_accum(layout: ParallelLayout, min_accum: int, multiple: int) -> int | None:
    """The smallest admissible k from which every rank's pipeline memory is affine in k (None:
    GPipe, whose in-flight count is k itself). See `_AccumLine` for the claim; this is the
    point past which each rank's schedule (`perfmodel.spec.pipeline.rank_order`) runs at least
    three whole periods of its steady phase: 1F1B's warm-up is at most pp - 1 forwards and its
    period one (forward, backward) pair; interleaved 1F1B (k a multiple of pp, so its rounds
    hold pp micro-batches) warms up with at most (V-1)·pp + 2·(pp-1) forwards and its period is
    V·pp (forward, backward) pairs, V·k operations in all."""
    pp = layout.pp
    if layout.pp_schedule == "interleaved-1f1b" and (multiple % pp or min_accum % pp):
        return None
    steady = pipeline.steady_accum(layout.pp_schedule, pp, layout.virtual_stages)
    if steady is None:
        return None
    k = max(steady, min_accum)
    return min_accum + -(-(k - min_accum) // multiple) * multiple


class _AccumLine:
    """The largest k that fits, per micro-batch, in closed form from two memory walks.

    Claim: for k >= K = `saturated_accum` (admissible k), pipeline rank r's tracked peak at
    micro-batch m is exactly affine in k: t_r(k, m) = t_r(K, m) + (k - K)·m·c_r, with c_r >= 0
    the bytes per sequence and micro-batch the rank holds for the whole step. So the largest k
    whose worst-rank peak fits is min over r of K + floor((budget - t_r(K, m)) / (m·c_r)),
    where m·c_r = (t_r(K2, m) - t_r(K, m)) / (K2 - K) is read from a second walk at K2 = 2K.
    Why: `perfmodel.costs.memory._rank_phases` makes every moment of a rank a sum of the
    rank's state (held micro-batches per stage, gathered / accumulated / reduced stages, the
    stale-output flag) and the moment's own terms, and reads k in two places only: the
    step-long token ids, labels and receive buffers (`persistent`, k times a per-token constant
    of the rank, added to every moment's per-token bytes alike) and the REDUCE_GRAD moments at
    the last micro-batch of each stage. Moments are kept once per (moment, state). Past K the
    rank's actions (`perfmodel.spec.pipeline.rank_order`) are a warm-up of w forwards (the
    same for every such k), a steady phase of V·k - w (forward, backward) pairs and a
    cool-down of w backwards. A period of P pairs gives every stage as many forwards as
    backwards, so held counts return to their values after each: 1F1B, one stage, P = 1;
    interleaved 1F1B, P = V·pp (operation op runs local stage (op // pp) mod V, so any V·pp
    consecutive pairs give each stage pp of each). The steady phase is then a first period
    (the first backward of each stage, which starts its accumulation), middle periods that all
    walk the same states, and a tail of (V·k - w) mod P pairs, the same for every admissible k
    (V·k ≡ 0 mod P), as is the cool-down's stage sequence; every REDUCE_GRAD (each stage's
    last backward) lies within P pairs of the end. From K on there are at least three whole
    periods, so the first, a middle one and the last are distinct and present, and the set of
    distinct (moment, state) pairs is the same for every k >= K; only `persistent` moves, by
    the same amount in every moment of the rank, so the maximum over the moments moves by
    m·c_r per unit of k.
    In floating point the shift is exact only up to rounding, so the closed form is a guess
    that `_pipeline_max_accum` verifies with one probe at it and one a multiple above (its
    answer is then exactly the search's: memory is non-decreasing in k) and searches from when
    the guess misses.
    Checked by: tests/test_layout_rows.py (the closed form equals the search, and each rank's
    tracked peak is affine past K, on random models, layouts and micro-batches)."""

    __slots__ = ("_saturated", "_at_saturated", "_at_double", "_budget")

    def __init__(self, saturated: int, at_saturated: list[MemoryCoefficients],
                 at_double: list[MemoryCoefficients], budget: float) -> None:
        self._saturated = saturated
        self._at_saturated = at_saturated   # per rank, at K
        self._at_double = at_double         # per rank, at 2K
        self._budget = budget               # the tracked bytes whose peak fits (reserves off)

    @classmethod
    def of(cls, peaks: _PeakByAccum, usable: int, saturated: int) -> _AccumLine | None:
        """The line of `peaks` past k = `saturated` (None: a rank's per-token bytes are not
        finite)."""
        low = peaks.rank_coefficients(saturated)
        high = peaks.rank_coefficients(2 * saturated)
        if low is None or high is None:
            return None
        reserve, fraction = low[0].reserve_bytes, low[0].reserve_fraction
        return cls(saturated, low, high, (usable - reserve) / (1.0 + fraction))

    def largest(self, micro_batch: int) -> float:
        """The largest real k >= K whose every rank's tracked peak is within the budget (K - 1
        when K itself is over it; inf when no rank's peak grows with k)."""
        best = math.inf
        k0 = self._saturated
        for low, high in zip(self._at_saturated, self._at_double, strict=True):
            t0, t1 = _tracked(low, micro_batch), _tracked(high, micro_batch)
            if t0 > self._budget:
                return k0 - 1
            slope = (t1 - t0) / k0   # K2 - K = K
            if slope > 0:
                best = min(best, k0 + (self._budget - t0) / slope)
        return best


def _tracked(coefficients: MemoryCoefficients, micro_batch: int) -> float:
    """The largest moment at micro-batch m (the tracked bytes `peak_bytes` adds reserves to)."""
    return max(f + micro_batch * s for f, s in zip(coefficients.fixed_bytes,
                                                   coefficients.per_sequence_bytes, strict=True))


def _pipeline_max_accums(peaks: _PeakByAccum, usable: int, micro_batches: Sequence[int],
                         min_accum: int, multiple: int, ceilings: Sequence[int]) -> list[int]:
    """`_pipeline_max_accum` of each micro-batch (`micro_batches` ascending, as `_rows` builds
    them: np.arange from 1). A larger m needs at least the memory of a smaller one at every k,
    so a k that failed for m fails for every larger m: the search of each m is capped by the
    previous m's first failing k, and no k at or above it is walked (the same answers, fewer
    memory walks: tests/test_layout_rows.py checks every row's bound against
    `memory_breakdown`). Where the saturated point K fits, the search starts from the closed
    form of `_AccumLine` (walked at K and 2K once for all micro-batches)."""
    out: list[int] = []
    fails_at: int | None = None   # a k known not to fit at the previous (smaller) m
    saturated = saturated_accum(peaks.layout, min_accum, multiple)
    line: _AccumLine | None = None
    for m, ceiling in zip(micro_batches, ceilings, strict=True):
        if fails_at is not None and fails_at <= min_accum:
            out.append(min_accum - 1)   # not even min_accum fits a smaller m
            continue
        guess: int | None = None
        cap = fails_at
        if (saturated is not None and saturated < ceiling
                and (fails_at is None or saturated < fails_at)):
            if peaks.at(saturated).peak_bytes(m) > usable:
                cap = saturated   # the answer is below K: searched there, where walks are short
            else:
                line = line or _AccumLine.of(peaks, usable, saturated)
                if line is not None:
                    guess = _admissible_floor(line.largest(m), min_accum, multiple, ceiling)
        k = _pipeline_max_accum(peaks, usable, m, min_accum, multiple, ceiling, cap, guess)
        if k == min_accum - 1:
            fails_at = min_accum
        elif k > 0:
            fails_at = k + multiple
        out.append(k)
    return out


def _admissible_floor(k: float, min_accum: int, multiple: int, ceiling: int) -> int:
    """The largest admissible k (min_accum plus a multiple of `multiple`) at most `k` and at
    most `ceiling` (min_accum when none is above it)."""
    top = min(k, float(ceiling))
    if top <= min_accum:
        return min_accum
    return min_accum + int((top - min_accum) // multiple) * multiple


def _pipeline_max_accum(peaks: _PeakByAccum, usable: int, micro_batch: int, min_accum: int,
                        multiple: int, ceiling: int, fails_at: int | None = None,
                        guess: int | None = None) -> int:
    """The largest admissible k (min_accum plus a multiple of `multiple`) whose worst-rank peak
    fits, searched up to `ceiling` (the most micro-batches a step of the global batch can take;
    0: every admissible k up to it fits, or none is admissible below it). Doubling from
    min_accum, then bisection: memory is non-decreasing in k (module doc). min_accum - 1 when
    not even k = min_accum fits (GPipe: its micro-batch bound is read at k = 1, while its affine
    step needs k >= pp), which leaves the row without an admissible k. `fails_at`: an
    admissible k > min_accum known not to fit (a smaller m's), never walked. `guess`: an
    admissible k thought to be the answer (`_AccumLine`): probed first, and the doubling
    starts from it when it fits (then one probe a multiple above ends the search when the guess
    is right) or is capped by it when it does not. Claim: the same answer with or without it.
    Why: with memory non-decreasing in k the answer is the one admissible k that fits below a
    k that does not; a fitting guess is a lower end and a failing one an upper end of the
    search, as the doubling's own probes are. Checked by: tests/test_layout_rows.py."""
    fits = peaks.fits_at(usable, micro_batch)
    if not fits(min_accum):
        return min_accum - 1
    top = min_accum + (ceiling - min_accum) // multiple * multiple
    if top <= min_accum:
        return 0
    start = min_accum
    if guess is not None and (fails_at is None or guess < fails_at) and min_accum < guess <= top:
        if fits(guess):
            start = guess
        else:
            fails_at = guess
    # doubling first: the walk's cost grows with k, so the ceiling is read only when reached,
    # and a k at or above `fails_at` is known not to fit without a walk
    if start == top:
        return 0
    lo, hi = start, start + multiple
    while True:
        if fails_at is not None and hi >= fails_at:
            hi = fails_at
            break
        if not fits(hi):
            break
        if hi == top:
            return 0
        lo, hi = hi, min(top, start + 2 * (hi - start))
    return _last_fitting(fits, lo, hi, multiple)   # fits(lo), not fits(hi)


def drop_dominated(rows: pd.DataFrame, keys: Sequence[str] = ()) -> pd.DataFrame:
    """The rows no other row of the same `keys` (the island) and the same sequences per
    micro-step beats at every admissible k (module doc). Exact: a removed row's every use has a
    replacement that is at least as fast, as busy and as small, at the same batch."""
    if rows.empty:
        return rows
    data = rows.assign(_seqs=rows["micro_batch"] * rows["dp"])
    keep = np.ones(len(data), dtype=bool)
    group_keys = [*keys, "_seqs"]
    for _, group in data.groupby(group_keys, sort=False):
        idx = group.index.to_numpy()
        if len(idx) < 2:
            continue
        g = group.reset_index(drop=True)
        lo = g["min_accum"].to_numpy()
        mult = g["accum_multiple"].to_numpy()
        hi = np.where(g["max_accum"].to_numpy() > 0, g["max_accum"].to_numpy(), np.inf)
        hi = np.where(g["accum_fits"].to_numpy(dtype=bool), hi, 1)
        cols = ("step_fixed_s", "microstep_s", "compute_fixed_s", "compute_micro_s",
                "memory_gib", "memory_accum_gib")
        vals = np.stack([g[c].to_numpy(dtype=float) for c in cols], axis=1)
        for i in range(len(g)):
            for j in range(len(g)):
                if i == j or not keep[data.index.get_loc(idx[j])]:
                    continue
                # j covers every k of i: its range contains i's and its multiple divides i's
                covers = lo[j] <= lo[i] and hi[j] >= hi[i] and mult[i] % mult[j] == 0
                if not covers or not np.all(vals[j] <= vals[i]):
                    continue
                if np.all(vals[j] == vals[i]) and j > i:
                    continue  # identical rows: keep the first
                keep[data.index.get_loc(idx[i])] = False
                break
    return rows.loc[keep].reset_index(drop=True)


def describe_row(row: Any) -> str:
    """One line naming a row's layout and checkpointing (for reports)."""
    return f"{row['layout']}, ac {row['ac']}, m {row['micro_batch']}"
