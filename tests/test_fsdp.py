"""perfmodel.fsdp: FSDP step graphs, the T(k) decomposition, durations from a profile."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel.arch import ModelSpec
from perfmodel.fsdp import (
    StepCosts,
    UnitCosts,
    recompute_fraction,
    simulate_step,
    step_costs,
    step_decomposition,
    total_comm_s,
    total_compute_s,
)
from perfmodel.hardware import GpuSpec, IslandSpec

U0 = UnitCosts(name="u0", forward_s=2, backward_s=4, all_gather_s=1, reduce_scatter_s=1)
U1 = UnitCosts(name="u1", forward_s=1, backward_s=2, all_gather_s=3, reduce_scatter_s=2)
HAND = StepCosts(units=(U0, U1), optimizer_s=0.5)


def _spans(result: Any) -> dict[str, tuple[float, float]]:
    return {iv.task.name: (iv.start_s, iv.end_s) for iv in result.schedule.intervals}


def test_two_unit_step_by_hand() -> None:
    """Slots F u0, F u1, B u1, B u0; AG(s) may start once slot s-2 ended (prefetch one ahead).

    comm:    AG u0 [0,1]  AG u1 [1,4]  AG u1 bwd [4,7] (after F u0 at 3 and AG u1)
             AG u0 bwd [7,8] (after F u1 at 5)  RS u1 [9,11] (after B u1)  RS u0 [13,14]
    compute: F u0 [1,3]  F u1 [4,5]  B u1 [7,9]  B u0 [9,13]  optimizer [14,14.5] (after RS u0)
    """
    result = simulate_step(HAND)
    assert _spans(result) == {
        "AG u0": (0, 1), "AG u1": (1, 4), "F u0": (1, 3), "AG u1 bwd": (4, 7), "F u1": (4, 5),
        "AG u0 bwd": (7, 8), "B u1": (7, 9), "RS u1": (9, 11), "B u0": (9, 13), "RS u0": (13, 14),
        "optimizer": (14, 14.5)}
    assert result.step_time_s == 14.5
    assert result.compute_busy_s == 9.5 and result.comm_busy_s == 11
    assert result.compute_idle_s == 5 and result.exposed_comm_s == 5  # [0,1] [3,4] [5,7] [13,14]
    path = [result.schedule.intervals[i].task.name for i in result.schedule.critical_path]
    assert path == ["AG u0", "AG u1", "AG u1 bwd", "B u1", "B u0", "RS u0", "optimizer"]


def test_two_unit_accumulation_by_hand() -> None:
    """A non-final micro-step has no reduce_scatter: ... B u1 [7,9], B u0 [9,13] -> 13 s; the final
    micro-step is the k=1 step shifted by 13: T(2) = 27.5, microstep 13, fixed 1.5 (RS tail 1 +
    optimizer 0.5)."""
    result = simulate_step(HAND, accum_steps=2)
    spans = _spans(result)
    assert spans["B u0 m0"] == (9, 13) and spans["AG u0 m1"] == (13, 14)
    assert result.step_time_s == 27.5
    dec = step_decomposition(HAND)
    assert (dec.microstep_s, dec.step_fixed_s) == (13, 1.5)


_dur = st.floats(0, 5, allow_nan=False, allow_infinity=False)


@st.composite
def _costs(draw: st.DrawFn, *, zero_comm: bool = False) -> StepCosts:
    units = tuple(UnitCosts(name=f"u{i}", forward_s=draw(_dur), backward_s=draw(_dur),
                            all_gather_s=0.0 if zero_comm else draw(_dur),
                            reduce_scatter_s=0.0 if zero_comm else draw(_dur))
                  for i in range(draw(st.integers(1, 5))))
    return StepCosts(units=units, optimizer_s=draw(_dur))


@settings(max_examples=120, deadline=None)
@given(_costs(), st.integers(1, 4))
def test_step_time_bounds(costs: StepCosts, k: int) -> None:
    """max(compute, comm) <= T <= compute + comm: each stream is sequential, and at every instant
    one of them runs (compute waits only for communication and vice versa)."""
    result = simulate_step(costs, accum_steps=k)
    compute, comm = total_compute_s(costs, k), total_comm_s(costs, k)
    assert result.compute_busy_s == pytest.approx(compute) and result.comm_busy_s == pytest.approx(comm)
    tol = 1e-9 * (compute + comm + 1)
    assert max(compute, comm) - tol <= result.step_time_s <= compute + comm + tol


@settings(max_examples=60, deadline=None)
@given(_costs(zero_comm=True), st.integers(1, 4))
def test_zero_cost_communication_gives_pure_compute(costs: StepCosts, k: int) -> None:
    result = simulate_step(costs, accum_steps=k)
    assert result.step_time_s == pytest.approx(total_compute_s(costs, k), rel=1e-12, abs=1e-12)
    assert result.exposed_comm_s == 0


@settings(max_examples=60, deadline=None)
@given(_costs(), st.integers(1, 5))
def test_accumulation_reduce_scatters_only_on_last_microstep(costs: StepCosts, k: int) -> None:
    result = simulate_step(costs, accum_steps=k)
    tasks = [iv.task for iv in result.schedule.intervals]
    n = len(costs.units)
    assert sum(t.kind == "all_gather" for t in tasks) == 2 * n * k
    reduce_ids = [t.task_id for t in tasks if t.kind == "reduce_scatter"]
    assert len(reduce_ids) == n
    # Every reduce_scatter comes after the last micro-step's first forward.
    last_forward = max(t.task_id for t in tasks if t.kind == "forward" and t.name.startswith("F u0"))
    assert min(reduce_ids) > last_forward


@settings(max_examples=80, deadline=None)
@given(_costs())
def test_decomposition_is_exact_for_k_up_to_8(costs: StepCosts) -> None:
    dec = step_decomposition(costs)
    for k in range(1, 9):
        t = simulate_step(costs, accum_steps=k).step_time_s
        assert dec.step_time_s(k) == pytest.approx(t, rel=1e-12, abs=1e-12)


# ---- durations from a profile ----------------------------------------------------------------

@dataclass
class LinearProfile:
    """A stand-in profile: compute ∝ micro-batch, comm = payload / bandwidth."""

    block_s: float = 0.01
    bw: float = 1e9
    calls: list[tuple[Any, ...]] | None = None

    def compute_time_s(self, phase: str, model: Any, seq_len: int, micro_batch: Any, unit: str = "model",
                       num_shards: int = 1) -> Any:
        scale = {"forward": 1.0, "backward": 2.0, "optimizer": 0.5}[phase]
        unit_scale = {"block": 1.0, "root": 3.0, "model": 10.0 / num_shards}[unit]
        return scale * unit_scale * self.block_s * micro_batch

    def island_comm_time_s(self, op: str, island: IslandSpec, payload_bytes: Any) -> Any:
        if self.calls is not None:
            self.calls.append((op, island.num_gpus, payload_bytes))
        return payload_bytes / self.bw


TINY = ModelSpec(name="tiny", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2,
                 intermediate_size=128, vocab_size=1000)
GPU = GpuSpec(name="G", memory_bytes=10**10, usable_memory_bytes=9 * 10**9, bf16_flops_per_s=1e14,
              hbm_bytes_per_s=1e12, intra_node_link="nvlink4", inter_node_link="ib-ndr400", nics_per_node=8)


def _island(nodes: int, gpus: int) -> IslandSpec:
    return IslandSpec(gpu=GPU, num_nodes=nodes, gpus_per_node=gpus, intra_link="nvlink4", inter_link="ib-ndr400")


def test_recompute_fraction() -> None:
    assert recompute_fraction(TINY, 128, "none") == 0
    assert recompute_fraction(TINY, 128, "full") == pytest.approx(1.0)
    attn = TINY.attention_flops_per_token(128)
    assert recompute_fraction(TINY, 128, "selective") == pytest.approx(attn / TINY.block_forward_flops_per_token(128))
    with pytest.raises(ValueError):
        recompute_fraction(TINY, 128, "most")


def test_step_costs_from_profile() -> None:
    prof = LinearProfile(calls=[])
    costs = step_costs(TINY, prof, _island(2, 4), seq_len=128, micro_batch=2, ac="full",
                       param_bytes=2, grad_bytes=4)
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


def test_single_gpu_island_has_no_communication() -> None:
    costs = step_costs(TINY, LinearProfile(), _island(1, 1), seq_len=128, micro_batch=1)
    assert costs.all_gather_s == 0 and costs.reduce_scatter_s == 0
    assert simulate_step(costs).step_time_s == pytest.approx(total_compute_s(costs, 1))


def test_invalid_costs() -> None:
    with pytest.raises(ValueError):
        UnitCosts(name="x", forward_s=-1, backward_s=0, all_gather_s=0, reduce_scatter_s=0)
    with pytest.raises(ValueError):
        StepCosts(units=(), optimizer_s=0)
    with pytest.raises(ValueError):
        simulate_step(HAND, accum_steps=0)
