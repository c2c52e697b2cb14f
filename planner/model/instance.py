"""Planner instance files (YAML): schema, loading, validation and pricing of the clusters.

Every problem with a file becomes an `InstanceError` (exit code 2) naming the file, the dotted
field path, the offending value, and a "To fix:" hint. The island table the planner solves
(`load_island_table`, DESIGN §3) lives in `planner.model.island_table` and is re-exported here.

`strategy: fsdp` means one island (max_islands is forced to 1, σ = 0). `streaming-diloco` is
refused with its reason (ConfigError, exit 2): the planner prices DiLoCo's blocking sync σ only,
and planning a streaming run by it would silently report DiLoCo's times under streaming's name;
`shardmeter streaming` tunes Streaming DiLoCo and `strategy: diloco` plans the blocking bound
(tests/test_price_scenarios.py).

`price_scale` multiplies every price of a cluster (its own, its alternatives', its per-size list
prices), whether listed (`price:`) or explicit, so "what if H100s were 30 % cheaper?" is
`--vary clusters.X.price_scale=0.7` (`gpu.NAME.price_scale` for every cluster of a GPU type,
`planner.analysis.scenarios`). A CSV island table is priced at the unscaled prices it was written
for and its rows are scaled on loading (`planner.model.island_table.load_island_table`).
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

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from perfmodel.facts import (
    carbon_intensity_g_per_kwh,
    check_limit,
    failure_limit_problem,
    get_gpu,
    load_yaml,
    model_parameters,
    price_rows,
    price_usd_per_gpu_hour,
    short_repr,
)
from perfmodel.spec.errors import (
    CatalogError,
    ConfigError,
    InstanceError,
    ShardMeterError,
    did_you_mean,
)
from perfmodel.tables import checkpoint_mode

LOG = logging.getLogger(__name__)

MAX_LISTED_ERRORS = 20
"""Most problems one instance error lists (the rest are counted)."""

Strategy = Literal["fsdp", "diloco", "streaming-diloco"]
Tier = Literal["on-demand", "spot", "community"]
CheckpointMode = Literal["sync", "async"]
Dtype = Literal["fp32", "bf16", "int8", "fp4"]


class _Strict(BaseModel):
    # NaN/inf are never a valid size, price or latency; YAML's true/false are never numbers.
    # attribute docstrings become field descriptions: docs/INSTANCE.md is generated from them
    # (scripts/make_instance_doc.py)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False,
                              use_attribute_docstrings=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_booleans_as_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        if field is not None and not _admits_bool(field.annotation):
            items = value if isinstance(value, list | tuple) else [value]
            if any(isinstance(v, bool) for v in items):
                raise ValueError("a boolean (true/false) is not accepted here; "
                                 "write a number or name")
        if field is not None and _is_bool(field.annotation) and value is not None \
                and not isinstance(value, bool):
            # one rule (perfmodel.spec.inputs): a boolean is written true or false; "false" in
            # quotes, 0 or "no" are refused, never read by their truthiness
            raise ValueError("not a boolean; write true or false, without quotes")
        return value


def _not_blank(value: str) -> str:
    """A name must have visible characters (a blank one cannot be told apart in any table)."""
    if not value.strip():
        raise ValueError("a blank name (only spaces) is not accepted; write a name")
    return value


def _is_bool(annotation: Any) -> bool:
    """A field whose only non-None type is bool."""
    kinds = [a for a in typing.get_args(annotation) if a is not type(None)] or [annotation]
    return kinds == [bool]


def _admits_bool(annotation: Any) -> bool:
    if annotation is bool or annotation is Any:
        return True
    return any(_admits_bool(a) for a in typing.get_args(annotation) if a is not Ellipsis)


class PriceRef(_Strict):
    """A reference into the price lists (`catalogs/prices/`)."""

    provider: str = Field(min_length=1)
    """Provider as the price lists name it (`shardmeter catalog prices`), e.g. Lambda."""
    tier: Tier = "on-demand"
    """Price tier: on-demand, spot (preemptible) or community."""
    as_of: str | None = None
    """Date of the price list, YYYY-MM-DD (default: the newest list of that provider)."""
    per_instance_size: bool = False
    """Price an island of g GPUs per node at the list's per-GPU price for a g-GPU instance when
    the list has that size (e.g. a 1-GPU slice at its own rate, not the 8-GPU one)."""

    @field_validator("as_of", mode="before")
    @classmethod
    def _date_to_str(cls, value: Any) -> Any:
        if isinstance(value, dt.date):
            return value.isoformat()
        if isinstance(value, str):
            try:
                dt.date.fromisoformat(value)
            except ValueError as err:
                raise ValueError(f"not a date YYYY-MM-DD ({err})") from None
        return value


class Training(_Strict):
    """What is trained and how (S, B, D, H: the planner's symbols, in the comments)."""

    seq_len: int = Field(gt=0)  # S
    """Sequence length S, tokens."""
    global_batch_seqs: int = Field(gt=0)  # B
    """Global batch B: sequences per (inner) optimizer step over all islands."""
    train_tokens: float = Field(gt=0)  # D
    """Tokens D to train on; wall time and cost scale with it."""
    strategy: Strategy = "diloco"
    """fsdp (one island), diloco (islands sync pseudo-gradients every H inner steps);
    streaming-diloco is refused by the planner (`shardmeter streaming` tunes it)."""
    inner_steps: int | None = Field(default=None, gt=0)  # H
    """DiLoCo H: inner steps between outer syncs (default 1: every step; ignored for fsdp)."""
    pseudo_gradient_dtype: Dtype = "fp32"
    """Data type of the pseudo-gradients sent between islands (bytes per parameter on the WAN)."""
    activation_checkpointing: str | tuple[str, ...] = "op-sac"
    """A checkpointing policy: none, full, op-sac, attn or layer:N (`selective` reads as op-sac),
    or a list of them for the planner to choose from per island (the island table then has an
    `ac` column)."""
    recipe: dict[str, Any] | None = None
    """Training recipe for the island tables: `base:` (torchtitan | paper) plus TrainingRecipe
    fields (`perfmodel.spec.recipe.recipe_from_mapping`); an explicit activation_checkpointing
    wins."""
    parallel: dict[str, Any] | None = None
    """Parallel layouts the island tables may use: pinned degrees (`tp: 8`), limits (`max_tp`,
    `max_pp`; `max_virtual_stages`, default 4, sets how deep interleaved 1F1B is searched),
    schedules (`schedules: [1f1b]`), `compute_dtype`, ...; passed through untouched to the
    performance model, which validates it (None: its default, plain FSDP; `{}`: every layout,
    `perfmodel.spec.layout_space`)."""
    compute_dtype: str | list[str] | None = None
    """The block linears' matmul dtype (bf16, fp8-tensorwise, fp8-rowwise, mxfp8): one value
    pins it (as `recipe: {compute_dtype: ...}` would), a list lets the planner choose per island
    (GPUs without FP8 keep only bf16); validated by the performance model. FP8 figures are
    priors (no GPU measured them)."""

    @field_validator("activation_checkpointing", mode="before")
    @classmethod
    def _canonical_checkpointing(cls, value: Any) -> str | tuple[str, ...]:
        try:
            if isinstance(value, list | tuple):
                if not value:
                    raise ValueError("an empty list; give at least one mode")
                modes = tuple(checkpoint_mode(v) for v in value)
                repeated = sorted({m for m in modes if modes.count(m) > 1})
                if repeated:
                    raise ValueError(f"mode(s) {', '.join(repeated)} listed twice; list each "
                                     "mode once")
                return modes
            return checkpoint_mode(value)
        except ShardMeterError as err:  # pydantic reports it with the field's path
            raise ValueError(f"{err.message}; {err.hint}") from None


class Alternative(_Strict):
    """Another price tier the same node pool is rented at (issue 28): islands of the cluster may
    be on this tier instead (e.g. spot next to on-demand); the planner chooses per island."""

    tier: Tier
    """The tier: on-demand, spot (preemptible) or community."""
    price_usd_per_gpu_hour: float | None = Field(default=None, gt=0)
    """Its price (default: the cluster's `price:` list at this tier, same provider and date)."""
    preemptions_per_node_hour: float | None = Field(default=None, ge=0)
    """Spot preemptions per node-hour (default: catalogs/reliability/preemption_rates.csv for a
    spot tier, 0 otherwise)."""
    spot_capacity_wait_s: float | None = Field(default=None, ge=0)
    """Wait for new capacity after a preemption (default: catalogs/reliability/defaults.csv)."""


class Failures(_Strict):
    """Plans under failures (issue 28): expected goodput, wall time and cost. The section's
    presence (or `--failures`) turns the model on; every field defaults to the sourced catalogs
    (catalogs/reliability/), and clusters may override them."""

    enabled: bool = True
    """False: the section is kept but the model is off (every figure as without it)."""
    failures_per_gpu_hour: float | None = Field(default=None, ge=0)
    """Interruptions per GPU-hour of every cluster (default: each GPU type's published figure)."""
    restart_s: float | None = Field(default=None, ge=0)
    """Seconds from an interruption to training again (default: catalog)."""
    checkpoint_write_gbit_s_per_node: float | None = Field(default=None, gt=0)
    """Checkpoint write bandwidth per node, Gbit/s (default: catalog)."""
    checkpoint_mode: CheckpointMode | None = None
    """sync (training stalls for the whole write) or async (for a snapshot; the write finishes
    in the background); default sync."""
    egress: bool = True
    """Price the DiLoCo syncs' traffic between sites at the providers' egress rates."""
    billing: bool = True
    """Round rented time to the providers' billing increments and minimums."""


class Cluster(_Strict):
    """A pool of identical nodes islands are carved from."""

    @field_validator("name", "gpu", "region")
    @classmethod
    def _names_not_blank(cls, value: str | None) -> str | None:
        return None if value is None else _not_blank(value)

    name: str = Field(min_length=1)
    """Cluster name (unique in the file); plans and `--vary clusters.NAME....` use it."""
    gpu: str = Field(min_length=1)
    """Catalog GPU type (`shardmeter catalog gpus`), e.g. H100-SXM5-80GB."""
    num_nodes: int = Field(gt=0)
    """Nodes available to rent."""
    gpus_per_node: int = Field(gt=0)
    """GPUs per node."""
    allowed_gpus_per_node: tuple[int, ...] | None = None
    """GPUs per node an island may use (default: the powers of two below gpus_per_node, and
    gpus_per_node)."""
    price_usd_per_gpu_hour: float | None = Field(default=None, gt=0)
    """Your own price, USD per GPU-hour (give this or `price:`, or neither when islands_table
    prices the islands)."""
    price: PriceRef | None = None
    """A dated list price from catalogs/prices/ (instead of price_usd_per_gpu_hour)."""
    price_scale: float = Field(default=1.0, gt=0, le=1000)
    """Multiplier on every price of this cluster (own price, list price, alternatives), e.g.
    0.7 for 30 % cheaper: a what-if (`--vary clusters.NAME.price_scale=0.7`); 1 = as priced."""
    wan_gbit_s: float | None = Field(default=None, gt=0)
    """WAN uplink of the site for DiLoCo syncs between clusters, Gbit/s (required unless fsdp)."""
    wan_latency_ms: float | None = Field(default=None, ge=0)
    """WAN latency, ms (default 0)."""
    fabric_gbit_s: float | None = Field(default=None, gt=0)
    """Inter-node fabric bandwidth per node for a sync among islands of this cluster alone
    (default: the GPU's catalog inter-node link x NICs per node; the WAN when unknown)."""
    fabric_latency_ms: float | None = Field(default=None, ge=0)
    """Latency of that fabric (default: the catalog link's)."""
    max_nodes_per_island: int | None = Field(default=None, gt=0)
    """Largest island in nodes (1: the nodes have no fast fabric and cannot form multi-node
    islands, as cloud pods without InfiniBand); None: up to num_nodes."""
    island_nodes: tuple[int, ...] | None = None
    """Node counts an island of this cluster may use (e.g. [256, 512, 1024, 2048]: keeps the island
    table of a large cluster small); None: every count 1..num_nodes. Each at most num_nodes, no
    repeats."""
    region: str | None = None
    """Grid region of the data centre, a key of catalogs/energy/carbon_intensity.csv
    (`gcp/us-central1`, `country/FIN`, ...): sets the CO2 of its energy (None: CO2 unknown)."""
    pue: float | None = Field(default=None, ge=1.0)
    """Power usage effectiveness of the data centre (default: the price list provider's
    published figure, catalogs/energy/pue.csv)."""
    alternatives: tuple[Alternative, ...] = ()
    """Other price tiers of the same node pool (e.g. spot next to on-demand); the planner picks
    per island."""
    failures_per_gpu_hour: float | None = Field(default=None, ge=0)
    """Interruptions per GPU-hour on this cluster (failure model; default: `failures:` or the
    GPU type's published figure)."""
    restart_s: float | None = Field(default=None, ge=0)
    """Restart time on this cluster (failure model)."""
    checkpoint_write_gbit_s_per_node: float | None = Field(default=None, gt=0)
    """Checkpoint write bandwidth per node on this cluster (failure model)."""
    preemptions_per_node_hour: float | None = Field(default=None, ge=0)
    """Preemptions per node-hour when the cluster's own price tier is spot (failure model)."""
    spot_capacity_wait_s: float | None = Field(default=None, ge=0)
    """Wait for new Spot capacity after a preemption (failure model)."""
    egress_usd_per_gb: float | None = Field(default=None, ge=0)
    """Egress price of traffic leaving this site, USD/GB (default: the price list provider's
    published schedule, catalogs/reliability/egress.csv)."""

    @property
    def tier(self) -> str:
        """Price tier of the cluster's own price (on-demand when priced explicitly)."""
        return self.price.tier if self.price is not None else "on-demand"

    @property
    def provider(self) -> str | None:
        """Provider of the cluster's price list (None when priced explicitly)."""
        return self.price.provider if self.price is not None else None

    @property
    def gpus_per_node_choices(self) -> tuple[int, ...]:
        """Allowed GPUs per node; default: powers of two below gpus_per_node, and gpus_per_node."""
        if self.allowed_gpus_per_node is not None:
            return tuple(sorted(set(self.allowed_gpus_per_node)))
        powers = [2**i for i in range(self.gpus_per_node.bit_length()) if 2**i < self.gpus_per_node]
        return tuple(sorted({*powers, self.gpus_per_node}))

    @property
    def island_node_counts(self) -> tuple[int, ...]:
        """Node counts of this cluster's island options: island_nodes (else 1..num_nodes) up to
        num_nodes and max_nodes_per_island, ascending."""
        counts = self.island_nodes if self.island_nodes is not None \
            else range(1, self.num_nodes + 1)
        top = min(self.num_nodes, self.max_nodes_per_island or self.num_nodes)
        return tuple(sorted(n for n in counts if n <= top))

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
    """Most islands in a plan (fsdp: always 1)."""
    max_gpus: int | None = Field(default=None, gt=0)
    """Most GPUs in a plan."""
    budget_usd: float | None = Field(default=None, gt=0)
    """Most a plan may cost, USD."""
    deadline_hours: float | None = Field(default=None, gt=0)
    """Longest a plan may take, hours."""


class Instance(_Strict):
    """A planner instance: the model, how it is trained, the clusters to plan on, and caps."""

    name: str = Field(min_length=1)
    """Name of the instance; it labels the outputs."""
    model: str = Field(min_length=1)
    """Catalog model (`shardmeter catalog models`) or a config.json path (relative to this
    file)."""
    training: Training
    """What is trained and how."""
    clusters: tuple[Cluster, ...] = Field(min_length=1)
    """Node pools islands are carved from (at least one)."""
    limits: Limits = Limits()
    """Caps on every plan."""
    islands_table: str | None = None
    """A CSV island table (relative to this file) instead of building it with the performance
    model (columns: README / planner.model.island_table.TABLE_COLUMNS)."""
    parameters: int | None = Field(default=None, gt=0)
    """Parameters exchanged between islands (default: the model's count)."""
    failures: Failures | None = None
    """Expected values under failures, preemptions and the full bill (None: off, as today)."""

    _source: Path | None = PrivateAttr(default=None)
    _model_parameters: int | None = PrivateAttr(default=None)

    @field_validator("name", "model")
    @classmethod
    def _names_not_blank(cls, value: str) -> str:
        return _not_blank(value)

    @property
    def model_ref(self) -> str:
        """`model` as the performance model reads it: a catalog name as written, a config.json
        path resolved relative to the YAML file (like `islands_table`), whatever the working
        directory."""
        path = Path(self.model)
        if path.suffix != ".json" or path.is_absolute() or self._source is None:
            return self.model
        return str(self._source.parent / path)

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

    @property
    def failures_on(self) -> bool:
        """Whether plans are scored by their expected values under failures."""
        return self.failures is not None and self.failures.enabled

    def with_failures(self) -> Instance:
        """This instance with the failure model on (a default `failures:` section when it has
        none), as `--failures` asks."""
        if self.failures_on:
            return self
        out = self.model_copy(update={"failures": Failures()})
        out._source = self._source
        out._model_parameters = self._model_parameters
        return out

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
    """Default resolver: the catalog price lists (`perfmodel.facts.price_usd_per_gpu_hour`)."""
    return price_usd_per_gpu_hour(ref.provider, ref.gpu, ref.tier, ref.as_of)


def gpu_prices(instance: Instance, resolve_price: PriceResolver | None = None, *,
               scaled: bool = True) -> dict[str, float]:
    """USD per GPU-hour of every cluster, resolving `price:` references, times the cluster's
    `price_scale` (`scaled=False`: as listed, the prices a CSV island table is written for)."""
    resolver = resolve_price or catalog_price
    out = {}
    for cluster in instance.clusters:
        scale = cluster.price_scale if scaled else 1.0
        if cluster.price_usd_per_gpu_hour is not None:
            out[cluster.name] = cluster.price_usd_per_gpu_hour * scale
        elif cluster.price is not None:
            ref = PriceLookup(provider=cluster.price.provider, gpu=cluster.gpu,
                              tier=cluster.price.tier, as_of=cluster.price.as_of)
            out[cluster.name] = float(resolver(ref)) * scale
    return out


def alternative_prices(instance: Instance,
                       resolve_price: PriceResolver | None = None) -> dict[str, dict[str, float]]:
    """USD per GPU-hour of every cluster's alternative tiers: {cluster: {tier: price}}; a tier
    without its own price is looked up in the cluster's price list (same provider and date)."""
    resolver = resolve_price or catalog_price
    out: dict[str, dict[str, float]] = {}
    for cluster in instance.clusters:
        for alt in cluster.alternatives:
            if alt.price_usd_per_gpu_hour is not None:
                price = alt.price_usd_per_gpu_hour
            elif cluster.price is not None:
                price = float(resolver(PriceLookup(provider=cluster.price.provider,
                                                   gpu=cluster.gpu, tier=alt.tier,
                                                   as_of=cluster.price.as_of)))
            else:  # caught by _check_semantics
                continue
            out.setdefault(cluster.name, {})[alt.tier] = price * cluster.price_scale
    return out


# ---- loading -----------------------------------------------------------------------------


def load_instance(path: str | Path, *, resolve_price: PriceResolver | None = None) -> Instance:
    """Read and validate an instance YAML file.

    When the instance has no `islands_table`, price references are resolved now (through
    `resolve_price`, default: the catalog price lists) so a bad reference fails early.
    """
    path = Path(path)
    raw = read_instance_yaml(path)
    if not isinstance(raw, dict):
        raise InstanceError(f"{path}: top level must be a mapping, got {type(raw).__name__}",
                            hint="start the file with `name:`, `model:`, `training:`, `clusters:`.")
    return instance_from_mapping(raw, path, resolve_price=resolve_price)


def read_instance_yaml(path: Path) -> Any:
    """The parsed YAML of an instance file (strict: duplicate keys, encodings and alias bombs
    are InstanceErrors naming the file; `perfmodel.spec.inputs`)."""
    return load_yaml(path, what="instance file", error=InstanceError,
                     hint="pass the path of a valid YAML instance (see instances/).")


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
            lines.append(f"unknown key {dotted!r} = {short_repr(item['input'])}; "
                         f"{did_you_mean(str(loc[-1]), known)}")
        elif item["type"] == "missing":
            lines.append(f"field {dotted!r} is required")
        else:
            lines.append(f"field {dotted!r} = {short_repr(item.get('input'))}: {item['msg']}")
        if len(lines) >= MAX_LISTED_ERRORS:
            lines.append(f"... and {len(errors) - len(lines) + 1} more")
            break
    return InstanceError(f"{path}: invalid instance:\n  " + "\n  ".join(lines),
                         hint="correct the listed fields "
                              "(see instances/small-*.yaml for examples).")


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

    _check_limits(instance, path)
    training = instance.training
    batch_tokens = training.global_batch_seqs * training.seq_len
    if training.train_tokens < batch_tokens:
        fail("training.train_tokens", training.train_tokens,
             f"fewer than one global batch ({training.global_batch_seqs} x {training.seq_len} = "
             f"{batch_tokens:,} tokens): the run would be shorter than one step",
             f"set train_tokens >= {batch_tokens:,}, or lower global_batch_seqs.")
    _check_recipe_outer(instance, fail)
    if training.strategy == "streaming-diloco":
        fail("training.strategy", training.strategy,
             "the planner does not model Streaming DiLoCo: it prices DiLoCo's blocking outer "
             "sync only, so a plan would show DiLoCo's times under streaming's name",
             "plan with `strategy: diloco` (its blocking sync bounds a streaming run's from "
             "above), and tune the streaming schedule of the chosen islands with `shardmeter "
             "streaming` (or `shardmeter predict --strategy streaming-diloco`).")
    names: set[str] = set()
    for i, c in enumerate(instance.clusters):
        where = f"clusters[{i}]"
        if c.name in names:
            fail(f"{where}.name", c.name, "duplicate cluster name",
                 "give every cluster a unique name.")
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
        if c.island_nodes is not None:
            _check_island_nodes(f"{where}.island_nodes", c, fail)
        priced = (c.price_usd_per_gpu_hour is not None) + (c.price is not None)
        if priced > 1 or (priced == 0 and instance.islands_table is None):
            fail(f"{where}.price_usd_per_gpu_hour", c.price_usd_per_gpu_hour,
                 "give exactly one of price_usd_per_gpu_hour and price (or neither when "
                 "islands_table prices the islands)",
                 "set `price_usd_per_gpu_hour: 3.59` or `price: {provider: ..., tier: on-demand}` "
                 "(a what-if on a price: `--vary clusters.NAME.price_scale=0.7`, listed or not).")
        if c.region is not None:
            _check_region(f"{where}.region", c.region, fail)
        tiers = [c.tier]
        for j, alt in enumerate(c.alternatives):
            if alt.tier in tiers:
                fail(f"{where}.alternatives[{j}].tier", alt.tier,
                     "tier offered twice by this cluster",
                     "list each tier once (the cluster's own price counts as one).")
            tiers.append(alt.tier)
            if alt.price_usd_per_gpu_hour is None and c.price is None:
                fail(f"{where}.alternatives[{j}].price_usd_per_gpu_hour", None,
                     "the cluster has no price list to look this tier up in",
                     "give `price_usd_per_gpu_hour:` for the alternative, or a `price:` "
                     "reference for the cluster.")
        if instance.training.strategy != "fsdp":
            for key in ("wan_gbit_s", "wan_latency_ms"):
                if getattr(c, key) is None:
                    fail(f"{where}.{key}", None,
                         f"required for strategy {instance.training.strategy}",
                         f"add `{key}:` to the cluster (σ needs the WAN uplink and latency).")
    if instance.training.strategy != "fsdp" and instance.training.inner_steps is None:
        fail("training.inner_steps", None, f"required for strategy {instance.training.strategy}",
             "add `inner_steps: 100` (H, inner steps per outer step).")
    if instance.islands_table is not None:
        table = instance.islands_table_path
        if table is not None and table.is_dir():
            fail("islands_table", instance.islands_table, f"{table} is a directory, not a CSV file",
                 "give the path of the island table CSV, relative to the YAML file.")
        if table is None or not table.is_file():
            fail("islands_table", instance.islands_table, f"file {table} does not exist",
                 "give a CSV path relative to the YAML file, or set islands_table: null.")
        if instance.parameters is None:
            fail("parameters", None, "required when islands_table is given",
                 "add `parameters: <number of model parameters>` (sets the pseudo-gradient size).")
    _check_catalog_names(instance, path)


_FIELD_LIMITS: tuple[tuple[str, str], ...] = (
    ("training.seq_len", "seq_len"), ("training.global_batch_seqs", "global_batch_seqs"),
    ("training.train_tokens", "train_tokens"), ("training.inner_steps", "inner_steps"),
    ("limits.max_islands", "islands"), ("limits.budget_usd", "usd"),
    ("limits.deadline_hours", "hours"),
)
"""Instance fields and the perfmodel.spec.inputs.LIMITS entry bounding each."""
_CLUSTER_LIMITS: tuple[tuple[str, str], ...] = (
    ("num_nodes", "nodes"), ("max_nodes_per_island", "nodes"),
    ("price_usd_per_gpu_hour", "usd_per_gpu_hour"), ("wan_gbit_s", "wan_gbit_s"),
    ("fabric_gbit_s", "wan_gbit_s"), ("wan_latency_ms", "latency_ms"),
    ("fabric_latency_ms", "latency_ms"),
)
"""Cluster fields and their LIMITS entry."""
MAX_PUE = 5.0
"""Largest power usage effectiveness accepted (published data centres: 1.05 to about 2)."""


def _check_limits(instance: Instance, path: Path) -> None:
    """Every count that drives work and every magnitude that could overflow a cost, within the
    documented limits (README "Limits"); an InstanceError names the field, the limit and why."""

    def check(key: str, value: Any, field: str) -> None:
        if value is not None:
            check_limit(key, value, field=field, where=str(path), error=InstanceError)

    for dotted, key in _FIELD_LIMITS:
        section, name = dotted.split(".")
        check(key, getattr(getattr(instance, section), name), dotted)
    check("clusters", len(instance.clusters), "clusters (count)")
    check("parameters", instance.parameters, "parameters")
    for i, c in enumerate(instance.clusters):
        for name, key in _CLUSTER_LIMITS:
            # a cluster that lists its island sizes tabulates only those: it may be as large as
            # one predicted step allows (`island_nodes`: a 16k-GPU cluster stays a small table)
            if key == "nodes" and c.island_nodes is not None:
                key = "step_nodes"
            check(key, getattr(c, name), f"clusters[{i}].{name}")
        if c.pue is not None and c.pue > MAX_PUE:
            raise InstanceError(f"{path}: field 'clusters[{i}].pue' = {c.pue!r}: above {MAX_PUE} "
                                "(published data centres run at 1.05 to about 2)",
                                hint=f"give a PUE between 1 and {MAX_PUE}.")
    if instance.limits.max_gpus is not None:
        check("flag_int", instance.limits.max_gpus, "limits.max_gpus")
    _check_failure_limits(instance, path)


_FAILURE_FIELDS = ("failures_per_gpu_hour", "restart_s", "checkpoint_write_gbit_s_per_node",
                   "preemptions_per_node_hour", "spot_capacity_wait_s", "egress_usd_per_gb")
"""Failure-model fields of the failures: section, clusters and alternatives (FAILURE_LIMITS)."""


def _check_failure_limits(instance: Instance, path: Path) -> None:
    """The failure model's inputs within `perfmodel.spec.failure_model.FAILURE_LIMITS`, the
    alternatives' prices within the price limit."""
    places: list[tuple[str, Any]] = [("failures", instance.failures)]
    for i, c in enumerate(instance.clusters):
        places.append((f"clusters[{i}]", c))
        places += [(f"clusters[{i}].alternatives[{j}]", a) for j, a in enumerate(c.alternatives)]
        for j, alt in enumerate(c.alternatives):
            if alt.price_usd_per_gpu_hour is not None:
                check_limit("usd_per_gpu_hour", alt.price_usd_per_gpu_hour,
                            field=f"clusters[{i}].alternatives[{j}].price_usd_per_gpu_hour",
                            where=str(path), error=InstanceError)
    for where, section in places:
        for name in _FAILURE_FIELDS:
            value = getattr(section, name, None)
            problem = failure_limit_problem(name, float(value)) if value is not None else ""
            if problem:
                raise InstanceError(f"{path}: field '{where}.{name}' = {value!r}: {problem}",
                                    hint=f"give {name} within that range (README, section "
                                         "Limits), or drop it for the catalog default.")


def _check_recipe_outer(instance: Instance, fail: Any) -> None:
    """A recipe's outer settings may not contradict the training section the planner reads
    (it plans with training.inner_steps and training.pseudo_gradient_dtype): one value, one
    place."""
    recipe = instance.training.recipe
    outer = recipe.get("outer") if isinstance(recipe, dict) else None
    if not isinstance(outer, dict):
        return
    for key in ("inner_steps", "pseudo_gradient_dtype"):
        if key not in outer:
            continue
        planned = getattr(instance.training, key)
        if key == "inner_steps" and planned is None:
            fail(f"training.recipe.outer.{key}", outer[key],
                 "the planner reads H from training.inner_steps, not from the recipe",
                 f"move it: `training.inner_steps: {short_repr(outer[key])}`, and drop "
                 f"recipe.outer.{key}.")
        if outer[key] != planned:
            fail(f"training.recipe.outer.{key}", outer[key],
                 f"contradicts training.{key} = {planned!r} (the planner uses training.{key})",
                 f"drop recipe.outer.{key}, or give both the same value.")


def _check_island_nodes(where: str, cluster: Cluster, fail: Any) -> None:
    """island_nodes: a non-empty list of distinct node counts, each 1..num_nodes."""
    counts = list(cluster.island_nodes or ())
    if not counts:
        fail(where, counts, "empty list",
             "list at least one node count, or drop the field (every count 1..num_nodes).")
    bad = [n for n in counts if n < 1 or n > cluster.num_nodes]
    if bad:
        fail(where, counts, f"values {bad} are outside 1..num_nodes={cluster.num_nodes}",
             f"use node counts between 1 and {cluster.num_nodes}, or raise num_nodes.")
    repeated = sorted({n for n in counts if counts.count(n) > 1})
    if repeated:
        fail(where, counts, f"values {repeated} are listed twice", "list each node count once.")


def _check_region(where: str, region: str, fail: Any) -> None:
    """An unknown grid region is a user error with a did-you-mean (catalogs/energy/)."""

    try:
        carbon_intensity_g_per_kwh(region)
    except CatalogError as err:
        fail(where, region, "unknown grid region",
             err.hint or "use a key of catalogs/energy/carbon_intensity.csv.")


def _check_catalog_names(instance: Instance, path: Path) -> None:
    """The model and every cluster's GPU must be known (catalog name or config.json path), and a
    cluster may not use more GPUs per node than its node type holds."""

    def fail(field: str, value: Any, err: ShardMeterError) -> None:
        raise InstanceError(f"{path}: field {field!r} = {value!r}: {err.message}",
                            hint=err.hint or "use a catalog name.")

    try:
        model_parameters(instance.model_ref)
    except (CatalogError, ConfigError) as err:
        fail("model", instance.model, err)
    for i, c in enumerate(instance.clusters):
        try:
            gpu = get_gpu(c.gpu)
        except CatalogError as err:
            fail(f"clusters[{i}].gpu", c.gpu, err)
        if c.gpus_per_node > gpu.max_gpus_per_node:
            raise InstanceError(
                f"{path}: field 'clusters[{i}].gpus_per_node' = {c.gpus_per_node}: "
                f"a {gpu.name} node holds at most {gpu.max_gpus_per_node} GPUs",
                hint=f"use gpus_per_node <= {gpu.max_gpus_per_node} and raise num_nodes instead.")


def instance_from_mapping(raw: dict[str, Any], path: str | Path, *,
                          resolve_price: PriceResolver | None = None) -> Instance:
    """Validate an instance mapping as if it had been read from `path` (relative table paths and
    error messages refer to that file); used for what-if scenarios
    (`planner.analysis.scenarios`)."""
    path = Path(path)
    try:
        instance = Instance.model_validate(raw)
    except ValidationError as err:
        raise _instance_error(path, err) from None
    instance._source = path.resolve()
    _check_semantics(instance, path)
    if instance.islands_table is None:
        try:
            gpu_prices(instance, resolve_price)
        except InstanceError:
            raise
        except ShardMeterError as err:
            raise InstanceError(f"{path}: cannot price a cluster: {err.message}",
                                hint=err.hint or "fix the cluster's price: reference.") from err
    try:
        alternative_prices(instance, resolve_price)
    except ShardMeterError as err:
        raise InstanceError(f"{path}: cannot price a cluster's alternative tier: {err.message}",
                            hint=err.hint or "give the alternative's price_usd_per_gpu_hour, or "
                                             "use a tier its price list has.") from err
    return instance


def size_prices(instance: Instance) -> dict[str, dict[int, float]]:
    """Per cluster whose `price:` sets per_instance_size: {GPUs per instance: USD per GPU-hour}
    of the instance sizes its price list has (newest snapshot per size unless `as_of` is set)."""
    wanted = [c for c in instance.clusters if c.price is not None and c.price.per_instance_size]
    if not wanted:
        return {}

    rows = price_rows()
    out: dict[str, dict[int, float]] = {}
    for cluster in wanted:
        ref = cluster.price
        if ref is None:  # not wanted (filtered above)
            continue
        gpu = get_gpu(cluster.gpu).name
        best: dict[int, Any] = {}
        for r in rows:
            if (r.provider.lower() != ref.provider.lower() or r.gpu_type != gpu
                    or r.tier != ref.tier or r.gpus_per_node is None
                    or (ref.as_of is not None and r.as_of != ref.as_of)):
                continue
            if r.gpus_per_node not in best or r.as_of > best[r.gpus_per_node].as_of:
                best[r.gpus_per_node] = r
        out[cluster.name] = {size: r.usd_per_gpu_hour * cluster.price_scale
                             for size, r in best.items()}
    return out
