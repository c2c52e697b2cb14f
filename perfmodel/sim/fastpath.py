"""Fast path: the FSDP step graph of `perfmodel.sim.fsdp`, compiled once and evaluated vectorised.

The schedule rules live only in the graph builder (`perfmodel.sim.fsdp.step_plan`). This module
compiles that plan — for one (unit count, unit types, recipe, k) — into a fixed DAG: per task its
stream predecessor and dependencies, its duration (a row of the duration arrays), and, for
compute tasks of an island with contention, the collectives that may overlap it (those issued
before it that are not its ancestors). Longest paths on a fixed DAG are max-plus operations:
start = max(end of predecessors), end = start + duration, here over (N,) arrays of N
configurations at once, so one Python pass over the tasks evaluates every configuration. With a
contention factor the end of a compute task comes from `perfmodel.sim.graph.contention_delay`, the
simulator's own function.

The graph of k = 2 is evaluated (k = 1 when a non-final micro-step has the same tasks as the
final one, as under reduce-scatter accumulation): every micro-step starts with both streams idle
(see `perfmodel.sim.fsdp`), so microstep_s is the end of the first micro-step and step_fixed_s =
T(k) − k·microstep_s, and T(k) = step_fixed_s + k·microstep_s for every k (what
`fsdp.step_decomposition` gets from T(1) and T(2) on the graph). The arithmetic is the
simulator's (same maxima, same additions), so the two agree to rounding (tests: 1e-9 relative on
randomised configurations and recipes, for k = 1..4).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from perfmodel.costs.model import CostModel
from perfmodel.sim.fsdp import (
    COST_FIELDS,
    StepCosts,
    TaskSpec,
    step_plan,
    unit_durations,
)
from perfmodel.sim.graph import COMPUTE_KINDS, contention_delay
from perfmodel.spec.arch import ModelSpec
from perfmodel.spec.hardware import IslandSpec
from perfmodel.spec.recipe import DEFAULT_RECIPE, TrainingRecipe

CHUNK = 4096
"""Configurations evaluated per pass (keeps the per-task arrays in cache)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class FastCosts:
    """Durations of T distinct unit types over N configurations, the units and the recipe."""

    forward_s: np.ndarray
    """(T, N) forward time of each unit type."""
    backward_s: np.ndarray
    """(T, N) backward time (with recompute)."""
    all_gather_s: np.ndarray
    """(T, N) one all_gather."""
    reduce_scatter_s: np.ndarray
    """(T, N) one reduce_scatter."""
    optimizer_s: np.ndarray
    """(N,) optimizer step."""
    unit_types: tuple[int, ...]
    """Type index of each unit in forward order (length U)."""
    recipe: TrainingRecipe = field(default=DEFAULT_RECIPE)
    """The recipe every configuration trains with (it shapes the graph)."""
    has_root: bool = True
    """Whether the last unit is the root."""
    overlap_slowdown: Any = 1.0
    """Contention factor >= 1: a scalar or an (N,) array."""
    extra: Mapping[tuple[str, int, int], np.ndarray] = field(default_factory=dict)
    """The other durations of parallel layouts, each an (N,) array keyed by (cost name, unit
    type or -1, index or -1): inline collectives (`forward_inline_s`, `backward_inline_s`,
    `prologue_s`, `epilogue_s`, `optimizer_inline_s`) and the HSDP all-reduce
    (`replicate_s`)."""
    block_norms: int = 2
    """Normalisation layers per block (the plan's norm-gradient all-reduces)."""

    def __post_init__(self) -> None:
        shape = self.forward_s.shape
        if len(shape) != 2 or not self.unit_types:
            raise ValueError(f"need (T, N) duration arrays and >= 1 unit, got shape {shape}")
        for key in ("backward_s", "all_gather_s", "reduce_scatter_s"):
            if getattr(self, key).shape != shape:
                raise ValueError(f"{key} has shape {getattr(self, key).shape}, expected {shape}")
        if self.optimizer_s.shape != shape[1:]:
            raise ValueError(f"optimizer_s has shape {self.optimizer_s.shape}, "
                             f"expected {shape[1:]}")
        if min(self.unit_types) < 0 or max(self.unit_types) >= shape[0]:
            raise ValueError(f"unit_types must index 0..{shape[0] - 1}")
        slow = np.asarray(self.overlap_slowdown, dtype=float)
        if slow.shape not in ((), shape[1:]) or not np.all(np.isfinite(slow) & (slow >= 1)):
            raise ValueError(
                f"overlap_slowdown must be finite and >= 1, a scalar or shape {shape[1:]}")
        for extra_key, value in self.extra.items():
            if value.shape != shape[1:]:
                raise ValueError(f"extra duration {extra_key} has shape {value.shape}, "
                                 f"expected {shape[1:]}")

    @property
    def size(self) -> int:
        return int(self.forward_s.shape[1])

    @classmethod
    def from_step_costs(cls, costs: Sequence[StepCosts]) -> FastCosts:
        """Stack configurations with the same units and recipe (one type per unit position)."""
        shapes = {(len(c.units), c.has_root, c.recipe) for c in costs}
        if len(shapes) != 1:
            raise ValueError(f"configurations must share the unit count, root and recipe, got "
                             f"{len(shapes)} different ones")
        num_units, has_root, recipe = shapes.pop()

        def grid(key: str) -> np.ndarray:
            return np.array([[getattr(u, key) for u in c.units] for c in costs], dtype=float).T

        extra: dict[tuple[str, int, int], np.ndarray] = {}
        for row in range(num_units):
            for name in ("forward_inline_s", "backward_inline_s"):
                for i in range(len(getattr(costs[0].units[row], name))):
                    extra[(name, row, i)] = np.array(
                        [getattr(c.units[row], name)[i] for c in costs], dtype=float)
            if recipe.parallel.dp_replicate > 1:
                extra[("replicate_s", row, -1)] = np.array(
                    [c.units[row].replicate_s for c in costs], dtype=float)
        for name in ("prologue_s", "epilogue_s", "optimizer_inline_s"):
            for i in range(len(getattr(costs[0], name))):
                extra[(name, -1, i)] = np.array([getattr(c, name)[i] for c in costs], dtype=float)
        return cls(forward_s=grid("forward_s"), backward_s=grid("backward_s"),
                   all_gather_s=grid("all_gather_s"), reduce_scatter_s=grid("reduce_scatter_s"),
                   optimizer_s=np.array([c.optimizer_s for c in costs], dtype=float),
                   unit_types=tuple(range(num_units)), recipe=recipe, has_root=has_root,
                   overlap_slowdown=np.array([c.overlap_slowdown for c in costs], dtype=float),
                   extra=extra, block_norms=costs[0].block_norms)

    def take(self, index: Any) -> FastCosts:
        """The configurations selected by `index` (a slice or an index array)."""
        slow = np.asarray(self.overlap_slowdown, dtype=float)
        return FastCosts(forward_s=self.forward_s[:, index], backward_s=self.backward_s[:, index],
                         all_gather_s=self.all_gather_s[:, index],
                         reduce_scatter_s=self.reduce_scatter_s[:, index],
                         optimizer_s=self.optimizer_s[index], unit_types=self.unit_types,
                         recipe=self.recipe, has_root=self.has_root,
                         overlap_slowdown=slow if slow.ndim == 0 else slow[index],
                         extra={k: v[index] for k, v in self.extra.items()},
                         block_norms=self.block_norms)

    def duration(self, name: str, row: int, index: int) -> np.ndarray:
        """The (N,) durations of one compiled task's cost."""
        if (name, row, index) in self.extra:
            return self.extra[(name, row, index)]
        if row < 0:
            return self.optimizer_s
        array: np.ndarray = getattr(self, name)[row]
        return array


def concat_fast_costs(parts: Sequence[FastCosts]) -> FastCosts:
    """One FastCosts over all parts (same units and recipe): one vectorised pass."""
    first = parts[0]
    # norms per block matter only to the inline (tensor-parallel) collectives they add
    def shape(p: FastCosts) -> tuple[Any, ...]:
        return (p.unit_types, p.has_root, p.recipe, sorted(p.extra),
                p.block_norms if p.extra else None)
    if any(shape(p) != shape(first) for p in parts):
        raise ValueError("parts must share unit types, root, recipe and layout durations")
    slow = [np.broadcast_to(np.asarray(p.overlap_slowdown, dtype=float), (p.size,)) for p in parts]
    return FastCosts(
        **{k: np.concatenate([getattr(p, k) for p in parts], axis=1) for k in COST_FIELDS},
        optimizer_s=np.concatenate([p.optimizer_s for p in parts]), unit_types=first.unit_types,
        recipe=first.recipe, has_root=first.has_root, overlap_slowdown=np.concatenate(slow),
        extra={k: np.concatenate([p.extra[k] for p in parts]) for k in first.extra},
        block_norms=first.block_norms)


@dataclass(frozen=True, kw_only=True, slots=True)
class FastStep:
    """Vectorised step quantities (each an (N,) array): T(k) = step_fixed_s + k·microstep_s."""

    microstep_s: np.ndarray
    """One non-final micro-step."""
    step_fixed_s: np.ndarray
    """Once per step: the last micro-step's extra and the optimizer."""
    microstep_compute_s: np.ndarray
    """Compute-stream busy time per micro-step."""
    step_fixed_compute_s: np.ndarray
    """Compute-stream busy time once per step (optimizer)."""
    microstep_comm_s: np.ndarray
    """Communication per micro-step."""
    step_fixed_comm_s: np.ndarray
    """Communication once per step (no-sync: the reduce-scatters)."""

    def step_time_s(self, accum_steps: Any = 1) -> np.ndarray:
        result: np.ndarray = self.step_fixed_s + np.asarray(accum_steps) * self.microstep_s
        return result

    def compute_busy_s(self, accum_steps: Any = 1) -> np.ndarray:
        result: np.ndarray = (self.step_fixed_compute_s
                              + np.asarray(accum_steps) * self.microstep_compute_s)
        return result

    def comm_busy_s(self, accum_steps: Any = 1) -> np.ndarray:
        result: np.ndarray = (self.step_fixed_comm_s
                              + np.asarray(accum_steps) * self.microstep_comm_s)
        return result


@dataclass(frozen=True, kw_only=True, slots=True)
class CompiledStep:
    """The fixed DAG of one step plan (indices into the plan)."""

    preds: tuple[tuple[int, ...], ...]
    """Stream predecessor and dependencies of each task."""
    costs: tuple[tuple[str, int, int], ...]
    """(duration name, unit type row or -1, index or -1) of each task (`FastCosts.duration`)."""
    is_compute: tuple[bool, ...]
    """Whether each task is compute (slowed by contention, counted as compute busy); the inline
    collectives of parallel layouts run on the compute stream but are communication, as in the
    graph simulator."""
    overlaps: tuple[tuple[int, ...], ...]
    """Per compute task: collectives issued before it that are not its ancestors (may overlap)."""
    sinks: tuple[int, ...]
    """Tasks no other task waits for (the makespan is the latest of their ends)."""
    first_micro: tuple[bool, ...]
    """Whether each task belongs to the first micro-step."""
    first_sinks: tuple[int, ...]
    """First-micro-step tasks no other first-micro-step task waits for (its end)."""


def _once_per_step(spec: TaskSpec) -> bool:
    """The optimizer and the collectives inside it: once per step, not part of a micro-step
    (the embedding's inline collectives, without a unit, are)."""
    return spec.cost in ("optimizer_s", "optimizer_inline_s")


@lru_cache(maxsize=128)
def compile_step(num_units: int, has_root: bool, recipe: TrainingRecipe, accum_steps: int,
                 unit_types: tuple[int, ...], block_norms: int = 2) -> CompiledStep:
    """Compile `fsdp.step_plan` into a fixed DAG (cached per units, recipe and k)."""
    plan = step_plan(num_units, has_root=has_root, recipe=recipe, accum_steps=accum_steps,
                     block_norms=block_norms)
    last: dict[str, int] = {}
    preds: list[tuple[int, ...]] = []
    ancestors: list[int] = []  # bit j set: task j is an ancestor
    overlaps: list[tuple[int, ...]] = []
    comm_so_far: list[int] = []
    for i, spec in enumerate(plan):
        stream_pred = {last[spec.stream]} if spec.stream in last else set()
        pred = tuple(sorted(set(spec.deps) | stream_pred))
        last[spec.stream] = i
        anc = 0
        for p in pred:
            anc |= ancestors[p] | (1 << p)
        ancestors.append(anc)
        preds.append(pred)
        is_compute = spec.kind in COMPUTE_KINDS
        overlaps.append(tuple(j for j in comm_so_far if not anc >> j & 1) if is_compute else ())
        if not is_compute:
            comm_so_far.append(i)
    waited = {p for pred in preds for p in pred}
    first = tuple(s.micro_step == 0 and not _once_per_step(s) for s in plan)
    waited_first = {p for i, pred in enumerate(preds) if first[i] for p in pred}
    return CompiledStep(
        preds=tuple(preds),
        costs=tuple((s.cost, -1 if s.unit is None else unit_types[s.unit], s.index)
                    for s in plan),
        is_compute=tuple(s.kind in COMPUTE_KINDS for s in plan), overlaps=tuple(overlaps),
        sinks=tuple(i for i in range(len(plan)) if i not in waited), first_micro=first,
        first_sinks=tuple(i for i in range(len(plan)) if first[i] and i not in waited_first))


@dataclass(frozen=True, kw_only=True, slots=True)
class Evaluation:
    """Longest-path results of a compiled step, each an (N,) array."""

    makespan_s: np.ndarray
    """End of the step."""
    compute_busy_s: np.ndarray
    """Compute-stream busy time (contention included)."""
    comm_busy_s: np.ndarray
    """Communication time."""
    first_end_s: np.ndarray
    """End of the first micro-step."""
    first_compute_busy_s: np.ndarray
    """Compute busy time of the first micro-step."""
    first_comm_busy_s: np.ndarray
    """Communication time of the first micro-step."""


def _latest(ends: list[np.ndarray], tasks: tuple[int, ...], n: int) -> np.ndarray:
    out = np.zeros(n) if not tasks else ends[tasks[0]]
    for t in tasks[1:]:
        out = np.maximum(out, ends[t])
    return out


def evaluate(compiled: CompiledStep, costs: FastCosts) -> Evaluation:
    """Longest paths of the compiled step for every configuration (max-plus over arrays)."""
    slow = np.asarray(costs.overlap_slowdown, dtype=float)
    contended = bool(np.any(slow != 1.0))
    extra_in, lost = slow - 1.0, 1.0 - 1.0 / slow
    n = costs.size
    zero = np.zeros(n)
    starts: list[np.ndarray] = []
    ends: list[np.ndarray] = []
    busy = {(c, f): zero for c in (True, False) for f in (True, False)}  # (compute, first) -> sum
    for i, pred in enumerate(compiled.preds):
        start = zero if not pred else ends[pred[0]]
        for p in pred[1:]:
            start = np.maximum(start, ends[p])
        name, row, index = compiled.costs[i]
        dur = costs.duration(name, row, index)
        is_compute = compiled.is_compute[i]
        end = start + dur
        if contended and is_compute and compiled.overlaps[i]:
            end = contention_delay(start, end, [(starts[j], ends[j]) for j in compiled.overlaps[i]],
                                   extra_in, lost)
        if contended:
            starts.append(start)
        ends.append(end)
        key = (is_compute, compiled.first_micro[i])
        # A slowed compute task occupies its stream for longer than its duration.
        busy[key] = busy[key] + (end - start if contended and is_compute else dur)
    return Evaluation(
        makespan_s=_latest(ends, compiled.sinks, n),
        compute_busy_s=busy[(True, True)] + busy[(True, False)],
        comm_busy_s=busy[(False, True)] + busy[(False, False)],
        first_end_s=_latest(ends, compiled.first_sinks, n),
        first_compute_busy_s=busy[(True, True)], first_comm_busy_s=busy[(False, True)])


@lru_cache(maxsize=128)
def steps_to_compile(num_units: int, has_root: bool, recipe: TrainingRecipe,
                     block_norms: int = 2) -> int:
    """1 where a non-final micro-step has the same tasks as the final one (one micro-step then
    tells both, as when every micro-step reduce-scatters), else 2."""
    plan = step_plan(num_units, has_root=has_root, recipe=recipe, accum_steps=2,
                     block_norms=block_norms)

    def shape(micro: int) -> list[tuple[Any, ...]]:
        tasks = [(i, s) for i, s in enumerate(plan)
                 if s.micro_step == micro and not _once_per_step(s)]
        base = tasks[0][0]
        return [(s.stream, s.kind, s.unit, s.cost, s.index,
                 tuple(d - base for d in s.deps if d >= base)) for _, s in tasks]

    return 1 if shape(0) == shape(1) else 2


def fast_step(costs: FastCosts) -> FastStep:
    """Evaluate the FSDP step graph for every configuration in `costs` (in chunks of CHUNK).

    One pass over the graph of k = 2 (k = 1 where every micro-step has the same tasks): the first
    micro-step ends with both streams idle and the next starts then (see `perfmodel.sim.fsdp`), so
    microstep_s is the first micro-step's end and step_fixed_s = T(k) − k·microstep_s (the
    graph's T(2) − T(1) and 2·T(1) − T(2))."""
    if costs.size > CHUNK:
        parts = [fast_step(costs.take(slice(i, i + CHUNK))) for i in range(0, costs.size, CHUNK)]
        return FastStep(**{f: np.concatenate([getattr(p, f) for p in parts])
                           for f in FastStep.__dataclass_fields__})
    key = (len(costs.unit_types), costs.has_root, costs.recipe)
    k = steps_to_compile(*key, costs.block_norms)
    ev = evaluate(compile_step(*key, k, costs.unit_types, costs.block_norms), costs)
    return FastStep(microstep_s=ev.first_end_s, step_fixed_s=ev.makespan_s - k * ev.first_end_s,
                    microstep_compute_s=ev.first_compute_busy_s,
                    step_fixed_compute_s=ev.compute_busy_s - k * ev.first_compute_busy_s,
                    microstep_comm_s=ev.first_comm_busy_s,
                    step_fixed_comm_s=ev.comm_busy_s - k * ev.first_comm_busy_s)


def model_fast_costs(model: ModelSpec, profile: CostModel, island: IslandSpec, *, seq_len: int,
                     micro_batches: np.ndarray, recipe: TrainingRecipe | None = None,
                     ac: str | None = None) -> FastCosts:
    """FastCosts of one model and island over an array of micro-batches (types: block, root);
    `ac` overrides the recipe's checkpointing mode."""
    mb = np.asarray(micro_batches)
    d = unit_durations(model, profile, island, seq_len=seq_len, micro_batch=mb, recipe=recipe,
                       ac=ac)
    n = mb.shape[0]
    policy = d.recipe.checkpoint
    # types: 0 a block, 1 the root, 2 a block checkpointed whole among others (layer:N)
    whole = [policy.mode == "layer" and policy.checkpointed(i) for i in range(model.num_layers)]
    unit_types = tuple(2 if w else 0 for w in whole) + (1,)

    def types(block: Any, root: Any, whole_block: Any = None) -> np.ndarray:
        rows = [block, root] + ([whole_block if whole_block is not None else block]
                                if any(whole) else [])
        return np.stack([np.broadcast_to(np.asarray(r, dtype=float), (n,)) for r in rows])

    def vector(value: Any) -> np.ndarray:
        return np.broadcast_to(np.asarray(value, dtype=float), (n,)).copy()

    block_rows = (0, 2) if any(whole) else (0,)
    extra: dict[tuple[str, int, int], np.ndarray] = {}

    def inline(*places: str) -> tuple[Any, ...]:
        return tuple(v for where in places for v in d.inline.get(where, ()))

    # a unit's backward collectives, then its post-backward's (one tuple, as in StepCosts)
    for name, row, values in (
            ("forward_inline_s", 0, inline("block_forward")),
            ("forward_inline_s", 2, inline("block_forward")),
            ("backward_inline_s", 0, inline("block_backward", "block_post_backward")),
            ("backward_inline_s", 2, inline("block_backward_whole", "block_post_backward")),
            ("forward_inline_s", 1, inline("root_forward")),
            ("backward_inline_s", 1, inline("root_backward", "root_post_backward")),
            ("prologue_s", -1, inline("embed_forward")),
            ("epilogue_s", -1, inline("embed_backward")),
            ("optimizer_inline_s", -1, inline("optimizer"))):
        if row in (*block_rows, 1, -1):
            for i, value in enumerate(values):
                extra[(name, row, i)] = vector(value)
    if d.recipe.parallel.dp_replicate > 1:
        for row in block_rows:
            extra[("replicate_s", row, -1)] = vector(d.block_replicate_s)
        extra[("replicate_s", 1, -1)] = vector(d.root_replicate_s)
    return FastCosts(
        forward_s=types(d.block_forward_s, d.root_forward_s),
        backward_s=types(d.block_backward_s, d.root_backward_s, d.whole_backward_s),
        all_gather_s=types(d.block_all_gather_s, d.root_all_gather_s),
        reduce_scatter_s=types(d.block_reduce_scatter_s, d.root_reduce_scatter_s),
        optimizer_s=vector(d.optimizer_s), unit_types=unit_types, recipe=d.recipe,
        overlap_slowdown=d.overlap_slowdown, extra=extra, block_norms=model.norms_per_block)
