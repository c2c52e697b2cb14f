"""perfmodel.sim.fsdp: FSDP step graphs, the T(k) decomposition, durations from a profile."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel.sim.fsdp import (
    StepCosts,
    UnitCosts,
    recompute_fraction,
    simulate_step,
    step_costs,
    step_decomposition,
    step_plan,
    total_comm_s,
    total_compute_s,
)
from perfmodel.spec.arch import ModelSpec
from perfmodel.spec.hardware import GpuSpec, IslandSpec
from perfmodel.spec.recipe import ACCUM_MODES, DEFAULT_RECIPE, PAPER_RECIPE, TrainingRecipe

U0 = UnitCosts(name="u0", forward_s=2, backward_s=4, all_gather_s=1, reduce_scatter_s=1)
U1 = UnitCosts(name="u1", forward_s=1, backward_s=2, all_gather_s=3, reduce_scatter_s=2)
HAND = StepCosts(units=(U0, U1), optimizer_s=0.5)  # u0 a block, u1 the root; torchtitan recipe
PAPER = StepCosts(units=(U0, U1), optimizer_s=0.5, recipe=PAPER_RECIPE)


def _spans(result: Any) -> dict[str, tuple[float, float]]:
    return {iv.task.name: (iv.start_s, iv.end_s) for iv in result.schedule.intervals}


def test_two_unit_step_by_hand_torchtitan() -> None:
    """Root u1 gathered first and kept for backward, the only block u0 is the last block (kept):
    comm:    AG u1 [0,3]  AG u0 [3,4]  RS u0 [13,14] (after B u0)  RS u1 [14,16] (last)
    compute: F u0 [4,6]  F u1 [6,7]  B u1 [7,9]  B u0 [9,13]  optimizer [16,16.5]
    """
    result = simulate_step(HAND)
    assert _spans(result) == {
        "AG u1": (0, 3), "AG u0": (3, 4), "F u0": (4, 6), "F u1": (6, 7), "B u1": (7, 9),
        "B u0": (9, 13), "RS u0": (13, 14), "RS u1": (14, 16), "optimizer": (16, 16.5)}
    assert result.step_time_s == 16.5
    assert result.compute_busy_s == 9.5 and result.comm_busy_s == 7
    assert result.compute_idle_s == 7 and result.exposed_comm_s == 7  # [0,4] and [13,16]
    path = [result.schedule.intervals[i].task.name for i in result.schedule.critical_path]
    assert path == ["AG u1", "AG u0", "F u0", "F u1", "B u1", "B u0", "RS u0", "RS u1", "optimizer"]


def test_two_unit_step_by_hand_paper() -> None:
    """Every unit resharded: AG u1 bwd (consumer B u1, slot 2) is issued at slot 1 and waits for
    slot 0 (F u0, ends 6); AG u0 bwd (consumer slot 3) waits for F u1 (7) and the stream (9)."""
    result = simulate_step(PAPER)
    assert _spans(result) == {
        "AG u1": (0, 3), "AG u0": (3, 4), "F u0": (4, 6), "AG u1 bwd": (6, 9), "F u1": (6, 7),
        "AG u0 bwd": (9, 10), "B u1": (9, 11), "B u0": (11, 15), "RS u0": (15, 16),
        "RS u1": (16, 18), "optimizer": (18, 18.5),
    }
    assert result.comm_busy_s == 11


def test_two_unit_accumulation_by_hand() -> None:
    """torchtitan reduce-scatters every micro-step: each micro-step ends with RS u1 (16 s), so
    T(2) = 32.5, microstep 16, fixed 0.5 (the optimizer). No-sync (paper): the first micro-step
    ends with B u0 at 15 and the final one is the k=1 step shifted: T(2) = 33.5, fixed 3.5."""
    result = simulate_step(HAND, accum_steps=2)
    spans = _spans(result)
    assert spans["RS u1 m0"] == (14, 16) and spans["AG u1 m1"] == (16, 19)
    assert result.step_time_s == 32.5
    dec = step_decomposition(HAND)
    assert (dec.microstep_s, dec.step_fixed_s) == (16, 0.5)
    paper = simulate_step(PAPER, accum_steps=2)
    assert _spans(paper)["B u0 m0"] == (11, 15) and "RS u0 m0" not in _spans(paper)
    assert paper.step_time_s == 33.5
    dec = step_decomposition(PAPER)
    assert (dec.microstep_s, dec.step_fixed_s) == (15, 3.5)


def test_overlap_slowdown_by_hand() -> None:
    """Paper recipe with compute 2x slower under a collective: F u1 runs under AG u1 bwd [6,9]
    (1 s of work -> [6,8]); B u1 starts at 9 under AG u0 bwd [9,10] (0.5 s of work done), the
    remaining 1.5 s run alone -> 11.5; then B u0 [11.5,15.5], RS, RS, optimizer -> 19."""
    slowed = StepCosts(units=(U0, U1), optimizer_s=0.5, recipe=PAPER_RECIPE, overlap_slowdown=2.0)
    result = simulate_step(slowed)
    spans = _spans(result)
    assert spans["F u1"] == (6, 8) and spans["AG u0 bwd"] == (9, 10) and spans["B u1"] == (9, 11.5)
    assert result.step_time_s == 19 and result.compute_busy_s == 11
    # Without contention the same step is the paper's 18.5 s.
    assert simulate_step(PAPER).step_time_s == 18.5


def test_collective_order_three_blocks() -> None:
    """The order FSDP2 issues (tests/test_fsdp_order.py records it from a real run)."""
    root = UnitCosts(name="root", forward_s=1, backward_s=2, all_gather_s=3, reduce_scatter_s=2)
    costs = StepCosts.uniform(num_blocks=3, block=U0, root=root, optimizer_s=0.5)
    names = [iv.task.name for iv in simulate_step(costs).schedule.intervals if iv.task.is_comm]
    assert names == ["AG root", "AG block0", "AG block1", "AG block2", "AG block1 bwd", "RS block2",
                     "AG block0 bwd", "RS block1", "RS block0", "RS root"]
    paper = StepCosts.uniform(
        num_blocks=3, block=U0, root=root, optimizer_s=0.5, recipe=PAPER_RECIPE
    )
    names = [iv.task.name for iv in simulate_step(paper).schedule.intervals if iv.task.is_comm]
    assert names == [
        "AG root", "AG block0", "AG block1", "AG block2", "AG root bwd", "AG block2 bwd",
        "AG block1 bwd", "RS block2", "AG block0 bwd", "RS block1", "RS block0", "RS root",
    ]


_dur = st.floats(0, 5, allow_nan=False, allow_infinity=False)
_recipes = st.builds(TrainingRecipe, accum_mode=st.sampled_from(ACCUM_MODES),
                     reshard_root_after_forward=st.booleans(),
                     reshard_last_block_after_forward=st.booleans(),
                     reshard_blocks_after_forward=st.booleans(), prefetch_depth=st.integers(0, 3))


@st.composite
def _costs(draw: st.DrawFn, *, zero_comm: bool = False, slowdown: bool = False) -> StepCosts:
    units = tuple(UnitCosts(name=f"u{i}", forward_s=draw(_dur), backward_s=draw(_dur),
                            all_gather_s=0.0 if zero_comm else draw(_dur),
                            reduce_scatter_s=0.0 if zero_comm else draw(_dur))
                  for i in range(draw(st.integers(1, 5))))
    factor = draw(st.floats(1, 3)) if slowdown else 1.0
    return StepCosts(units=units, optimizer_s=draw(_dur), recipe=draw(_recipes),
                     has_root=draw(st.booleans()), overlap_slowdown=factor)


@settings(max_examples=120, deadline=None)
@given(_costs(slowdown=True), st.integers(1, 4))
def test_step_time_bounds(costs: StepCosts, k: int) -> None:
    """max(compute, comm) <= T <= compute + comm: each stream is sequential, and at every instant
    one of them runs (compute waits only for communication and vice versa). Contention only
    lengthens compute."""
    result = simulate_step(costs, accum_steps=k)
    compute, comm = total_compute_s(costs, k), total_comm_s(costs, k)
    tol = 1e-9 * (compute + comm + 1)
    assert result.comm_busy_s == pytest.approx(comm)
    assert compute - tol <= result.compute_busy_s <= costs.overlap_slowdown * compute + tol
    assert (
        max(result.compute_busy_s, comm) - tol
        <= result.step_time_s
        <= result.compute_busy_s + comm + tol
    )


@settings(max_examples=60, deadline=None)
@given(_costs(zero_comm=True, slowdown=True), st.integers(1, 4))
def test_zero_cost_communication_gives_pure_compute(costs: StepCosts, k: int) -> None:
    result = simulate_step(costs, accum_steps=k)
    assert result.step_time_s == pytest.approx(total_compute_s(costs, k), rel=1e-12, abs=1e-12)
    assert result.exposed_comm_s == 0


@settings(max_examples=60, deadline=None)
@given(_costs(), st.integers(1, 5))
def test_reduce_scatters_per_accumulation_mode(costs: StepCosts, k: int) -> None:
    result = simulate_step(costs, accum_steps=k)
    tasks = [iv.task for iv in result.schedule.intervals]
    n = len(costs.units)
    reduce_ids = [t.task_id for t in tasks if t.kind == "reduce_scatter"]
    every = costs.recipe.accum_mode == "reduce_scatter"
    assert len(reduce_ids) == n * (k if every else 1)
    last_forward = max(
        t.task_id for t in tasks if t.kind == "forward" and t.name.startswith("F u0")
    )
    if not every:  # no-sync: every reduce_scatter comes after the last micro-step's first forward
        assert min(reduce_ids) > last_forward
    # The root's reduce_scatter closes each micro-step that reduces: nothing but compute after it.
    if costs.has_root:
        root_rs = [
            t for t in tasks if t.kind == "reduce_scatter" and t.name.startswith(f"RS u{n - 1}")
        ]
        assert tasks[-2] == root_rs[-1] and tasks[-1].kind == "optimizer"
    gathers = sum(t.kind == "all_gather" for t in tasks)
    assert gathers == k * sum(1 for t in step_plan(n, has_root=costs.has_root, recipe=costs.recipe)
                              if t.kind == "all_gather")


@settings(max_examples=80, deadline=None)
@given(_costs(slowdown=True))
def test_decomposition_is_exact_for_k_up_to_8(costs: StepCosts) -> None:
    dec = step_decomposition(costs)
    for k in range(1, 9):
        t = simulate_step(costs, accum_steps=k).step_time_s
        assert dec.step_time_s(k) == pytest.approx(t, rel=1e-12, abs=1e-12)


def test_plan_gathers_follow_the_recipe() -> None:
    """torchtitan: root and last block gathered once per micro-step, other blocks twice; paper:
    every unit twice; no resharding at all: once each."""
    def gathers(recipe: TrainingRecipe) -> int:
        return sum(t.kind == "all_gather" for t in step_plan(5, recipe=recipe))

    assert gathers(DEFAULT_RECIPE) == 5 + 3
    assert gathers(PAPER_RECIPE) == 10
    assert gathers(DEFAULT_RECIPE.with_overrides(reshard_blocks_after_forward=False)) == 5


# ---- durations from a profile ----------------------------------------------------------------

@dataclass
class LinearProfile:
    """A stand-in profile: compute ∝ micro-batch, comm = payload / bandwidth."""

    overlap_slowdown = 1.0
    recompute_factor = 1.0
    fsdp_copy_s_per_byte = 0.0
    tp_dispatch_s: ClassVar[dict[str, dict[str, float]]] = {}

    block_s: float = 0.01
    bw: float = 1e9
    calls: list[tuple[Any, ...]] | None = None

    def compute_time_s(
        self, phase: str, model: Any, seq_len: int, micro_batch: Any, unit: str = "model",
        num_shards: int = 1,
    ) -> Any:
        scale = {"forward": 1.0, "backward": 2.0, "optimizer": 0.5}[phase]
        unit_scale = {"block": 1.0, "root": 3.0, "model": 10.0 / num_shards}[unit]
        return scale * unit_scale * self.block_s * micro_batch

    def island_comm_time_s(self, op: str, island: IslandSpec, payload_bytes: Any) -> Any:
        if self.calls is not None:
            self.calls.append((op, island.num_gpus, payload_bytes))
        return payload_bytes / self.bw


TINY = ModelSpec(name="tiny", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2,
                 intermediate_size=128, vocab_size=1000)
GPU = GpuSpec(
    name="G", memory_bytes=10**10, usable_memory_bytes=9 * 10**9, bf16_flops_per_s=1e14,
    hbm_bytes_per_s=1e12, intra_node_link="nvlink4", inter_node_link="ib-ndr400", nics_per_node=8,
)


def _island(nodes: int, gpus: int) -> IslandSpec:
    return IslandSpec(
        gpu=GPU, num_nodes=nodes, gpus_per_node=gpus, intra_link="nvlink4", inter_link="ib-ndr400"
    )


def test_recompute_fraction() -> None:
    assert recompute_fraction(TINY, 128, "none") == 0
    assert recompute_fraction(TINY, 128, "full") == pytest.approx(1.0)
    attn = TINY.attention_flops_per_token(128)
    assert recompute_fraction(TINY, 128, "attn") == pytest.approx(
        attn / TINY.block_forward_flops_per_token(128)
    )
    assert recompute_fraction(TINY, 128, "layer:2") == 0  # a block not checkpointed whole
    assert recompute_fraction(TINY, 128, "layer:2", whole=True) == 1
    with pytest.raises(ValueError, match="To fix"):
        recompute_fraction(TINY, 128, "most")


def test_step_costs_from_profile() -> None:
    prof = LinearProfile(calls=[])
    costs = step_costs(TINY, prof, _island(2, 4), seq_len=128, micro_batch=2, ac="full")
    assert (
        costs.recipe == DEFAULT_RECIPE.with_overrides(ac="full") and costs.overlap_slowdown == 1.0
    )
    assert [u.name for u in costs.units] == ["block0", "block1", "block2", "root"]
    block, root = costs.units[0], costs.units[-1]
    assert block.forward_s == pytest.approx(0.02)
    assert block.backward_s == pytest.approx(0.04 + 0.02)  # full AC: + one forward
    assert root.backward_s == pytest.approx(0.12)  # the root is not checkpointed
    assert costs.optimizer_s == pytest.approx(0.5 * 10 / 8 * 0.01 * 2)
    assert block.all_gather_s == pytest.approx(TINY.block_params * 2 / 1e9)
    assert block.reduce_scatter_s == pytest.approx(TINY.block_params * 4 / 1e9)
    assert root.all_gather_s == pytest.approx(TINY.root_params * 2 / 1e9)
    assert {c[1] for c in prof.calls} == {8}
    # The recipe's dtypes size the payloads: bf16 gradients halve the reduce-scatter.
    bf16 = step_costs(TINY, prof, _island(2, 4), seq_len=128, micro_batch=2,
                      recipe=DEFAULT_RECIPE.with_overrides(reduce_dtype="bf16", param_dtype="fp32"))
    assert bf16.units[0].reduce_scatter_s == pytest.approx(TINY.block_params * 2 / 1e9)
    assert bf16.units[0].all_gather_s == pytest.approx(TINY.block_params * 4 / 1e9)
    assert bf16.units[0].backward_s == pytest.approx(
        0.04 + 0.02 * recompute_fraction(TINY, 128, "op-sac")
    )
    # layer:2 checkpoints the 2nd block (1-based) whole and leaves the others alone
    layered = step_costs(TINY, prof, _island(2, 4), seq_len=128, micro_batch=2, ac="layer:2")
    assert [u.backward_s for u in layered.units[:3]] == pytest.approx([0.04, 0.06, 0.04])


def test_overlap_slowdown_is_read_from_the_profile() -> None:
    @dataclass
    class Contended(LinearProfile):
        overlap_slowdown: float = 1.5

    costs = step_costs(TINY, Contended(), _island(1, 8), seq_len=128, micro_batch=1)
    assert costs.overlap_slowdown == 1.5
    assert simulate_step(costs).step_time_s > simulate_step(
        step_costs(TINY, LinearProfile(), _island(1, 8), seq_len=128, micro_batch=1)).step_time_s
    with pytest.raises(ValueError, match="overlap_slowdown"):
        step_costs(TINY, Contended(overlap_slowdown=0.5), _island(1, 8), seq_len=128, micro_batch=1)


def test_single_gpu_island_has_no_communication() -> None:
    costs = step_costs(TINY, LinearProfile(), _island(1, 1), seq_len=128, micro_batch=1)
    assert total_comm_s(costs, 1) == 0
    assert simulate_step(costs).step_time_s == pytest.approx(total_compute_s(costs, 1))


def test_invalid_costs() -> None:
    with pytest.raises(ValueError):
        UnitCosts(name="x", forward_s=-1, backward_s=0, all_gather_s=0, reduce_scatter_s=0)
    with pytest.raises(ValueError):
        StepCosts(units=(), optimizer_s=0)
    with pytest.raises(ValueError):
        simulate_step(HAND, accum_steps=0)
    with pytest.raises(ValueError, match="overlap_slowdown"):
        StepCosts(units=(U0,), optimizer_s=0, overlap_slowdown=0.9)
