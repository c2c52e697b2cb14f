"""perfmodel.diloco.graph: blocking DiLoCo and Streaming DiLoCo."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel.diloco.fragments import (
    Piece,
    StreamingConfig,
    fragment_blocks,
    fragment_params,
    fragment_pieces,
    streaming_steps_to_simulate,
    utilisation_steps,
)
from perfmodel.diloco.graph import (
    OUTER_OPTIMIZER_BYTES_PER_PARAM,
    outer_optimizer_s,
    pseudo_gradient_bytes,
    simulate_diloco,
)
from perfmodel.diloco.streaming import fragment_exchange_s, no_block_condition, simulate_streaming
from perfmodel.spec import formulas
from perfmodel.spec.catalog import get_model
from perfmodel.spec.recipe import OuterRecipe


def test_pseudo_gradient_bytes_use_the_shared_payload_formula() -> None:
    model = get_model("Llama-3-8B")
    n = model.total_params
    assert pseudo_gradient_bytes(model, "fp32") == 4 * n
    # quantised: one fp32 scale per 128 values on top of 1 B (int8) or 0.5 B (fp4) per value
    assert pseudo_gradient_bytes(model, "int8") == n + 4 * -(-n // 128)
    assert pseudo_gradient_bytes(model, "fp4") == 0.5 * n + 4 * -(-n // 128)
    with pytest.raises(ValueError):
        pseudo_gradient_bytes(model, "fp8")


def test_heterogeneous_islands_wait_for_the_slowest() -> None:
    """H=4 steps of 1.0 s and 1.5 s, σ = 2: the outer step takes 4·1.5 + 2 = 8 s."""
    result = simulate_diloco({"fast": 1.0, "slow": 1.5}, inner_steps=4, sync_s=2.0, outer_rounds=3)
    assert result.outer_step_s == 8.0
    with_opt = simulate_diloco(
        {"fast": 1.0, "slow": 1.5}, inner_steps=4, sync_s=2.0, outer_opt_s=0.25
    )
    assert with_opt.outer_step_s == 8.25 and with_opt.island_wait_s == {"fast": 4.0, "slow": 2.0}
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
    assert [
        (e.fragment, e.after_step, e.needed_by_step, e.start_s, e.end_s, e.blocked_s)
        for e in run.exchanges
    ] == [
        (0, 2, 4, 2, 3.5, 0.5),
        (1, 4, 6, 4.5, 5, 0),
        (0, 6, 8, 6.5, 8, 0.5),
        (1, 8, 10, 9, 9.5, 0),
    ]


def test_streaming_config_validation() -> None:
    with pytest.raises(ValueError, match="fragment_pattern"):
        StreamingConfig(num_fragments=3, sync_every=4, delay_steps=1, fragment_pattern="random")
    with pytest.raises(ValueError):
        StreamingConfig(num_fragments=0, sync_every=4, delay_steps=1)
    with pytest.raises(ValueError, match="one exchange duration per fragment"):
        simulate_streaming(
            step_s=1.0,
            exchange_s=[1.0],
            config=StreamingConfig(num_fragments=2, sync_every=2, delay_steps=0),
            num_steps=4,
        )


# Dyadic step times keep every sum exact, so "exactly at the boundary" is exact.
_step = st.sampled_from([0.25, 0.5, 1.0, 1.5, 2.0, 3.75])


@settings(max_examples=150, deadline=None)
@given(step=_step, fragments=st.integers(1, 4), delay=st.integers(0, 4), interval=st.integers(1, 4))
def test_streaming_blocks_exactly_when_an_exchange_outlasts_its_window(
    step: float, fragments: int, delay: int, interval: int
) -> None:
    """With τ <= H/F each exchange starts on an idle outer stream: it blocks iff it lasts longer
    than τ steps. Checked on both sides of the boundary."""
    delay = min(delay, interval)
    config = StreamingConfig(
        num_fragments=fragments, sync_every=fragments * interval, delay_steps=delay
    )
    steps = streaming_steps_to_simulate(config)
    window = delay * step
    at = simulate_streaming(
        step_s=step, exchange_s=[window] * fragments, config=config, num_steps=steps
    )
    assert not at.blocks and at.total_s == steps * step
    over = window + step / 1024
    late = simulate_streaming(
        step_s=step, exchange_s=[over] * fragments, config=config, num_steps=steps
    )
    assert late.blocks
    assert late.blocked_s == pytest.approx(sum(e.blocked_s for e in late.exchanges))
    assert no_block_condition(step_s=step, exchange_s=[window] * fragments, config=config)
    assert not no_block_condition(step_s=step, exchange_s=[over] * fragments, config=config)


def test_fragment_exchange_uses_the_shared_sync_formula() -> None:
    model = get_model("Llama-3.2-1B")
    times = fragment_exchange_s(
        model, 2, dtype="fp4", num_islands=3, bw_bytes_per_s=1e9, latency_s=0.01
    )
    for params, t in zip(fragment_params(model, 2), times, strict=True):
        # 2·(M−1)/M·P/bw + 2·(M−1)·lat with P = payload incl. fp4 scales
        payload = 0.5 * params + 4 * -(-params // 128)
        assert t == pytest.approx(4 / 3 * payload / 1e9 + 4 * 0.01)
        assert t == pytest.approx(
            formulas.sync_time_s(3, formulas.payload_bytes(params, "fp4"), 1e9, 0.01)
        )


def test_h_not_a_multiple_of_f_syncs_every_fragment_every_h_steps() -> None:
    config = StreamingConfig(num_fragments=3, sync_every=10, delay_steps=1)
    sends = {s: config.sends_after(s) for s in range(1, 31)}
    assert [s for s, fs in sends.items() if fs] == [4, 7, 10, 14, 17, 20, 24, 27, 30]
    for f in range(3):
        steps = [s for s, fs in sends.items() if f in fs]
        assert all(b - a == 10 for a, b in zip(steps, steps[1:], strict=False))
    run = simulate_streaming(step_s=1.0, exchange_s=[0.5, 0.5, 0.5], config=config, num_steps=30)
    assert not run.blocks and len(run.exchanges) == 9
    assert {e.needed_by_step - e.after_step for e in run.exchanges} == {2}
    many = StreamingConfig(num_fragments=3, sync_every=2, delay_steps=0)  # F > H: two at once
    assert [many.sends_after(s) for s in (1, 2, 3, 4)] == [[0], [1, 2], [0], [1, 2]]


def test_strided_and_contiguous_fragments() -> None:
    assert fragment_blocks(7, 3) == ((0, 1, 2), (3, 4), (5, 6))
    assert fragment_blocks(7, 3, "strided") == ((0, 3, 6), (1, 4), (2, 5))
    model = get_model("Llama-3.2-1B")  # 16 blocks
    strided = fragment_params(model, 4, "strided")
    assert sum(strided) == model.total_params
    # block 0 (embedding) and the last block (norm + LM head) both sit in strided fragment 0 / 3
    assert strided[0] == 4 * model.block_params + model.embedding_params
    assert strided[3] == 4 * model.block_params + model.norm_params + model.lm_head_params
    pieces = fragment_pieces(model, 4, "strided")
    assert [p.block for p in pieces[1]] == [1, 5, 9, 13]
    # deeper blocks finish backward earlier and start forward later
    assert pieces[1][0].ready_fraction > pieces[1][-1].ready_fraction
    assert pieces[1][0].need_fraction < pieces[1][-1].need_fraction
    assert pieces[0][0].ready_fraction == 1.0 and pieces[0][0].need_fraction == 0.0
    assert all(
        1 / 3 < p.ready_fraction <= 1 and 0 <= p.need_fraction < 1 / 3 for f in pieces for p in f
    )


def test_backward_overlap_by_hand() -> None:
    """t = 1, F = 1, H = 2, τ = 0, one 1 s transfer; the piece exists after half of the step and
    is needed a quarter into the next one.

    overlap: sent at 1.5 (half of step 2), done 2.5; step 3 runs [2, 2.25], waits to 2.5, ends 3.25.
    no overlap: sent at 2, done 3; step 3 runs [3, 4]. Blocked 0.25 s vs 1 s.
    """
    piece = [[Piece(fragment=0, block=1, params=1, ready_fraction=0.5, need_fraction=0.25)]]
    over = StreamingConfig(num_fragments=1, sync_every=2, delay_steps=0, overlap_backward=True)
    run = simulate_streaming(step_s=1.0, exchange_s=[[1.0]], config=over, num_steps=3, pieces=piece)
    assert run.total_s == 3.25 and run.blocked_s == 0.25 and run.split_steps
    assert [(e.start_s, e.end_s, e.blocked_s) for e in run.exchanges] == [(1.5, 2.5, 0.25)]
    plain = StreamingConfig(num_fragments=1, sync_every=2, delay_steps=0)
    run = simulate_streaming(step_s=1.0, exchange_s=[1.0], config=plain, num_steps=3)
    assert run.total_s == 4.0 and run.blocked_s == 1.0 and not run.split_steps


def test_outer_optimizer_runs_before_the_needing_step() -> None:
    """Blocking DiLoCo as a stream: H = 2, σ = 1, outer step 0.5 s: step 3 starts at 2 + 1 + 0.5."""
    config = StreamingConfig(num_fragments=1, sync_every=2, delay_steps=0)
    run = simulate_streaming(
        step_s=1.0, exchange_s=[1.0], config=config, num_steps=3, outer_opt_s=[0.5]
    )
    assert run.total_s == 4.5 and run.outer_optimizer_s == 0.5 and run.blocked_s == 1.0
    model = get_model("Llama-3.2-1B")
    t = outer_optimizer_s(model.total_params, num_gpus=8, hbm_bytes_per_s=2e12)
    assert t == pytest.approx(model.total_params / 8 * OUTER_OPTIMIZER_BYTES_PER_PARAM / 2e12)


@pytest.mark.parametrize("sigma", [0.0, 3.0, 40.0, 500.0])
def test_blocking_diloco_utilisation_is_ht_over_ht_plus_sigma(sigma: float) -> None:
    config = StreamingConfig(num_fragments=1, sync_every=20, delay_steps=0)
    steps, first = utilisation_steps(config)
    run = simulate_streaming(step_s=0.5, exchange_s=[sigma], config=config, num_steps=steps)
    assert run.utilisation(first) == pytest.approx(20 * 0.5 / (20 * 0.5 + sigma))


def test_overlap_never_hurts_and_streaming_beats_blocking() -> None:
    model = get_model("Llama-3.2-1B")
    cu = {}
    for name, (f, tau, over) in {"diloco": (1, 0, False), "streaming": (4, 0, False),
                                 "delayed": (4, 1, False), "overlap": (4, 1, True)}.items():
        config = StreamingConfig(
            num_fragments=f, sync_every=20, delay_steps=tau, overlap_backward=over
        )
        ex = fragment_exchange_s(model, config, dtype="bf16", num_islands=2, bw_bytes_per_s=1e9,
                                 latency_s=0.01)
        steps, first = utilisation_steps(config)
        run = simulate_streaming(step_s=1.0, exchange_s=ex, config=config, num_steps=steps,
                                 pieces=fragment_pieces(model, f))
        cu[name] = run.utilisation(first)
    # τ = 0 streaming moves the same bytes as DiLoCo, but fragments 1..F-1 are merged only when
    # the forward reaches their first block (the earlier blocks compute meanwhile)
    assert cu["diloco"] < cu["streaming"] < cu["delayed"] <= cu["overlap"] <= 1.0


def test_config_from_recipe() -> None:
    outer = OuterRecipe(inner_steps=30, num_fragments=4, delay_steps=2, overlap_backward=False,
                        fragment_pattern="strided")
    assert StreamingConfig.from_recipe(outer) == StreamingConfig(
        num_fragments=4, sync_every=30, delay_steps=2, overlap_backward=False,
        fragment_pattern="strided",
    )
