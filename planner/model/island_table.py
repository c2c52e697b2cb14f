"""The island table the planner solves: its columns, where it comes from, and its validation.

`load_island_table` is the single place that produces the table (DESIGN §3): a user's CSV
(`islands_table:`), checked against the instance's clusters, or the performance model's table
(`perfmodel.tables.island_table_for`). `validate_island_table` checks columns, types, signs,
duplicates and cluster names. Problems are `InstanceError`s naming the file, line, column and
value, with a "To fix:" hint. Re-exported by `planner.model.instance`.

Rows are (cluster, nodes, gpus_per_node) x layout x checkpointing x micro_batch. The layout
columns (`LAYOUT_COLUMNS`) are optional: a table without them is plain FSDP, one row per option
and micro-batch, planned exactly as before they existed. With them, a row says its tensor,
pipeline and context parallel degrees (tp, pp, cp), its replicas (dp_replicate), virtual stages
and pipeline schedule, sequence parallelism, its checkpointing mode (ac), its data-parallel ranks
dp = n·g/(tp·pp·cp) (an island's batch contribution is k·m·dp) and the accumulation steps its
schedule admits (min_accum <= k <= max_accum, k a multiple of accum_multiple); `layout` is a
display string. The planner never parses layouts or recipes: it validates these columns and
carries them per row (`planner.model.problem.IslandPair`).

What the table leaves out is never silent: the performance model's exclusion records travel with
the table (`EXCLUDED_ATTR` in `DataFrame.attrs`), and `table_exclusions` adds every island option
of the instance that has no row and no record.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pandas as pd

from perfmodel.facts import (
    LIMITS,
    PROVENANCES,
    cap_message,
    check_limit,
    get_gpu,
    read_text,
    short_repr,
)
from perfmodel.spec.errors import (
    CatalogError,
    InstanceError,
    ShardMeterError,
    UserInputError,
    did_you_mean,
)
from perfmodel.spec.formulas import GIB
from perfmodel.tables import (
    IDENTITY_COLUMNS,
    ClusterRequest,
    checkpoint_mode,
    island_table_for,
    table_identity,
)
from planner.model.instance import Instance, gpu_prices
from planner.model.problem import Exclusion

TABLE_COLUMNS = ("cluster", "gpu_type", "nodes", "gpus_per_node", "micro_batch", "microstep_s",
                 "step_fixed_s", "usd_per_hour", "memory_gib", "bound")
_INT_COLUMNS = ("nodes", "gpus_per_node", "micro_batch")
_POSITIVE = ("nodes", "gpus_per_node", "micro_batch", "microstep_s", "usd_per_hour")
_NON_NEGATIVE = ("step_fixed_s", "memory_gib")  # a zero fixed tail or memory is accepted
_BOUNDS = {"compute", "communication", "mixed"}
OPTION_KEY = ["cluster", "nodes", "gpus_per_node"]
ENERGY_COLUMNS = ("compute_fixed_s", "compute_micro_s", "comm_only_fixed_s", "comm_only_micro_s",
                  "tdp_w")
"""The step's activity split and the GPU's TDP (perfmodel.tables; the power model of issue 14)."""
DEGREE_COLUMNS = ("tp", "pp", "cp", "dp_replicate", "virtual_stages", "dp")
"""Integer layout columns (>= 1): tensor, pipeline, context parallel degrees, replicas, virtual
stages per pipeline rank, data-parallel ranks dp = n·g/(tp·pp·cp)."""
ACCUM_COLUMNS = ("min_accum", "accum_multiple", "max_accum")
"""The k a row's schedule admits: min_accum <= k <= max_accum (max_accum empty: no memory bound),
k a multiple of accum_multiple (defaults 1, 1, none)."""
PP_SCHEDULES = ("gpipe", "1f1b", "interleaved-1f1b")
"""Values of the pp_schedule column (empty where pp is 1)."""
VARIANT_COLUMNS = ("tp", "pp", "cp", "dp_replicate", "virtual_stages", "pp_schedule",
                   "sequence_parallel", "dp", "ac", "layout")
"""The columns that tell rows of one option and micro-batch apart (with the option and
micro_batch: the row key)."""
LAYOUT_COLUMNS = (*VARIANT_COLUMNS, *ACCUM_COLUMNS)
"""Optional layout and checkpointing columns (absent: plain FSDP with the instance's mode)."""
OPTIONAL_COLUMNS = ("memory_accum_gib", "accum_fits", *ENERGY_COLUMNS, *LAYOUT_COLUMNS,
                    *IDENTITY_COLUMNS, "provenance")
"""Kept when present: peak memory with k >= 2 accumulation micro-steps, and whether it fits the GPU
(a row with accum_fits false may only run k = 1; a table without the column allows every k); the
activity split; the layout columns; what the table was built for; the provenance of the profile
that predicted the row (measured, calibrated, prior: its residual group under `--quantile`,
planner.model.uncertainty)."""
EXCLUDED_ATTR = "excluded"
"""`DataFrame.attrs` key of the performance model's exclusion records
(`planner.model.problem.Exclusion`) of a table it built."""


def load_island_table(instance: Instance) -> pd.DataFrame:
    """The island table the planner solves: `islands_table` if given, else built by the perf model.

    The builder is `perfmodel.tables.island_table_for` (fed `ClusterRequest`s built from the
    instance). Either way the table is validated (`validate_island_table`).
    """
    path = instance.islands_table_path
    if path is not None:
        text = read_text(path, what="island table", error=InstanceError,
                         hint="give a CSV with the columns " + ", ".join(TABLE_COLUMNS) + ".")
        try:
            frame = pd.read_csv(io.StringIO(text), skipinitialspace=True)
        except (pd.errors.ParserError, pd.errors.EmptyDataError, ValueError) as err:
            raise InstanceError(f"{path}: cannot read island table: "
                                f"{cap_message(str(err), 500)}",
                                hint="give a CSV with the columns "
                                + ", ".join(TABLE_COLUMNS) + ".") from None
        table = validate_island_table(frame, str(path), instance)
        check_table_against_clusters(table, str(path), instance)
        check_table_identity(table, str(path), instance)
        return scale_prices(table, instance)
    prices = gpu_prices(instance, scaled=False)
    requests = [ClusterRequest(**_cluster_request(c, prices[c.name])) for c in instance.clusters]
    training = instance.training
    arguments = table_arguments(instance)
    where = str(instance.source or instance.name)
    try:
        built = island_table_for(instance.model_ref, seq_len=training.seq_len,
                                 clusters=requests, global_batch_seqs=training.global_batch_seqs,
                                 **arguments)
    except UserInputError as err:
        if where in err.message or type(err) not in (UserInputError, InstanceError):
            raise
        # the performance model validates what the instance passes through (training.parallel,
        # the checkpointing modes, the recipe): its message names the field, this the file
        raise InstanceError(f"{where}: {err.message}", hint=err.hint) from None
    # The pseudo-gradient size comes from the model unless the instance overrides it.
    instance._model_parameters = built.parameters
    table = validate_island_table(built.table, f"island table of model {built.model_name!r}",
                                  instance)
    # what the performance model left out, with why (ModelTable.excluded)
    table.attrs[EXCLUDED_ATTR] = tuple(Exclusion.of(r) for r in built.excluded)
    return scale_prices(table, instance)


def scale_prices(table: pd.DataFrame, instance: Instance) -> pd.DataFrame:
    """`table` (priced and checked at the clusters' unscaled prices) with each cluster's rows'
    usd_per_hour times its `price_scale` (a what-if); the table itself when nothing is scaled."""
    scaled = [c for c in instance.clusters if c.price_scale != 1.0]
    if not scaled:
        return table
    out = table.copy()
    for cluster in scaled:
        rows = out["cluster"] == cluster.name
        out.loc[rows, "usd_per_hour"] = out.loc[rows, "usd_per_hour"] * cluster.price_scale
    return out


def _cluster_request(cluster: Any, usd_per_gpu_hour: float) -> dict[str, Any]:
    """The `ClusterRequest` fields of an instance cluster; `island_nodes` (the node counts an
    island may use) goes along, so the performance model tabulates only those (the planner
    drops other node counts either way: `build_problem`)."""
    fields: dict[str, Any] = {
        "name": cluster.name, "gpu": cluster.gpu, "num_nodes": cluster.num_nodes,
        "gpus_per_node": cluster.gpus_per_node,
        "allowed_gpus_per_node": cluster.gpus_per_node_choices,
        "usd_per_gpu_hour": usd_per_gpu_hour, "wan_bw_bytes_per_s": cluster.wan_bw_bytes_per_s,
        "wan_latency_s": cluster.wan_latency_s}
    if cluster.island_nodes is not None:
        fields["island_nodes"] = tuple(cluster.island_nodes)
    return fields


def table_arguments(instance: Instance) -> dict[str, Any]:
    """The training keywords of `perfmodel.tables.island_table_for` for an instance, passed
    through untouched (the planner never parses recipes or layouts; perfmodel validates them):
    `ac` (one checkpointing mode, or a list of modes to choose from) when explicit — an explicit
    activation_checkpointing wins over the recipe's, so with a recipe and no explicit mode it is
    left out; `recipe` (the training.recipe mapping) and `parallel` (the training.parallel
    mapping: pinned degrees, limits, schedules) when given."""
    training = instance.training
    explicit_ac = training.recipe is None or "activation_checkpointing" in training.model_fields_set
    ac = training.activation_checkpointing
    out: dict[str, Any] = {"ac": (list(ac) if isinstance(ac, tuple) else ac) if explicit_ac
                           else None}
    if training.recipe is not None:
        out["recipe"] = training.recipe
    if training.parallel is not None:
        out["parallel"] = training.parallel
    dtype = training.compute_dtype
    if isinstance(dtype, list):  # a choice: the layout space enumerates it (plain FSDP when
        out["parallel"] = {**(training.parallel or FSDP_ONLY), "compute_dtype": dtype}
    elif dtype is not None:      # there is no parallel section); one value: a recipe field
        out["recipe"] = {**(training.recipe or {}), "compute_dtype": dtype}
    return out


FSDP_ONLY = {"tp": 1, "pp": 1, "dp_replicate": 1}
"""The `parallel:` mapping of plain FSDP (what an instance without one trains)."""


def check_table_identity(frame: pd.DataFrame, source: str, instance: Instance) -> None:
    """A fixed island table must say what it was built for (IDENTITY_COLUMNS: model, seq_len,
    recipe) and say the instance's run: a table of another model, sequence length or recipe
    would price a different job (an 8B table planning a 70B run; a 1024-token table a
    8192-token run). A table that does not say is refused: it cannot be checked.

    With an `ac` column each row is checked against the recipe with its own checkpointing mode,
    which must be one the instance allows; an instance that lists several modes needs that
    column (one recipe column cannot say which mode a row trains)."""
    missing = [c for c in IDENTITY_COLUMNS if c not in frame.columns]
    arguments = table_arguments(instance)
    modes = arguments["ac"]
    allowed = None if modes is None else [modes] if isinstance(modes, str) else list(modes)
    training = instance.training
    where = instance.source or instance.name
    if allowed is not None and len(allowed) > 1 and "ac" not in frame.columns:
        raise InstanceError(
            f"{source}: instance {where} chooses among checkpointing modes "
            f"{', '.join(allowed)}, but the island table has no 'ac' column saying each row's",
            hint="add an ac column (one mode per row), or give training.activation_checkpointing "
                 "one mode.")
    recipe = {"recipe": arguments["recipe"]} if "recipe" in arguments else {}
    identities: dict[str | None, Any] = {}

    def identity(mode: str | None) -> Any:
        # a layout pin or limit changes which rows a table has, not what each row trains
        if mode not in identities:
            identities[mode] = table_identity(instance.model_ref, seq_len=training.seq_len,
                                              ac=mode, **recipe)
        return identities[mode]

    row_modes: list[str | None]
    if "ac" in frame.columns:
        row_modes = [str(v) for v in frame["ac"]]
        for row, value in frame["ac"].items():
            if allowed is not None and value not in allowed:
                raise InstanceError(
                    f"{source}, line {_row(row) + 2}: column 'ac' = {short_repr(value)}: "
                    f"instance {where} allows activation checkpointing "
                    f"{', '.join(allowed)} only",
                    hint=f"drop the rows of other modes, or list {value} in "
                         "training.activation_checkpointing.")
    else:
        row_modes = [None if allowed is None else allowed[0]] * len(frame)
    want = identity(row_modes[0] if row_modes else (allowed or [None])[0])
    expected = {"model": want.model, "seq_len": want.seq_len, "recipe": want.recipe}
    if missing:
        raise InstanceError(
            f"{source}: the island table does not say what it was built for (missing column(s) "
            f"{', '.join(missing)}), so it cannot be checked against instance {where}",
            hint="add the columns with the run the table describes: "
                 + ", ".join(f"{c}={expected[c]}" for c in missing)
                 + " (`shardmeter islands INSTANCE -o table.csv` writes them).")
    for column in IDENTITY_COLUMNS:
        values = frame[column]
        for position, (row, value) in enumerate(values.items()):
            text = str(value).strip()
            if column == "seq_len":
                ok = _same_int(value, want.seq_len)
            elif column == "model":
                ok = text.lower() in {want.model.lower(), instance.model.lower()}
            else:
                expected["recipe"] = identity(row_modes[position]).recipe
                ok = text == expected["recipe"]
            if not ok:
                raise InstanceError(
                    f"{source}, line {_row(row) + 2}: column {column!r} = {short_repr(value)}: "
                    f"the table was built for another run than instance {where}, which trains "
                    f"{column} {expected[column]!r}",
                    hint=f"give a table built for {column} {expected[column]} (`shardmeter "
                         "islands INSTANCE -o table.csv`), or drop islands_table to build it from "
                         "the performance model.")


def _same_int(value: Any, expected: int) -> bool:
    try:
        return float(value) == expected
    except (TypeError, ValueError):
        return False


def validate_island_table(frame: pd.DataFrame, source: str,
                          instance: Instance | None = None) -> pd.DataFrame:
    """Check columns, types, signs, duplicates and cluster names; return a clean copy."""

    def fail(row: int | None, column: str, value: Any, problem: str, hint: str) -> None:
        where = f"{source}, line {row + 2}" if row is not None else source
        value = value.item() if hasattr(value, "item") else value
        raise InstanceError(f"{where}: column {column!r} = {value!r}: {problem}", hint=hint)

    missing = [c for c in TABLE_COLUMNS if c not in frame.columns]
    if missing:
        raise InstanceError(f"{source}: island table lacks columns {missing}",
                            hint="the header must be: " + ",".join(TABLE_COLUMNS))
    extra = [c for c in OPTIONAL_COLUMNS if c in frame.columns]
    frame = frame.loc[:, [*TABLE_COLUMNS, *extra]].reset_index(drop=True).copy()
    if frame.empty:
        return frame
    if "accum_fits" in extra:
        for row, value in frame["accum_fits"].items():
            try:
                _as_bool(value)
            except InstanceError as err:
                fail(_row(row), "accum_fits", value, "not a boolean", err.hint or "")
        frame["accum_fits"] = frame["accum_fits"].map(_as_bool)
    for column in (c for c in ENERGY_COLUMNS if c in extra):
        numbers = pd.to_numeric(frame[column], errors="coerce")
        # tdp_w may be empty (GPU without a catalog TDP); the activity split must be finite
        bad = numbers.isna() if column != "tdp_w" else numbers.le(0)
        for row in numbers.index[bad | numbers.abs().eq(float("inf"))]:
            fail(_row(row), column, frame.at[row, column], "not a finite number",
                 "put a finite number there (perfmodel.tables writes these columns).")
        # a split is a share of the step (T = C + X): negative seconds would give negative kWh
        # (a rounding residue of T - C is tolerated)
        for row in numbers.index[numbers < -ROUNDING_S]:
            fail(_row(row), column, numbers[row], "negative",
                 "the activity split and the TDP are >= 0 (perfmodel.tables writes them).")
        frame[column] = numbers.astype(float)
    if "memory_accum_gib" in extra:
        numbers = pd.to_numeric(frame["memory_accum_gib"], errors="coerce")
        for row in numbers.index[~numbers.map(lambda v: 0 <= v <= MAX_MEMORY_GIB)]:
            fail(_row(row), "memory_accum_gib", frame.at[row, "memory_accum_gib"],
                 "not a number >= 0", "put the peak memory with accumulation in GiB there.")
        frame["memory_accum_gib"] = numbers.astype(float)
    if len(frame) > LIMITS["table_rows"].maximum:
        check_limit("table_rows", len(frame), field="rows", where=source, error=InstanceError)
    _validate_layout_columns(frame, [c for c in LAYOUT_COLUMNS if c in extra], fail)
    for column in ("cluster", "gpu_type", "bound"):
        frame[column] = frame[column].fillna("").astype(str).str.strip()  # an empty cell is ""
    if "provenance" in extra:
        frame["provenance"] = frame["provenance"].fillna("").astype(str).str.strip()
        for row, value in frame["provenance"].items():
            if value not in PROVENANCES:
                fail(_row(row), "provenance", value, "not a profile provenance",
                     "use one of " + ", ".join(PROVENANCES) + ".")
    for column in TABLE_COLUMNS[2:9]:
        numbers = pd.to_numeric(frame[column], errors="coerce")
        for row in numbers.index[numbers.isna() | numbers.abs().eq(float("inf"))]:
            fail(_row(row), column, frame.at[row, column], "not a number",
                 "put a finite number there.")
        if column in _INT_COLUMNS:
            for row in numbers.index[numbers != numbers.round()]:
                fail(_row(row), column, numbers[row], "not an integer", "use a whole number.")
            numbers = numbers.astype(int)
        bad = numbers <= 0 if column in _POSITIVE else numbers < 0
        for row in numbers.index[bad | ~numbers.astype(float).map(lambda v: v < float("inf"))]:
            problem = "must be > 0" if column in _POSITIVE else "must be >= 0 and finite"
            fail(_row(row), column, numbers[row], problem,
                 f"{column} must be a positive, finite value.")
        cap = _COLUMN_MAXIMA.get(column)
        if cap is not None:
            for row in numbers.index[numbers > cap[0]]:
                fail(_row(row), column, numbers[row], f"above {cap[0]:g} ({cap[1]})",
                     f"give {column} at most {cap[0]:g}.")
        frame[column] = numbers
    for row, bound in frame["bound"].items():
        if bound.lower() not in _BOUNDS:
            fail(_row(row), "bound", bound, f"expected one of {sorted(_BOUNDS)}",
                 "use compute, communication or mixed.")
    variant = [c for c in VARIANT_COLUMNS if c in extra]
    _check_layout_sizes(frame, variant, fail)
    dupes = frame.duplicated(subset=[*OPTION_KEY, *variant, "micro_batch"], keep=False)
    if dupes.any():
        rows = [int(r) + 2 for r in frame.index[dupes]]
        key = ", ".join([*OPTION_KEY, *variant, "micro_batch"])
        raise InstanceError(f"{source}: duplicate ({key}) rows on lines {rows}",
                            hint="keep one row per island option"
                                 + (", layout, checkpointing mode" if variant else "")
                                 + " and micro-batch.")
    per_gpu = frame["usd_per_hour"] / (frame["nodes"] * frame["gpus_per_node"])
    for row in per_gpu.index[per_gpu > LIMITS["usd_per_gpu_hour"].maximum]:
        fail(_row(row), "usd_per_hour", frame.at[row, "usd_per_hour"],
             f"{per_gpu[row]:g} USD per GPU-hour, above "
             f"{LIMITS['usd_per_gpu_hour'].maximum:g} ({LIMITS['usd_per_gpu_hour'].reason})",
             "give the island's price per hour: nodes x gpus_per_node x USD per GPU-hour.")
    prices = frame.groupby(OPTION_KEY)["usd_per_hour"].nunique()
    if (prices > 1).any():
        key = prices.index[prices > 1][0]
        raise InstanceError(f"{source}: option {key} has different usd_per_hour across "
                            "micro_batch rows",
                            hint="the island price does not depend on the "
                                 "micro-batch; use one value.")
    if instance is not None:
        names = [c.name for c in instance.clusters]
        for row, cluster in frame["cluster"].items():
            if cluster not in names:
                fail(_row(row), "cluster", cluster, f"not a cluster of instance {instance.name!r} "
                     f"({instance.source or 'no file'}); "
                     + did_you_mean(cluster, names), "use the cluster names of the instance file.")
    return frame


Fail = Any
"""`validate_island_table`'s fail(row, column, value, problem, hint) (raises InstanceError)."""


def _validate_layout_columns(frame: pd.DataFrame, columns: list[str], fail: Fail) -> None:
    """Types and ranges of the layout columns present, normalised in place: degrees and
    accumulation bounds integers >= 1 (max_accum may be empty), pp_schedule one of PP_SCHEDULES,
    sequence_parallel a boolean, ac a checkpointing mode (canonical name), layout text."""
    cap = LIMITS["flag_int"].maximum
    for column in (c for c in (*DEGREE_COLUMNS, *ACCUM_COLUMNS) if c in columns):
        empty = frame[column].map(_is_empty)
        numbers = pd.to_numeric(frame[column].where(~empty), errors="coerce")
        for row in numbers.index[(numbers.isna() & (~empty | (column != "max_accum")))
                                 | numbers.abs().eq(float("inf"))]:
            fail(_row(row), column, frame.at[row, column], "not a number",
                 "put a whole number >= 1 there"
                 + (" (or leave it empty: no bound)." if column == "max_accum" else "."))
        known = numbers.dropna()
        for row in known.index[(known != known.round()) | (known < 1) | (known > cap)]:
            fail(_row(row), column, known[row], f"not a whole number between 1 and {cap:.0f}",
                 f"{column} counts ranks, stages or micro-steps: a whole number >= 1.")
        frame[column] = numbers.astype(float) if column == "max_accum" else numbers.astype(int)
    if "pp_schedule" in columns:
        schedules = frame["pp_schedule"].map(
            lambda v: "" if _is_empty(v) else str(v).strip().lower())
        pp = frame["pp"] if "pp" in columns else pd.Series(1, index=frame.index)
        for row, value in schedules.items():
            if value not in PP_SCHEDULES and not (value == "" and pp.at[row] == 1):
                fail(_row(row), "pp_schedule", frame.at[row, "pp_schedule"],
                     f"expected one of {list(PP_SCHEDULES)}"
                     + (" (empty only where pp is 1)" if value == "" else ""),
                     f"use {', '.join(PP_SCHEDULES)}.")
        frame["pp_schedule"] = schedules
    if "sequence_parallel" in columns:
        values = []
        for row, value in frame["sequence_parallel"].items():
            if _is_empty(value):
                values.append(False)
                continue
            text = str(value).strip().lower()
            if isinstance(value, bool | np.bool_):
                values.append(bool(value))
            elif text in ("true", "1", "yes", "1.0"):
                values.append(True)
            elif text in ("false", "0", "no", "0.0"):
                values.append(False)
            else:
                fail(_row(row), "sequence_parallel", value, "not a boolean", "use true or false.")
        frame["sequence_parallel"] = values
    if "ac" in columns:
        modes = []
        for row, value in frame["ac"].items():
            try:
                modes.append(checkpoint_mode(value))
            except ShardMeterError as err:
                fail(_row(row), "ac", value, f"not a checkpointing mode ({err.message})",
                     err.hint or "use none, full, op-sac, attn or layer:N.")
        frame["ac"] = modes
    if "layout" in columns:
        frame["layout"] = frame["layout"].map(lambda v: "" if _is_empty(v) else str(v).strip())


def _check_layout_sizes(frame: pd.DataFrame, columns: list[str], fail: Fail) -> None:
    """A row's degrees must tile its island: tp·pp·cp·dp = n·g (dp given) or tp·pp·cp divides
    n·g; dp_replicate divides dp; and its schedule must admit some k (the first multiple of
    accum_multiple at or above min_accum is at most max_accum)."""
    if "max_accum" in frame.columns:
        multiple = frame["accum_multiple"] if "accum_multiple" in frame.columns else 1
        low = frame["min_accum"] if "min_accum" in frame.columns else 1
        first = -(-low // multiple) * multiple
        for row in frame.index[frame["max_accum"].notna() & (first > frame["max_accum"])]:
            fail(_row(row), "max_accum", frame.at[row, "max_accum"],
                 "the row admits no accumulation step k (min_accum, accum_multiple and max_accum "
                 "leave none)", "drop the row: its schedule does not fit.")
    if not any(c in columns for c in ("tp", "pp", "cp", "dp", "dp_replicate")):
        return
    one = pd.Series(1, index=frame.index)
    gpus = frame["nodes"] * frame["gpus_per_node"]
    model = frame.get("tp", one) * frame.get("pp", one) * frame.get("cp", one)
    if "dp" in columns:
        for row in frame.index[model * frame["dp"] != gpus]:
            fail(_row(row), "dp", frame.at[row, "dp"],
                 f"tp·pp·cp·dp = {model[row] * frame.at[row, 'dp']} is not the island's "
                 f"{gpus[row]} GPUs", "give dp = nodes x gpus_per_node / (tp x pp x cp).")
        dp = frame["dp"]
    else:
        for row in frame.index[gpus % model != 0]:
            fail(_row(row), "tp", frame.get("tp", one)[row],
                 f"tp·pp·cp = {model[row]} does not divide the island's {gpus[row]} GPUs",
                 "use degrees whose product divides the GPU count.")
        dp = gpus // model
    if "dp_replicate" in columns:
        for row in frame.index[dp % frame["dp_replicate"] != 0]:
            fail(_row(row), "dp_replicate", frame.at[row, "dp_replicate"],
                 f"does not divide the {dp[row]} data-parallel ranks",
                 "dp_replicate x dp_shard = dp: use a divisor of dp.")


def _is_empty(value: Any) -> bool:
    """An empty CSV cell (NaN, None or blank text)."""
    return value is None or (isinstance(value, float) and value != value) or (
        isinstance(value, str) and not value.strip())


def data_parallel(row: Any, num_gpus: int) -> int:
    """dp of a validated table row (a namedtuple of `itertuples`): its `dp`, else
    n·g/(tp·pp·cp) (n·g for plain FSDP)."""
    if hasattr(row, "dp"):
        return int(row.dp)
    degrees = int(getattr(row, "tp", 1)) * int(getattr(row, "pp", 1)) * int(getattr(row, "cp", 1))
    return num_gpus // degrees


def variant_text(value: Any) -> str:
    """A layout cell as text: integers without a decimal point, booleans as true/false."""
    if isinstance(value, bool | np.bool_):
        return "true" if value else "false"
    if isinstance(value, int | np.integer) or (isinstance(value, float) and value.is_integer()):
        return str(int(value))
    return str(value)


def layout_text(variant: tuple[tuple[str, str], ...]) -> str:
    """A display string for a row without a `layout` column: its degrees and schedule, e.g.
    "tp 2 x pp 4 x dp 16 (1f1b)" ("" when it has none)."""
    named = dict(variant)
    parts = [f"{c} {named[c]}" for c in ("tp", "pp", "cp", "dp_replicate", "dp") if c in named]
    extras = [named[c] for c in ("pp_schedule",) if named.get(c)]
    if named.get("virtual_stages", "1") != "1":
        extras.append(f"v {named['virtual_stages']}")
    if named.get("sequence_parallel") == "true":
        extras.append("sp")
    return " x ".join(parts) + (f" ({', '.join(extras)})" if extras else "")


def table_exclusions(instance: Instance, table: pd.DataFrame) -> tuple[Exclusion, ...]:
    """Every cluster or island option of the instance that contributes no row to `table`: the
    performance model's records (`EXCLUDED_ATTR`), then each option of the instance (its node
    counts x allowed GPUs per node) with no row and no record, said to have no row."""
    given = tuple(Exclusion.of(r) for r in table.attrs.get(EXCLUDED_ATTR, ()))
    present = {(str(c), int(n), int(g)) for c, n, g in
               table.loc[:, OPTION_KEY].drop_duplicates().itertuples(index=False)}

    def named(cluster: str, nodes: int, gpn: int) -> bool:
        return any(e.cluster == cluster and e.nodes in (None, nodes)
                   and e.gpus_per_node in (None, gpn) for e in given)

    out = list(given)
    path = instance.islands_table_path
    mode = table_arguments(instance)["ac"]
    ac_flag = f" --ac {mode}" if isinstance(mode, str) else ""
    for c in instance.clusters:
        for nodes in c.island_node_counts:
            for gpn in c.gpus_per_node_choices:
                if (c.name, nodes, gpn) in present or named(c.name, nodes, gpn):
                    continue
                if path is None:
                    reason = "the performance model's island table has no row for it"
                    fix = (f"see why with `shardmeter memory {instance.model} --gpu {c.gpu} "
                           f"--nodes {nodes} --gpus-per-node {gpn} --seq-len "
                           f"{instance.training.seq_len}{ac_flag}`; more activation checkpointing "
                           "(training.activation_checkpointing: full) or more GPUs per island "
                           "may make it fit")
                else:
                    reason = f"the island table {path} has no row for it"
                    fix = ("add its rows to the table, or leave it out of the instance "
                           "(island_nodes, allowed_gpus_per_node, max_nodes_per_island)")
                out.append(Exclusion(cluster=c.name, nodes=nodes, gpus_per_node=gpn,
                                     reason=reason, fix=fix))
    return tuple(out)


ROUNDING_S = 1e-9
"""A negative activity share above this (in seconds) is a rounding residue of T − C, not an
error."""
MAX_MEMORY_GIB = LIMITS["memory_gib"].maximum
_COLUMN_MAXIMA: dict[str, tuple[float, str]] = {
    "nodes": (LIMITS["step_nodes"].maximum, LIMITS["step_nodes"].reason),
    "micro_batch": (LIMITS["micro_batch"].maximum, LIMITS["micro_batch"].reason),
    "microstep_s": (LIMITS["step_time_s"].maximum, LIMITS["step_time_s"].reason),
    "step_fixed_s": (LIMITS["step_time_s"].maximum, LIMITS["step_time_s"].reason),
    "memory_gib": (MAX_MEMORY_GIB, LIMITS["memory_gib"].reason),
}
"""Upper bounds of table columns (perfmodel.spec.inputs.LIMITS): a step of 1e300 s would make
every cost infinite."""


def _as_bool(value: Any) -> bool:
    """A CSV/DataFrame truth value (True/False, 1/0, "true"/"false"); missing means True."""
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("true", "1", "yes", ""):
            return True
        if text in ("false", "0", "no"):
            return False
        raise InstanceError(f"island table column 'accum_fits' = {value!r}: not a boolean",
                            hint="use true or false.")
    if value is None or (isinstance(value, float) and value != value):
        return True
    return bool(value)


def check_table_against_clusters(frame: pd.DataFrame, source: str, instance: Instance) -> None:
    """Rows of a user's island table must describe their cluster: its GPU type, at most its node
    count and GPUs per node, memory within the GPU's, and (when the cluster has a price) a cost
    of nodes x gpus_per_node x that price. An empty table is refused here: nothing to plan."""
    if frame.empty:
        raise InstanceError(f"{source}: the island table has no rows (instance "
                            f"{instance.source or instance.name})",
                            hint="add one row per island option and micro-batch, "
                                 "or drop islands_table "
                                 "to build the table from the performance model.")
    prices = gpu_prices(instance, scaled=False)

    def fail(row: int, column: str, value: Any, problem: str, hint: str) -> None:
        value = value.item() if hasattr(value, "item") else value
        raise InstanceError(f"{source}, line {row + 2}: column {column!r} = {value!r}: {problem}",
                            hint=hint)

    for row, r in frame.iterrows():
        c = instance.cluster(r["cluster"])
        where = f"cluster {c.name!r} of {instance.source or instance.name}"
        if r["gpu_type"].lower() != c.gpu.lower():
            fail(_row(row), "gpu_type", r["gpu_type"], f"{where} has gpu {c.gpu!r}",
                 f"write gpu_type {c.gpu} on the rows of cluster {c.name}.")
        if r["nodes"] > c.num_nodes:
            fail(_row(row), "nodes", r["nodes"], f"{where} has only {c.num_nodes} nodes",
                 f"keep nodes <= {c.num_nodes}, or raise num_nodes of the cluster.")
        if r["gpus_per_node"] > c.gpus_per_node:
            fail(_row(row), "gpus_per_node", r["gpus_per_node"],
                 f"{where} has {c.gpus_per_node} GPUs per node",
                 f"keep gpus_per_node <= {c.gpus_per_node}.")
        memory_gib = gpu_memory_gib(c.gpu)
        if r["memory_gib"] > memory_gib * (1 + 1e-9):
            fail(_row(row), "memory_gib", r["memory_gib"],
                 f"above the {memory_gib:.4g} GiB of a {c.gpu}",
                 "such an option does not fit: drop the row or fix its memory_gib.")
        price = prices.get(c.name)
        expected = None if price is None else price * r["nodes"] * r["gpus_per_node"]
        if expected is not None and abs(r["usd_per_hour"] - expected) > max(0.01, 1e-6 * expected):
            fail(_row(row), "usd_per_hour", r["usd_per_hour"],
                 f"{where} costs ${price}/GPU-hour, so {r['nodes']}x{r['gpus_per_node']} GPUs cost "
                 f"${expected:.2f}/h",
                 "make usd_per_hour = nodes x gpus_per_node x the cluster's price, or remove the "
                 "cluster's price_usd_per_gpu_hour/price to let the table price the islands.")


def gpu_memory_gib(gpu: str) -> float:
    """Memory of one catalog GPU in GiB (`perfmodel.tables.get_gpu`); infinite for a GPU outside
    the catalog or without catalogs: nothing to compare a table's memory_gib with."""

    try:
        return get_gpu(gpu).memory_bytes / GIB
    except CatalogError:
        return float("inf")


def _row(label: Any) -> int:
    """The 0-based row of a table's index label (the frames here have a RangeIndex; pandas types
    labels as Hashable)."""
    return int(label)
