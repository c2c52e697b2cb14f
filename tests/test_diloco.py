"""perfmodel.diloco: blocking DiLoCo and Streaming DiLoCo."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel.catalog import get_model
from perfmodel.diloco import (
    StreamingConfig,
    fragment_exchange_s,
    fragment_params,
    no_block_condition,
    outer_sync_s,
    pseudo_gradient_bytes,
    simulate_diloco,
    simulate_streaming,
    streaming_steps_to_simulate,
)


def test_outer_sync_formula() -> None:
    assert outer_sync_s(num_islands=1, payload_bytes=1e9, bw_bytes_per_s=1e6, latency_s=1) == 0
    # M=4: 2·3/4·P/bw + 2·3·lat
    assert outer_sync_s(num_islands=4, payload_bytes=8e9, bw_bytes_per_s=1e9, latency_s=0.05) == pytest.approx(
        12 + 0.3)
    with pytest.raises(ValueError):
        outer_sync_s(num_islands=2, payload_bytes=1, bw_bytes_per_s=0, latency_s=0)


def test_pseudo_gradient_bytes() -> None:
    model = get_model("Llama-3-8B")
    assert pseudo_gradient_bytes(model, "fp32") == 4 * model.total_params
    assert pseudo_gradient_bytes(model, "int8") == model.total_params
    with pytest.raises(ValueError):
        pseudo_gradient_bytes(model, "fp8")


def test_heterogeneous_islands_wait_for_the_slowest() -> None:
    """H=4 steps of 1.0 s and 1.5 s, σ = 2: the outer step takes 4·1.5 + 2 = 8 s."""
    result = simulate_diloco({"fast": 1.0, "slow": 1.5}, inner_steps=4, sync_s=2.0, outer_rounds=3)
    assert result.outer_step_s == 8.0
    assert result.schedule.makespan_s == 24.0
    assert result.amortised_step_s == 2.0 and result.amortised_sync_s == 0.5
    assert result.island_wait_s == {"fast": 4.0, "slow": 2.0}
    second_round = [iv for iv in result.schedule.intervals if iv.task.name == "step 5"]
    assert [iv.start_s for iv in second_round] == [8.0, 8.0]


def test_fragments_are_contiguous_layer_groups() -> None:
    model = get_model("Llama-3.2-1B")
    for f in (1, 3, 5, model.num_layers):
        sizes = fragment_params(model, f)
        assert len(sizes) == f and sum(sizes) == model.total_params
    sizes = fragment_params(model, 3)  # 16 layers: 6, 5, 5 blocks
    assert sizes[1] == 5 * model.block_params
    assert sizes[0] == 6 * model.block_params + model.embedding_params
    with pytest.raises(ValueError):
        fragment_params(model, model.num_layers + 1)


def test_streaming_by_hand() -> None:
    """t = 1, F = 2, H = 4 (a fragment every 2 steps), τ = 1, exchanges 1.5 s and 0.5 s.

    after step 2: fragment 0 [2, 3.5], needed by step 4 (ready at 3): blocks 0.5, step 4 [3.5, 4.5]
    after step 4: fragment 1 [4.5, 5], needed by step 6 (ready at 5.5): in time
    after step 6: fragment 0 [6.5, 8], needed by step 8 (ready at 7.5): blocks 0.5, step 8 [8, 9]
    after step 8: fragment 1 [9, 9.5], never needed. Total 9 s, blocked 1 s.
    """
    config = StreamingConfig(num_fragments=2, sync_every=4, delay_steps=1)
    run = simulate_streaming(step_s=1.0, exchange_s=[1.5, 0.5], config=config, num_steps=8)
    assert run.total_s == 9 and run.blocked_s == 1 and run.blocks
    assert [(e.fragment, e.after_step, e.needed_by_step, e.start_s, e.end_s, e.blocked_s) for e in run.exchanges] == [
        (0, 2, 4, 2, 3.5, 0.5), (1, 4, 6, 4.5, 5, 0), (0, 6, 8, 6.5, 8, 0.5), (1, 8, 10, 9, 9.5, 0)]


def test_streaming_config_validation() -> None:
    with pytest.raises(ValueError, match="multiple"):
        StreamingConfig(num_fragments=3, sync_every=4, delay_steps=1)
    with pytest.raises(ValueError):
        StreamingConfig(num_fragments=0, sync_every=4, delay_steps=1)
    with pytest.raises(ValueError, match="one exchange duration per fragment"):
        simulate_streaming(step_s=1.0, exchange_s=[1.0], config=StreamingConfig(num_fragments=2, sync_every=2,
                                                                                 delay_steps=0), num_steps=4)


# Dyadic step times keep every sum exact, so "exactly at the boundary" is exact.
_step = st.sampled_from([0.25, 0.5, 1.0, 1.5, 2.0, 3.75])


@settings(max_examples=150, deadline=None)
@given(step=_step, fragments=st.integers(1, 4), delay=st.integers(0, 4), interval=st.integers(1, 4))
def test_streaming_blocks_exactly_when_an_exchange_outlasts_its_window(step: float, fragments: int, delay: int,
                                                                        interval: int) -> None:
    """With τ <= H/F each exchange starts on an idle outer stream: it blocks iff it lasts longer
    than τ steps. Checked on both sides of the boundary."""
    delay = min(delay, interval)
    config = StreamingConfig(num_fragments=fragments, sync_every=fragments * interval, delay_steps=delay)
    steps = streaming_steps_to_simulate(config)
    window = delay * step
    at = simulate_streaming(step_s=step, exchange_s=[window] * fragments, config=config, num_steps=steps)
    assert not at.blocks and at.total_s == steps * step
    over = window + step / 1024
    late = simulate_streaming(step_s=step, exchange_s=[over] * fragments, config=config, num_steps=steps)
    assert late.blocks
    assert late.blocked_s == pytest.approx(sum(e.blocked_s for e in late.exchanges))
    assert no_block_condition(step_s=step, exchange_s=[window] * fragments, config=config)
    assert not no_block_condition(step_s=step, exchange_s=[over] * fragments, config=config)


def test_fragment_exchange_uses_outer_sync() -> None:
    model = get_model("Llama-3.2-1B")
    times = fragment_exchange_s(model, 2, dtype="bf16", num_islands=3, bw_bytes_per_s=1e9, latency_s=0.01)
    for params, t in zip(fragment_params(model, 2), times, strict=True):
        assert t == pytest.approx(outer_sync_s(num_islands=3, payload_bytes=2 * params, bw_bytes_per_s=1e9,
                                               latency_s=0.01))
