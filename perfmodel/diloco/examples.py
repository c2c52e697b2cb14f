"""The four Streaming DiLoCo situations of the ShardMeter paper's figure 6 (A fast WAN, B slow
WAN that blocks, C and D its two remedies), derived for any model from its inner step time."""

from __future__ import annotations

from dataclasses import replace

from perfmodel.diloco.fragments import StreamingConfig, fragment_params
from perfmodel.diloco.tuner import WanLink
from perfmodel.spec import formulas
from perfmodel.spec.arch import ModelSpec

EXAMPLE_MODEL = "Llama-3-8B"
"""Workload of the figure 6 examples (any model works; fragment sizes differ by at most a block
plus the embedding or LM head)."""
EXAMPLE_GPU = "H100-SXM5-80GB"
"""GPU of the figure 6 examples."""
EXAMPLE_BASE = StreamingConfig(num_fragments=3, sync_every=6, delay_steps=2)
"""Situation A/B: three fragments, one sent every two inner steps (paper: six steps, an outer step
every two iterations); exchanges start after the step, as in the ShardMeter paper's figure 6, and
are merged when the forward reaches the fragment's first block (at the step's start for fragment
0, the largest: it holds block 0 and the embedding, so its window is exactly τ steps)."""
SLOW_EXCHANGE_STEPS = 2.5
"""B's WAN is sized so the largest of the base fragments needs 2.5 inner steps: longer than the
2-step window (blocks), shorter than a 3-step one (D) and, halved by doubling F, within 2 (C)."""
FAST_WAN_FACTOR = 10.0
"""A's WAN is this much faster than B's."""


def streaming_examples(
    model: ModelSpec, *, step_s: float, latency_s: float, num_islands: int = 2, dtype: str = "fp32"
) -> dict[str, tuple[WanLink, StreamingConfig, str]]:
    """The four situations of the paper's figure 6 for `model` at inner step time `step_s`:
    A fast WAN (no blocking), B slow WAN (blocks), C = B with twice the fragments, D = B with a
    3-step delay. The WAN bandwidths are derived from the step time (SLOW_EXCHANGE_STEPS)."""
    if num_islands < 2:
        raise ValueError("the examples need >= 2 islands (one island exchanges nothing)")
    base = EXAMPLE_BASE
    if formulas.sync_time_s(num_islands, 0.0, 1.0, latency_s) >= SLOW_EXCHANGE_STEPS * step_s:
        raise ValueError(
            f"WAN latency {latency_s} s alone outlasts {SLOW_EXCHANGE_STEPS} inner "
            f"steps of {step_s} s"
        )
    largest = formulas.payload_bytes(max(fragment_params(model, base.num_fragments)), dtype)
    slow_bw = float(
        formulas.bandwidth_for_sync_s(num_islands, largest, SLOW_EXCHANGE_STEPS * step_s, latency_s)
    )
    slow = WanLink(
        num_islands=num_islands, bw_bytes_per_s=slow_bw, latency_s=latency_s, dtype=dtype
    )
    fast = slow.with_bandwidth(FAST_WAN_FACTOR * slow_bw)
    more = replace(base, num_fragments=2 * base.num_fragments, sync_every=2 * base.sync_every)
    longer = replace(base, sync_every=base.num_fragments * 3, delay_steps=3)
    return {
        "A": (fast, base, "fast WAN: every exchange fits its 2-step window"),
        "B": (
            slow,
            base,
            f"slow WAN: a fragment needs {SLOW_EXCHANGE_STEPS} steps, the window is 2: "
            "training blocks",
        ),
        "C": (
            slow,
            more,
            "remedy 1: twice the fragments halve each exchange (full exchange 6 -> 12 steps)",
        ),
        "D": (
            slow,
            longer,
            "remedy 2: delay 2 -> 3 steps leaves the exchange more time (full "
            "exchange 6 -> 9 steps)",
        ),
    }
