"""Power, energy and CO2 of simulated training (issue 14; DESIGN §3 "energy").

Per GPU the power depends on what the simulated step is doing (`perfmodel.sim.graph.Schedule`):

* compute busy (the compute stream runs):        P_compute = compute_frac · TDP
* communication only (a collective runs, compute waits): P_comm = comm_frac · TDP
* idle (neither: waiting for the slowest island, the DiLoCo sync, or a dependency):
                                                  P_idle = idle_frac · TDP

Per node the host (CPUs, memory, NICs, fans) draws `host_w_per_gpu` for every GPU slot the island
uses, for the whole step. Per data centre the PUE multiplies everything. The energy of one island
step is the integral of that power over the simulated timeline; of a plan, the sum over islands
and inner steps, where every island also idles while it waits for the slowest island (τ − t_i)
and for the blocking outer sync (σ/H per inner step): rented GPUs stay powered.

Assumptions (defaults of `PowerAssumptions`, each with its source; the bench records measured
energy where a device exposes it, so a lent GPU can replace them):

* compute_frac = 1.0: a training GPU at its TDP — the convention of Meta's Llama 3 model card
  ("peak power capacity per GPU device", 700 W for H100-80GB) and of most published estimates.
* host_w_per_gpu = 269 W: chosen so that an 8 x H100 DGX node at TDP plus host draws the
  measured 76 % of its 10.2 kW rating during compute-intensive training (Latif et al. 2025,
  "Empirically-Calibrated H100 Node Power Models", arXiv 2506.14551): (0.76·10.2 kW − 8·700 W)/8.
* idle_frac = 0.12: an idle H200 drew 80 W of its 700 W TDP in a public measurement (assumption;
  no peer-reviewed source found; the NVML bench calibrates it).
* comm_frac = 0.35: NCCL kernels keep some SMs and the HBM busy while compute waits
  (assumption without a source; stated so it can be measured and replaced).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from perfmodel.sim.graph import Schedule
from perfmodel.spec.errors import UserInputError
from perfmodel.spec.formulas import J_PER_KWH


def _check_fraction(name: str, value: float, high: float = 1.5) -> None:
    ok = not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)
    if not ok or not 0.0 <= value <= high:
        raise UserInputError(f"PowerAssumptions.{name} is {value!r}",
                             hint=f"set {name} to a finite number in [0, {high}].")


@dataclass(frozen=True, kw_only=True, slots=True)
class PowerAssumptions:
    """Fractions of TDP per GPU state and the host share (module docstring gives the sources)."""

    compute_frac: float = 1.0
    """GPU power while the compute stream runs, as a fraction of TDP."""
    comm_frac: float = 0.35
    """GPU power while only a collective runs, as a fraction of TDP."""
    idle_frac: float = 0.12
    """GPU power while idle (waiting), as a fraction of TDP."""
    host_w_per_gpu: float = 269.0
    """Host power (CPUs, memory, NICs, fans) per GPU slot used, watts."""

    def __post_init__(self) -> None:
        for name in ("compute_frac", "comm_frac", "idle_frac"):
            _check_fraction(name, getattr(self, name))
        if not (self.idle_frac <= self.comm_frac <= self.compute_frac):
            raise UserInputError(
                f"PowerAssumptions need idle_frac <= comm_frac <= compute_frac, got "
                f"{self.idle_frac}, {self.comm_frac}, {self.compute_frac}",
                hint="order the fractions idle <= comm <= compute.")
        _check_fraction("host_w_per_gpu", self.host_w_per_gpu, high=5000.0)


DEFAULT_POWER = PowerAssumptions()


@dataclass(frozen=True, kw_only=True, slots=True)
class StepActivity:
    """What one GPU of an island does during one inner step, in seconds."""

    step_s: float
    """Wall time of the step."""
    compute_s: float
    """Time the compute stream is busy."""
    comm_only_s: float
    """Time a collective runs while compute waits (exposed communication)."""

    def __post_init__(self) -> None:
        values = (self.step_s, self.compute_s, self.comm_only_s)
        if not all(math.isfinite(v) and v >= 0 for v in values):
            raise ValueError(f"StepActivity needs finite non-negative times, got {values}")
        if self.compute_s + self.comm_only_s > self.step_s * (1 + 1e-9) + 1e-12:
            raise ValueError(f"compute {self.compute_s} + comm-only {self.comm_only_s} s exceed "
                             f"the step {self.step_s} s")

    @property
    def idle_s(self) -> float:
        """Time the GPU neither computes nor communicates."""
        return max(self.step_s - self.compute_s - self.comm_only_s, 0.0)


def activity_from_schedule(schedule: Schedule, island: str | None = None) -> StepActivity:
    """Busy, communication-only and idle time of one island's simulated step."""
    compute_s = schedule.busy_s(comm=False, island=island)
    comm_only_s = schedule.exposed_comm_s(island)
    return StepActivity(step_s=schedule.makespan_s, compute_s=compute_s,
                        comm_only_s=min(comm_only_s, schedule.makespan_s - compute_s))


def gpu_energy_j(activity: StepActivity, *, tdp_w: float,
                 power: PowerAssumptions = DEFAULT_POWER) -> float:
    """IT energy of one GPU (its host share included) over one step, joules, before PUE."""
    if not (math.isfinite(tdp_w) and tdp_w > 0):
        raise UserInputError(f"GPU TDP is {tdp_w!r} W", hint="give a positive finite TDP in watts.")
    gpu = tdp_w * (power.compute_frac * activity.compute_s + power.comm_frac * activity.comm_only_s
                   + power.idle_frac * activity.idle_s)
    return gpu + power.host_w_per_gpu * activity.step_s


def idle_power_w(*, tdp_w: float, power: PowerAssumptions = DEFAULT_POWER) -> float:
    """IT power of one waiting GPU with its host share, watts, before PUE."""
    return tdp_w * power.idle_frac + power.host_w_per_gpu


def island_step_energy_j(activity: StepActivity, *, num_gpus: int, tdp_w: float, pue: float,
                         wait_s: float = 0.0, power: PowerAssumptions = DEFAULT_POWER) -> float:
    """Facility energy of an island of `num_gpus` GPUs over one inner step plus `wait_s` of idle
    waiting (for the slowest island and the amortised outer sync), joules."""
    if isinstance(num_gpus, bool) or num_gpus < 1:
        raise ValueError(f"num_gpus must be >= 1, got {num_gpus!r}")
    if not (math.isfinite(pue) and pue >= 1.0):
        raise UserInputError(f"PUE is {pue!r}", hint="give a PUE >= 1 (1.0 = no overhead).")
    if not (math.isfinite(wait_s) and wait_s >= 0):
        raise ValueError(f"wait_s must be finite and >= 0, got {wait_s!r}")
    per_gpu = gpu_energy_j(activity, tdp_w=tdp_w, power=power) + idle_power_w(
        tdp_w=tdp_w, power=power) * wait_s
    return pue * num_gpus * per_gpu


def co2_kg(energy_j: float, gco2e_per_kwh: float) -> float:
    """Emissions of `energy_j` joules at a grid intensity of `gco2e_per_kwh`, kilograms CO2e."""
    if not (math.isfinite(gco2e_per_kwh) and gco2e_per_kwh >= 0):
        raise UserInputError(f"carbon intensity is {gco2e_per_kwh!r} gCO2e/kWh",
                             hint="give a finite non-negative grid intensity.")
    return energy_j / J_PER_KWH * gco2e_per_kwh / 1000.0
