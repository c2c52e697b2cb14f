"""Planner instance files (YAML): schema, loading, validation, and the island table entry point.

Every problem with a file becomes an `InstanceError` (exit code 2) naming the file, the dotted
field path, the offending value, and a "To fix:" hint. `load_island_table` is the single place
that produces the island table the planner solves (DESIGN §3).

`strategy: fsdp` means one island (max_islands is forced to 1, σ = 0). `streaming-diloco` is
planned with the same blocking σ formula as `diloco` for now (an upper bound on its sync cost).
"""

from __future__ import annotations

import datetime as dt
import logging
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pandas as pd
import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator

from perfmodel.errors import InstanceError, ShardMeterError, did_you_mean

LOG = logging.getLogger(__name__)

Strategy = Literal["fsdp", "diloco", "streaming-diloco"]
Dtype = Literal["fp32", "bf16", "int8"]
Checkpointing = Literal["none", "selective", "full"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PriceRef(_Strict):
    """A reference into the price lists (`catalogs/prices/`)."""

    provider: str = Field(min_length=1)
    tier: Literal["on-demand", "spot", "community"] = "on-demand"
    as_of: str | None = None

    @field_validator("as_of", mode="before")
    @classmethod
    def _date_to_str(cls, value: Any) -> Any:
        return value.isoformat() if isinstance(value, dt.date) else value


class Training(_Strict):
    """What is trained and how (DESIGN §3 symbols in comments)."""

    seq_len: int = Field(gt=0)  # S
    global_batch_seqs: int = Field(gt=0)  # B
    train_tokens: float = Field(gt=0)  # D
    strategy: Strategy = "diloco"
    inner_steps: int | None = Field(default=None, gt=0)  # H
    pseudo_gradient_dtype: Dtype = "fp32"
    activation_checkpointing: Checkpointing = "selective"


class Cluster(_Strict):
    """A pool of identical nodes islands are carved from."""

    name: str = Field(min_length=1)
    gpu: str = Field(min_length=1)
    num_nodes: int = Field(gt=0)
    gpus_per_node: int = Field(gt=0)
    allowed_gpus_per_node: tuple[int, ...] | None = None
    price_usd_per_gpu_hour: float | None = Field(default=None, ge=0)
    price: PriceRef | None = None
    wan_gbit_s: float | None = Field(default=None, gt=0)
    wan_latency_ms: float | None = Field(default=None, ge=0)

    @property
    def gpus_per_node_choices(self) -> tuple[int, ...]:
        """Allowed GPUs per node; default: powers of two below gpus_per_node, and gpus_per_node."""
        if self.allowed_gpus_per_node is not None:
            return tuple(sorted(set(self.allowed_gpus_per_node)))
        powers = [2**i for i in range(self.gpus_per_node.bit_length()) if 2**i < self.gpus_per_node]
        return tuple(sorted({*powers, self.gpus_per_node}))

    @property
    def wan_bw_bytes_per_s(self) -> float:
        """WAN uplink in bytes/s (infinite when not given, only allowed for fsdp)."""
        return float("inf") if self.wan_gbit_s is None else self.wan_gbit_s * 1e9 / 8.0

    @property
    def wan_latency_s(self) -> float:
        """WAN latency in seconds (0 when not given, only allowed for fsdp)."""
        return 0.0 if self.wan_latency_ms is None else self.wan_latency_ms / 1000.0


class Limits(_Strict):
    """Optional caps on every plan."""

    max_islands: int | None = Field(default=None, gt=0)
    max_gpus: int | None = Field(default=None, gt=0)
    budget_usd: float | None = Field(default=None, gt=0)
    deadline_hours: float | None = Field(default=None, gt=0)


class Instance(_Strict):
    """A planner instance (see module docstring and DESIGN §3)."""

    name: str = Field(min_length=1)
    model: str = Field(min_length=1)
    training: Training
    clusters: tuple[Cluster, ...] = Field(min_length=1)
    limits: Limits = Limits()
    islands_table: str | None = None
    parameters: int | None = Field(default=None, gt=0)

    _source: Path | None = PrivateAttr(default=None)
    _model_parameters: int | None = PrivateAttr(default=None)

    @property
    def pseudo_gradient_parameters(self) -> int:
        """Parameters exchanged between islands: `parameters`, else the model's count once the
        island table was built from the performance model, else 0."""
        return self.parameters or self._model_parameters or 0

    @field_validator("parameters", mode="before")
    @classmethod
    def _integral_float(cls, value: Any) -> Any:
        if isinstance(value, str | float):
            try:
                number = float(value)
            except ValueError:
                return value
            if number.is_integer():
                return int(number)
        return value

    @property
    def source(self) -> Path | None:
        """The YAML file this instance came from."""
        return self._source

    @property
    def islands_table_path(self) -> Path | None:
        """`islands_table` resolved relative to the YAML file."""
        if self.islands_table is None:
            return None
        path = Path(self.islands_table)
        if not path.is_absolute() and self._source is not None:
            path = self._source.parent / path
        return path

    @property
    def max_islands(self) -> int | None:
        """Island cap; 1 for fsdp."""
        return 1 if self.training.strategy == "fsdp" else self.limits.max_islands

    @property
    def inner_steps(self) -> int:
        """H (1 for fsdp, where it does not matter)."""
        return self.training.inner_steps or 1

    def cluster(self, name: str) -> Cluster:
        """The cluster called `name`."""
        for cluster in self.clusters:
            if cluster.name == name:
                return cluster
        raise KeyError(name)


# ---- price references --------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class PriceLookup:
    """What `resolve_price` is asked: a price-list entry for one GPU type."""

    provider: str
    """Provider as in the price lists."""
    gpu: str
    """GPU name of the cluster."""
    tier: str
    """on-demand, spot or community."""
    as_of: str | None
    """Snapshot date; None for the newest."""


PriceResolver = Callable[[PriceLookup], float]


def catalog_price(ref: PriceLookup) -> float:
    """Default resolver: `perfmodel.catalog.price_usd_per_gpu_hour`, imported lazily."""
    try:
        from perfmodel.catalog import price_usd_per_gpu_hour
    except ImportError as err:
        raise InstanceError(
            f"price lists are unavailable ({err}); cannot resolve price of {ref.gpu} from {ref.provider}",
            hint="give price_usd_per_gpu_hour for the cluster instead of `price:`.",
        ) from err
    return price_usd_per_gpu_hour(ref.provider, ref.gpu, ref.tier, ref.as_of)


def gpu_prices(instance: Instance, resolve_price: PriceResolver | None = None) -> dict[str, float]:
    """USD per GPU-hour of every cluster, resolving `price:` references."""
    resolver = resolve_price or catalog_price
    out = {}
    for cluster in instance.clusters:
        if cluster.price_usd_per_gpu_hour is not None:
            out[cluster.name] = cluster.price_usd_per_gpu_hour
        elif cluster.price is not None:
            ref = PriceLookup(provider=cluster.price.provider, gpu=cluster.gpu,
                              tier=cluster.price.tier, as_of=cluster.price.as_of)
            out[cluster.name] = float(resolver(ref))
    return out


# ---- loading -----------------------------------------------------------------------------


def load_instance(path: str | Path, *, resolve_price: PriceResolver | None = None) -> Instance:
    """Read and validate an instance YAML file.

    When the instance has no `islands_table`, price references are resolved now (through
    `resolve_price`, default: the catalog price lists) so a bad reference fails early.
    """
    path = Path(path)
    if not path.is_file():
        raise InstanceError(f"instance file {path} does not exist",
                            hint="pass the path of a YAML instance (see instances/).")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise InstanceError(f"{path}: not valid YAML: {err}", hint="fix the YAML syntax.") from err
    if not isinstance(raw, dict):
        raise InstanceError(f"{path}: top level must be a mapping, got {type(raw).__name__}",
                            hint="start the file with `name:`, `model:`, `training:`, `clusters:`.")
    try:
        instance = Instance.model_validate(raw)
    except ValidationError as err:
        raise _instance_error(path, err) from None
    instance._source = path.resolve()
    _check_semantics(instance, path)
    if instance.islands_table is None:
        gpu_prices(instance, resolve_price)
    return instance


def _instance_error(path: Path, err: ValidationError) -> InstanceError:
    lines = []
    errors = err.errors()
    locs = [tuple(e["loc"]) for e in errors]
    for item in errors:
        loc = tuple(item["loc"])
        if any(other != loc and other[: len(loc)] == loc for other in locs):
            continue  # a container error caused by an error inside it
        dotted = _dotted(loc)
        if item["type"] == "extra_forbidden":
            known = _fields_at(loc[:-1])
            lines.append(f"unknown key {dotted!r} = {item['input']!r}; {did_you_mean(str(loc[-1]), known)}")
        elif item["type"] == "missing":
            lines.append(f"field {dotted!r} is required")
        else:
            lines.append(f"field {dotted!r} = {item.get('input')!r}: {item['msg']}")
    return InstanceError(f"{path}: invalid instance:\n  " + "\n  ".join(lines),
                         hint="correct the listed fields (see instances/small-*.yaml for examples).")


def _dotted(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _fields_at(loc: tuple[int | str, ...]) -> list[str]:
    model: Any = Instance
    for part in loc:
        if isinstance(part, int):
            continue
        info = model.model_fields.get(part)
        if info is None:
            return []
        model = _model_in(info.annotation)
        if model is None:
            return []
    return list(model.model_fields)


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is not None:
        for arg in typing.get_args(annotation):
            found = _model_in(arg)
            if found is not None:
                return found
    return None


def _check_semantics(instance: Instance, path: Path) -> None:
    def fail(field: str, value: Any, problem: str, hint: str) -> None:
        raise InstanceError(f"{path}: field {field!r} = {value!r}: {problem}", hint=hint)

    names: set[str] = set()
    for i, c in enumerate(instance.clusters):
        where = f"clusters[{i}]"
        if c.name in names:
            fail(f"{where}.name", c.name, "duplicate cluster name", "give every cluster a unique name.")
        names.add(c.name)
        allowed = c.allowed_gpus_per_node
        if allowed is not None:
            if not allowed:
                fail(f"{where}.allowed_gpus_per_node", list(allowed), "empty list",
                     "list at least one GPUs-per-node count, or drop the field.")
            bad = [g for g in allowed if g <= 0 or g > c.gpus_per_node]
            if bad:
                fail(f"{where}.allowed_gpus_per_node", list(allowed),
                     f"values {bad} are outside 1..gpus_per_node={c.gpus_per_node}",
                     f"use values between 1 and {c.gpus_per_node}.")
        if (c.price_usd_per_gpu_hour is None) == (c.price is None):
            fail(f"{where}.price_usd_per_gpu_hour", c.price_usd_per_gpu_hour,
                 "give exactly one of price_usd_per_gpu_hour and price",
                 "set `price_usd_per_gpu_hour: 3.59` or `price: {provider: ..., tier: on-demand}`.")
        if instance.training.strategy != "fsdp":
            for key in ("wan_gbit_s", "wan_latency_ms"):
                if getattr(c, key) is None:
                    fail(f"{where}.{key}", None, f"required for strategy {instance.training.strategy}",
                         f"add `{key}:` to the cluster (σ needs the WAN uplink and latency).")
    if instance.training.strategy != "fsdp" and instance.training.inner_steps is None:
        fail("training.inner_steps", None, f"required for strategy {instance.training.strategy}",
             "add `inner_steps: 100` (H, inner steps per outer step).")
    if instance.islands_table is not None:
        table = instance.islands_table_path
        if table is None or not table.is_file():
            fail("islands_table", instance.islands_table, f"file {table} does not exist",
                 "give a CSV path relative to the YAML file, or set islands_table: null.")
        if instance.parameters is None:
            fail("parameters", None, "required when islands_table is given",
                 "add `parameters: <number of model parameters>` (sets the pseudo-gradient size).")


# ---- island table --------------------------------------------------------------------------

TABLE_COLUMNS = ("cluster", "gpu_type", "nodes", "gpus_per_node", "micro_batch", "microstep_s",
                 "step_fixed_s", "usd_per_hour", "memory_gib", "bound")
_INT_COLUMNS = ("nodes", "gpus_per_node", "micro_batch")
_POSITIVE = ("nodes", "gpus_per_node", "micro_batch", "microstep_s", "usd_per_hour")
_NON_NEGATIVE = ("step_fixed_s", "memory_gib")  # a zero fixed tail or memory is accepted
_BOUNDS = {"compute", "communication", "mixed"}
OPTION_KEY = ["cluster", "nodes", "gpus_per_node"]


def load_island_table(instance: Instance) -> pd.DataFrame:
    """The island table the planner solves: `islands_table` if given, else built by the perf model.

    The builder is `perfmodel.tables.island_table_for` (fed `ClusterRequest`s built from the
    instance), imported lazily. Either way the table is validated (`validate_island_table`).
    """
    path = instance.islands_table_path
    if path is not None:
        try:
            frame = pd.read_csv(path, skipinitialspace=True)
        except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as err:
            raise InstanceError(f"{path}: cannot read island table: {err}",
                                hint="give a CSV with the columns " + ", ".join(TABLE_COLUMNS) + ".") from err
        return validate_island_table(frame, str(path), instance)
    try:
        from perfmodel.tables import ClusterRequest, island_table_for
    except ImportError as err:
        raise ShardMeterError(
            f"instance {instance.name!r} has no islands_table and the performance-model table "
            f"builder is unavailable ({err})",
            hint="set `islands_table:` (and `parameters:`) in the instance, or install a version "
                 "with perfmodel.tables.",
        ) from err
    prices = gpu_prices(instance)
    requests = [
        ClusterRequest(name=c.name, gpu=c.gpu, num_nodes=c.num_nodes, gpus_per_node=c.gpus_per_node,
                       allowed_gpus_per_node=c.gpus_per_node_choices, usd_per_gpu_hour=prices[c.name],
                       wan_bw_bytes_per_s=c.wan_bw_bytes_per_s, wan_latency_s=c.wan_latency_s)
        for c in instance.clusters
    ]
    built = island_table_for(instance.model, seq_len=instance.training.seq_len,
                             ac=instance.training.activation_checkpointing, clusters=requests)
    # The pseudo-gradient size comes from the model unless the instance overrides it.
    instance._model_parameters = built.parameters
    return validate_island_table(built.table, f"island table of model {built.model_name!r}", instance)


def validate_island_table(frame: pd.DataFrame, source: str, instance: Instance | None = None) -> pd.DataFrame:
    """Check columns, types, signs, duplicates and cluster names; return a clean copy."""

    def fail(row: int | None, column: str, value: Any, problem: str, hint: str) -> None:
        where = f"{source}, line {row + 2}" if row is not None else source
        value = value.item() if hasattr(value, "item") else value
        raise InstanceError(f"{where}: column {column!r} = {value!r}: {problem}", hint=hint)

    missing = [c for c in TABLE_COLUMNS if c not in frame.columns]
    if missing:
        raise InstanceError(f"{source}: island table lacks columns {missing}",
                            hint="the header must be: " + ",".join(TABLE_COLUMNS))
    frame = frame.loc[:, list(TABLE_COLUMNS)].reset_index(drop=True).copy()
    if frame.empty:
        return frame
    for column in ("cluster", "gpu_type", "bound"):
        frame[column] = frame[column].astype(str).str.strip()
    for column in TABLE_COLUMNS[2:9]:
        numbers = pd.to_numeric(frame[column], errors="coerce")
        for row in numbers.index[numbers.isna()]:
            fail(int(row), column, frame.at[row, column], "not a number", "put a finite number there.")
        if column in _INT_COLUMNS:
            for row in numbers.index[numbers != numbers.round()]:
                fail(int(row), column, numbers[row], "not an integer", "use a whole number.")
            numbers = numbers.astype(int)
        bad = numbers <= 0 if column in _POSITIVE else numbers < 0
        for row in numbers.index[bad | ~numbers.astype(float).map(lambda v: v < float("inf"))]:
            problem = "must be > 0" if column in _POSITIVE else "must be >= 0 and finite"
            fail(int(row), column, numbers[row], problem, f"{column} must be a positive, finite value.")
        frame[column] = numbers
    for row, bound in frame["bound"].items():
        if bound.lower() not in _BOUNDS:
            fail(int(row), "bound", bound, f"expected one of {sorted(_BOUNDS)}", "use compute, communication or mixed.")
    dupes = frame.duplicated(subset=[*OPTION_KEY, "micro_batch"], keep=False)
    if dupes.any():
        rows = [int(r) + 2 for r in frame.index[dupes]]
        raise InstanceError(f"{source}: duplicate (cluster, nodes, gpus_per_node, micro_batch) rows on lines {rows}",
                            hint="keep one row per island option and micro-batch.")
    prices = frame.groupby(OPTION_KEY)["usd_per_hour"].nunique()
    if (prices > 1).any():
        key = prices.index[prices > 1][0]
        raise InstanceError(f"{source}: option {key} has different usd_per_hour across micro_batch rows",
                            hint="the island price does not depend on the micro-batch; use one value.")
    if instance is not None:
        names = [c.name for c in instance.clusters]
        for row, cluster in frame["cluster"].items():
            if cluster not in names:
                fail(int(row), "cluster", cluster, f"not a cluster of instance {instance.name!r}; "
                     + did_you_mean(cluster, names), "use the cluster names of the instance file.")
    return frame
