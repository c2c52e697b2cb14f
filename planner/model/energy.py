"""Energy and CO2 of one plan from the island table's activity split and the GPUs' TDP (issue 14).

Energy of a plan
----------------
Every rented GPU is powered for the whole wall time W = steps·(τ + σ/H), steps = D/(B·S). Per
inner step island i (cluster c, n_i·g_i GPUs of TDP P_i, k_i micro-steps) computes
c_i(k) = compute_fixed_s + k·compute_micro_s, communicates only x_i(k) = comm_only_fixed_s +
k·comm_only_micro_s (island table; no gap where neither stream runs, perfmodel.tables) and idles
for the rest of the period L = τ + σ/H (waiting for the slowest island and the outer sync). With
the fractions of `perfmodel.costs.power.PowerAssumptions` (P_comp = f_comp·P, P_comm = f_comm·P,
P_idle = f_idle·P) and a host share h per GPU for the whole period, one GPU's energy per period is

    P_comp·c + P_comm·x + P_idle·(L − c − x) + h·L = L·(P_idle + h) + (P_comp − P_idle)·c
                                                                   + (P_comm − P_idle)·x,

so over the run (steps periods), with the data centre's PUE:

    E = Σ_i PUE_c·n_i·g_i·[ W·(P_idle + h) + steps·((P_comp − P_idle)·c_i + (P_comm − P_idle)·x_i) ]
    CO2 = Σ_i I_c·E_i                      (I_c: grid intensity of the cluster's region).

A table without the activity split (an old CSV) counts the whole step t_i as compute
("all busy at compute power": c_i = t_i, x_i = 0), an upper bound; the plan says so.

The time-vs-energy frontier over all plans is `planner.solvers.energy_dp`; solving an instance is
`planner.analysis.energy`, which re-exports this module.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from perfmodel.costs.power import DEFAULT_POWER, PowerAssumptions
from perfmodel.facts import carbon_intensity_g_per_kwh, gpu_tdp_w, provider_pue
from perfmodel.spec.errors import UserInputError
from perfmodel.spec.formulas import J_PER_KWH

if TYPE_CHECKING:
    from planner.model.problem import IslandChoice, Problem

METRICS = ("energy", "co2")
"""Objectives the energy DP traces against wall time."""
FIELD = {"energy": "energy_kwh", "co2": "co2_kg"}
"""Plan field of each metric."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PairPower:
    """The power-relevant facts of one island-table row (one `Problem.pairs` entry)."""

    compute_fixed_s: float
    """Compute busy time once per inner step."""
    compute_micro_s: float
    """Compute busy time per micro-step."""
    comm_only_fixed_s: float
    """Communication-only time once per inner step."""
    comm_only_micro_s: float
    """Communication-only time per micro-step."""
    tdp_w: float
    """TDP of one GPU, watts."""
    split_known: bool
    """False: the table has no activity split; the whole step counts as compute."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.tdp_w) and self.tdp_w > 0):
            raise ValueError(f"PairPower needs a positive finite TDP, got {self.tdp_w!r}")


@dataclass(frozen=True, kw_only=True, slots=True)
class ClusterEnergy:
    """Facility and grid of one cluster."""

    pue: float
    """Power usage effectiveness."""
    pue_source: str
    """Where the PUE comes from."""
    region: str | None
    """Grid region key (None: CO2 unknown)."""
    gco2e_per_kwh: float | None
    """Grid intensity of the region."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.pue) and self.pue >= 1.0):
            raise ValueError(f"PUE must be >= 1, got {self.pue!r}")


@dataclass(frozen=True, kw_only=True, slots=True)
class EnergyData:
    """What the planner needs to price a plan in joules and kilograms CO2e."""

    pairs: tuple[PairPower | None, ...]
    """Per `Problem.pairs` entry (None: no TDP known, energy unknown)."""
    clusters: tuple[ClusterEnergy, ...]
    """Per `Problem.clusters` entry."""
    power: PowerAssumptions = DEFAULT_POWER
    """Fractions of TDP per state and host share."""

    @property
    def energy_known(self) -> bool:
        """Every pair has a TDP."""
        return all(p is not None for p in self.pairs)

    @property
    def co2_known(self) -> bool:
        """Energy known and every cluster has a region."""
        return self.energy_known and all(c.gco2e_per_kwh is not None for c in self.clusters)

    @property
    def split_known(self) -> bool:
        """Every pair has its activity split (else the all-busy fallback applies somewhere)."""
        return all(p is not None and p.split_known for p in self.pairs)


# ---- building ------------------------------------------------------------------------------


def pair_power(row: Any, tdp_fallback: float | None) -> PairPower | None:
    """PairPower of an island-table row (a namedtuple of `itertuples`)."""
    tdp = getattr(row, "tdp_w", None)
    tdp = float(tdp) if tdp is not None and math.isfinite(float(tdp)) else tdp_fallback
    if tdp is None:
        return None
    split = [getattr(row, c, None) for c in ("compute_fixed_s", "compute_micro_s",
                                             "comm_only_fixed_s", "comm_only_micro_s")]
    known = [float(v) for v in split if v is not None]
    if len(known) < len(split) or not all(math.isfinite(v) for v in known):
        return PairPower(compute_fixed_s=float(row.step_fixed_s),
                         compute_micro_s=float(row.microstep_s), comm_only_fixed_s=0.0,
                         comm_only_micro_s=0.0, tdp_w=tdp, split_known=False)
    cf, cm, xf, xm = known
    return PairPower(compute_fixed_s=cf, compute_micro_s=cm, comm_only_fixed_s=xf,
                     comm_only_micro_s=xm, tdp_w=tdp, split_known=True)


def cluster_energy(cluster: Any) -> ClusterEnergy:
    """PUE (instance override, else the price list provider's) and grid of an instance cluster."""

    if cluster.pue is not None:
        pue, source = float(cluster.pue), "instance"
    else:
        pue, source = provider_pue(cluster.price.provider if cluster.price is not None else None)
    region = cluster.region
    return ClusterEnergy(pue=pue, pue_source=source, region=region,
                         gco2e_per_kwh=(None if region is None
                                        else carbon_intensity_g_per_kwh(region)))


def table_tdp(gpu: str) -> float | None:
    """Catalog TDP of a GPU, for tables without a `tdp_w` column."""

    return gpu_tdp_w(gpu)


def build_energy(instance: Any, rows: Sequence[Any], gpu_types: Sequence[str]) -> EnergyData:
    """EnergyData of the kept table rows (one per pair, with its GPU type) of an instance."""
    tdp_of = {gpu: table_tdp(gpu) for gpu in set(gpu_types)}
    pairs = tuple(pair_power(row, tdp_of[gpu]) for row, gpu in zip(rows, gpu_types, strict=True))
    return EnergyData(pairs=pairs, clusters=tuple(cluster_energy(c) for c in instance.clusters))


# ---- one plan ------------------------------------------------------------------------------


def island_coefficients(problem: Problem, pair_index: int, accum_steps: int,
                        metric: str = "energy") -> tuple[float, float]:
    """(a, b) of one island: facility power while waiting, W (a·W is its baseline energy over the
    run), and its extra energy per inner step above idle, J; both × grid intensity (kg/J)
    for co2."""
    data: EnergyData = problem.energy
    pp = data.pairs[pair_index]
    if pp is None:
        raise ValueError("no TDP for this pair")
    option = problem.options[problem.pairs[pair_index].option_index]
    cluster = data.clusters[option.cluster_index]
    p = data.power
    scale = cluster.pue * option.num_gpus
    if metric == "co2":
        if cluster.gco2e_per_kwh is None:
            raise ValueError("no grid region for this cluster")
        scale *= cluster.gco2e_per_kwh / 1000.0 / J_PER_KWH
    c = pp.compute_fixed_s + accum_steps * pp.compute_micro_s
    x = pp.comm_only_fixed_s + accum_steps * pp.comm_only_micro_s
    a = scale * (pp.tdp_w * p.idle_frac + p.host_w_per_gpu)
    b = scale * pp.tdp_w * ((p.compute_frac - p.idle_frac) * c + (p.comm_frac - p.idle_frac) * x)
    return a, b


def plan_energy(problem: Problem, choices: Sequence[IslandChoice],
                wall_s: float) -> tuple[float | None, float | None]:
    """(energy_kwh, co2_kg) of a plan with wall time `wall_s` (None where unknown)."""
    data: EnergyData | None = problem.energy
    if (data is None or not choices
            or not all(data.pairs[c.pair_index] is not None for c in choices)):
        return None, None
    steps = problem.inner_steps_total
    joules, co2 = 0.0, 0.0
    co2_ok = True
    for choice in choices:
        a, b = island_coefficients(problem, choice.pair_index, choice.accum_steps)
        e = a * wall_s + steps * b
        joules += e
        option = problem.options[problem.pairs[choice.pair_index].option_index]
        intensity = data.clusters[option.cluster_index].gco2e_per_kwh
        if intensity is None:
            co2_ok = False
        else:
            co2 += e / J_PER_KWH * intensity / 1000.0
    return joules / J_PER_KWH, co2 if co2_ok else None


def require_metric(problem: Problem, metric: str) -> None:
    """Exit 2 when the instance cannot price `metric` (no TDP, no region)."""
    data: EnergyData | None = problem.energy
    if data is None or not data.energy_known:
        raise UserInputError(f"the energy of {problem.name!r} is unknown: a GPU has no TDP",
                             hint="use catalog GPUs or give the island table a tdp_w column.")
    if metric == "co2" and not data.co2_known:
        missing = [problem.clusters[i].name for i, c in enumerate(data.clusters)
                   if c.gco2e_per_kwh is None]
        raise UserInputError(f"the CO2 of {problem.name!r} is unknown: "
                             f"clusters {missing} have no region",
                             hint="add `region:` (a key of "
                                  "catalogs/energy/carbon_intensity.csv) to them.")
