"""Expected wall time and cost of a plan under failures, preemptions and the full bill (issue 28).

With the failure model on (an instance's `failures:` section or `--failures`), every plan is
scored by its expected values; the solvers optimise those (`planner.solvers.expected`). Step
times are never changed.

Who stops when something fails
------------------------------
* A plan of one island (FSDP, or DiLoCo with one island): one interruption stops the whole job.
  Its rate is λ = G·r + n·ρ for the island's G GPUs (r failures per GPU-hour of the GPU type)
  and n nodes when it is rented at a spot tier (ρ preemptions per node-hour); a failure restarts
  after R, a preemption after R + the wait for new capacity. The job checkpoints every whole
  number of inner steps (Daly's optimum, `perfmodel.spec.failure_model.checkpointed_wall_factor`):
  E[W] = W·φ with φ Daly's exact expected wall time per useful second.
* A DiLoCo plan of M >= 2 islands: an island's interruption stops that island only. It loses
  the outer step it fails in, restarts (R, plus the capacity wait after a preemption, plus
  fetching the fp32 global model over its cluster's WAN) and rejoins at the next outer step; the
  outer steps it misses train without its share b_i of the global batch, so the run needs more
  outer steps to train its D tokens: E[W] = W·B/Σ_i a_i·b_i, with a_i the island's participation
  (`failure_model.island_participation`) at the outer-step period T = H·τ + σ. The period is kept at
  that of the full plan (a sync among fewer islands is no slower: an upper bound), and the
  global model is checkpointed off the critical path at outer steps (no stall).

What the money is
-----------------
E[C] = Σ_i price_i·billed_i(E[W])/3600 + egress, where billed_i rounds the expected wall time to
the island's provider's billing increment and minimum (catalogs/reliability/billing.csv; exact
time where none is catalogued) and egress prices the DiLoCo syncs between sites: the ring
all-reduce visits the islands site by site, so each site c of the plan's cluster set sends one
ring hop of 2(M−1)/M·P bytes to the next site per outer step, at its provider's internet egress
schedule (catalogs/reliability/egress.csv, tiered per 30-day month; the instance's
`egress_usd_per_gb` overrides). Islands of one site (a cluster and its alternative tiers) sync
without egress. Every interruption-free figure is today's: without the model, a plan's expected
values are its wall time and cost.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from perfmodel.facts import (
    EgressPrice,
    async_stall_fraction,
    checkpoint_bytes,
    checkpoint_write_gbit_s_per_node,
    checkpointed_wall_factor,
    egress_price,
    failures_per_gpu_hour,
    island_participation,
    offer_billing,
    preemptions_per_node_hour,
    restart_s,
    spot_capacity_wait_s,
)
from perfmodel.spec.formulas import DTYPE_BYTES
from planner.model.problem import PRICE_UNITS_PER_USD_PER_HOUR

if TYPE_CHECKING:
    from planner.model.problem import IslandChoice, IslandOption, Problem

SECONDS_PER_HOUR = 3600.0
SECONDS_PER_MONTH = 30 * 24 * 3600.0
"""Egress tiers are per 30-day month."""
BYTES_PER_GB = 1e9
PREEMPTIBLE_TIERS = ("spot",)
"""Price tiers whose nodes the provider may reclaim."""


@dataclass(frozen=True, kw_only=True, slots=True)
class OptionRisk:
    """The interruptions and billing of one island option (cluster, nodes, GPUs, tier)."""

    failure_rate_per_s: float
    """Failures of the island per second: G·r."""
    preemption_rate_per_s: float
    """Preemptions of the island per second: n·ρ at a spot tier, else 0."""
    restart_s: float
    """Restart after a failure."""
    preemption_restart_s: float
    """Restart after a preemption (restart + capacity wait)."""
    checkpoint_stall_s: float
    """Training stall per checkpoint when the island runs alone (sync: the write)."""
    checkpoint_lag_s: float
    """Background write after the stall (async), else 0."""
    billing_increment_s: float = 0.0
    """Billed time is a multiple of this (0: exact)."""
    billing_minimum_s: float = 0.0
    """Least billed time."""

    @property
    def rate_per_s(self) -> float:
        """All interruptions per second."""
        return self.failure_rate_per_s + self.preemption_rate_per_s

    def restarts(self, extra_s: float = 0.0) -> tuple[list[float], list[float]]:
        """(restart times, weights) of the interruption types, `extra_s` added to each."""
        rate = self.rate_per_s
        if rate <= 0:
            return [self.restart_s + extra_s], [1.0]
        return ([self.restart_s + extra_s, self.preemption_restart_s + extra_s],
                [self.failure_rate_per_s / rate, self.preemption_rate_per_s / rate])

    def no_worse_than(self, other: OptionRisk) -> bool:
        """Every interruption figure and the billing at most `other`'s (used by the exact
        dominance reductions, `planner.model.problem.dominated_options`)."""
        return (self.failure_rate_per_s <= other.failure_rate_per_s
                and self.preemption_rate_per_s <= other.preemption_rate_per_s
                and self.restart_s <= other.restart_s
                and self.preemption_restart_s <= other.preemption_restart_s
                and self.checkpoint_stall_s <= other.checkpoint_stall_s
                and self.checkpoint_lag_s <= other.checkpoint_lag_s
                and self.billing_increment_s == other.billing_increment_s
                and self.billing_minimum_s == other.billing_minimum_s)

    def billed_s(self, wall_s: float) -> float:
        """Billed seconds of a rental of `wall_s`."""
        billed = wall_s
        if self.billing_increment_s > 0:
            billed = math.ceil(wall_s / self.billing_increment_s - 1e-12) * self.billing_increment_s
        return max(billed, self.billing_minimum_s)


@dataclass(frozen=True, kw_only=True, slots=True)
class SiteRisk:
    """What a cluster (a site) adds: the rejoin fetch and its egress price."""

    fetch_s: float
    """Seconds to fetch the fp32 global model over the cluster's WAN when an island rejoins."""
    egress: EgressPrice | None
    """Egress schedule of traffic leaving the site (None: none published; counted as 0)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RiskModel:
    """Everything the expected values of a plan need, per option and per cluster."""

    options: tuple[OptionRisk, ...]
    """Per `Problem.options` entry."""
    sites: tuple[SiteRisk, ...]
    """Per `Problem.clusters` entry."""
    checkpoint_mode: str
    """sync or async."""
    checkpoint_bytes: float
    """Bytes of one checkpoint (master weights + AdamW moments)."""
    egress_on: bool = True
    """Whether egress is priced."""
    billing_on: bool = True
    """Whether billing increments apply."""
    assumptions: tuple[str, ...] = ()
    """The sources and assumptions used, for reports."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ExpectedPoint:
    """The expected values of one plan."""

    wall_time_s: float
    """E[W]."""
    cost_usd: float
    """E[C] (GPU-hours as billed, plus egress)."""
    goodput: float
    """Failure-free wall time / E[W] (for islands: the trained share of the global batch)."""
    egress_usd: float
    """Egress part of the cost."""
    checkpoint_interval_s: float | None
    """Compute time between checkpoints (one-island plans)."""
    participation: tuple[float, ...] = ()
    """Per island (islands order of the plan): share of outer steps it contributes to."""


def option_loss(problem: Problem, option_index: int, period_s: float) -> float:
    """1 − a of an island of this option in a plan of several islands with outer period T."""
    risk: RiskModel = problem.risk
    option_risk = risk.options[option_index]
    cluster = problem.options[option_index].cluster_index
    times, weights = option_risk.restarts(risk.sites[cluster].fetch_s)
    return 1.0 - island_participation(option_risk.rate_per_s, period_s, times, weights)


def egress_usd(problem: Problem, num_islands: int, cluster_indices: Sequence[int],
               outer_steps: float, wall_s: float) -> float:
    """Egress of the DiLoCo syncs of a plan (module docstring)."""
    risk: RiskModel = problem.risk
    used = sorted(set(cluster_indices))
    if not risk.egress_on or num_islands < 2 or len(used) < 2:
        return 0.0
    hop_bytes = 2.0 * (num_islands - 1) / num_islands * problem.pseudo_gradient_bytes
    months = max(1.0, wall_s / SECONDS_PER_MONTH)
    total = 0.0
    for c in used:
        price = risk.sites[c].egress
        if price is not None:
            total += months * price.usd(outer_steps * hop_bytes / months)
    return total


def expected_point(problem: Problem, choices: Sequence[IslandChoice], inner_step_s: float,
                   sync_s: float, wall_s: float) -> ExpectedPoint:
    """E[W], E[C] and goodput of a plan with failure-free wall time `wall_s` (module
    docstring)."""
    risk: RiskModel = problem.risk
    options = [problem.pairs[c.pair_index].option_index for c in choices]
    interval: float | None = None
    participation: tuple[float, ...] = ()
    if len(choices) == 1:
        own = risk.options[options[0]]
        times, weights = own.restarts()
        factor, interval = checkpointed_wall_factor(
            rate_per_s=own.rate_per_s, stall_s=own.checkpoint_stall_s,
            write_lag_s=own.checkpoint_lag_s, restart_s=times, weights=weights,
            step_s=inner_step_s)
        expected_wall = wall_s * factor
        goodput = 1.0 / factor if math.isfinite(factor) else 0.0
    else:
        period = problem.inner_steps * inner_step_s + sync_s
        participation = tuple(1.0 - option_loss(problem, o, period) for o in options)
        seqs = [c.accum_steps * problem.pairs[c.pair_index].seqs_per_accum_step for c in choices]
        goodput = sum(a * b for a, b in zip(participation, seqs, strict=True)) / sum(seqs)
        expected_wall = wall_s / goodput if goodput > 0 else math.inf
    if not (math.isfinite(expected_wall) and goodput > 0):  # no run ever finishes
        return ExpectedPoint(wall_time_s=math.inf, cost_usd=math.inf, goodput=0.0, egress_usd=0.0,
                             checkpoint_interval_s=interval, participation=participation)
    outer_steps = problem.inner_steps_total / problem.inner_steps / goodput
    egress = egress_usd(problem, len(choices),
                        [problem.options[o].cluster_index for o in options], outer_steps,
                        expected_wall)
    rented = 0.0
    for o in options:
        billed = risk.options[o].billed_s(expected_wall) if risk.billing_on else expected_wall
        rented += (problem.options[o].price_units / PRICE_UNITS_PER_USD_PER_HOUR * billed
                   / SECONDS_PER_HOUR)
    return ExpectedPoint(wall_time_s=expected_wall, cost_usd=rented + egress, goodput=goodput,
                         egress_usd=egress, checkpoint_interval_s=interval,
                         participation=participation)


# ---- building ------------------------------------------------------------------------------

def _pick(*values: float | None) -> float | None:
    return next((v for v in values if v is not None), None)


def build_risk(instance: Any, clusters: Sequence[Any], options: Sequence[IslandOption],
               params: float) -> RiskModel:
    """The RiskModel of an instance whose failure model is on: per option its interruptions
    (the cluster's, else the `failures:` section's, else the catalogs'), per cluster its rejoin
    fetch and egress schedule."""
    config = instance.failures
    notes: dict[str, str] = {}
    mode = config.checkpoint_mode or "sync"
    recipe = dict(instance.training.recipe or {})
    size = float(checkpoint_bytes(params, str(recipe.get("master_dtype", "fp32"))))
    default_restart = restart_s()
    default_gbit = checkpoint_write_gbit_s_per_node()
    default_wait = spot_capacity_wait_s()
    stall_fraction = async_stall_fraction()
    notes["restart"] = f"restart {default_restart.value:g} s: {default_restart.source}"
    notes["checkpoint"] = (f"checkpoint write {default_gbit.value:g} Gbit/s per node: "
                           f"{default_gbit.source}")
    if mode == "async":
        notes["async"] = f"async stall fraction {stall_fraction.value:.4g}: {stall_fraction.source}"
    out = []
    for option in options:
        spec = instance.cluster(option.cluster)
        alt = next((a for a in spec.alternatives if a.tier == option.tier), None)
        rate_gpu = _pick(spec.failures_per_gpu_hour, config.failures_per_gpu_hour)
        if rate_gpu is None:
            found = failures_per_gpu_hour(option.gpu_type)
            rate_gpu = found.value
            notes[f"failures {option.gpu_type}"] = (f"{option.gpu_type}: {found.value:.4g} "
                                                     f"failures per GPU-hour ({found.source})")
        preempt = 0.0
        if option.tier in PREEMPTIBLE_TIERS:
            given = _pick(alt.preemptions_per_node_hour if alt else None,
                          spec.preemptions_per_node_hour if alt is None else None)
            if given is None:
                found = preemptions_per_node_hour(spec.provider, option.gpu_type)
                given = found.value
                notes[f"preempt {spec.provider} {option.gpu_type}"] = (
                    f"{spec.provider or spec.name} {option.gpu_type} spot: {found.value:.4g} "
                    f"preemptions per node-hour ({found.source})")
            preempt = given
        restart = _pick(spec.restart_s, config.restart_s, default_restart.value)
        wait = _pick(alt.spot_capacity_wait_s if alt else None, spec.spot_capacity_wait_s,
                     default_wait.value)
        if option.tier in PREEMPTIBLE_TIERS and wait == default_wait.value:
            notes["wait"] = f"spot capacity wait {default_wait.value:g} s: {default_wait.source}"
        gbit = _pick(spec.checkpoint_write_gbit_s_per_node, config.checkpoint_write_gbit_s_per_node,
                     default_gbit.value) or default_gbit.value
        write = size * 8.0 / (gbit * 1e9 * option.nodes)
        stall, lag = (write * stall_fraction.value, write) if mode == "async" else (write, 0.0)
        bill = (offer_billing(spec.provider, spec.gpu, option.tier, spec.price.as_of)
                if spec.price is not None else None)
        out.append(OptionRisk(
            failure_rate_per_s=(rate_gpu or 0.0) * option.num_gpus / SECONDS_PER_HOUR,
            preemption_rate_per_s=preempt * option.nodes / SECONDS_PER_HOUR,
            restart_s=restart or 0.0, preemption_restart_s=(restart or 0.0) + (wait or 0.0),
            checkpoint_stall_s=stall, checkpoint_lag_s=lag,
            billing_increment_s=bill.increment_s if bill else 0.0,
            billing_minimum_s=bill.minimum_s if bill else 0.0))
        if bill is not None:
            notes[f"billing {spec.provider} {option.tier}"] = (
                f"{spec.provider} {option.tier}: billed per {bill.increment_s:g} s, at least "
                f"{bill.minimum_s:g} s ({bill.source})")
    sites = []
    for info, spec in zip(clusters, instance.clusters, strict=True):
        fetch = params * DTYPE_BYTES["fp32"] / info.wan_bw_bytes_per_s
        sites.append(SiteRisk(fetch_s=0.0 if math.isinf(info.wan_bw_bytes_per_s) else fetch,
                              egress=_egress(spec, notes)))
    return RiskModel(options=tuple(out), sites=tuple(sites), checkpoint_mode=mode,
                     checkpoint_bytes=size, egress_on=config.egress, billing_on=config.billing,
                     assumptions=tuple(notes.values()))


def _egress(spec: Any, notes: dict[str, str]) -> EgressPrice | None:
    if spec.egress_usd_per_gb is not None:
        return EgressPrice(provider=spec.name,
                           tiers=((0.0, spec.egress_usd_per_gb / BYTES_PER_GB),),
                           source="instance")
    found = egress_price(spec.provider) if spec.provider else None
    if found is None:
        notes[f"egress {spec.name}"] = (f"{spec.name}: no published egress rate "
                                        f"({spec.provider or 'explicit price'}); counted as 0")
    else:
        notes[f"egress {found.provider}"] = (f"{found.provider} egress from "
                                              f"{found.first_usd_per_gb:g} USD/GB: {found.source}")
    return found

