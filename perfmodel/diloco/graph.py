"""DiLoCo and Streaming DiLoCo graphs (paper §II-B, §III-C-1, §IV-D; DESIGN §2 and §3).

DiLoCo is a second graph level: each island is a stream whose tasks are whole inner steps (each
the makespan of that island's FSDP step graph). Every H inner steps all islands meet at a
blocking outer all_reduce of the pseudo-gradient; faster islands idle until the slowest is done.
Its duration is σ, `perfmodel.spec.formulas.sync_time_s` (the one home of that formula).

Streaming DiLoCo lives in `perfmodel.diloco.fragments` (fragment schedule and fragments) and
`perfmodel.diloco.streaming` (the simulated run and its closed form), where an exchange gates only
the forward of its own layers in the needing step. Blocking DiLoCo is its F = 1, τ = 0 case: the
one fragment holds block 0, so it gates the whole next step, and both graphs give
H·t / (H·t + σ) (tests/test_streaming_agreement.py). The outer optimizer step of both is
`outer_optimizer_s`.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfmodel.diloco.streaming import (
    OUTER_STREAM,
)
from perfmodel.sim.graph import Schedule, TaskGraph
from perfmodel.spec import formulas
from perfmodel.spec.arch import ModelSpec

WAN_ISLAND = "wan"
"""Trace process of the blocking DiLoCo all_reduce."""
STEP_STREAM = "steps"
"""Stream of an island's inner steps at the DiLoCo level."""
OUTER_OPTIMIZER_BYTES_PER_PARAM = 24.0
"""HBM traffic of one Nesterov outer step per parameter: read the fp32 global copy, the fp32
momentum and the fp32 averaged pseudo-gradient (12 B), write momentum, global copy and the new
fp32 local parameters (12 B)."""


def pseudo_gradient_bytes(model: ModelSpec, dtype: str = "fp32") -> float:
    """Bytes of one full pseudo-gradient on the wire (`formulas.payload_bytes`, scales included)."""
    return float(formulas.payload_bytes(model.total_params, dtype))


def outer_optimizer_s(params: float, *, num_gpus: int, hbm_bytes_per_s: float) -> float:
    """Time of the Nesterov outer step over `params` parameters sharded over `num_gpus` GPUs."""
    if num_gpus < 1 or hbm_bytes_per_s <= 0 or params < 0:
        raise ValueError(
            f"need num_gpus >= 1, hbm bandwidth > 0, params >= 0; got {num_gpus}, "
            f"{hbm_bytes_per_s}, {params}"
        )
    return params / num_gpus * OUTER_OPTIMIZER_BYTES_PER_PARAM / hbm_bytes_per_s


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
    """H·max island step + σ + outer optimizer step."""
    island_wait_s: dict[str, float]
    """Per island: time spent waiting for slower islands and the sync, per outer step."""

    @property
    def amortised_step_s(self) -> float:
        """Wall time per inner step, outer sync included (DESIGN §3: τ + σ/H)."""
        return self.outer_step_s / self.inner_steps

    @property
    def amortised_sync_s(self) -> float:
        return self.sync_s / self.inner_steps


def simulate_diloco(
    island_step_s: dict[str, float],
    *,
    inner_steps: int,
    sync_s: float,
    outer_rounds: int = 1,
    outer_opt_s: float = 0.0,
) -> DilocoResult:
    """Islands (name -> inner step time) run H inner steps, then a blocking outer all_reduce and
    the outer optimizer step (`outer_opt_s`, on every island)."""
    if not island_step_s or inner_steps < 1 or outer_rounds < 1 or outer_opt_s < 0:
        raise ValueError("need >= 1 island, inner_steps >= 1, outer_rounds >= 1, outer_opt_s >= 0")
    graph = TaskGraph()
    sync: int | None = None
    opts: dict[str, int | None] = dict.fromkeys(island_step_s)
    for r in range(outer_rounds):
        lasts = []
        for name, step_s in island_step_s.items():
            prev = opts[name] if opts[name] is not None else sync
            for h in range(inner_steps):
                prev = graph.add(
                    f"step {r * inner_steps + h + 1}",
                    island=name,
                    stream=STEP_STREAM,
                    kind="inner_step",
                    duration_s=step_s,
                    deps=[prev],
                )
            lasts.append(prev)
        sync = graph.add(
            f"outer all_reduce {r + 1}",
            island=WAN_ISLAND,
            stream=OUTER_STREAM,
            kind="outer_all_reduce",
            duration_s=sync_s,
            deps=lasts,
        )
        if outer_opt_s > 0:
            opts = {
                name: graph.add(
                    f"outer optimizer {r + 1}",
                    island=name,
                    stream=STEP_STREAM,
                    kind="optimizer",
                    duration_s=outer_opt_s,
                    deps=[sync],
                )
                for name in island_step_s
            }
    schedule = graph.simulate()
    outer = schedule.makespan_s / outer_rounds
    wait = {
        name: outer - inner_steps * step_s - outer_opt_s for name, step_s in island_step_s.items()
    }
    return DilocoResult(
        schedule=schedule,
        inner_steps=inner_steps,
        outer_rounds=outer_rounds,
        sync_s=sync_s,
        outer_step_s=outer,
        island_wait_s=wait,
    )
