"""perfmodel.sim.analysis: regimes, micro-batch sweeps, the Streaming DiLoCo tuner."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from perfmodel.diloco.examples import streaming_examples
from perfmodel.diloco.fragments import StreamingConfig
from perfmodel.diloco.tuner import (
    WanLink,
    bandwidth_for_utilisation,
    fabric_link,
    required_wan_bw_bytes_per_s,
    run_streaming,
    streaming_utilisation,
    tune_streaming,
)
from perfmodel.sim.analysis import (
    COMM_BOUND,
    COMPUTE_BOUND,
    IDLE_FRACTION_THRESHOLD,
    MIXED,
    analyse_step,
    batch_sweep,
    classify_regime,
    regime_changes,
    transition_micro_batch,
)
from perfmodel.sim.fsdp import StepCosts, UnitCosts, simulate_step
from perfmodel.spec import formulas
from perfmodel.spec.catalog import get_gpu, get_link, get_model
from perfmodel.spec.hardware import IslandSpec

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
    """The two-unit step of test_fsdp (torchtitan recipe): T 16.5, compute 9.5, comm 7 -> both
    idle > 10 %: mixed. Compute waits [0, 4] for AG u1 + AG u0 and [13, 16] for the RS tail."""
    u0 = UnitCosts(name="u0", forward_s=2, backward_s=4, all_gather_s=1, reduce_scatter_s=1)
    u1 = UnitCosts(name="u1", forward_s=1, backward_s=2, all_gather_s=3, reduce_scatter_s=2)
    info = analyse_step(simulate_step(StepCosts(units=(u0, u1), optimizer_s=0.5)))
    assert info.regime == MIXED
    assert info.compute_idle_s == 7 and info.comm_idle_s == 9.5 and info.exposed_comm_s == 7
    assert info.largest_compute_gap_s == 4  # [0, 4] waiting for the root's and u0's all_gathers
    assert info.critical_comm_fraction == pytest.approx(7 / 16.5)  # AG u1, AG u0, RS u0, RS u1


class ConstantCommProfile:
    """Compute ∝ micro-batch, communication independent of it: the paper's batch-size effect."""

    overlap_slowdown = 1.0
    recompute_factor = 1.0
    fsdp_copy_s_per_byte = 0.0
    tp_dispatch_s: dict[str, dict[str, float]] = {}

    def compute_time_s(
        self, phase: str, model: Any, seq_len: int, micro_batch: Any, unit: str = "model",
        num_shards: int = 1,
    ) -> Any:
        scale = {"forward": 1.0, "backward": 2.0, "optimizer": 0.0}[phase]
        return scale * 1e-3 * np.asarray(micro_batch, dtype=float) * (1 if unit != "model" else 0)

    def island_comm_time_s(self, op: str, island: IslandSpec, payload_bytes: Any) -> Any:
        return 4e-3 if op == "all_gather" else 8e-3


def _island(nodes: int = 1, gpus: int = 8) -> IslandSpec:
    gpu = get_gpu("A100-PCIe-80GB")
    return IslandSpec(gpu=gpu, num_nodes=nodes, gpus_per_node=gpus, intra_link=gpu.intra_node_link,
                      inter_link=gpu.inter_node_link, nics_per_node=gpu.nics_per_node)


def test_batch_sweep_turns_compute_bound() -> None:
    sweep = batch_sweep(
        MODEL, ConstantCommProfile(), _island(), seq_len=512, micro_batches=[32, 1, 2, 4, 8, 16],
        max_micro_batch=8,
    )
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


def test_tuner_keeps_h_and_picks_shortest_delay_then_fewest_fragments() -> None:
    step_s, wan = 2.0, _wan(5)
    current = StreamingConfig(num_fragments=2, sync_every=12, delay_steps=0)
    tuning = tune_streaming(MODEL, step_s=step_s, wan=wan, current=current, max_delay_steps=3)
    cfg = tuning.config
    assert cfg is not None and not tuning.result.blocks and cfg.sync_every == 12
    assert f"τ={cfg.delay_steps}" in tuning.reason and f"F={cfg.num_fragments}" in tuning.reason
    # Nothing with a shorter delay, or the same delay and fewer fragments, avoids blocking.
    for d in range(0, cfg.delay_steps + 1):
        for f in range(1, MODEL.num_layers + 1 if d < cfg.delay_steps else cfg.num_fragments):
            other = StreamingConfig(num_fragments=f, sync_every=12, delay_steps=d)
            assert run_streaming(MODEL, step_s=step_s, wan=wan, config=other).blocks, (f, d)
    # the recommendation is the first remedy printed, so table and remedies agree
    assert tuning.remedies[0].startswith(
        f"recommended: F={cfg.num_fragments}, τ={cfg.delay_steps} (H=12)"
    )


def test_tuner_bounds_explain_and_single_island() -> None:
    none = tune_streaming(MODEL, step_s=1.0, wan=_wan(0.001), max_delay_steps=2, sync_every=8)
    assert none.config is None and "cannot carry one pseudo-gradient per period" in none.reason
    one = tune_streaming(MODEL, step_s=1.0, wan=_wan(0.001, islands=1), sync_every=10)
    assert one.config == StreamingConfig(num_fragments=1, sync_every=10, delay_steps=0)
    capped = tune_streaming(MODEL, step_s=1.0, wan=_wan(100), sync_every=400, max_sync_every=50)
    assert capped.sync_every == 50 and "capped" in capped.reason


def test_remedies_each_remove_blocking() -> None:
    step_s = 1.0
    examples = streaming_examples(MODEL, step_s=step_s, latency_s=0.02)
    slow, base, _ = examples["B"]
    tuning = tune_streaming(MODEL, step_s=step_s, wan=slow, current=base)
    assert tuning.config is not None and tuning.config.sync_every == base.sync_every
    text = " | ".join(tuning.remedies)
    for kind in (
        "recommended", "more fragments", "longer delay", "faster link",
        "lower pseudo-gradient dtype",
    ):
        assert kind in text
    needed = required_wan_bw_bytes_per_s(MODEL, step_s=step_s, wan=slow, config=base)
    assert (
        run_streaming(MODEL, step_s=step_s, wan=slow.with_bandwidth(needed), config=base).blocks
        is False
    )
    assert run_streaming(
        MODEL, step_s=step_s, wan=slow.with_bandwidth(needed * 0.99), config=base
    ).blocks
    assert (
        tune_streaming(MODEL, step_s=step_s, wan=slow.with_bandwidth(needed), current=base).remedies
        == ()
    )


@pytest.mark.parametrize("model_name", ["Llama-3.2-1B", "Llama-3-8B", "SmolLM-360M"])
def test_figure6_situations(model_name: str) -> None:
    model = get_model(model_name)
    cases = streaming_examples(model, step_s=3.0, latency_s=0.05)
    blocks = {
        k: run_streaming(
            model, step_s=3.0, wan=w, config=c, num_steps=c.sync_every + c.delay_steps + 1
        ).blocks
        for k, (w, c, _) in cases.items()
    }
    assert blocks == {"A": False, "B": True, "C": False, "D": False}
    assert cases["C"][1].num_fragments == 2 * cases["B"][1].num_fragments
    assert cases["D"][1].delay_steps == cases["B"][1].delay_steps + 1


def test_bandwidth_for_utilisation_matches_blocking_diloco_closed_form() -> None:
    """F = 1, τ = 0, no overlap: CU = H·t / (H·t + σ), so σ = H·t·(1/CU − 1) and the bandwidth is
    σ inverted (formulas.bandwidth_for_sync_s). The bisection must land on it."""
    config = StreamingConfig(num_fragments=1, sync_every=50, delay_steps=0)
    wan = _wan(1, dtype="bf16", islands=3)
    rows = bandwidth_for_utilisation(MODEL, step_s=0.4, wan=wan, config=config, targets=(0.5, 0.9))
    payload = formulas.payload_bytes(MODEL.total_params, "bf16")
    for row in rows:
        sigma = 50 * 0.4 * (1 / row.target - 1)
        exact = formulas.bandwidth_for_sync_s(3, payload, sigma, wan.latency_s)
        assert row.bw_bytes_per_s == pytest.approx(exact, rel=2e-4)
        assert (
            row.utilisation >= row.target
            and row.gbit_s == pytest.approx(row.bw_bytes_per_s * 8e-9)
        )


def test_bandwidth_for_utilisation_properties() -> None:
    step_s = 0.5
    plain = StreamingConfig(num_fragments=4, sync_every=40, delay_steps=1)
    over = StreamingConfig(num_fragments=4, sync_every=40, delay_steps=1, overlap_backward=True)
    wan, fp4 = _wan(1, dtype="bf16"), _wan(1, dtype="fp4")
    cases = [(wan, plain), (wan, over), (fp4, over)]
    a, b, c = (
        bandwidth_for_utilisation(MODEL, step_s=step_s, wan=w, config=cfg) for w, cfg in cases
    )
    for rows, (link, cfg) in zip((a, b, c), cases, strict=True):
        bws = [r.bw_bytes_per_s for r in rows]
        # more utilisation, more bandwidth
        assert all(x is not None for x in bws) and bws == sorted(bws)
        for r in rows:  # just below the answer the target is missed
            below = streaming_utilisation(
                MODEL, step_s=step_s, wan=link.with_bandwidth(r.bw_bytes_per_s * 0.99), config=cfg
            )
            assert below < r.target
    # overlap helps
    assert all(y.bw_bytes_per_s <= x.bw_bytes_per_s for x, y in zip(a, b, strict=True))
    # fp4 + scales is 0.53 B/value against 2 B for bf16
    assert all(z.bw_bytes_per_s < y.bw_bytes_per_s / 2.5 for y, z in zip(b, c, strict=True))
    # latency alone: two islands 2 s apart cannot reach 99 % with 0.5 s steps and τ = 1
    far = WanLink(num_islands=2, bw_bytes_per_s=1, latency_s=2.0, dtype="bf16")
    far_rows = bandwidth_for_utilisation(
        MODEL, step_s=step_s, wan=far, config=plain, targets=(0.99,)
    )
    assert far_rows[0].bw_bytes_per_s is None


def test_fabric_link_for_islands_of_one_cluster() -> None:
    """Same-cluster islands sync over the node's inter-node link (bus bandwidth x NICs), the
    planner's rule (perfmodel.tables.cluster_fabric), not over the WAN."""
    gpu = get_gpu("H100-SXM5-80GB")
    link = get_link(gpu.inter_node_link)
    fabric = fabric_link(gpu.name, num_islands=2, dtype="bf16")
    assert fabric.kind == "fabric" and fabric.latency_s == link.latency_s
    assert fabric.bw_bytes_per_s == link.busbw_bytes_per_s * (
        gpu.nics_per_node if link.per_nic else 1
    )
    fast = run_streaming(
        MODEL,
        step_s=0.5,
        wan=fabric,
        config=StreamingConfig(num_fragments=1, sync_every=10, delay_steps=0),
    )
    slow = run_streaming(MODEL, step_s=0.5, wan=_wan(1, dtype="bf16"), config=StreamingConfig(
        num_fragments=1, sync_every=10, delay_steps=0))
    assert fast.blocked_s < slow.blocked_s
