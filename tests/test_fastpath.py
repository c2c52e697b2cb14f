"""perfmodel.sim.fastpath (the step graph compiled once, evaluated vectorised) equals the
simulator."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from perfmodel.sim.fastpath import (
    FastCosts,
    compile_step,
    concat_fast_costs,
    fast_step,
    model_fast_costs,
)
from perfmodel.sim.fsdp import StepCosts, UnitCosts, simulate_step, step_costs, step_plan
from perfmodel.spec.arch import ModelSpec
from perfmodel.spec.catalog import get_gpu
from perfmodel.spec.hardware import IslandSpec
from perfmodel.spec.layout import ParallelLayout
from perfmodel.spec.recipe import ACCUM_MODES, DEFAULT_RECIPE, PAPER_RECIPE, TrainingRecipe

N_CONFIGS = 1200
TINY = ModelSpec(name="tiny", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2,
                 intermediate_size=128, vocab_size=1000)


class LinearProfile:
    """A stand-in profile: compute ∝ micro-batch (numpy arrays welcome), comm = payload / bw."""

    overlap_slowdown = 1.0
    recompute_factor = 1.0
    fsdp_copy_s_per_byte = 0.0
    tp_dispatch_s: dict[str, dict[str, float]] = {}

    def __init__(self, block_s: float, bw: float) -> None:
        self.block_s, self.bw = block_s, bw

    def compute_time_s(
        self, phase: str, model: Any, seq_len: int, micro_batch: Any, unit: str = "model",
        num_shards: int = 1, shard: Any = None,
    ) -> Any:
        scale = {"forward": 1.0, "backward": 2.0, "optimizer": 0.5}[phase]
        per_unit = {"block": 1.0, "root": 3.0, "model": 10.0 / num_shards}[unit]
        tp = 1 if shard is None else shard.tp
        return scale * per_unit * self.block_s * micro_batch / tp

    def island_comm_time_s(self, op: str, island: IslandSpec, payload_bytes: Any) -> Any:
        return payload_bytes / self.bw

    def group_comm_time_s(self, op: str, group: Any, payload_bytes: Any, *, inline: bool = False,
                          compute_s: Any = 0.0) -> Any:
        return 1e-5 * (group.size - 1) + payload_bytes / self.bw


def _random_recipe(rng: np.random.Generator) -> TrainingRecipe:
    return TrainingRecipe(accum_mode=str(rng.choice(ACCUM_MODES)),
                          reshard_root_after_forward=bool(rng.random() < 0.5),
                          reshard_last_block_after_forward=bool(rng.random() < 0.5),
                          reshard_blocks_after_forward=bool(rng.random() < 0.8),
                          prefetch_depth=int(rng.integers(0, 4)))


def _random_costs(rng: np.random.Generator, num_units: int, recipe: TrainingRecipe,
                  has_root: bool) -> StepCosts:
    """Durations spanning compute-bound to communication-bound, with some exact zeros; half of
    the configurations with compute-communication contention."""

    def dur(scale: float) -> float:
        return 0.0 if rng.random() < 0.1 else float(rng.exponential(scale))

    comm_scale = float(rng.choice([0.1, 1.0, 10.0]))
    units = tuple(
        UnitCosts(
            name=f"u{i}", forward_s=dur(1.0), backward_s=dur(2.0), all_gather_s=dur(comm_scale),
            reduce_scatter_s=dur(2 * comm_scale),
        )
        for i in range(num_units)
    )
    slowdown = 1.0 if rng.random() < 0.5 else float(1.0 + 2.0 * rng.random())
    return StepCosts(units=units, optimizer_s=dur(0.5), recipe=recipe, has_root=has_root,
                     overlap_slowdown=slowdown)


def test_fast_path_equals_graph_on_random_configurations() -> None:
    """>= 1,000 random configurations: unit counts, durations, recipes (accumulation mode,
    resharding of root / last block / blocks, prefetch depth), root or not, contention, k."""
    rng = np.random.default_rng(20240601)
    groups: dict[tuple[int, bool, TrainingRecipe], list[tuple[StepCosts, int]]] = {}
    shapes = [
        (int(rng.integers(1, 7)), bool(rng.random() < 0.8), _random_recipe(rng)) for _ in range(40)
    ]
    for _ in range(N_CONFIGS):
        n, has_root, recipe = shapes[int(rng.integers(len(shapes)))]
        groups.setdefault((n, has_root, recipe), []).append(
            (_random_costs(rng, n, recipe, has_root), int(rng.integers(1, 5))))
    checked, contended = 0, 0
    for configs in groups.values():
        fast = fast_step(FastCosts.from_step_costs([c for c, _ in configs]))
        ks = np.array([k for _, k in configs])
        fast_t = fast.step_time_s(ks)
        for i, (costs, k) in enumerate(configs):
            graph = simulate_step(costs, accum_steps=k)
            assert fast_t[i] == pytest.approx(graph.step_time_s, rel=1e-9, abs=1e-12)
            assert fast.compute_busy_s(k)[i] == pytest.approx(
                graph.compute_busy_s, rel=1e-9, abs=1e-12
            )
            assert fast.comm_busy_s(k)[i] == pytest.approx(graph.comm_busy_s, rel=1e-9, abs=1e-12)
            checked += 1
            contended += graph.compute_busy_s > costs.compute_s * k + costs.optimizer_s + 1e-9
    assert checked == N_CONFIGS
    assert contended > 100  # contention really changed many of the compared schedules
    assert len({key[2].accum_mode for key in groups}) == 2


LAYOUTS = (ParallelLayout(tp=2), ParallelLayout(tp=2, sequence_parallel=False),
           ParallelLayout(tp=4, dp_shard=1), ParallelLayout(tp=2, dp_shard=1,
                                                            sequence_parallel=False),
           ParallelLayout(dp_replicate=2), ParallelLayout(tp=2, dp_replicate=2),
           ParallelLayout(tp=2, cp=2))


def _layout_costs(rng: np.random.Generator, num_units: int, recipe: TrainingRecipe) -> StepCosts:
    """Random durations for every task the plan of a parallel layout has (inline collectives of
    each unit, the embedding's, the optimizer's, HSDP's all-reduces)."""
    plan = step_plan(num_units, recipe=recipe, accum_steps=2)

    def count(cost: str, unit: int | None) -> int:
        return max((t.index + 1 for t in plan if t.cost == cost and t.unit == unit), default=0)

    def dur(scale: float) -> float:
        return 0.0 if rng.random() < 0.1 else float(rng.exponential(scale))

    def durs(scale: float, cost: str, unit: int | None) -> tuple[float, ...]:
        return tuple(dur(scale) for _ in range(count(cost, unit)))

    units = tuple(UnitCosts(
        name=f"u{i}", forward_s=dur(1.0), backward_s=dur(2.0), all_gather_s=dur(0.5),
        reduce_scatter_s=dur(1.0), replicate_s=dur(1.0),
        forward_inline_s=durs(0.2, "forward_inline_s", i),
        backward_inline_s=durs(0.2, "backward_inline_s", i)) for i in range(num_units))
    return StepCosts(units=units, optimizer_s=dur(0.5), recipe=recipe,
                     overlap_slowdown=1.0 if rng.random() < 0.5 else 1.5,
                     prologue_s=durs(0.2, "prologue_s", None),
                     epilogue_s=durs(0.2, "epilogue_s", None),
                     optimizer_inline_s=durs(0.1, "optimizer_inline_s", None))


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda lay: lay.describe() if lay.dp_shard > 0
                         else "inferred dp_shard, " + replace(lay, dp_shard=1).describe())
def test_fast_path_equals_graph_for_parallel_layouts(layout: ParallelLayout) -> None:
    """Inline TP/CP collectives, post-backward and optimizer collectives, HSDP all-reduces:
    every checkpointing and accumulation mode, k = 1..4, step time and both busy times."""
    rng = np.random.default_rng(23)
    for ac in ("none", "op-sac", "full", "layer:2", "attn"):
        for mode in ACCUM_MODES:
            recipe = replace(DEFAULT_RECIPE.with_overrides(ac=ac, accum_mode=mode),
                             parallel=layout)
            configs = [_layout_costs(rng, 4, recipe) for _ in range(6)]
            fast = fast_step(FastCosts.from_step_costs(configs))
            for i, costs in enumerate(configs):
                for k in (1, 2, 3, 4):
                    graph = simulate_step(costs, accum_steps=k)
                    assert fast.step_time_s(k)[i] == pytest.approx(graph.step_time_s, rel=1e-9)
                    assert fast.comm_busy_s(k)[i] == pytest.approx(graph.comm_busy_s, rel=1e-9)
                    assert fast.compute_busy_s(k)[i] == pytest.approx(graph.compute_busy_s,
                                                                      rel=1e-9)


def test_model_fast_costs_match_step_costs_for_layouts() -> None:
    """The per-place inline durations reach the same tasks in both (layer:N's whole blocks
    included)."""
    prof = LinearProfile(block_s=0.003, bw=5e8)
    island = IslandSpec(gpu=get_gpu("H100-SXM5-80GB"), num_nodes=2, gpus_per_node=4,
                        intra_link="nvlink4", inter_link="ib-ndr400")
    mbs = np.array([1, 2, 5])
    for layout in (ParallelLayout(tp=2), ParallelLayout(tp=4, dp_shard=2),
                   ParallelLayout(tp=2, dp_replicate=2, sequence_parallel=False)):
        for ac, mode in (("layer:2", "no_sync"), ("op-sac", "reduce_scatter")):
            recipe = replace(DEFAULT_RECIPE.with_overrides(ac=ac, accum_mode=mode),
                             parallel=layout)
            fast = fast_step(model_fast_costs(TINY, prof, island, seq_len=128,
                                              micro_batches=mbs, recipe=recipe))
            for i, m in enumerate(mbs):
                costs = step_costs(TINY, prof, island, seq_len=128, micro_batch=int(m),
                                   recipe=recipe)
                for k in (1, 3):
                    graph = simulate_step(costs, accum_steps=k)
                    assert fast.step_time_s(k)[i] == pytest.approx(graph.step_time_s, rel=1e-9)
                    assert fast.comm_busy_s(k)[i] == pytest.approx(graph.comm_busy_s, rel=1e-9)


def test_compiled_graph_is_the_plan() -> None:
    """The compiled DAG has one node per planned task; its critical inputs come from the plan."""
    for recipe in (DEFAULT_RECIPE, PAPER_RECIPE):
        plan = step_plan(4, recipe=recipe, accum_steps=2)
        compiled = compile_step(4, True, recipe, 2, (0, 0, 0, 1))
        assert len(compiled.preds) == len(plan)
        assert compiled.sinks == (len(plan) - 1,)  # the optimizer ends every step
        for spec, pred in zip(plan, compiled.preds, strict=True):
            assert set(spec.deps) <= set(pred)


def test_model_fast_costs_match_step_costs() -> None:
    prof = LinearProfile(block_s=0.003, bw=5e8)
    gpu = get_gpu("H100-SXM5-80GB")
    island = IslandSpec(
        gpu=gpu, num_nodes=2, gpus_per_node=4, intra_link="nvlink4", inter_link="ib-ndr400"
    )
    mbs = np.array([1, 2, 3, 8])
    for recipe in (
        DEFAULT_RECIPE,
        PAPER_RECIPE,
        DEFAULT_RECIPE.with_overrides(ac="full", reduce_dtype="bf16"),
    ):
        fast = fast_step(
            model_fast_costs(TINY, prof, island, seq_len=128, micro_batches=mbs, recipe=recipe)
        )
        for i, m in enumerate(mbs):
            costs = step_costs(TINY, prof, island, seq_len=128, micro_batch=int(m), recipe=recipe)
            for k in (1, 3):
                assert fast.step_time_s(k)[i] == pytest.approx(
                    simulate_step(costs, accum_steps=k).step_time_s, rel=1e-9
                )


def test_chunks_and_concatenation_keep_results() -> None:
    prof = LinearProfile(block_s=0.003, bw=5e8)
    gpu = get_gpu("H100-SXM5-80GB")
    island = IslandSpec(
        gpu=gpu, num_nodes=1, gpus_per_node=8, intra_link="nvlink4", inter_link="ib-ndr400"
    )
    a = model_fast_costs(TINY, prof, island, seq_len=128, micro_batches=np.arange(1, 5000))
    b = model_fast_costs(TINY, prof, island, seq_len=256, micro_batches=np.arange(1, 4000))
    joined = fast_step(concat_fast_costs([a, b]))  # > one chunk
    np.testing.assert_allclose(
        joined.microstep_s,
        np.concatenate([fast_step(a).microstep_s, fast_step(b).microstep_s]),
        rtol=1e-12,
    )
    with pytest.raises(ValueError, match="share"):
        concat_fast_costs(
            [
                a,
                model_fast_costs(
                    TINY, prof, island, seq_len=128, micro_batches=np.arange(1, 3),
                    recipe=PAPER_RECIPE,
                ),
            ]
        )


def test_fast_costs_validation() -> None:
    ok = np.ones((2, 3))
    with pytest.raises(ValueError, match="shape"):
        FastCosts(forward_s=ok, backward_s=np.ones((2, 2)), all_gather_s=ok, reduce_scatter_s=ok,
                  optimizer_s=np.ones(3), unit_types=(0, 1))
    with pytest.raises(ValueError, match="unit_types"):
        FastCosts(forward_s=ok, backward_s=ok, all_gather_s=ok, reduce_scatter_s=ok,
                  optimizer_s=np.ones(3), unit_types=(0, 2))
    with pytest.raises(ValueError, match="overlap_slowdown"):
        FastCosts(
            forward_s=ok, backward_s=ok, all_gather_s=ok, reduce_scatter_s=ok,
            optimizer_s=np.ones(3), unit_types=(0, 1), overlap_slowdown=np.array([1.0, 0.5, 1.0]),
        )
    unit = UnitCosts(name="a", forward_s=1, backward_s=1, all_gather_s=1, reduce_scatter_s=1)
    with pytest.raises(ValueError, match="share the unit count"):
        FastCosts.from_step_costs([StepCosts(units=(unit,) * n, optimizer_s=0) for n in (1, 2)])
