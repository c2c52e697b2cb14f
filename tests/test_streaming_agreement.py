"""Streaming DiLoCo: an exchange gates only the forward of its own layers (issue 22, item 10).

The closed form (`perfmodel.diloco.streaming.steady_state`, `no_block_condition`), the graph
(`simulate_streaming`, `simulate_diloco`), the tuner (`streaming_utilisation`,
`bandwidth_for_utilisation`, `tune_streaming`) and `shardmeter streaming
--bandwidth-for-utilisation` must tell one story; each test below compares two or more of them.
"""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfmodel.diloco.fragments import (
    Piece,
    StreamingConfig,
    fragment_pieces,
    utilisation_steps,
)
from perfmodel.diloco.graph import simulate_diloco
from perfmodel.diloco.streaming import (
    fragment_exchange_s,
    no_block_condition,
    simulate_streaming,
    steady_state,
)
from perfmodel.diloco.tuner import (
    BANDWIDTH_REL_TOL,
    WanLink,
    bandwidth_for_utilisation,
    run_streaming,
    steady_state_utilisation,
    streaming_utilisation,
    tune_streaming,
)
from perfmodel.spec.catalog import get_model

MODEL = get_model("Chinchilla-1B")  # 24 blocks, the published study's 1B shape


def _wan(gbit: float, dtype: str = "bf16", latency_s: float = 0.0) -> WanLink:
    return WanLink(num_islands=2, bw_bytes_per_s=gbit * 1e9 / 8, latency_s=latency_s, dtype=dtype)


def test_tau0_gates_only_the_fragments_own_layers_by_hand() -> None:
    """t = 1, F = 2, H = 4, τ = 0, whole-fragment exchanges of 0.5 s. Fragment 0 holds block 0
    (needed at the step's start), fragment 1 starts a quarter into the forward.

    after step 2: fragment 0 [2, 2.5]; step 3 waits for it: [2.5, 3.5], blocked 0.5
    step 4 [3.5, 4.5]; after it fragment 1 [4.5, 5]; step 5 runs its first quarter [4.5, 4.75],
    waits to 5, ends 5.75: blocked 0.25 (0.5 when the whole step waited)
    step 6 [5.75, 6.75]; fragment 0 [6.75, 7.25]; step 7 [7.25, 8.25]; step 8 [8.25, 9.25].
    """
    pieces = [
        [Piece(fragment=0, block=0, params=1, ready_fraction=1.0, need_fraction=0.0)],
        [Piece(fragment=1, block=1, params=1, ready_fraction=0.6, need_fraction=0.25)],
    ]
    config = StreamingConfig(num_fragments=2, sync_every=4, delay_steps=0)
    run = simulate_streaming(
        step_s=1.0, exchange_s=[0.5, 0.5], config=config, num_steps=8, pieces=pieces
    )
    assert run.total_s == 9.25 and run.blocked_s == 1.25
    assert [(e.fragment, e.start_s, e.end_s, e.blocked_s) for e in run.exchanges] == [
        (0, 2, 2.5, 0.5), (1, 4.5, 5, 0.25), (0, 6.75, 7.25, 0.5), (1, 9.25, 9.75, 0.0),
    ]
    # without layer positions the fragment is needed at the step's start (the old rule)
    blind = simulate_streaming(step_s=1.0, exchange_s=[0.5, 0.5], config=config, num_steps=8)
    assert blind.blocked_s == 1.5
    # the closed form: per period 0.5 + 0.25 blocked over H·t = 4
    state = steady_state(step_s=1.0, exchange_s=[0.5, 0.5], config=config, pieces=pieces)
    assert state.blocked_s == (0.5, 0.25) and state.utilisation == 4 / 4.75
    steps, first = utilisation_steps(config)
    long = simulate_streaming(
        step_s=1.0, exchange_s=[0.5, 0.5], config=config, num_steps=steps, pieces=pieces
    )
    assert long.utilisation(first) == pytest.approx(state.utilisation, rel=1e-12)
    assert not no_block_condition(step_s=1.0, exchange_s=[0.5, 0.5], config=config,
                                  need_fractions=[0.0, 0.25])
    assert no_block_condition(step_s=1.0, exchange_s=[0.0, 0.25], config=config,
                              need_fractions=[0.0, 0.25])


@pytest.mark.parametrize("sigma", [0.0, 0.7, 12.0])
def test_blocking_diloco_is_the_f1_case_of_every_form(sigma: float) -> None:
    """F = 1, τ = 0: the one fragment holds block 0, so it gates the whole next step. The DiLoCo
    graph, the streaming graph with layer positions, and the closed form all give
    H·t / (H·t + σ)."""
    step_s, h = 0.5, 20
    config = StreamingConfig(num_fragments=1, sync_every=h, delay_steps=0)
    pieces = fragment_pieces(MODEL, 1)
    exact = h * step_s / (h * step_s + sigma)
    diloco = simulate_diloco({"island": step_s}, inner_steps=h, sync_s=sigma, outer_rounds=3)
    steps, first = utilisation_steps(config)
    run = simulate_streaming(
        step_s=step_s, exchange_s=[sigma], config=config, num_steps=steps, pieces=pieces
    )
    state = steady_state(step_s=step_s, exchange_s=[sigma], config=config, pieces=pieces)
    assert h * step_s / diloco.outer_step_s == pytest.approx(exact, rel=1e-12)
    assert run.utilisation(first) == pytest.approx(exact, rel=1e-12)
    assert state.utilisation == pytest.approx(exact, rel=1e-12)


# Dyadic times keep every sum exact, so "exactly at the boundary" is exact.
_step = st.sampled_from([0.25, 0.5, 1.0, 2.0])
_need = st.sampled_from([0.0, 0.0625, 0.125, 0.25])


@settings(max_examples=120, deadline=None)
@given(step=_step, fragments=st.integers(1, 4), delay=st.integers(0, 3), slack=st.integers(0, 2),
       needs=st.lists(_need, min_size=4, max_size=4))
def test_whole_fragment_blocks_exactly_past_tau_plus_its_first_block(
    step: float, fragments: int, delay: int, slack: int, needs: list[float]
) -> None:
    """Without backward overlap, exchange f blocks iff it outlasts (τ + n_f)·t, n_f its first
    block's forward share: the simulation, `no_block_condition` and the closed form agree on both
    sides of the boundary."""
    interval = delay + 1 + slack  # exchanges τ + 1 steps apart or more: the closed form is exact
    config = StreamingConfig(
        num_fragments=fragments, sync_every=fragments * interval, delay_steps=delay
    )
    need = needs[:fragments]
    pieces = [
        [Piece(fragment=f, block=f, params=1, ready_fraction=1.0, need_fraction=n)]
        for f, n in enumerate(need)
    ]
    steps, first = utilisation_steps(config)
    windows = [(delay + n) * step for n in need]
    for extra in (0.0, step / 1024):
        exchange = [w + extra for w in windows]
        run = simulate_streaming(
            step_s=step, exchange_s=exchange, config=config, num_steps=steps, pieces=pieces
        )
        state = steady_state(step_s=step, exchange_s=exchange, config=config, pieces=pieces)
        late = extra > 0
        assert run.blocks == late == state.blocks
        assert no_block_condition(
            step_s=step, exchange_s=exchange, config=config, need_fractions=need
        ) is not late
        assert run.utilisation(first) == pytest.approx(state.utilisation, rel=1e-12)
        if late:
            assert state.blocked_s == pytest.approx([extra] * fragments, rel=1e-9)


def _configs() -> list[StreamingConfig]:
    out = []
    for over, pattern, delay, fragments in itertools.product(
        (False, True), ("contiguous", "strided"), (0, 1, 2), (1, 3, 8)
    ):
        h = fragments * (delay + 1) + (fragments if delay == 1 else 1)  # H need not be k·F
        config = StreamingConfig(num_fragments=fragments, sync_every=h, delay_steps=delay,
                                 overlap_backward=over, fragment_pattern=pattern)
        if config.min_send_spacing >= delay + 1:
            out.append(config)
    return out


CONFIGS = _configs()


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: (
    f"F{c.num_fragments}-H{c.sync_every}-tau{c.delay_steps}-{c.fragment_pattern[:3]}"
    f"-{'ovl' if c.overlap_backward else 'step'}"))
def test_closed_form_matches_the_simulated_run(config: StreamingConfig) -> None:
    """Real per-block pieces of Chinchilla-1B, with latency and an outer optimizer step: the
    closed-form steady state equals the simulated one at link speeds from badly blocking to
    idle, and both say the same about blocking."""
    assert len(CONFIGS) >= 30
    step_s, opt = 0.1, 2e-11
    for gbit in (0.5, 5.0, 50.0, 5000.0):
        wan = _wan(gbit, latency_s=0.004)
        simulated = streaming_utilisation(MODEL, step_s=step_s, wan=wan, config=config,
                                          opt_s_per_param=opt)
        closed = steady_state_utilisation(MODEL, step_s=step_s, wan=wan, config=config,
                                          opt_s_per_param=opt)
        assert closed == pytest.approx(simulated, rel=1e-9), gbit
        exchange = fragment_exchange_s(MODEL, config, dtype="bf16", num_islands=2,
                                       bw_bytes_per_s=wan.bw_bytes_per_s, latency_s=0.004)
        state = steady_state(step_s=step_s, exchange_s=exchange, config=config,
                             pieces=fragment_pieces(MODEL, config.num_fragments,
                                                    config.fragment_pattern))
        assert state.blocks == run_streaming(MODEL, step_s=step_s, wan=wan, config=config).blocks


def test_closed_form_refuses_schedules_where_exchanges_queue() -> None:
    config = StreamingConfig(num_fragments=4, sync_every=8, delay_steps=2)  # one every 2 steps
    with pytest.raises(ValueError, match="τ \\+ 1 = 3 steps apart"):
        steady_state(step_s=1.0, exchange_s=[0.1] * 4, config=config)


@pytest.mark.parametrize("over", [False, True])
@pytest.mark.parametrize("delay", [0, 1])
def test_bandwidth_for_utilisation_lands_on_the_closed_form_threshold(
    over: bool, delay: int
) -> None:
    """The tuner's bisection (on the simulator) and the closed form: at the bandwidth it returns
    the closed form reaches the target, a bisection tolerance below it does not."""
    config = StreamingConfig(num_fragments=8, sync_every=100, delay_steps=delay,
                             overlap_backward=over, fragment_pattern="strided")
    rows = bandwidth_for_utilisation(MODEL, step_s=0.1, wan=_wan(1.0), config=config)
    for row in rows:
        assert row.bw_bytes_per_s is not None
        at = steady_state_utilisation(MODEL, step_s=0.1, config=config,
                                      wan=_wan(1.0).with_bandwidth(row.bw_bytes_per_s))
        below = steady_state_utilisation(
            MODEL, step_s=0.1, config=config,
            wan=_wan(1.0).with_bandwidth(row.bw_bytes_per_s * (1 - 2 * BANDWIDTH_REL_TOL)))
        assert at >= row.target > below
        assert row.utilisation == pytest.approx(at, rel=1e-9)


def test_tau0_streaming_needs_less_than_diloco_without_backward_overlap() -> None:
    """Before this rule a τ = 0 fragment held the whole next step, so Streaming DiLoCo without
    backward overlap needed exactly DiLoCo's bandwidth; now the blocks before each fragment's
    first one compute meanwhile, and the closed form says by how much."""
    diloco = StreamingConfig(num_fragments=1, sync_every=100, delay_steps=0)
    streaming = StreamingConfig(num_fragments=8, sync_every=100, delay_steps=0,
                                fragment_pattern="contiguous")
    a, b = (bandwidth_for_utilisation(MODEL, step_s=0.1, wan=_wan(1.0), config=c, targets=(0.9,))
            for c in (diloco, streaming))
    assert b[0].bw_bytes_per_s is not None and a[0].bw_bytes_per_s is not None
    assert b[0].bw_bytes_per_s < a[0].bw_bytes_per_s
    # at DiLoCo's threshold the closed form gives streaming a higher utilisation, by the forward
    # time before each fragment's first block that the exchange no longer holds up
    wan = _wan(1.0).with_bandwidth(a[0].bw_bytes_per_s)
    needs = [frag[0].need_fraction for frag in fragment_pieces(MODEL, 8)]
    held = 100 * 0.1 * (1 / 0.9 - 1)
    assert steady_state_utilisation(MODEL, step_s=0.1, wan=wan, config=streaming) == (
        pytest.approx(100 * 0.1 / (100 * 0.1 + held - 0.1 * sum(needs)), rel=1e-6))


def test_tuner_recommendation_agrees_with_the_closed_form() -> None:
    """Every configuration the tuner passed over (shorter delay, or same delay and fewer
    fragments) blocks by the closed form, and the one it recommends does not."""
    wan, step_s, h = _wan(20.0, latency_s=0.01), 0.4, 48
    current = StreamingConfig(num_fragments=2, sync_every=h, delay_steps=0)
    tuning = tune_streaming(MODEL, step_s=step_s, wan=wan, current=current, max_delay_steps=3)
    chosen = tuning.config
    assert chosen is not None and chosen.delay_steps >= 1

    def blocks(config: StreamingConfig) -> bool:
        exchange = fragment_exchange_s(MODEL, config, dtype="bf16", num_islands=2,
                                       bw_bytes_per_s=wan.bw_bytes_per_s, latency_s=0.01)
        return steady_state(step_s=step_s, exchange_s=exchange, config=config,
                            pieces=fragment_pieces(MODEL, config.num_fragments)).blocks

    assert not blocks(chosen)
    checked = 0
    for delay in range(chosen.delay_steps + 1):
        last = MODEL.num_layers if delay < chosen.delay_steps else chosen.num_fragments - 1
        for fragments in range(1, last + 1):
            other = StreamingConfig(num_fragments=fragments, sync_every=h, delay_steps=delay)
            if other.min_send_spacing >= delay + 1:
                assert blocks(other), (fragments, delay)
                checked += 1
    assert checked > 5


@pytest.mark.parametrize("overlap_flag", ["--overlap-backward", "--no-overlap-backward"])
def test_cli_bandwidth_for_utilisation_agrees(run_cli, overlap_flag: str) -> None:
    """`shardmeter streaming --bandwidth-for-utilisation` prints the tuner's answer, and the
    closed form brackets it."""
    result = run_cli(
        "streaming", "Chinchilla-1B", "--bandwidth-for-utilisation", "--step-time-s", "0.1",
        "--fragments", "8", "--fragment-pattern", "strided", "--delay", "0", "--sync-every",
        "100", "--islands", "2", "--wan-latency-ms", "0", "--pseudo-gradient-dtype", "bf16",
        overlap_flag, "--utilisation", "0.5,0.9,0.99", "--format", "json",
    )
    assert result.code == 0, result.err
    out = json.loads(result.out)
    config = StreamingConfig(num_fragments=8, sync_every=100, delay_steps=0,
                             overlap_backward=overlap_flag == "--overlap-backward",
                             fragment_pattern="strided")
    rows = bandwidth_for_utilisation(MODEL, step_s=0.1, wan=_wan(1.0), config=config,
                                     targets=(0.5, 0.9, 0.99))
    assert [r["gbit_s"] for r in out["rows"]] == [r.gbit_s for r in rows]
    for row in out["rows"]:
        bw = row["gbit_s"] * 1e9 / 8
        at = steady_state_utilisation(MODEL, step_s=0.1, config=config, wan=_wan(1.0)
                                      .with_bandwidth(bw))
        below = steady_state_utilisation(MODEL, step_s=0.1, config=config, wan=_wan(1.0)
                                         .with_bandwidth(bw * (1 - 2 * BANDWIDTH_REL_TOL)))
        assert at >= row["utilisation"] > below
