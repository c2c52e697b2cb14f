"""Streaming DiLoCo questions answered with the simulator (paper §IV-D; DESIGN §2 and §3).

* `streaming_utilisation`: compute utilisation of a fragment schedule on a sync link, in steady
  state (inner-step work / wall time over one period of H steps after two warm-up periods);
  `steady_state_utilisation` is its closed form (`perfmodel.diloco.streaming.steady_state`) from
  the same inputs, for schedules whose exchanges are at least τ + 1 steps apart.
* `bandwidth_for_utilisation`: the link bandwidth that reaches 50/80/90/95/99 % utilisation,
  found by bisection on the simulator (a max-plus schedule is monotone in every duration, so
  utilisation never falls when bandwidth rises); `None` where latency alone already prevents it.
* `tune_streaming`: ONE recommendation — at the H asked for, the shortest delay τ, then the fewest
  fragments F, that never block — plus single-knob alternatives for a blocking configuration, and
  a reason when nothing within the bounds works.
* the four situations of the ShardMeter paper's figure 6 live in `perfmodel.diloco.examples`.

The sync link (`WanLink`) is the topology: islands in different clusters sync over the slowest
WAN uplink; islands of one cluster over that cluster's inter-node fabric (`fabric_link`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from perfmodel.diloco.fragments import (
    DEFAULT_SEQ_LEN,
    Piece,
    StreamingConfig,
    fragment_pieces,
    streaming_steps_to_simulate,
    utilisation_steps,
)
from perfmodel.diloco.graph import OUTER_OPTIMIZER_BYTES_PER_PARAM
from perfmodel.diloco.streaming import (
    StreamingResult,
    fragment_exchange_s,
    simulate_streaming,
    steady_state,
)
from perfmodel.facts import cluster_fabric
from perfmodel.spec import formulas
from perfmodel.spec.arch import ModelSpec
from perfmodel.spec.errors import UserInputError
from perfmodel.spec.recipe import PSEUDO_GRADIENT_DTYPES

DEFAULT_MAX_DELAY_STEPS = 5
"""Streaming DiLoCo overlaps of up to 5 inner steps kept the loss close to the blocking
baseline (Douillard et al. 2025, §3.3.2); longer delays merge staler fragments. Assumption."""
DEFAULT_MAX_SYNC_EVERY = 100
"""Each fragment synchronised at least every 100 inner steps (the H of the Streaming DiLoCo
experiments); rarer synchronisation lets replicas drift apart. Assumption."""
UTILISATION_TARGETS = (0.5, 0.8, 0.9, 0.95, 0.99)
"""Compute utilisations of the published bandwidth study (Douillard et al. 2025, Table 4)."""
BANDWIDTH_RANGE_BYTES_PER_S = (1e3, 1e15)
"""Bisection bracket: 8 kbit/s to 8 Pbit/s."""
BANDWIDTH_REL_TOL = 1e-4
"""Bisection stops when the bracket is narrower than this ratio."""


@dataclass(frozen=True, kw_only=True, slots=True)
class WanLink:
    """The link a pseudo-gradient crosses between islands (the sync topology)."""

    num_islands: int
    """M islands exchanging."""
    bw_bytes_per_s: float
    """Slowest uplink (cross-cluster) or the cluster's inter-node link (same cluster), bytes/s."""
    latency_s: float
    """Largest latency, seconds."""
    dtype: str = "fp32"
    """Pseudo-gradient dtype (fp32, bf16, int8, fp4)."""
    kind: str = "wan"
    """'wan' (islands in different clusters) or 'fabric' (islands of one cluster)."""

    def __post_init__(self) -> None:
        if self.num_islands < 1 or not self.bw_bytes_per_s > 0 or self.latency_s < 0:
            raise ValueError("need num_islands >= 1, bandwidth > 0 and latency >= 0")
        if self.dtype not in PSEUDO_GRADIENT_DTYPES:
            raise ValueError(f"dtype must be one of {PSEUDO_GRADIENT_DTYPES}, got {self.dtype!r}")
        if self.kind not in ("wan", "fabric"):
            raise ValueError(f"kind must be 'wan' or 'fabric', got {self.kind!r}")

    def with_bandwidth(self, bw_bytes_per_s: float) -> WanLink:
        return replace(self, bw_bytes_per_s=bw_bytes_per_s)


def fabric_link(gpu_name: str, *, num_islands: int, dtype: str) -> WanLink:
    """Islands of one cluster sync over its inter-node fabric (DESIGN §3), as the planner's σ
    does: `perfmodel.tables.cluster_fabric` is the one home of that link's bandwidth and latency."""

    found = cluster_fabric(gpu_name)
    if found is None:
        raise UserInputError(f"no catalog inter-node link for GPU {gpu_name!r}",
                             hint="sync over the WAN instead (drop --islands-same-cluster).")
    bw, latency = found
    return WanLink(num_islands=num_islands, bw_bytes_per_s=bw, latency_s=latency, dtype=dtype,
                   kind="fabric")


def outer_opt_s_per_param(*, num_gpus: int, hbm_bytes_per_s: float) -> float:
    """Seconds of Nesterov outer step per parameter on an island of `num_gpus` GPUs."""
    return OUTER_OPTIMIZER_BYTES_PER_PARAM / (num_gpus * hbm_bytes_per_s)


def _inputs(
    model: ModelSpec, *, wan: WanLink, config: StreamingConfig, seq_len: int,
    opt_s_per_param: float,
) -> tuple[
    tuple[float | tuple[float, ...], ...], tuple[tuple[Piece, ...], ...], list[float | list[float]]
]:
    """Exchange times, pieces and outer optimizer times of `config` on `wan` (what the simulator
    and the closed form take)."""
    exchange = fragment_exchange_s(
        model,
        config,
        dtype=wan.dtype,
        num_islands=wan.num_islands,
        bw_bytes_per_s=wan.bw_bytes_per_s,
        latency_s=wan.latency_s,
        seq_len=seq_len,
    )
    pieces = fragment_pieces(model, config.num_fragments, config.fragment_pattern, seq_len=seq_len)
    opt = [[p.params * opt_s_per_param for p in frag] for frag in pieces]
    if not config.overlap_backward:
        opt = [[sum(frag)] for frag in opt]
    return exchange, pieces, [o if len(o) > 1 else o[0] for o in opt]


def run_streaming(
    model: ModelSpec,
    *,
    step_s: float,
    wan: WanLink,
    config: StreamingConfig,
    num_steps: int | None = None,
    seq_len: int = DEFAULT_SEQ_LEN,
    opt_s_per_param: float = 0.0,
) -> StreamingResult:
    """Simulate a Streaming DiLoCo configuration on `wan`."""
    exchange, pieces, opt = _inputs(
        model, wan=wan, config=config, seq_len=seq_len, opt_s_per_param=opt_s_per_param
    )
    return simulate_streaming(
        step_s=step_s,
        exchange_s=exchange,
        config=config,
        num_steps=num_steps or streaming_steps_to_simulate(config),
        pieces=pieces,
        outer_opt_s=opt,
    )


def streaming_utilisation(
    model: ModelSpec,
    *,
    step_s: float,
    wan: WanLink,
    config: StreamingConfig,
    seq_len: int = DEFAULT_SEQ_LEN,
    opt_s_per_param: float = 0.0,
) -> float:
    """Steady-state compute utilisation (one period of H steps after two warm-up periods)."""
    steps, first = utilisation_steps(config)
    run = run_streaming(
        model,
        step_s=step_s,
        wan=wan,
        config=config,
        num_steps=steps,
        seq_len=seq_len,
        opt_s_per_param=opt_s_per_param,
    )
    return run.utilisation(first)


def steady_state_utilisation(
    model: ModelSpec,
    *,
    step_s: float,
    wan: WanLink,
    config: StreamingConfig,
    seq_len: int = DEFAULT_SEQ_LEN,
    opt_s_per_param: float = 0.0,
) -> float:
    """`streaming_utilisation` in closed form (`perfmodel.diloco.streaming.steady_state`); needs
    exchanges at least τ + 1 steps apart (ValueError otherwise)."""
    exchange, pieces, opt = _inputs(
        model, wan=wan, config=config, seq_len=seq_len, opt_s_per_param=opt_s_per_param
    )
    state = steady_state(
        step_s=step_s, exchange_s=exchange, config=config, pieces=pieces, outer_opt_s=opt
    )
    return state.utilisation


def _smallest_bandwidth(ok: Callable[[float], bool]) -> float | None:
    """Smallest bandwidth (within the bracket, to BANDWIDTH_REL_TOL) where `ok` holds, assuming
    `ok` is monotone in the bandwidth; None if it fails at the top of the bracket."""
    lo, hi = BANDWIDTH_RANGE_BYTES_PER_S
    if not ok(hi):
        return None
    if ok(lo):
        return lo
    while hi / lo > 1 + BANDWIDTH_REL_TOL:
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


@dataclass(frozen=True, kw_only=True, slots=True)
class UtilisationBandwidth:
    """The bandwidth a utilisation target needs."""

    target: float
    """Compute utilisation asked for (0..1)."""
    bw_bytes_per_s: float | None
    """Smallest link bandwidth reaching it (None: unreachable, latency or outer step too long)."""
    utilisation: float
    """Utilisation simulated at that bandwidth (or at infinite bandwidth when unreachable)."""

    @property
    def gbit_s(self) -> float | None:
        return None if self.bw_bytes_per_s is None else self.bw_bytes_per_s * 8 / 1e9


def bandwidth_for_utilisation(
    model: ModelSpec,
    *,
    step_s: float,
    wan: WanLink,
    config: StreamingConfig,
    targets: Sequence[float] = UTILISATION_TARGETS,
    seq_len: int = DEFAULT_SEQ_LEN,
    opt_s_per_param: float = 0.0,
) -> tuple[UtilisationBandwidth, ...]:
    """Per target utilisation, the smallest bandwidth of `wan` (its latency, islands and dtype
    kept) at which the simulated steady state reaches it. Bisection on the simulator."""
    if step_s <= 0 or any(not 0 < t < 1 for t in targets):
        raise ValueError(f"need step_s > 0 and targets in (0, 1); got {step_s}, {list(targets)}")

    def cu(bw: float) -> float:
        return streaming_utilisation(
            model,
            step_s=step_s,
            wan=wan.with_bandwidth(bw),
            config=config,
            seq_len=seq_len,
            opt_s_per_param=opt_s_per_param,
        )

    out = []
    for target in targets:
        def reaches(b: float, t: float = target) -> bool:
            return cu(b) >= t

        bw = _smallest_bandwidth(reaches)
        out.append(
            UtilisationBandwidth(
                target=target,
                bw_bytes_per_s=bw,
                utilisation=cu(bw if bw is not None else BANDWIDTH_RANGE_BYTES_PER_S[1]),
            )
        )
    return tuple(out)


def required_wan_bw_bytes_per_s(
    model: ModelSpec,
    *,
    step_s: float,
    wan: WanLink,
    config: StreamingConfig,
    seq_len: int = DEFAULT_SEQ_LEN,
) -> float | None:
    """Smallest bandwidth at which `config` never blocks (bisection on the simulator); None when
    the latency alone outlasts the overlap window."""
    if wan.num_islands == 1:
        return 0.0
    return _smallest_bandwidth(
        lambda bw: (
            not run_streaming(
                model, step_s=step_s, wan=wan.with_bandwidth(bw), config=config, seq_len=seq_len
            ).blocks
        )
    )


# ---- the tuner ---------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class StreamingTuning:
    """The tuner's one recommendation, single-knob alternatives, and why when there is none."""

    config: StreamingConfig | None
    """At H = `sync_every`: the shortest delay, then the fewest fragments, that never block
    (None: nothing within the bounds)."""
    result: StreamingResult | None
    """Simulation of the recommended configuration."""
    sync_every: int
    """H the search kept fixed (the one asked for, capped at `max_sync_every`)."""
    max_delay_steps: int
    """Upper bound on τ (staleness bound against replica drift)."""
    max_sync_every: int
    """Upper bound on H (each fragment synchronised at least this often)."""
    remedies: tuple[str, ...]
    """For a blocking configuration: the recommendation first, then single changes that each
    remove blocking (empty if the configuration asked about does not block)."""
    reason: str
    """Why the recommendation is what it is, or why there is none."""


def _blocks(
    model: ModelSpec, step_s: float, wan: WanLink, config: StreamingConfig, seq_len: int
) -> bool:
    return run_streaming(model, step_s=step_s, wan=wan, config=config, seq_len=seq_len).blocks


def tune_streaming(
    model: ModelSpec,
    *,
    step_s: float,
    wan: WanLink,
    current: StreamingConfig | None = None,
    sync_every: int | None = None,
    max_delay_steps: int = DEFAULT_MAX_DELAY_STEPS,
    max_sync_every: int = DEFAULT_MAX_SYNC_EVERY,
    seq_len: int = DEFAULT_SEQ_LEN,
) -> StreamingTuning:
    """One recommendation at a fixed H: shortest delay τ first (staleness is what costs loss),
    then fewest fragments F (fewest messages), among configurations that never block.

    H is the one of `current` (or `sync_every`, default `max_sync_every`), capped at
    `max_sync_every`; the fragment pattern and backward overlap of `current` are kept."""
    if step_s <= 0 or max_delay_steps < 0 or max_sync_every < 1:
        raise ValueError("need step_s > 0, max_delay_steps >= 0 and max_sync_every >= 1")
    base = current or StreamingConfig(
        num_fragments=1, sync_every=sync_every or max_sync_every, delay_steps=0
    )
    h = min(base.sync_every, max_sync_every)
    chosen = None
    for delay in range(0, max_delay_steps + 1):
        for fragments in range(1, model.num_layers + 1):
            cfg = replace(base, num_fragments=fragments, sync_every=h, delay_steps=delay)
            run = run_streaming(model, step_s=step_s, wan=wan, config=cfg, seq_len=seq_len)
            if not run.blocks:
                chosen = cfg
                break
            if run.link_bound:  # more fragments only add latency to the load of a period
                break
        if chosen:
            break
    result = (
        run_streaming(model, step_s=step_s, wan=wan, config=chosen, seq_len=seq_len)
        if chosen
        else None
    )
    capped = (
        f" (H capped from {base.sync_every} at --max-sync-every {max_sync_every})"
        if h < base.sync_every
        else ""
    )
    if chosen is None:
        reason = (
            _no_config_reason(model, step_s=step_s, wan=wan, h=h, max_delay=max_delay_steps)
            + capped
        )
    else:
        reason = (
            f"at H={h}{capped}: the shortest delay (τ={chosen.delay_steps}), then the fewest "
            f"fragments (F={chosen.num_fragments}), that never block"
        )
    remedies: tuple[str, ...] = ()
    if current is not None and _blocks(model, step_s, wan, current, seq_len):
        remedies = _remedies(
            model,
            step_s=step_s,
            wan=wan,
            current=current,
            chosen=chosen,
            max_delay_steps=max_delay_steps,
            max_sync_every=max_sync_every,
            seq_len=seq_len,
        )
    return StreamingTuning(
        config=chosen,
        result=result,
        sync_every=h,
        max_delay_steps=max_delay_steps,
        max_sync_every=max_sync_every,
        remedies=remedies,
        reason=reason,
    )


def _no_config_reason(
    model: ModelSpec, *, step_s: float, wan: WanLink, h: int, max_delay: int
) -> str:
    full = float(
        formulas.sync_time_s(
            wan.num_islands,
            formulas.payload_bytes(model.total_params, wan.dtype),
            wan.bw_bytes_per_s,
            wan.latency_s,
        )
    )
    period = h * step_s
    head = (
        f"no F <= {model.num_layers} and τ <= {max_delay} avoids blocking at H={h}: one full "
        f"pseudo-gradient takes {full:.3g} s on this link, one period of H steps {period:.3g} s"
    )
    if full > period:
        return head + (
            " — the link cannot carry one pseudo-gradient per period: raise H, use a lower dtype "
            "or a faster link"
        )
    return head + (
        f" — the largest fragment does not fit a window of {max_delay} steps (plus the forward "
        "of the blocks before its first one) and its latency"
    )


def _remedies(
    model: ModelSpec,
    *,
    step_s: float,
    wan: WanLink,
    current: StreamingConfig,
    chosen: StreamingConfig | None,
    max_delay_steps: int,
    max_sync_every: int,
    seq_len: int,
) -> tuple[str, ...]:
    def ok(config: StreamingConfig, link: WanLink = wan) -> bool:
        return not _blocks(model, step_s, link, config, seq_len)

    out: list[str] = []
    if chosen is not None:
        out.append(
            f"recommended: F={chosen.num_fragments}, τ={chosen.delay_steps} "
            f"(H={chosen.sync_every}) does not block"
        )
    h = min(current.sync_every, max_sync_every)
    for fragments in range(current.num_fragments + 1, model.num_layers + 1):
        if ok(replace(current, num_fragments=fragments, sync_every=h)):
            out.append(
                f"or more fragments only: F={fragments} (H={h}, "
                f"τ={current.delay_steps}) does not block"
            )
            break
    for delay in range(current.delay_steps + 1, max_delay_steps + 1):
        if ok(replace(current, delay_steps=delay, sync_every=h)):
            out.append(
                f"or a longer delay only: τ={delay} (F={current.num_fragments}, "
                f"H={h}) does not block"
            )
            break
    for every in range(current.sync_every + 1, max_sync_every + 1):
        if ok(replace(current, sync_every=every)):
            out.append(
                f"or a longer H only: H={every} (F={current.num_fragments}, "
                f"τ={current.delay_steps}) does not block"
            )
            break
    if not current.overlap_backward and ok(replace(current, overlap_backward=True)):
        out.append(
            "or overlap the exchange with the backward pass (--overlap-backward): does not block"
        )
    for dtype in ("bf16", "int8", "fp4"):
        if formulas.DTYPE_BYTES[dtype] < formulas.DTYPE_BYTES[wan.dtype] and ok(
            current, replace(wan, dtype=dtype)
        ):
            out.append(f"or a lower pseudo-gradient dtype: {dtype} does not block")
            break
    needed = required_wan_bw_bytes_per_s(
        model, step_s=step_s, wan=wan, config=current, seq_len=seq_len
    )
    out.append(
        "a faster link alone cannot help: latency exceeds the overlap window"
        if needed is None
        else f"or a faster link: >= {needed * 8 / 1e9:.3g} Gbit/s does not block"
    )
    if chosen is None:  # no recommendation to be an alternative to
        out = [r.removeprefix("or ") for r in out]
    return tuple(out)
