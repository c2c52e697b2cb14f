"""perfmodel.fastpath agrees with the graph simulator."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from perfmodel.arch import ModelSpec
from perfmodel.catalog import get_gpu
from perfmodel.fastpath import FastCosts, fast_step, model_fast_costs
from perfmodel.fsdp import StepCosts, UnitCosts, simulate_step, step_costs
from perfmodel.hardware import IslandSpec

N_CONFIGS = 1200
TINY = ModelSpec(name="tiny", hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2,
                 intermediate_size=128, vocab_size=1000)


class LinearProfile:
    """A stand-in profile: compute ∝ micro-batch (numpy arrays welcome), comm = payload / bw."""

    def __init__(self, block_s: float, bw: float) -> None:
        self.block_s, self.bw = block_s, bw

    def compute_time_s(self, phase: str, model: Any, seq_len: int, micro_batch: Any, unit: str = "model",
                       num_shards: int = 1) -> Any:
        scale = {"forward": 1.0, "backward": 2.0, "optimizer": 0.5}[phase]
        return scale * {"block": 1.0, "root": 3.0, "model": 10.0 / num_shards}[unit] * self.block_s * micro_batch

    def island_comm_time_s(self, op: str, island: IslandSpec, payload_bytes: Any) -> Any:
        return payload_bytes / self.bw


def _random_costs(rng: np.random.Generator, num_units: int) -> StepCosts:
    """Durations spanning compute-bound to communication-bound, with some exact zeros."""

    def dur(scale: float) -> float:
        return 0.0 if rng.random() < 0.1 else float(rng.exponential(scale))

    comm_scale = float(rng.choice([0.1, 1.0, 10.0]))
    units = tuple(UnitCosts(name=f"u{i}", forward_s=dur(1.0), backward_s=dur(2.0), all_gather_s=dur(comm_scale),
                            reduce_scatter_s=dur(2 * comm_scale)) for i in range(num_units))
    return StepCosts(units=units, optimizer_s=dur(0.5))


def test_fast_path_equals_graph_on_random_configurations() -> None:
    rng = np.random.default_rng(20240601)
    groups: dict[int, list[tuple[StepCosts, int]]] = {}
    for _ in range(N_CONFIGS):
        n = int(rng.integers(1, 6))
        groups.setdefault(n, []).append((_random_costs(rng, n), int(rng.integers(1, 5))))
    checked = 0
    for configs in groups.values():
        fast = fast_step(FastCosts.from_step_costs([c for c, _ in configs]))
        ks = np.array([k for _, k in configs])
        fast_t = fast.step_time_s(ks)
        for i, (costs, k) in enumerate(configs):
            graph = simulate_step(costs, accum_steps=k)
            assert fast_t[i] == pytest.approx(graph.step_time_s, rel=1e-9, abs=1e-12)
            assert fast.compute_busy_s(k)[i] == pytest.approx(graph.compute_busy_s, rel=1e-9, abs=1e-12)
            assert fast.comm_busy_s(k)[i] == pytest.approx(graph.comm_busy_s, rel=1e-9, abs=1e-12)
            checked += 1
    assert checked == N_CONFIGS


def test_model_fast_costs_match_step_costs() -> None:
    prof = LinearProfile(block_s=0.003, bw=5e8)
    gpu = get_gpu("H100-SXM5-80GB")
    island = IslandSpec(gpu=gpu, num_nodes=2, gpus_per_node=4, intra_link="nvlink4", inter_link="ib-ndr400")
    mbs = np.array([1, 2, 3, 8])
    fast = fast_step(model_fast_costs(TINY, prof, island, seq_len=128, micro_batches=mbs, ac="selective"))
    for i, m in enumerate(mbs):
        costs = step_costs(TINY, prof, island, seq_len=128, micro_batch=int(m), ac="selective")
        for k in (1, 3):
            assert fast.step_time_s(k)[i] == pytest.approx(simulate_step(costs, accum_steps=k).step_time_s, rel=1e-9)


def test_fast_costs_validation() -> None:
    ok = np.ones((2, 3))
    with pytest.raises(ValueError, match="shape"):
        FastCosts(forward_s=ok, backward_s=np.ones((2, 2)), all_gather_s=ok, reduce_scatter_s=ok,
                  optimizer_s=np.ones(3), unit_types=(0, 1))
    with pytest.raises(ValueError, match="unit_types"):
        FastCosts(forward_s=ok, backward_s=ok, all_gather_s=ok, reduce_scatter_s=ok,
                  optimizer_s=np.ones(3), unit_types=(0, 2))
    with pytest.raises(ValueError, match="share the unit count"):
        FastCosts.from_step_costs([StepCosts(units=(UnitCosts(name="a", forward_s=1, backward_s=1, all_gather_s=1,
                                                              reduce_scatter_s=1),) * n, optimizer_s=0)
                                   for n in (1, 2)])
