"""perfmodel.analysis: regimes, micro-batch sweeps, the Streaming DiLoCo tuner."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from perfmodel.analysis import (
    COMM_BOUND,
    COMPUTE_BOUND,
    IDLE_FRACTION_THRESHOLD,
    MIXED,
    WanLink,
    analyse_step,
    batch_sweep,
    classify_regime,
    regime_changes,
    required_wan_bw_bytes_per_s,
    run_streaming,
    streaming_examples,
    transition_micro_batch,
    tune_streaming,
)
from perfmodel.catalog import get_gpu, get_model
from perfmodel.diloco import StreamingConfig
from perfmodel.fsdp import StepCosts, UnitCosts, simulate_step
from perfmodel.hardware import IslandSpec

MODEL = get_model("Llama-3.2-1B")


def test_classify_regime_thresholds() -> None:
    theta = IDLE_FRACTION_THRESHOLD
    assert classify_regime(10.0, 10.0 * (1 - theta), 2.0) == COMPUTE_BOUND
    assert classify_regime(10.0, 2.0, 10.0 * (1 - theta / 2)) == COMM_BOUND
    assert classify_regime(10.0, 9.5, 9.5) == MIXED  # both saturated
    assert classify_regime(10.0, 5.0, 5.0) == MIXED  # the critical path alternates
    labels = classify_regime(np.array([1.0, 1.0]), np.array([1.0, 0.1]), np.array([0.0, 1.0]))
    assert list(labels) == [COMPUTE_BOUND, COMM_BOUND]


def test_analyse_step_hand_example() -> None:
    """The two-unit step of test_fsdp: T 14.5, compute 9.5, comm 11 -> both idle > 10 %: mixed."""
    u0 = UnitCosts(name="u0", forward_s=2, backward_s=4, all_gather_s=1, reduce_scatter_s=1)
    u1 = UnitCosts(name="u1", forward_s=1, backward_s=2, all_gather_s=3, reduce_scatter_s=2)
    info = analyse_step(simulate_step(StepCosts(units=(u0, u1), optimizer_s=0.5)))
    assert info.regime == MIXED
    assert info.compute_idle_s == 5 and info.comm_idle_s == 3.5 and info.exposed_comm_s == 5
    assert info.largest_compute_gap_s == 2  # [5, 7] waiting for AG u1 bwd
    assert info.critical_comm_fraction == pytest.approx(8 / 14.5)  # AG u0, AG u1, AG u1 bwd, RS u0


class ConstantCommProfile:
    """Compute ∝ micro-batch, communication independent of it: the paper's batch-size effect."""

    def compute_time_s(self, phase: str, model: Any, seq_len: int, micro_batch: Any, unit: str = "model",
                       num_shards: int = 1) -> Any:
        scale = {"forward": 1.0, "backward": 2.0, "optimizer": 0.0}[phase]
        return scale * 1e-3 * np.asarray(micro_batch, dtype=float) * (1 if unit != "model" else 0)

    def island_comm_time_s(self, op: str, island: IslandSpec, payload_bytes: Any) -> Any:
        return 4e-3 if op == "all_gather" else 8e-3


def _island(nodes: int = 1, gpus: int = 8) -> IslandSpec:
    gpu = get_gpu("A100-PCIe-80GB")
    return IslandSpec(gpu=gpu, num_nodes=nodes, gpus_per_node=gpus, intra_link=gpu.intra_node_link,
                      inter_link=gpu.inter_node_link, nics_per_node=gpu.nics_per_node)


def test_batch_sweep_turns_compute_bound() -> None:
    sweep = batch_sweep(MODEL, ConstantCommProfile(), _island(), seq_len=512, micro_batches=[32, 1, 2, 4, 8, 16],
                        max_micro_batch=8)
    assert list(sweep["micro_batch"]) == [1, 2, 4, 8, 16, 32]
    assert sweep["bound"].iloc[0] == COMM_BOUND and sweep["bound"].iloc[-1] == COMPUTE_BOUND
    assert list(sweep["fits"]) == [True, True, True, True, False, False]
    m = transition_micro_batch(sweep)
    assert m is not None and sweep.set_index("micro_batch").loc[m, "bound"] == COMPUTE_BOUND
    assert regime_changes(sweep)[-1][2] == COMPUTE_BOUND
    tokens = sweep["micro_batch"] * 512 * 8
    assert np.allclose(sweep["tokens_per_s"], tokens / sweep["step_time_s"])
    assert sweep["relative_step_time"].iloc[0] == 1.0
    with pytest.raises(ValueError):
        batch_sweep(MODEL, ConstantCommProfile(), _island(), seq_len=512, micro_batches=[0, 1])


def _wan(gbit: float, dtype: str = "fp32", islands: int = 2) -> WanLink:
    return WanLink(num_islands=islands, bw_bytes_per_s=gbit * 1e9 / 8, latency_s=0.02, dtype=dtype)


def test_tuner_picks_fewest_fragments_then_shortest_delay() -> None:
    step_s = 2.0
    wan = _wan(5)
    tuning = tune_streaming(MODEL, step_s=step_s, wan=wan, max_delay_steps=3, max_sync_every=100)
    cfg = tuning.config
    assert cfg is not None and not tuning.result.blocks
    assert cfg.sync_every == cfg.num_fragments * cfg.delay_steps and cfg.delay_steps <= 3
    # Nothing with fewer fragments, or the same fragments and a shorter delay, avoids blocking.
    for f in range(1, cfg.num_fragments + 1):
        for d in range(1, 4 if f < cfg.num_fragments else cfg.delay_steps):
            other = StreamingConfig(num_fragments=f, sync_every=f * d, delay_steps=d)
            assert run_streaming(MODEL, step_s=step_s, wan=wan, config=other).blocks


def test_tuner_bounds_and_single_island() -> None:
    assert tune_streaming(MODEL, step_s=1.0, wan=_wan(0.001), max_delay_steps=2, max_sync_every=8).config is None
    one = tune_streaming(MODEL, step_s=1.0, wan=_wan(0.001, islands=1))
    assert one.config == StreamingConfig(num_fragments=1, sync_every=1, delay_steps=1)


def test_remedies_each_remove_blocking() -> None:
    step_s = 1.0
    examples = streaming_examples(MODEL, step_s=step_s, latency_s=0.02)
    slow, base, _ = examples["B"]
    tuning = tune_streaming(MODEL, step_s=step_s, wan=slow, current=base)
    text = " | ".join(tuning.remedies)
    for kind in ("more fragments", "longer delay", "faster WAN", "lower pseudo-gradient dtype"):
        assert kind in text
    needed = required_wan_bw_bytes_per_s(MODEL, step_s=step_s, wan=slow, config=base)
    faster = WanLink(num_islands=2, bw_bytes_per_s=needed * (1 + 1e-9), latency_s=slow.latency_s)
    assert not run_streaming(MODEL, step_s=step_s, wan=faster, config=base).blocks
    assert tune_streaming(MODEL, step_s=step_s, wan=faster, current=base).remedies == ()


@pytest.mark.parametrize("model_name", ["Llama-3.2-1B", "Llama-3-8B", "SmolLM-360M"])
def test_figure6_situations(model_name: str) -> None:
    model = get_model(model_name)
    cases = streaming_examples(model, step_s=3.0, latency_s=0.05)
    blocks = {k: run_streaming(model, step_s=3.0, wan=w, config=c, num_steps=c.sync_every + c.delay_steps + 1).blocks
              for k, (w, c, _) in cases.items()}
    assert blocks == {"A": False, "B": True, "C": False, "D": False}
    assert cases["C"][1].num_fragments == 2 * cases["B"][1].num_fragments
    assert cases["D"][1].delay_steps == cases["B"][1].delay_steps + 1
