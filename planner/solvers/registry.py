"""Solver names and what each one is: the one table the frontier code dispatches through.

Two kinds of backend answer the planning problem (DESIGN §3):

* oracle backends (cpsat, milp, brute) answer "the cheapest plan with W <= ε"; the
  epsilon-constraint loop (`planner.analysis.pareto.epsilon_frontier`) calls them until the
  frontier is traced. CP-SAT and MILP run behind the staircase walk (`planner.solvers.oracle`),
  each cross-checked by the DP where it applies, else by the other MILP/CP backend;
* frontier backends (dp, heuristic) return a whole frontier at once.

`auto` is the DP where the problem's structure allows it, else CP-SAT. With the failure model on
(`Problem.risk`) the objectives are expected values that CP-SAT and MILP cannot express exactly:
`dp` (then `planner.solvers.expected`) and `brute` are the exact backends, `heuristic` the
baseline. Adding a backend means one entry in `BACKENDS`; `planner.analysis.pareto.compute_frontier`
never names a backend.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass

from perfmodel.spec.errors import UserInputError
from planner.model.evaluate import nondominated
from planner.model.problem import Plan, Problem
from planner.solvers.baselines import BruteForce, heuristic_plans
from planner.solvers.cpsat import CpSatSubsolver
from planner.solvers.dp import dp_frontier, dp_unsupported
from planner.solvers.expected import expected_frontier
from planner.solvers.milp import MilpSubsolver, highs_available
from planner.solvers.oracle import (
    CostOracle,
    StaircaseOracle,
    Subsolver,
    dp_checker,
    subsolver_checker,
)

LOG = logging.getLogger(__name__)

MILP_BACKENDS = ("highs", "cbc")
"""MILP solvers behind PuLP: HiGHS (highspy, the default) or CBC (bundled, the fallback)."""
DEFAULT_TIME_LIMIT_S = 300.0
"""Total solve time of a frontier when none is given; a frontier cut short says it is not exact."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SolverSettings:
    """How a backend runs."""

    threads: int
    """Solver threads (CP-SAT workers, MILP threads)."""
    time_limit_s: float
    """Total solve time; a backend cut short reports its result not proven exact."""
    milp_backend: str = "highs"
    """MILP solver behind PuLP (MILP_BACKENDS)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class WholeFrontier:
    """What a frontier backend returns."""

    points: tuple[Plan, ...]
    """Non-dominated plans within the problem's budget and deadline."""
    proven_exact: bool
    """True when the backend is exact and finished."""
    note: str = ""
    """Why the points are not proven exact (empty when they are)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Backend:
    """One solver name: exactly one of `oracle` and `frontier` is set."""

    name: str
    """The `--solver` value."""
    exact: bool
    """Whether the backend is an exact method."""
    summary: str
    """One line for help texts."""
    oracle: Callable[[Problem, SolverSettings], CostOracle] | None = None
    """The exact oracle the epsilon-constraint loop calls."""
    frontier: Callable[[Problem, SolverSettings], WholeFrontier] | None = None
    """The whole frontier at once."""

    def __post_init__(self) -> None:
        if (self.oracle is None) == (self.frontier is None):
            raise ValueError(f"backend {self.name!r}: give exactly one of oracle and frontier")

    def make_oracle(self, problem: Problem, settings: SolverSettings) -> CostOracle:
        """The oracle of an oracle backend (ValueError for a frontier backend)."""
        if self.oracle is None:
            raise ValueError(f"backend {self.name!r} returns whole frontiers, not an oracle")
        return self.oracle(problem, settings)


def _milp(problem: Problem, threads: int, backend: str) -> Subsolver:
    if backend == "highs" and not highs_available():
        LOG.warning("HiGHS (highspy) is not installed: using CBC for the MILP backend")
        backend = "cbc"
    return MilpSubsolver(problem, threads=threads, backend=backend)


def _cpsat(problem: Problem, s: SolverSettings) -> CostOracle:
    checker = dp_checker(problem) or subsolver_checker(
        problem, _milp(problem, s.threads, s.milp_backend))
    return StaircaseOracle(problem, CpSatSubsolver(problem, threads=s.threads),
                           time_limit_s=s.time_limit_s, checker=checker)


def _milp_oracle(problem: Problem, s: SolverSettings) -> CostOracle:
    checker = dp_checker(problem) or subsolver_checker(
        problem, CpSatSubsolver(problem, threads=s.threads))
    return StaircaseOracle(problem, _milp(problem, s.threads, s.milp_backend),
                           time_limit_s=s.time_limit_s, checker=checker)


def _brute(problem: Problem, s: SolverSettings) -> CostOracle:
    return BruteForce(problem, reduce=True)


def _dp(problem: Problem, s: SolverSettings) -> WholeFrontier:
    if problem.risk is not None:
        expected = expected_frontier(problem, time_limit_s=s.time_limit_s)
        return WholeFrontier(points=expected.points, proven_exact=expected.proven_exact,
                             note=expected.note)
    result = dp_frontier(problem, time_limit_s=s.time_limit_s)
    return WholeFrontier(points=result.points, proven_exact=result.proven_exact,
                         note="" if result.proven_exact
                         else f"the DP sweep hit the {s.time_limit_s:g} s time limit")


def _heuristic(problem: Problem, s: SolverSettings) -> WholeFrontier:
    plans, _ = heuristic_plans(problem)
    return WholeFrontier(points=tuple(nondominated(plans)), proven_exact=False,
                         note="heuristic (not an exact method)")


BACKENDS: dict[str, Backend] = {b.name: b for b in (
    Backend(name="dp", exact=True, frontier=_dp,
            summary="exact DP: per-cluster knapsacks and a level sweep (planner.solvers.dp)"),
    Backend(name="cpsat", exact=True, oracle=_cpsat,
            summary="OR-Tools CP-SAT staircase, cross-checked (planner.solvers.cpsat)"),
    Backend(name="milp", exact=True, oracle=_milp_oracle,
            summary="HiGHS/CBC MILP staircase through PuLP, cross-checked (planner.solvers.milp)"),
    Backend(name="brute", exact=True, oracle=_brute,
            summary="enumeration of every plan: the reference (planner.solvers.baselines)"),
    Backend(name="heuristic", exact=False, frontier=_heuristic,
            summary="the paper's proportional split: a baseline, not exact"),
)}
SOLVERS = ("auto", *BACKENDS)
"""auto: the exact DP where the problem's structure allows it (`planner.solvers.dp`), else
CP-SAT."""


def default_threads() -> int:
    """Solver threads when none are given: the machine's CPUs (at most 8)."""
    return max(1, min(8, os.cpu_count() or 1))


def resolve_solver(problem: Problem, solver: str) -> Backend:
    """The backend of a name: `auto` becomes dp or cpsat; `dp` on a problem the DP cannot take is
    a user error."""
    reason = dp_unsupported(problem)
    if problem.risk is not None:
        if solver in ("auto", "dp") and reason is not None:
            raise UserInputError(f"with failures modelled, {problem.name!r} needs the exact DP, "
                                 f"which cannot solve it: {reason}",
                                 hint="drop limits.max_gpus (or shrink the instance), or use "
                                      "--solver brute on a small instance.")
        if solver in ("cpsat", "milp"):
            raise UserInputError(f"--solver {solver} cannot optimise expected values under "
                                 "failures exactly",
                                 hint="use --solver auto (the DP), brute or heuristic.")
        if solver == "auto":
            solver = "dp"
    if solver == "auto":
        solver = "dp" if reason is None else "cpsat"
    elif solver == "dp" and reason is not None:
        raise UserInputError(f"--solver dp cannot solve {problem.name!r}: {reason}",
                             hint="use --solver auto or cpsat.")
    if solver not in BACKENDS:
        raise UserInputError(f"unknown solver {solver!r}",
                             hint=f"use one of {', '.join(SOLVERS)}.")
    return BACKENDS[solver]
