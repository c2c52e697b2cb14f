"""Per-island throughput/cost tables: the one thing the planner consumes (DESIGN §3).

For every island option (cluster, nodes n = 1..num_nodes, g in allowed_gpus_per_node) and every
micro-batch m = 1..(largest that fits the GPU's usable memory) one row:

    cluster, gpu_type, nodes, gpus_per_node, micro_batch, microstep_s, step_fixed_s,
    usd_per_hour, memory_gib, bound, provenance

microstep_s / step_fixed_s are the exact decomposition of the FSDP step graph (perfmodel.sim.fsdp),
evaluated by the vectorised fast path; usd_per_hour = n·g·usd_per_gpu_hour; memory_gib is the
predicted peak per GPU; bound is the regime of a single-micro-step step (perfmodel.sim.analysis);
provenance is the profile's ('measured' or 'prior').

This module is also the planner's one door into the performance model and its catalogs (DESIGN
§1: `planner` imports perfmodel only through `perfmodel.tables`, `perfmodel.spec.formulas` and
`perfmodel.spec.errors`): it re-exports the energy facts (TDP, PUE, grid intensity), the power
assumptions and units, and fronts the model/GPU/price catalogs with thin functions that import
`perfmodel.spec.catalog` when called (a planner without catalogs still loads instances with tables).
One home per formula: nothing here is copied, every name is the catalog's own.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from perfmodel import progress
from perfmodel.costs.memory import max_micro_batch, memory_coefficients
from perfmodel.profiles.profile import HardwareProfile, default_profile
from perfmodel.sim.analysis import classify_regime
from perfmodel.sim.fastpath import FastCosts, concat_fast_costs, fast_step, model_fast_costs
from perfmodel.sim.fsdp import resolve_recipe
from perfmodel.sim.layouts import LAYOUT_COLUMNS, IslandLayouts, drop_dominated, island_layout_rows
from perfmodel.spec.arch import ModelSpec
from perfmodel.spec.catalog import get_gpu, get_model
from perfmodel.spec.energy_catalog import gpu_tdp_w
from perfmodel.spec.errors import UserInputError
from perfmodel.spec.formulas import GIB
from perfmodel.spec.hardware import ClusterSpec
from perfmodel.spec.inputs import LIMITS
from perfmodel.spec.layout_space import LayoutSpace
from perfmodel.spec.recipe import (
    DEFAULT_RECIPE,
    TrainingRecipe,
    canonical_ac,
    recipe_from_mapping,
)

__all__ = ["IDENTITY_COLUMNS", "LAYOUT_TABLE_COLUMNS", "TABLE_COLUMNS", "ClusterRequest",
           "Exclusion", "ModelTable", "TableIdentity", "build_island_table", "build_layout_table",
           "checkpoint_mode", "gpu_profile", "island_table_for", "recipe_key", "table_identity"]

logger = logging.getLogger(__name__)

TABLE_COLUMNS = ("cluster", "gpu_type", "nodes", "gpus_per_node", "micro_batch", "microstep_s",
                 "step_fixed_s", "usd_per_hour", "memory_gib", "bound", "provenance",
                 "memory_accum_gib", "accum_fits", "compute_fixed_s", "compute_micro_s",
                 "comm_only_fixed_s", "comm_only_micro_s", "tdp_w")
"""memory_gib is the peak at k = 1; memory_accum_gib the peak at any k >= 2 (the same for every
k >= 2: the last micro-step holds what earlier ones accumulated) in the recipe's accumulation
mode; accum_fits says whether that fits the GPU (the planner keeps k = 1 where it does not).

The activity split of the step (issue 14, for the power model): compute-stream busy time
C(k) = compute_fixed_s + k·compute_micro_s and communication-only time
X(k) = comm_only_fixed_s + k·comm_only_micro_s. The step graph is a list schedule (a task starts
when its predecessors end), so one island's step has no moment where neither stream runs:
X(k) = T(k) − C(k), and both are linear in k because T(k) and C(k) are (perfmodel.sim.fastpath).
tdp_w is the GPU's datasheet TDP (NaN when the catalog gives none)."""


def build_island_table(model: ModelSpec, *, seq_len: int, ac: str | None = None,
                       clusters: Sequence[ClusterSpec],
                       profiles: Mapping[str, HardwareProfile] | None = None,
                       recipe: TrainingRecipe | None = None,
                       global_batch_seqs: int | None = None) -> pd.DataFrame:
    """The island table of `model` over `clusters` (profiles keyed by GPU name; default: the GPU's
    default profile, measured beating prior) for `recipe` (default torchtitan; `ac` overrides its
    checkpointing mode).

    With `global_batch_seqs` B, micro-batches m with m·n·g > B are left out: an island's
    sequences per inner step are a share of the batch, so no plan can use them (exact). A table
    above LIMITS['table_rows'] rows is refused while it is built (memory stays bounded)."""

    model.check_step_modelled("an island table")
    recipe = resolve_recipe(recipe, ac)
    if not recipe.parallel.is_default:
        raise UserInputError(
            f"island tables price FSDP islands; the recipe's layout "
            f"(tp {recipe.parallel.tp}, pp {recipe.parallel.pp}, cp {recipe.parallel.cp}, "
            f"dp_replicate {recipe.parallel.dp_replicate}) is not one",
            hint="remove the recipe's parallel: section for island tables, or plan layouts "
                 "with the layout-aware planner.")
    ac = recipe.ac
    if seq_len < 1:
        raise ValueError(f"seq_len must be >= 1, got {seq_len}")
    costs: list[FastCosts] = []
    meta: list[dict[str, Any]] = []
    rows = 0
    for cluster in progress.track(clusters, f"island table of {model.name}, by cluster"):
        profile = _profile_for(cluster.gpu.name, profiles)
        for nodes in range(1, cluster.num_nodes + 1):
            for gpn in cluster.allowed_gpus_per_node:
                gpus = nodes * gpn
                largest = max_micro_batch(model, gpu_memory_bytes=cluster.gpu.usable_memory_bytes,
                                          num_gpus=gpus, seq_len=seq_len, recipe=recipe)
                if global_batch_seqs is not None:
                    largest = min(largest, global_batch_seqs // gpus)
                if largest < 1:
                    logger.info("%s %dx%d: not even micro-batch 1 fits (or the batch is smaller "
                                "than the island); no rows", cluster.name, nodes, gpn)
                    continue
                rows += largest
                if rows > LIMITS["table_rows"].maximum:
                    limit = LIMITS["table_rows"]
                    raise UserInputError(
                        f"the island table of {model.name} would have more than "
                        f"{limit.maximum:,.0f} rows (every node count x GPUs per node x "
                        f"micro-batch that fits; {limit.reason})",
                        hint="lower the clusters' num_nodes or allowed_gpus_per_node, or "
                             "global_batch_seqs (micro-batches above B/(n·g) are not tabulated).")
                mb = np.arange(1, largest + 1)
                costs.append(model_fast_costs(model, profile, cluster.island(nodes, gpn),
                                              seq_len=seq_len, micro_batches=mb, recipe=recipe))
                peak = memory_coefficients(model, num_gpus=gpus, seq_len=seq_len,
                                           recipe=recipe).peak_bytes(mb)
                accum_peak = memory_coefficients(model, num_gpus=gpus, seq_len=seq_len,
                                                 recipe=recipe, accum_steps=2).peak_bytes(mb)
                meta.append({"cluster": cluster.name, "gpu_type": cluster.gpu.name, "nodes": nodes,
                             "gpus_per_node": gpn, "micro_batch": mb,
                             "usd_per_hour": gpus * cluster.usd_per_gpu_hour,
                             "memory_gib": peak / GIB,
                             "memory_accum_gib": accum_peak / GIB,
                             "accum_fits": accum_peak <= cluster.gpu.usable_memory_bytes,
                             "tdp_w": gpu_tdp_w(cluster.gpu.name) or float("nan"),
                             "provenance": profile.provenance})
    if not costs:
        return pd.DataFrame({c: [] for c in TABLE_COLUMNS})
    fast = fast_step(concat_fast_costs(costs))
    frame = pd.concat([pd.DataFrame(m) for m in meta], ignore_index=True)
    frame["microstep_s"] = fast.microstep_s
    frame["step_fixed_s"] = fast.step_fixed_s
    frame["compute_fixed_s"] = fast.step_fixed_compute_s
    frame["compute_micro_s"] = fast.microstep_compute_s
    frame["comm_only_fixed_s"] = fast.step_fixed_s - fast.step_fixed_compute_s
    frame["comm_only_micro_s"] = fast.microstep_s - fast.microstep_compute_s
    frame["bound"] = classify_regime(fast.step_time_s(1), fast.compute_busy_s(1),
                                     fast.comm_busy_s(1))
    frame = frame.loc[:, list(TABLE_COLUMNS)]
    # what every row trains, for callers that report it
    frame.attrs["recipe"] = recipe.to_dict()
    return frame


LAYOUT_TABLE_COLUMNS = (*TABLE_COLUMNS, *LAYOUT_COLUMNS, "worst_stage")
"""A layout table's columns: TABLE_COLUMNS, then each row's layout and checkpointing
(`perfmodel.sim.layouts.LAYOUT_COLUMNS`: sequences per micro-step m·dp, admissible k from
min_accum to max_accum (empty: unbounded) in steps of accum_multiple), then the pipeline's worst
stage ('' without a pipeline). T(k), C(k) and X(k) are affine in k for every admissible k."""


def build_layout_table(model: ModelSpec, *, seq_len: int, clusters: Sequence[ClusterSpec],
                       space: LayoutSpace, recipe: TrainingRecipe | None = None,
                       profiles: Mapping[str, HardwareProfile] | None = None,
                       global_batch_seqs: int | None = None,
                       island_nodes: Mapping[str, Sequence[int]] | None = None
                       ) -> tuple[pd.DataFrame, tuple[Exclusion, ...]]:
    """The island table over layouts and checkpointing modes (`perfmodel.sim.layouts`): one row
    per (option, layout, mode, micro-batch) that fits, exactly dominated rows removed per
    option, and an `Exclusion` for every option and cluster with no row (its binding limit and
    the smallest fix found: another checkpointing mode, more model parallelism, more GPUs)."""
    model.check_step_modelled("an island table")
    recipe = resolve_recipe(recipe, None)
    frames: list[pd.DataFrame] = []
    excluded: list[Exclusion] = []
    rows = 0
    # An island's rows and exclusion depend on its profile (one per GPU name) and its
    # IslandSpec (GPU, nodes, GPUs per node, links), not on the cluster's name, price or WAN:
    # islands of equal (GPU name, IslandSpec) in several clusters are built once and share the
    # rows (exact: the same function of the same inputs; benchmarks/compare_layout_tables.py).
    built: dict[tuple[str, Any], tuple[pd.DataFrame, Exclusion | None]] = {}
    for cluster in progress.track(clusters, f"layout table of {model.name}, by cluster"):
        profile = _profile_for(cluster.gpu.name, profiles)
        counts = tuple((island_nodes or {}).get(cluster.name, ())) or tuple(
            range(1, cluster.num_nodes + 1))
        mine: list[Exclusion] = []
        for nodes in counts:
            for gpn in cluster.allowed_gpus_per_node:
                island = cluster.island(nodes, gpn)
                key = (cluster.gpu.name.lower(), island)
                if key not in built:
                    # candidates the batch alone rejects skip their memory walk; an island left
                    # with no row is asked again for every candidate's reason (its exclusion)
                    result = island_layout_rows(model, profile, island, seq_len=seq_len,
                                                space=space, recipe=recipe,
                                                global_batch_seqs=global_batch_seqs,
                                                skip_rejected=True)
                    table = drop_dominated(result.rows)
                    why = None
                    if table.empty:
                        result = island_layout_rows(model, profile, island, seq_len=seq_len,
                                                    space=space, recipe=recipe,
                                                    global_batch_seqs=global_batch_seqs)
                        why = _exclusion(model, profile, cluster, island, seq_len, space, recipe,
                                         result, global_batch_seqs)
                    built[key] = (table, why)
                table, why = built[key]
                if why is not None:
                    mine.append(replace(why, cluster=cluster.name))
                    continue
                rows += len(table)
                if rows > LIMITS["table_rows"].maximum:
                    limit = LIMITS["table_rows"]
                    raise UserInputError(
                        f"the island table of {model.name} would have more than "
                        f"{limit.maximum:,.0f} rows ({limit.reason})",
                        hint="restrict the layouts (training.parallel: max_tp, max_pp, "
                             "schedules), the checkpointing modes, or the clusters' "
                             "island_nodes.")
                frames.append(table.assign(
                    cluster=cluster.name, gpu_type=cluster.gpu.name, nodes=nodes,
                    gpus_per_node=gpn, usd_per_hour=nodes * gpn * cluster.usd_per_gpu_hour,
                    tdp_w=gpu_tdp_w(cluster.gpu.name) or float("nan"),
                    provenance=profile.provenance))
        if mine and len(mine) == len(counts) * len(cluster.allowed_gpus_per_node):
            largest = mine[-1]
            excluded.append(Exclusion(cluster=cluster.name, nodes=None, gpus_per_node=None,
                                      reason=f"no island of it has a row: at its largest "
                                             f"({largest.nodes} x {largest.gpus_per_node}) "
                                             f"{largest.reason}", fix=largest.fix))
        excluded.extend(mine)
    if not frames:
        return pd.DataFrame({c: [] for c in LAYOUT_TABLE_COLUMNS}), tuple(excluded)
    frame = pd.concat(frames, ignore_index=True).loc[:, list(LAYOUT_TABLE_COLUMNS)]
    # the column contract's "no memory bound on k" is an empty cell (the rows' 0)
    frame["max_accum"] = frame["max_accum"].where(frame["max_accum"] > 0)
    frame.attrs["recipe"] = recipe.to_dict()
    return frame, tuple(excluded)


def _exclusion(model: ModelSpec, profile: HardwareProfile, cluster: ClusterSpec, island: Any,
               seq_len: int, space: LayoutSpace, recipe: TrainingRecipe, result: IslandLayouts,
               global_batch_seqs: int | None) -> Exclusion:
    """Why an option has no row, and the smallest change found that gives it one: another
    checkpointing mode (same layouts), then more model parallelism (any layout, same modes),
    then fewer GPUs (batch) or more GPUs (memory)."""
    where = dict(cluster=cluster.name, nodes=island.num_nodes, gpus_per_node=island.gpus_per_node)
    if not result.rejected:
        return Exclusion(**where, reason="no layout of the instance's space applies to "
                                         f"{island.num_gpus} GPUs of this model",
                         fix="allow other tp/pp degrees in training.parallel")
    memory = [r for r in result.rejected if r.over_bytes > 0]
    if not memory:
        first = result.rejected[0]
        return Exclusion(**where, reason=first.reason,
                         fix="use fewer GPUs per island, more model parallelism (tp, pp) or a "
                             "larger global batch")
    closest = min(memory, key=lambda r: r.over_bytes)
    reason = f"{closest.layout.describe()}, ac {closest.ac}: {closest.reason}"
    modes = [m for m in ("op-sac", "layer:2", "full") if m not in (space.checkpointing
                                                                   or (recipe.ac,))]
    for mode in modes:
        trial = replace(space, checkpointing=(mode,))
        if _fits_some(model, profile, island, seq_len, trial, recipe, global_batch_seqs):
            return Exclusion(**where, reason=reason,
                             fix=f"checkpointing {mode} fits (activation_checkpointing: {mode})")
    free = LayoutSpace.parse({}, list(space.checkpointing) or None)
    fits = _best_fit(model, profile, island, seq_len, free, recipe, global_batch_seqs)
    if fits is not None:
        return Exclusion(**where, reason=reason,
                         fix=f"the layout {fits} fits (allow it in training.parallel)")
    return Exclusion(**where, reason=reason,
                     fix=f"more GPUs per island: no layout fits {island.num_gpus} GPUs "
                         f"({island.num_nodes} x {island.gpus_per_node})")


def _fits_some(model: ModelSpec, profile: HardwareProfile, island: Any, seq_len: int,
               space: LayoutSpace, recipe: TrainingRecipe, batch: int | None) -> bool:
    return _best_fit(model, profile, island, seq_len, space, recipe, batch) is not None


def _best_fit(model: ModelSpec, profile: HardwareProfile, island: Any, seq_len: int,
              space: LayoutSpace, recipe: TrainingRecipe, batch: int | None) -> str | None:
    """The least model-parallel layout of `space` with a row (memory arithmetic only)."""
    layouts = space.candidates(num_layers=model.num_layers, num_heads=model.num_heads,
                               num_kv_heads=model.num_kv_heads,
                               intermediate_size=model.intermediate_size, seq_len=seq_len,
                               nodes=island.num_nodes, gpus_per_node=island.gpus_per_node,
                               num_experts=model.num_experts)
    layouts.sort(key=lambda lay: (lay.model_parallel, lay.dp_replicate, lay.pp_schedule))
    for layout in layouts:
        for mode in space.checkpointing or (recipe.ac,):
            r = replace(recipe, parallel=layout, ac=mode)
            k0 = layout.pp if layout.pp > 1 and layout.pp_schedule != "gpipe" else 1
            if batch is not None and k0 * layout.dp > batch:
                continue
            if max_micro_batch(model, gpu_memory_bytes=island.gpu.usable_memory_bytes,
                               num_gpus=island.num_gpus, seq_len=seq_len, recipe=r,
                               accum_steps=k0) >= 1:
                return f"{layout.describe()} (ac {mode})"
    return None


def _profile_for(gpu_name: str,
                 profiles: Mapping[str, HardwareProfile] | None) -> HardwareProfile:
    if profiles is not None:
        for key, profile in profiles.items():
            if key.lower() == gpu_name.lower():
                return profile

    return default_profile(gpu_name)


def gpu_profile(gpu_name: str) -> tuple[str, str]:
    """(profile name, provenance) of the profile the island tables of a GPU are built with
    (`default_profile`: measured > calibrated > prior): what a plan on that GPU rests on."""
    profile = _profile_for(gpu_name, None)
    return profile.name, profile.provenance


# ---- the planner's entry point (the planner imports perfmodel only through this module) -------

@dataclass(frozen=True, kw_only=True, slots=True)
class ClusterRequest:
    """What the planner knows of a cluster: names and numbers from its instance file."""

    name: str
    """Cluster name."""
    gpu: str
    """Catalog GPU name (did-you-mean on typos)."""
    num_nodes: int
    """Nodes available."""
    gpus_per_node: int
    """GPUs per node available."""
    allowed_gpus_per_node: tuple[int, ...]
    """GPUs-per-node counts an island may use."""
    usd_per_gpu_hour: float
    """Resolved price of one GPU-hour."""
    wan_bw_bytes_per_s: float
    """WAN uplink, bytes/s."""
    wan_latency_s: float
    """WAN latency, seconds."""
    island_nodes: tuple[int, ...] = ()
    """Node counts an island may use (empty: every count 1..num_nodes)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Exclusion:
    """A cluster or island option that contributes no row to the table, and why."""

    cluster: str
    """Cluster name."""
    nodes: int | None
    """Nodes of the option (None: the whole cluster)."""
    gpus_per_node: int | None
    """GPUs per node of the option (None: the whole cluster)."""
    reason: str
    """The binding limit with its numbers."""
    fix: str
    """The smallest change found that makes it usable (or what would be needed)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelTable:
    """An island table together with the model facts the planner needs."""

    table: pd.DataFrame
    """Rows as in TABLE_COLUMNS."""
    parameters: int
    """Total model parameters (sets the pseudo-gradient size)."""
    model_name: str
    """Resolved model name."""
    excluded: tuple[Exclusion, ...] = ()
    """Every cluster and option with no row, with its reason and fix (layout tables)."""


IDENTITY_COLUMNS = ("model", "seq_len", "recipe")
"""What an island table was built for (`table_identity`): a fixed table must say it, and the
planner checks it against the instance it serves."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TableIdentity:
    """The values of IDENTITY_COLUMNS a table for one training run carries."""

    model: str
    """Resolved model name (catalog name, or a config.json's name)."""
    seq_len: int
    """Tokens per sequence."""
    recipe: str
    """`recipe_key` of the training recipe."""


def recipe_key(recipe: TrainingRecipe) -> str:
    """A canonical, readable key of what a recipe changes in an island's step and memory: the
    fields (outside `name` and `outer`) that differ from torchtitan's, as `field=value` joined by
    ';' ('torchtitan' when none differ)."""
    default, mine = DEFAULT_RECIPE.to_dict(), recipe.to_dict()
    diffs = [f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in mine.items()
             if k not in ("name", "outer") and v != default[k]]
    return ";".join(diffs) or "torchtitan"


LAYOUT_KEY = "layouts per row"
"""What a layout table's recipe key says in place of the checkpointing mode and the layout."""


def _is_layout_table(ac: Any, parallel: Mapping[str, Any] | None) -> bool:
    """Layouts (or checkpointing modes) are decisions: the instance has a parallel section or
    lists several modes."""
    return parallel is not None or isinstance(ac, list | tuple)


def _one_mode(ac: str | Sequence[str] | None) -> str | None:
    """The single checkpointing mode of a plain FSDP table (None: the recipe's); a list of
    modes makes a layout table (`_is_layout_table`), so reaching here with one is a caller's
    error, reported as such."""
    if ac is None or isinstance(ac, str):
        return ac
    raise UserInputError(f"activation checkpointing {list(ac)!r}: a list of modes needs a "
                         "layout table",
                         hint="pass one mode, or the list as a list (the planner chooses).")


def table_identity(model: str, *, seq_len: int, ac: str | Sequence[str] | None = None,
                   recipe: TrainingRecipe | Mapping[str, Any] | None = None,
                   parallel: Mapping[str, Any] | None = None) -> TableIdentity:
    """The identity a table built for this run carries (arguments as `island_table_for`): a
    layout table's recipe key leaves out the checkpointing mode and the layout, which are
    columns of its rows."""
    if isinstance(recipe, Mapping):
        recipe = recipe_from_mapping(recipe, source="training.recipe")
    if _is_layout_table(ac, parallel):
        base = replace(resolve_recipe(recipe, None), ac=DEFAULT_RECIPE.ac,
                       parallel=DEFAULT_RECIPE.parallel)
        key = recipe_key(base)
        return TableIdentity(model=get_model(model).name, seq_len=seq_len,
                             recipe=f"{key};{LAYOUT_KEY}")
    return TableIdentity(model=get_model(model).name, seq_len=seq_len,
                         recipe=recipe_key(resolve_recipe(recipe, _one_mode(ac))))


def island_table_for(model: str, *, seq_len: int, ac: str | Sequence[str] | None = None,
                     clusters: Sequence[ClusterRequest],
                     recipe: TrainingRecipe | Mapping[str, Any] | None = None,
                     global_batch_seqs: int | None = None,
                     parallel: Mapping[str, Any] | None = None) -> ModelTable:
    """Resolve catalog names and build the island table (catalog errors name the bad value);
    `recipe` (default torchtitan; a mapping is an instance's `training.recipe` section) is what
    every island trains, `ac` overrides its checkpointing mode (a list: the modes the planner
    may choose), `parallel` (an instance's `training.parallel` mapping) lets the planner choose
    layouts (`perfmodel.spec.layout_space`), `global_batch_seqs` leaves out micro-batches no
    plan can use. Without `parallel` and with one mode the table is today's FSDP table
    (`build_island_table`); otherwise `build_layout_table`, whose excluded options come back in
    `ModelTable.excluded`. The table carries its identity (IDENTITY_COLUMNS)."""
    if isinstance(recipe, Mapping):
        recipe = recipe_from_mapping(recipe, source="training.recipe")
    spec = get_model(model)
    spec.check_step_modelled("an island table")
    specs = []
    for c in clusters:
        gpu = get_gpu(c.gpu)
        specs.append(ClusterSpec(
            name=c.name, gpu=gpu, num_nodes=c.num_nodes, gpus_per_node=c.gpus_per_node,
            allowed_gpus_per_node=tuple(c.allowed_gpus_per_node),
            usd_per_gpu_hour=c.usd_per_gpu_hour,
            intra_link=gpu.intra_node_link, inter_link=gpu.inter_node_link,
            nics_per_node=gpu.nics_per_node, wan_bw_bytes_per_s=c.wan_bw_bytes_per_s,
            wan_latency_s=c.wan_latency_s))
    excluded: tuple[Exclusion, ...] = ()
    if _is_layout_table(ac, parallel):
        space = LayoutSpace.parse(parallel, list(ac) if isinstance(ac, list | tuple) else ac)
        table, excluded = build_layout_table(
            spec, seq_len=seq_len, clusters=specs, space=space, recipe=recipe,
            global_batch_seqs=global_batch_seqs,
            island_nodes={c.name: c.island_nodes for c in clusters if c.island_nodes})
    else:
        table = build_island_table(spec, seq_len=seq_len, ac=_one_mode(ac), clusters=specs,
                                   recipe=recipe, global_batch_seqs=global_batch_seqs)
    identity = table_identity(model, seq_len=seq_len, ac=ac, recipe=recipe, parallel=parallel)
    table = table.assign(model=identity.model, seq_len=identity.seq_len, recipe=identity.recipe)
    return ModelTable(table=table, parameters=spec.total_params, model_name=spec.name,
                      excluded=excluded)


def checkpoint_mode(name: object) -> str:
    """The canonical name of a checkpointing policy (`perfmodel.spec.recipe.CheckpointPolicy`;
    aliases such as `selective` resolve with a notice); UserInputError for anything else."""
    return canonical_ac(name, where="activation_checkpointing")
