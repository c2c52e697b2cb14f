"""The island table the planner solves: its columns, where it comes from, and its validation.

`load_island_table` is the single place that produces the table (DESIGN §3): a user's CSV
(`islands_table:`), checked against the instance's clusters, or the performance model's table
(`perfmodel.tables.island_table_for`, imported lazily). `validate_island_table` checks columns,
types, signs, duplicates and cluster names. Problems are `InstanceError`s naming the file, line,
column and value, with a "To fix:" hint. Re-exported by `planner.model.instance`.
"""

from __future__ import annotations

import io
from typing import Any

import pandas as pd

from perfmodel.facts import LIMITS, cap_message, check_limit, get_gpu, read_text, short_repr
from perfmodel.spec.errors import CatalogError, InstanceError, did_you_mean
from perfmodel.spec.formulas import GIB
from perfmodel.tables import IDENTITY_COLUMNS, ClusterRequest, island_table_for, table_identity
from planner.model.instance import Instance, gpu_prices

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
OPTIONAL_COLUMNS = ("memory_accum_gib", "accum_fits", *ENERGY_COLUMNS, *IDENTITY_COLUMNS)
"""Kept when present: peak memory with k >= 2 accumulation micro-steps, and whether it fits the GPU
(a row with accum_fits false may only run k = 1; a table without the column allows every k)."""


def load_island_table(instance: Instance) -> pd.DataFrame:
    """The island table the planner solves: `islands_table` if given, else built by the perf model.

    The builder is `perfmodel.tables.island_table_for` (fed `ClusterRequest`s built from the
    instance), imported lazily. Either way the table is validated (`validate_island_table`).
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
        return table
    prices = gpu_prices(instance)
    requests = [
        ClusterRequest(name=c.name, gpu=c.gpu, num_nodes=c.num_nodes, gpus_per_node=c.gpus_per_node,
                       allowed_gpus_per_node=c.gpus_per_node_choices,
                       usd_per_gpu_hour=prices[c.name], wan_bw_bytes_per_s=c.wan_bw_bytes_per_s,
                       wan_latency_s=c.wan_latency_s)
        for c in instance.clusters
    ]
    training = instance.training
    explicit_ac, extra = _recipe_arguments(instance)
    built = island_table_for(instance.model_ref, seq_len=training.seq_len,
                             ac=training.activation_checkpointing if explicit_ac else None,
                             clusters=requests, global_batch_seqs=training.global_batch_seqs,
                             **extra)
    # The pseudo-gradient size comes from the model unless the instance overrides it.
    instance._model_parameters = built.parameters
    return validate_island_table(built.table, f"island table of model {built.model_name!r}",
                                 instance)


def _recipe_arguments(instance: Instance) -> tuple[bool, dict[str, Any]]:
    """(is activation_checkpointing explicit, the recipe keyword) of an instance: the recipe
    section reaches perfmodel as a mapping (the planner never parses recipes); an explicit
    activation_checkpointing wins over the recipe's."""
    training = instance.training
    explicit_ac = training.recipe is None or "activation_checkpointing" in training.model_fields_set
    return explicit_ac, ({} if training.recipe is None else {"recipe": training.recipe})


def check_table_identity(frame: pd.DataFrame, source: str, instance: Instance) -> None:
    """A fixed island table must say what it was built for (IDENTITY_COLUMNS: model, seq_len,
    recipe) and say the instance's run: a table of another model, sequence length or recipe
    would price a different job (an 8B table planning a 70B run; a 1024-token table a
    8192-token run). A table that does not say is refused: it cannot be checked."""
    missing = [c for c in IDENTITY_COLUMNS if c not in frame.columns]
    explicit_ac, extra = _recipe_arguments(instance)
    training = instance.training
    want = table_identity(instance.model_ref, seq_len=training.seq_len,
                          ac=training.activation_checkpointing if explicit_ac else None, **extra)
    expected = {"model": want.model, "seq_len": want.seq_len, "recipe": want.recipe}
    if missing:
        raise InstanceError(
            f"{source}: the island table does not say what it was built for (missing column(s) "
            f"{', '.join(missing)}), so it cannot be checked against instance "
            f"{instance.source or instance.name}",
            hint="add the columns with the run the table describes: "
                 + ", ".join(f"{c}={expected[c]}" for c in missing)
                 + " (`shardmeter islands INSTANCE -o table.csv` writes them).")
    for column in IDENTITY_COLUMNS:
        values = frame[column]
        for row, value in values.items():
            text = str(value).strip()
            if column == "seq_len":
                ok = _same_int(value, want.seq_len)
            elif column == "model":
                ok = text.lower() in {want.model.lower(), instance.model.lower()}
            else:
                ok = text == want.recipe
            if not ok:
                raise InstanceError(
                    f"{source}, line {_row(row) + 2}: column {column!r} = {short_repr(value)}: "
                    f"the table was built for another run than instance "
                    f"{instance.source or instance.name}, which trains {column} "
                    f"{expected[column]!r}",
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
    for column in ("cluster", "gpu_type", "bound"):
        frame[column] = frame[column].fillna("").astype(str).str.strip()  # an empty cell is ""
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
    dupes = frame.duplicated(subset=[*OPTION_KEY, "micro_batch"], keep=False)
    if dupes.any():
        rows = [int(r) + 2 for r in frame.index[dupes]]
        raise InstanceError(f"{source}: duplicate (cluster, nodes, gpus_per_node, "
                            f"micro_batch) rows on lines {rows}",
                            hint="keep one row per island option and micro-batch.")
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


ROUNDING_S = 1e-9
"""A negative activity share above this (in seconds) is a rounding residue of T − C, not an
error."""
MAX_MEMORY_GIB = LIMITS["memory_gib"].maximum
_COLUMN_MAXIMA: dict[str, tuple[float, str]] = {
    "nodes": (LIMITS["nodes"].maximum, LIMITS["nodes"].reason),
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
    prices = gpu_prices(instance)

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
