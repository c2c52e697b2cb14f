"""DiLoCo and Streaming DiLoCo graphs (paper §II-B, §III-C-1, §IV-D; DESIGN §2 and §3).

DiLoCo is a second graph level: each island is a stream whose tasks are whole inner steps (each
the makespan of that island's FSDP step graph). Every H inner steps all islands meet at a
blocking outer all_reduce of the pseudo-gradient over the WAN; faster islands idle until the
slowest is done. Its duration is the ring all_reduce across M islands (DESIGN §3):

    σ = 0 if M = 1,  else  2·(M−1)/M · P / bw + 2·(M−1) · lat

with P the pseudo-gradient bytes, bw the slowest uplink and lat the largest latency.

Streaming DiLoCo splits the model into F fragments (contiguous layer groups; the embedding goes
with the first fragment, final norm and LM head with the last). Every H/F inner steps the next
fragment is exchanged on an extra outer-communication stream, so each fragment is synchronised
once every H steps. The exchange of a fragment scheduled after inner step s starts once step s
has produced it (and the outer stream is free); the merged fragment is needed by step s + τ + 1,
i.e. τ inner steps (the delay) overlap the exchange. When the exchange is late the compute
stream blocks; the blocked time is the compute stream's idle time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from perfmodel.arch import ModelSpec
from perfmodel.graph import Schedule, TaskGraph

PSEUDO_GRADIENT_BYTES = {"fp32": 4, "bf16": 2, "int8": 1}
"""Bytes per parameter of the exchanged pseudo-gradient, by dtype."""
WAN_ISLAND = "wan"
"""Trace process of the blocking DiLoCo all_reduce."""
OUTER_STREAM = "outer"
"""Stream of outer (WAN) communication."""
STEP_STREAM = "steps"
"""Stream of an island's inner steps at the DiLoCo level."""
TRAIN_ISLAND = "train"
"""Trace process of a Streaming DiLoCo run (the slowest island's inner steps + the outer stream)."""
COMPUTE_STREAM = "compute"
"""Stream of the inner steps of a Streaming DiLoCo run."""


def outer_sync_s(*, num_islands: int, payload_bytes: float, bw_bytes_per_s: float,
                 latency_s: float) -> float:
    """σ: ring all_reduce of `payload_bytes` across `num_islands` islands over the WAN."""
    if num_islands < 1 or payload_bytes < 0 or bw_bytes_per_s <= 0 or latency_s < 0:
        raise ValueError(f"need num_islands >= 1, payload >= 0, bandwidth > 0, latency >= 0; got "
                         f"{num_islands}, {payload_bytes}, {bw_bytes_per_s}, {latency_s}")
    if num_islands == 1:
        return 0.0
    m = num_islands
    return 2 * (m - 1) / m * payload_bytes / bw_bytes_per_s + 2 * (m - 1) * latency_s


def pseudo_gradient_bytes(model: ModelSpec, dtype: str = "fp32") -> int:
    """Bytes of one full pseudo-gradient."""
    if dtype not in PSEUDO_GRADIENT_BYTES:
        raise ValueError(f"pseudo-gradient dtype must be one of {sorted(PSEUDO_GRADIENT_BYTES)}, got {dtype!r}")
    return model.total_params * PSEUDO_GRADIENT_BYTES[dtype]


# ---- DiLoCo -------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True, slots=True)
class DilocoResult:
    """A simulated DiLoCo run of `outer_rounds` outer steps."""

    schedule: Schedule
    """Island-level schedule: one stream per island, plus the WAN stream."""
    inner_steps: int
    """H."""
    outer_rounds: int
    """Outer steps simulated."""
    sync_s: float
    """σ, one blocking outer all_reduce."""
    outer_step_s: float
    """H·max island step + σ."""
    island_wait_s: dict[str, float]
    """Per island: time spent waiting for slower islands and the sync, per outer step."""

    @property
    def amortised_step_s(self) -> float:
        """Wall time per inner step, outer sync included (DESIGN §3: τ + σ/H)."""
        return self.outer_step_s / self.inner_steps

    @property
    def amortised_sync_s(self) -> float:
        return self.sync_s / self.inner_steps


def simulate_diloco(island_step_s: dict[str, float], *, inner_steps: int, sync_s: float,
                    outer_rounds: int = 1) -> DilocoResult:
    """Islands (name -> inner step time) run H inner steps, then a blocking outer all_reduce."""
    if not island_step_s or inner_steps < 1 or outer_rounds < 1:
        raise ValueError("need >= 1 island, inner_steps >= 1 and outer_rounds >= 1")
    graph = TaskGraph()
    sync: int | None = None
    for r in range(outer_rounds):
        lasts = []
        for name, step_s in island_step_s.items():
            prev = sync
            for h in range(inner_steps):
                prev = graph.add(f"step {r * inner_steps + h + 1}", island=name, stream=STEP_STREAM,
                                 kind="inner_step", duration_s=step_s, deps=[prev])
            lasts.append(prev)
        sync = graph.add(f"outer all_reduce {r + 1}", island=WAN_ISLAND, stream=OUTER_STREAM,
                         kind="outer_all_reduce", duration_s=sync_s, deps=lasts)
    schedule = graph.simulate()
    outer = schedule.makespan_s / outer_rounds
    wait = {name: outer - inner_steps * step_s for name, step_s in island_step_s.items()}
    return DilocoResult(schedule=schedule, inner_steps=inner_steps, outer_rounds=outer_rounds,
                        sync_s=sync_s, outer_step_s=outer, island_wait_s=wait)


# ---- Streaming DiLoCo ---------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True, slots=True)
class StreamingConfig:
    """Fragment schedule of Streaming DiLoCo."""

    num_fragments: int
    """F: contiguous layer groups exchanged separately."""
    sync_every: int
    """H: inner steps between two synchronisations of the same fragment (F divides H)."""
    delay_steps: int
    """τ: inner steps that overlap a fragment's exchange before the merged fragment is needed."""

    def __post_init__(self) -> None:
        if self.num_fragments < 1 or self.sync_every < 1 or self.delay_steps < 0:
            raise ValueError(f"need fragments >= 1, sync_every >= 1, delay >= 0; got "
                             f"{self.num_fragments}, {self.sync_every}, {self.delay_steps}")
        if self.sync_every % self.num_fragments:
            raise ValueError(f"sync_every {self.sync_every} must be a multiple of the fragment count "
                             f"{self.num_fragments} (one fragment every H/F steps)")

    @property
    def send_interval(self) -> int:
        """Inner steps between two fragment exchanges (H/F)."""
        return self.sync_every // self.num_fragments


@dataclass(frozen=True, kw_only=True, slots=True)
class Exchange:
    """One fragment exchange in a streaming run."""

    fragment: int
    """Fragment index (0 = embedding side)."""
    after_step: int
    """Inner step (1-based) whose result is exchanged."""
    needed_by_step: int
    """First inner step that needs the merged fragment (after_step + τ + 1)."""
    start_s: float
    """Start of the exchange."""
    end_s: float
    """End of the exchange."""
    blocked_s: float
    """How long the needing step waited for it (0 when in time or never needed)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StreamingResult:
    """A simulated Streaming DiLoCo run."""

    schedule: Schedule
    """Compute ('train') and outer-communication streams."""
    config: StreamingConfig
    """The fragment schedule."""
    num_steps: int
    """Inner steps simulated."""
    compute_s: float
    """Summed inner-step durations."""
    total_s: float
    """End of the last inner step."""
    exchanges: tuple[Exchange, ...]
    """Every exchange, in order."""

    @property
    def blocked_s(self) -> float:
        """Time the compute stream waited for late exchanges."""
        return self.total_s - self.compute_s

    @property
    def blocks(self) -> bool:
        return self.blocked_s > 0


def fragment_params(model: ModelSpec, num_fragments: int) -> tuple[int, ...]:
    """Parameters per fragment: blocks split into contiguous groups (sizes differ by at most one
    block), the embedding with the first fragment and final norm + LM head with the last."""
    if not 1 <= num_fragments <= model.num_layers:
        raise ValueError(f"fragments must be within 1..{model.num_layers} (one layer group each), "
                         f"got {num_fragments}")
    base, extra = divmod(model.num_layers, num_fragments)
    sizes = [(base + (1 if f < extra else 0)) * model.block_params for f in range(num_fragments)]
    sizes[0] += model.embedding_params
    sizes[-1] += model.norm_params + model.lm_head_params
    return tuple(sizes)


def simulate_streaming(*, step_s: float | Sequence[float], exchange_s: Sequence[float],
                       config: StreamingConfig, num_steps: int) -> StreamingResult:
    """Simulate `num_steps` inner steps; `exchange_s[f]` is fragment f's exchange duration.

    `step_s` is the inner step time (the slowest island's), one value or one per step.
    """
    steps = [float(step_s)] * num_steps if isinstance(step_s, int | float) else [float(x) for x in step_s]
    if num_steps < 1 or len(steps) != num_steps:
        raise ValueError(f"need num_steps >= 1 step durations, got {len(steps)} for {num_steps}")
    if len(exchange_s) != config.num_fragments:
        raise ValueError(f"need one exchange duration per fragment ({config.num_fragments}), got {len(exchange_s)}")
    graph = TaskGraph()
    step_ids: list[int] = []
    pending: dict[int, list[int]] = {}  # step that waits -> exchange task ids
    issued: list[tuple[int, int, int]] = []  # (task id, fragment, after_step)
    for s in range(1, num_steps + 1):
        step_ids.append(graph.add(f"step {s}", island=TRAIN_ISLAND, stream=COMPUTE_STREAM, kind="inner_step",
                                  duration_s=steps[s - 1], deps=pending.pop(s, [])))
        if s % config.send_interval == 0:
            frag = (s // config.send_interval - 1) % config.num_fragments
            ex = graph.add(f"fragment {frag} (after step {s})", island=TRAIN_ISLAND, stream=OUTER_STREAM,
                           kind="outer_all_reduce", duration_s=exchange_s[frag], deps=[step_ids[-1]])
            pending.setdefault(s + config.delay_steps + 1, []).append(ex)
            issued.append((ex, frag, s))
    schedule = graph.simulate()
    exchanges = tuple(_exchange(schedule, ex, frag, after, config.delay_steps, step_ids)
                      for ex, frag, after in issued)
    total = schedule.intervals[step_ids[-1]].end_s
    return StreamingResult(schedule=schedule, config=config, num_steps=num_steps, compute_s=sum(steps),
                           total_s=total, exchanges=exchanges)


def _exchange(schedule: Schedule, task_id: int, fragment: int, after: int, delay: int,
              step_ids: list[int]) -> Exchange:
    iv = schedule.intervals[task_id]
    need = after + delay + 1
    blocked = 0.0
    if need <= len(step_ids):
        ready = schedule.intervals[step_ids[need - 2]].end_s  # when step `need` could have started
        blocked = max(0.0, iv.end_s - ready)
    return Exchange(fragment=fragment, after_step=after, needed_by_step=need, start_s=iv.start_s,
                    end_s=iv.end_s, blocked_s=blocked)


def no_block_condition(*, step_s: float, exchange_s: Sequence[float], config: StreamingConfig) -> bool:
    """Steady-state test with a constant step time: every exchange fits in its window of τ steps
    and the outer stream keeps up with one exchange per H/F steps. Exact when τ <= H/F (each
    exchange then starts on an idle outer stream); sufficient otherwise."""
    window = min(config.delay_steps, config.send_interval) * step_s
    return max(exchange_s) <= window


def streaming_steps_to_simulate(config: StreamingConfig) -> int:
    """Enough inner steps to see every fragment exchanged twice and its need."""
    return 2 * config.sync_every + config.delay_steps + 1


def fragment_exchange_s(model: ModelSpec, num_fragments: int, *, dtype: str, num_islands: int,
                        bw_bytes_per_s: float, latency_s: float) -> tuple[float, ...]:
    """σ of each fragment's exchange."""
    per_param = PSEUDO_GRADIENT_BYTES[dtype]
    return tuple(outer_sync_s(num_islands=num_islands, payload_bytes=p * per_param,
                              bw_bytes_per_s=bw_bytes_per_s, latency_s=latency_s)
                 for p in fragment_params(model, num_fragments))
