"""What-if scenarios: one frontier per variant of an instance, every plan scored in every variant.

`--vary PATH=V1,V2,...` names a field of the instance file by a dotted path — clusters are
addressed by name or index (`clusters.A.wan_gbit_s`, `clusters.0.price.tier`), everything else by
its keys (`training.inner_steps`, `limits.max_islands`) — and a list of values (each read as YAML,
so `10`, `2.5`, `null`, `fp4`). Several `--vary` options form the Cartesian product. Each
scenario is a complete instance, validated like a file (a bad value exits 2 naming the path) and
solved independently, one task per scenario on the executor (`planner.executor`: the local process
pool by default, a dask.distributed cluster with `--executor dask://HOST:PORT`; the results in
scenario order whichever runs them).

Prices as users say them: `clusters.A.price_scale=0.7` scales a cluster's price, listed or
explicit (`planner.model.instance.Cluster.price_scale`), and `gpu.NAME.FIELD` sets FIELD on every
cluster whose `gpu` is NAME (`--vary gpu.H100-SXM5-80GB.price_scale=0.7`: "what if H100s were
30 % cheaper, wherever they are rented?"). Linked scenarios: `--scenario NAME:PATH=V,PATH=V`
(repeatable) is one named scenario that sets several paths together; the named scenarios and
`base` (the file as written) form one axis, crossed with the `--vary` axes.
Checked by: tests/test_price_scenarios.py (a scaled list price reprices the plans exactly; the GPU
path reaches every cluster of that type; a linked scenario equals both overrides at once).

Cross-evaluation: a plan (its islands: cluster, nodes, GPUs per node, micro-batch, accumulation
steps, and the row's layout and checkpointing columns where the table has them) is scored under
every scenario by the planner's one evaluator; where a scenario has no such island row, does not
admit its k, or the plan breaks its limits, the plan is infeasible there.

Regret. Of a frontier plan P in scenario j: C_j(P) / min{C_j(Q) : Q on j's frontier, W_j(Q) <=
W_j(P)} − 1, the extra cost over the cheapest plan that hindsight (knowing j) would have chosen at
least as fast; 0 on j's frontier, infinite where P is infeasible in j or slower than all of j's
frontier. Of a `plan` answer (a query's pick): the relative loss in the query's objective versus
scenario j's own pick (time for `--objective time`, cost otherwise), infinite where P breaks j's
budget, deadline or throughput floor. The robust choice is the plan of least maximum regret
(ties: least mean regret, then the order found).

Bands. Each scenario's own plans carry the p10/p90 band `plan` and `pareto` give (the same
fields, `planner.model.uncertainty.PlanBands`, and `*_lo`/`*_hi` with --interval): the worker
reads them off the scenario's own instance and island table (`plan_bands`, the shipped
residuals), so a scenario that changes prices, the WAN, the failure model or the clusters has
the band of what it changed. Why that is sound for every scenario kind: a scenario is a complete
instance, solved like a file, and a band is a property of one plan in one instance; where the
band does not apply (the failure model is on in that scenario, its island table has no
provenance column, a group has too few ratios) its plans say why in `interval_note`, exactly as
`plan` does. The regret and the robust choice stay on point estimates: they compare plans across
scenarios, and a band describes the step-time error of one plan, not which scenario happens
(`--quantile` is refused in a study for that reason: the regret of Q-figures would be another
study). Checked by: tests/test_plan_bands.py (a study's scenario records equal `plan`'s and
`pareto`'s bands of the same scenario instance; a failure scenario says why it has none).
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import itertools
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfmodel.facts import check_limit, parse_yaml, short_repr
from perfmodel.spec.errors import ConfigError, InfeasibleError, UserInputError, did_you_mean
from planner.analysis.pareto import Frontier, solve_instance
from planner.analysis.report import plan_label
from planner.executor import Executor, parse_executor, run_tasks
from planner.model.evaluate import evaluate, violations
from planner.model.instance import (
    gpu_prices,
    instance_from_mapping,
    load_instance,
    read_instance_yaml,
)
from planner.model.island_table import load_island_table
from planner.model.problem import IslandChoice, Plan, Problem
from planner.model.uncertainty import ErrorModel, PlanBands, plan_bands

LOG = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True, slots=True)
class Variation:
    """One `--vary PATH=V1,V2,...`."""

    path: str
    """Dotted path into the instance mapping."""
    values: tuple[Any, ...]
    """Values, parsed as YAML."""

    def __post_init__(self) -> None:
        if not self.path or not self.values:
            raise UserInputError(f"--vary {self.path!r}: needs a path and at least one value",
                                 hint="write --vary clusters.A.wan_gbit_s=1,10,100.")


@dataclass(frozen=True, kw_only=True, slots=True)
class Scenario:
    """One combination of varied values."""

    name: str
    """`path=value, ...` (or `base` when nothing varies)."""
    overrides: tuple[tuple[str, Any], ...]
    """(path, value) pairs applied to the instance mapping."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ScenarioResult:
    """A solved scenario."""

    instance_path: str
    """Instance file the scenario varies."""
    scenario: Scenario
    """What was varied."""
    problem: Problem | None
    """Its planning problem (None when it has no plan)."""
    frontier: Frontier | None
    """Its exact frontier (or the heuristic's points); None when it has no plan."""
    error: str = ""
    """Why the scenario has no plan (an infeasible scenario is an answer, not a failure)."""
    skipped: bool = False
    """Not solved: the study's time limit was spent before its turn (not proven anything)."""
    bands: PlanBands | None = None
    """The p10/p90 band of its plans (module docstring, "Bands"); None where it has no plan."""

    @property
    def points(self) -> tuple[Plan, ...]:
        """Frontier points (none for an infeasible scenario)."""
        return () if self.frontier is None else self.frontier.points


IslandKey = tuple[str, int, int, int, int, str, tuple[tuple[str, str], ...]]
"""One island of a plan across scenarios (`plan_key`): cluster, nodes, gpus_per_node,
micro_batch, accum_steps, price tier, and the row's layout and checkpointing columns."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ScoredPlan:
    """A plan scored under every scenario of one instance."""

    label: str
    """Readable island configuration."""
    found_in: tuple[str, ...]
    """Scenarios whose frontier (or answer) holds it."""
    wall_time_s: tuple[float, ...]
    """W under each scenario (inf: infeasible there)."""
    cost_usd: tuple[float, ...]
    """C under each scenario (inf: infeasible there)."""
    regret: tuple[float, ...]
    """Regret under each scenario (module docstring; inf: infeasible or no comparable plan)."""
    islands: tuple[IslandKey, ...] = field(default=())
    """(cluster, nodes, gpus_per_node, micro_batch, accum_steps, tier, variant) of each island
    (`plan_key`)."""

    @property
    def max_regret(self) -> float:
        """Worst regret over the scenarios."""
        return max(self.regret)

    @property
    def mean_regret(self) -> float:
        """Mean regret over the scenarios."""
        return sum(self.regret) / len(self.regret)


# ---- parsing and applying ------------------------------------------------------------------


def parse_vary(text: str) -> Variation:
    """`PATH=V1,V2,...` -> Variation (values parsed as YAML scalars)."""
    path, sep, values = text.partition("=")
    if not sep or not path.strip() or not values.strip():
        raise UserInputError(f"--vary {text!r}: expected PATH=V1,V2,...",
                             hint="write e.g. --vary clusters.A.wan_gbit_s=1,10,100.")
    parsed = []
    for raw in values.split(","):
        value = parse_yaml(raw.strip(), source=f"--vary {short_repr(text)}: value "
                           f"{short_repr(raw)}",
                           hint="quote nothing; separate values by commas.") \
            if raw.strip() else None
        parsed.append(value.isoformat() if isinstance(value, dt.date | dt.time) else value)
    return Variation(path=path.strip(), values=tuple(parsed))


def parse_linked(text: str) -> Scenario:
    """`NAME:PATH=V,PATH=V,...` (`--scenario`) -> one named Scenario setting every path."""
    name, sep, body = text.partition(":")
    example = "--scenario cheap-h100:clusters.A.price_scale=0.7,clusters.B.price_scale=0.7"
    if not sep or not name.strip() or not body.strip():
        raise UserInputError(f"--scenario {short_repr(text)}: expected NAME:PATH=V,PATH=V,...",
                             hint=f"write e.g. {example}.")
    pairs: list[tuple[str, Any]] = []
    for item in body.split(","):
        path, eq, raw = item.partition("=")
        if not eq or not path.strip() or not raw.strip():
            raise UserInputError(f"--scenario {name.strip()}: {short_repr(item)} is not PATH=V",
                                 hint=f"set one value per path, separated by commas: {example}.")
        value = parse_yaml(raw.strip(), source=f"--scenario {name.strip()}: value "
                           f"{short_repr(raw)}", hint="quote nothing; one value per path.")
        pairs.append((path.strip(), value.isoformat() if isinstance(value, dt.date | dt.time)
                      else value))
    paths = [p for p, _ in pairs]
    if len(set(paths)) != len(paths):
        raise UserInputError(f"--scenario {name.strip()} sets a path twice: {paths}",
                             hint="set each path once in a scenario.")
    return Scenario(name=name.strip(), overrides=tuple(pairs))


def scenarios_of(variations: Sequence[Variation],
                 linked: Sequence[Scenario] = ()) -> list[Scenario]:
    """The Cartesian product of the variations (one `base` scenario when there are none), crossed
    with the axis `base` + the named linked scenarios when there are any."""
    paths = [v.path for v in variations]
    if len(set(paths)) != len(paths):
        raise UserInputError(f"--vary names a path twice: {paths}",
                             hint="give each path once, with all its values.")
    names = [s.name for s in linked]
    if len(set(names)) != len(names) or "base" in names:
        raise UserInputError(f"--scenario names repeat or use 'base': {names}",
                             hint="give each --scenario its own name other than base (the file "
                                  "as written is always the scenario 'base').")
    clash = sorted({p for s in linked for p, _ in s.overrides} & set(paths))
    if clash:
        raise UserInputError(f"--scenario and --vary both set {clash}",
                             hint="set a path in the scenarios or vary it, not both.")
    axis = [Scenario(name="base", overrides=()), *linked] if linked else [None]
    out = []
    for named in axis:
        for combo in itertools.product(*(v.values for v in variations)):
            pairs = tuple(zip(paths, combo, strict=True))
            parts = ([] if named is None or (named.name == "base" and pairs) else [named.name])
            parts += [f"{p}={_show(v)}" for p, v in pairs]
            out.append(Scenario(name=", ".join(parts) or "base",
                                overrides=(named.overrides if named else ()) + pairs))
    return out


def _show(value: Any) -> str:
    return "null" if value is None else str(value)


def apply_overrides(raw: dict[str, Any], overrides: Sequence[tuple[str, Any]],
                    source: str) -> dict[str, Any]:
    """A deep copy of the instance mapping with each (path, value) set (a `gpu.NAME.FIELD` path
    on every cluster of that GPU type)."""
    out = copy.deepcopy(raw)
    seen: dict[str, str] = {}
    for path, value in overrides:
        for expanded in expand_path(out, path, source):
            field = _cluster_by_index(out, expanded)
            if field in seen:
                raise UserInputError(f"{path} and {seen[field]} both set {field} of {source}",
                                     hint="set each field once per scenario (a --scenario "
                                          "and a --vary, or a GPU path and a cluster path, "
                                          "reach the same cluster).")
            seen[field] = path
            _set(out, expanded, value, source)
    return out


def _cluster_by_index(raw: dict[str, Any], path: str) -> str:
    """`clusters.NAME.rest` as `clusters.I.rest` (I the cluster's index), to compare paths."""
    parts = path.split(".")
    clusters = raw.get("clusters")
    if len(parts) >= 2 and parts[0] == "clusters" and isinstance(clusters, list):
        for i, item in enumerate(clusters):
            if isinstance(item, dict) and str(item.get("name")) == parts[1]:
                return ".".join(["clusters", str(i), *parts[2:]])
    return path


def expand_path(raw: dict[str, Any], path: str, source: str) -> list[str]:
    """`gpu.NAME.FIELD[...]` -> `clusters.I.FIELD[...]` for every cluster I whose gpu is NAME
    (case-insensitive; NAME may hold dots); any other path as it is."""
    if not path.startswith("gpu."):
        return [path]
    rest = path.removeprefix("gpu.")
    clusters = raw.get("clusters") if isinstance(raw, dict) else None
    items = clusters if isinstance(clusters, list) else []
    gpus = sorted({str(c.get("gpu")) for c in items if isinstance(c, dict)})
    for gpu in sorted(gpus, key=len, reverse=True):
        if rest.lower().startswith(gpu.lower() + ".") and len(rest) > len(gpu) + 1:
            field = rest[len(gpu) + 1:]
            return [f"clusters.{i}.{field}" for i, c in enumerate(items)
                    if isinstance(c, dict) and str(c.get("gpu")).lower() == gpu.lower()]
    name = rest.rsplit(".", 1)[0] if "." in rest else rest
    raise UserInputError(f"{path}: {source} has no cluster with gpu {name!r} (GPU types: "
                         f"{', '.join(gpus)})",
                         hint=f"{_sentence(did_you_mean(name, gpus))} Write gpu.<GPU type>."
                              "<cluster field>, e.g. gpu.H100-SXM5-80GB.price_scale=0.7.")


def _sentence(text: str) -> str:
    """`text` ending as a sentence (a did-you-mean question keeps its question mark)."""
    return text if text.endswith(("?", ".")) else text + "."


def _set(raw: dict[str, Any], path: str, value: Any, source: str) -> None:
    parts = path.split(".")
    node: Any = raw
    for depth, part in enumerate(parts):
        last = depth == len(parts) - 1
        where = ".".join(parts[: depth + 1])
        if isinstance(node, list):
            node_index = _list_index(node, part, where, source)
            if last:
                node[node_index] = value
                return
            node = node[node_index]
        elif isinstance(node, dict):
            if last:
                node[part] = value  # unknown keys are caught by the instance schema
                return
            if part not in node or node[part] is None:
                node[part] = {}
            node = node[part]
        else:
            raise UserInputError(f"what-if path {path}: {source}: {'.'.join(parts[:depth])} is a "
                                 "value, not a mapping",
                                 hint="point the path at a field of the instance file.")


def _list_index(items: list[Any], part: str, where: str, source: str) -> int:
    for i, item in enumerate(items):
        if isinstance(item, dict) and str(item.get("name")) == part:
            return i
    if part.isdigit() and int(part) < len(items):
        return int(part)
    names = [str(i.get("name")) for i in items if isinstance(i, dict)]
    raise UserInputError(f"what-if path {where} (--vary / --scenario): {source} has no entry "
                         f"{part!r} (names: {names})",
                         hint="address a cluster by its name or its index.")


# ---- solving -----------------------------------------------------------------------------


def scenario_instance(instance_path: str, scenario: Scenario) -> Any:
    """The validated instance of one scenario (a bad path or value raises UserInputError)."""

    path = Path(instance_path)
    load_instance(path)  # the file itself must be valid first (its own errors, its own lines)
    raw = read_instance_yaml(path)
    varied = apply_overrides(raw, scenario.overrides, str(path))
    try:
        return instance_from_mapping(varied, path)
    except UserInputError as err:
        raise type(err)(f"scenario {scenario.name}: {err.message}", hint=err.hint) from err


def solve_scenario(instance_path: str, scenario: Scenario, solve: dict[str, Any]) -> ScenarioResult:
    """Load, vary and solve one scenario (runs in a worker process), with the bands of its plans
    (`solve["interval_level"]`: --interval, else the p10/p90 band only; `solve["error_model"]`:
    the residuals' model read once by `solve_all`, else read here). A scenario without any plan
    comes back with its reason; other errors propagate."""

    solve = dict(solve)
    level = solve.pop("interval_level", None)
    model = solve.pop("error_model", None)
    deadline = solve.pop("deadline", None)
    if deadline is not None:
        left = deadline - time.time()
        if left <= 0:
            return ScenarioResult(instance_path=str(instance_path), scenario=scenario,
                                  problem=None, frontier=None, skipped=True,
                                  error="not solved: --time-limit-s was spent on the scenarios "
                                        "before it (it bounds the whole study)")
        limit = solve.get("time_limit_s")
        solve["time_limit_s"] = left if limit is None else min(limit, left)
    instance = scenario_instance(instance_path, scenario)
    try:
        table = _scenario_table(instance_path, scenario, instance)
    except UserInputError as err:
        raise type(err)(f"scenario {scenario.name}: {err.message}", hint=err.hint) from err
    try:
        problem, frontier = solve_instance(instance, table, **solve)
    except InfeasibleError as err:
        return ScenarioResult(instance_path=str(instance_path), scenario=scenario, problem=None,
                              frontier=None, error=err.message)
    try:
        bands = plan_bands(instance, table, problem, model=model, level=level)
    except UserInputError as err:  # --interval where this scenario's plans can have no band
        raise type(err)(f"scenario {scenario.name}: {err.message}", hint=err.hint) from err
    return ScenarioResult(instance_path=str(instance_path), scenario=scenario, problem=problem,
                          frontier=frontier, bands=bands)


def _is_price_path(path: str) -> bool:
    """Does a (expanded) path set a cluster's price (price_usd_per_gpu_hour, price.*,
    price_scale)?"""
    parts = path.split(".")
    return len(parts) >= 3 and parts[0] == "clusters" and parts[2].startswith("price")


def _scenario_table(instance_path: str, scenario: Scenario, instance: Any) -> Any:
    """The scenario's island table. A CSV table carries the base prices in usd_per_hour, so when a
    scenario changes a cluster's price, the table is read as the base prices it was written for
    and the rows of every cluster are repriced: usd_per_hour = nodes x GPUs per node x the
    scenario's price per GPU-hour, or, for a cluster the table alone prices, its rows times the
    scenario's price_scale over the file's (a table built by the performance model is priced
    anew)."""

    path = Path(instance_path)
    expanded = list(scenario.overrides)
    if any(p.startswith("gpu.") for p, _ in expanded):  # which clusters a GPU path reaches
        raw = read_instance_yaml(path)
        expanded = [(e, v) for p, v in expanded for e in expand_path(raw, p, str(path))]
    priced = [p for p, _ in expanded if _is_price_path(p)]
    if instance.islands_table is None or not priced:
        return load_island_table(instance)
    rest = [(p, v) for p, v in expanded if not _is_price_path(p)]
    base = instance_from_mapping(apply_overrides(read_instance_yaml(path), rest, str(path)), path)
    table = load_island_table(base).copy()
    prices = gpu_prices(instance)
    for cluster in instance.clusters:
        rows = table["cluster"] == cluster.name
        if cluster.name in prices:
            table.loc[rows, "usd_per_hour"] = (table.loc[rows, "nodes"]
                                               * table.loc[rows, "gpus_per_node"]
                                               * prices[cluster.name])
        else:  # the table prices this cluster's islands: only its price_scale can change
            ratio = cluster.price_scale / base.cluster(cluster.name).price_scale
            table.loc[rows, "usd_per_hour"] = table.loc[rows, "usd_per_hour"] * ratio
    return table


def solve_all(instance_paths: Sequence[str], scenarios: Sequence[Scenario], solve: dict[str, Any],
              *, executor: str | Executor | None = None) -> list[ScenarioResult]:
    """Every (instance, scenario), one task each on `executor` (`planner.executor`; None: the
    local process pool), in that order whichever finishes first.

    Every scenario instance is validated here first, so a bad --vary fails before any solve. The
    workers get absolute paths (a dask worker may run in another directory)."""

    spec = parse_executor(executor)
    jobs = [(str(Path(p).resolve()), s) for p in instance_paths for s in scenarios]
    check_limit("scenarios", len(jobs), field="instances x --vary combinations")
    for path, scenario in jobs:
        scenario_instance(path, scenario)
    if solve.get("time_limit_s") is not None:  # the limit bounds the whole study, not each solve
        solve = {**solve, "deadline": time.time() + float(solve["time_limit_s"])}
    if spec.parallel(len(jobs)):
        solve = {**solve, "threads": 1}  # one process per core already
    # the residuals' model read and checked once, not once per scenario; where it cannot be
    # read, each scenario's plans say why they have no band (`plan_bands`)
    with contextlib.suppress(ConfigError):
        solve = {"error_model": ErrorModel.from_residuals(), **solve}
    results = run_tasks(solve_scenario, [(p, s, solve) for p, s in jobs], spec,
                        description="scenarios (--vary grid)")
    given = [str(p) for p in instance_paths for _ in scenarios]
    return [_as_given(r, path) for r, path in zip(results, given, strict=True)]


def _as_given(result: ScenarioResult, path: str) -> ScenarioResult:
    """The result under the instance path as the caller gave it (reports name that file)."""
    return ScenarioResult(instance_path=path, scenario=result.scenario, problem=result.problem,
                          frontier=result.frontier, error=result.error, skipped=result.skipped,
                          bands=result.bands)


# ---- cross-evaluation --------------------------------------------------------------------


def plan_key(plan: Plan) -> tuple[IslandKey, ...]:
    """What identifies a plan across scenarios: its islands (cluster, nodes, gpus_per_node,
    micro_batch, accum_steps, price tier, and the row's layout and checkpointing columns as
    (column, value) pairs, empty for a plain FSDP table)."""
    return tuple(sorted((i.cluster, i.nodes, i.gpus_per_node, i.micro_batch, i.accum_steps,
                         i.tier, i.variant) for i in plan.islands))


def rescore(problem: Problem | None, key: Sequence[tuple[Any, ...]]) -> Plan | None:
    """The plan with these islands evaluated in `problem`; None where it is infeasible there.
    An island is (cluster, nodes, gpus_per_node, micro_batch, accum_steps[, tier[, variant]]);
    without a tier it is the cluster's own price tier, without a variant a plain FSDP row."""
    if problem is None:
        return None
    index: dict[tuple[Any, ...], int] = {}
    for pi, pair in enumerate(problem.pairs):
        option = problem.options[pair.option_index]
        index[(option.cluster, option.nodes, option.gpus_per_node, pair.micro_batch,
               option.tier, pair.variant)] = pi
        index.setdefault((option.cluster, option.nodes, option.gpus_per_node, pair.micro_batch,
                          None, pair.variant), pi)  # options list a cluster's own tier first
    choices = []
    for island in key:
        cluster, nodes, gpn, m, k = island[:5]
        tier = island[5] if len(island) > 5 else None
        variant = island[6] if len(island) > 6 else ()
        found = index.get((cluster, nodes, gpn, m, tier, variant))
        if found is None or not problem.pairs[found].admits(k):
            return None
        choices.append(IslandChoice(pair_index=found, accum_steps=k))
    if violations(problem, choices):
        return None
    return evaluate(problem, choices)


def frontier_regret(plan: Plan | None, frontier: Sequence[Plan]) -> float:
    """Regret of a rescored plan against one scenario's frontier (module docstring)."""
    if plan is None:
        return math.inf
    faster = [q.cost_usd for q in frontier if q.wall_time_s <= plan.wall_time_s]
    if not faster or min(faster) <= 0:
        return math.inf if not faster else 0.0
    return max(0.0, plan.cost_usd / min(faster) - 1.0)


def score_frontiers(results: Sequence[ScenarioResult]) -> list[ScoredPlan]:
    """Every frontier plan of the scenarios of one instance, scored under all of them."""
    return _score(results, [[(r.scenario.name, p) for p in r.points] for r in results],
                  lambda rescored, j: frontier_regret(rescored, results[j].points))


def score_answers(results: Sequence[ScenarioResult], answers: Sequence[Plan | None], objective: str,
                  admissible: Sequence[Any]) -> list[ScoredPlan]:
    """Each scenario's query answer scored under all scenarios (`admissible[j](plan)`: does the
    plan meet scenario j's constraints, e.g. its throughput floor)."""
    def regret(rescored: Plan | None, j: int) -> float:
        best = answers[j]
        if rescored is None or best is None or not admissible[j](rescored):
            return math.inf
        if objective == "time":
            return max(0.0, rescored.wall_time_s / best.wall_time_s - 1.0)
        return max(0.0, rescored.cost_usd / best.cost_usd - 1.0) if best.cost_usd > 0 else 0.0

    found = [[(r.scenario.name, a)] if a is not None else []
             for r, a in zip(results, answers, strict=True)]
    return _score(results, found, regret)


def _score(results: Sequence[ScenarioResult], found: Sequence[Sequence[tuple[str, Plan]]],
           regret: Any) -> list[ScoredPlan]:

    order: list[tuple[Any, ...]] = []
    origin: dict[tuple[Any, ...], list[str]] = {}
    labels: dict[tuple[Any, ...], str] = {}
    for plans in found:
        for name, plan in plans:
            key = plan_key(plan)
            if key not in origin:
                order.append(key)
                origin[key] = []
                labels[key] = plan_label(plan,
                                         next((r.problem for r in results if r.problem), None))
            if name not in origin[key]:
                origin[key].append(name)
    out = []
    for key in order:
        rescored = [rescore(r.problem, key) for r in results]
        out.append(ScoredPlan(
            label=labels[key], found_in=tuple(origin[key]), islands=key,
            wall_time_s=tuple(math.inf if p is None else p.wall_time_s for p in rescored),
            cost_usd=tuple(math.inf if p is None else p.cost_usd for p in rescored),
            regret=tuple(regret(p, j) for j, p in enumerate(rescored))))
    return out


def robust(scored: Sequence[ScoredPlan]) -> ScoredPlan | None:
    """The min-max-regret plan (ties: least mean regret, then first found)."""
    if not scored:
        return None
    return min(enumerate(scored), key=lambda e: (e[1].max_regret, e[1].mean_regret, e[0]))[1]
