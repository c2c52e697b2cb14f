"""Catalog loading and validation: models, GPUs, links and price lists.

Rows are validated with pydantic; a bad row raises CatalogError naming file, row, field and
value. Unknown names raise CatalogError with the closest names ("did you mean").
"""

from __future__ import annotations

import csv
import functools
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from perfmodel.spec.arch import FAMILY_LAYOUT, ModelSpec
from perfmodel.spec.errors import CatalogError, unknown_name
from perfmodel.spec.formulas import GIB
from perfmodel.spec.hardware import GpuSpec, LinkSpec
from perfmodel.spec.hf_config import load_hf_config
from perfmodel.spec.paths import catalog_dir

TIERS = ("on-demand", "spot", "community")


class _Row(BaseModel):
    model_config = ConfigDict(extra="ignore", str_strip_whitespace=True)


class ModelRow(_Row):
    name: str = Field(min_length=1)
    family: str
    hidden_size: int = Field(gt=0)
    num_hidden_layers: int = Field(gt=0)
    num_attention_heads: int = Field(gt=0)
    num_key_value_heads: int = Field(gt=0)
    head_dim: int | None = Field(default=None, ge=0)
    intermediate_size: int = Field(gt=0)
    vocab_size: int = Field(gt=0)
    tie_word_embeddings: bool
    params_b: float | None = None
    hf_id: str = ""
    source: str = Field(min_length=1)

    @field_validator("head_dim", "params_b", mode="before")
    @classmethod
    def _blank_is_none(cls, v: Any) -> Any:
        return None if v == "" else v

    @field_validator("family")
    @classmethod
    def _known_family(cls, v: str) -> str:
        if v not in FAMILY_LAYOUT:
            raise ValueError(f"unknown family {v!r}; known: {', '.join(FAMILY_LAYOUT)}")
        return v


class GpuRow(_Row):
    gpu_type: str = Field(min_length=1)
    memory_gib: float = Field(gt=0)
    usable_memory_gib: float = Field(gt=0)
    hbm_bandwidth_tb_s: float = Field(gt=0)
    bf16_dense_tflops: float = Field(gt=0)
    fp8_dense_tflops: float | None = Field(default=None, gt=0)
    intra_node_link: str
    inter_node_link: str
    nics_per_node: int = Field(gt=0)
    max_gpus_per_node: int = Field(gt=0)
    source: str = Field(min_length=1)

    @field_validator("fp8_dense_tflops", mode="before")
    @classmethod
    def _no_fp8_is_none(cls, v: Any) -> Any:
        return None if v == "" else v


class LinkRow(_Row):
    name: str = Field(min_length=1)
    kind: str = Field(pattern="^(intra|inter|wan)$")
    latency_us: float = Field(ge=0)
    busbw_gb_s: float = Field(gt=0)
    line_rate_gb_s: float = Field(gt=0)
    per_nic: bool
    source: str = Field(min_length=1)


class PriceRow(_Row):
    provider: str = Field(min_length=1)
    gpu_type: str = Field(min_length=1)
    tier: str = Field(pattern="^(on-demand|spot|community)$")
    usd_per_gpu_hour: float = Field(gt=0)
    as_of: str = Field(min_length=4)
    gpus_per_node: int | None = None
    offer: str = ""
    source: str = Field(min_length=1)

    @field_validator("gpus_per_node", mode="before")
    @classmethod
    def _blank_is_none(cls, v: Any) -> Any:
        return None if v == "" else v


def _read_rows(path: Path, row_type: type[_Row]) -> list[Any]:
    if not path.is_file():
        raise CatalogError(f"catalog file {path} not found",
                           hint="reinstall shardmeter or set SHARDMETER_CATALOGS to the "
                                "catalogs folder.")
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [f for f, info in row_type.model_fields.items()
                   if info.is_required() and f not in (reader.fieldnames or [])]
        if missing:
            raise CatalogError(f"{path}: missing column(s) {', '.join(missing)}",
                               hint=f"add the column(s) to the header of {path}.")
        rows = []
        for line_no, raw in enumerate(reader, start=2):
            try:
                rows.append(row_type.model_validate(raw))
            except ValidationError as err:
                first = err.errors()[0]
                field = ".".join(str(p) for p in first["loc"])
                raise CatalogError(
                    f"{path}, line {line_no}: field {field!r} = {raw.get(field)!r}: {first['msg']}",
                    hint=f"fix line {line_no} of {path}.") from err
    return rows


def _lookup(kind: str, name: str, table: dict[str, Any], where: Path) -> Any:
    key = name.strip().lower()
    if key in table:
        return table[key]
    raise unknown_name(kind, name, [v.name for v in table.values()], where=str(where))


# ---- models -----------------------------------------------------------------------------

@functools.cache
def load_models() -> dict[str, ModelSpec]:
    """Catalog models by lower-cased name."""
    path = catalog_dir() / "models.csv"
    out: dict[str, ModelSpec] = {}
    for r in _read_rows(path, ModelRow):
        layout = dict(FAMILY_LAYOUT[r.family])
        layout["tie_word_embeddings"] = r.tie_word_embeddings
        try:
            spec = ModelSpec(
                name=r.name, family=r.family, hidden_size=r.hidden_size,
                num_layers=r.num_hidden_layers, num_heads=r.num_attention_heads,
                num_kv_heads=r.num_key_value_heads, head_dim=r.head_dim or 0,
                intermediate_size=r.intermediate_size, vocab_size=r.vocab_size,
                published_params=r.params_b * 1e9 if r.params_b else None, **layout)
        except CatalogError:
            raise
        except ValueError as err:
            raise CatalogError(f"{path}: model {r.name!r}: {err}",
                               hint=f"fix the row of {r.name!r}.") from err
        out[r.name.lower()] = spec
    return out


def get_model(name_or_path: str) -> ModelSpec:
    """A catalog model by name (case-insensitive) or a Hugging Face config.json path."""
    p = Path(name_or_path)
    if name_or_path.endswith(".json") or p.is_file() or p.is_dir():
        return load_hf_config(p / "config.json" if p.is_dir() else p)
    result: ModelSpec = _lookup("model", name_or_path, load_models(), catalog_dir() / "models.csv")
    return result


# ---- links and GPUs ---------------------------------------------------------------------

@functools.cache
def load_links() -> dict[str, LinkSpec]:
    path = catalog_dir() / "links.csv"
    return {
        r.name.lower(): LinkSpec(
            name=r.name, kind=r.kind, latency_s=r.latency_us * 1e-6,
            busbw_bytes_per_s=r.busbw_gb_s * 1e9, line_rate_bytes_per_s=r.line_rate_gb_s * 1e9,
            per_nic=r.per_nic, source=r.source)
        for r in _read_rows(path, LinkRow)
    }


def get_link(name: str) -> LinkSpec:
    result: LinkSpec = _lookup("link", name, load_links(), catalog_dir() / "links.csv")
    return result


@functools.cache
def load_gpus() -> dict[str, GpuSpec]:
    """Datasheet GPUs (gpus.csv, generated from shared/data) plus hand-kept local devices
    (gpus_local.csv, e.g. the CPU class the shipped measured profile was collected on)."""
    out: dict[str, GpuSpec] = {}
    for path in (catalog_dir() / "gpus.csv", catalog_dir() / "gpus_local.csv"):
        if path.is_file() or path.name == "gpus.csv":
            out.update(_load_gpu_file(path))
    return out


def _load_gpu_file(path: Path) -> dict[str, GpuSpec]:
    links = load_links()
    out: dict[str, GpuSpec] = {}
    for line_no, r in enumerate(_read_rows(path, GpuRow), start=2):
        for field in ("intra_node_link", "inter_node_link"):
            if getattr(r, field).lower() not in links:
                raise CatalogError(
                    f"{path}, line {line_no}: field {field!r} = {getattr(r, field)!r} is "
                    "not a known link",
                    hint=f"use a name from {catalog_dir() / 'links.csv'}.")
        out[r.gpu_type.lower()] = GpuSpec(
            name=r.gpu_type, memory_bytes=int(r.memory_gib * GIB),
            usable_memory_bytes=int(r.usable_memory_gib * GIB),
            bf16_flops_per_s=r.bf16_dense_tflops * 1e12,
            hbm_bytes_per_s=r.hbm_bandwidth_tb_s * 1e12, intra_node_link=r.intra_node_link,
            inter_node_link=r.inter_node_link, nics_per_node=r.nics_per_node,
            max_gpus_per_node=r.max_gpus_per_node, source=r.source,
            fp8_flops_per_s=None if r.fp8_dense_tflops is None else r.fp8_dense_tflops * 1e12)
    return out


def get_gpu(name: str) -> GpuSpec:
    result: GpuSpec = _lookup("gpu", name, load_gpus(), catalog_dir() / "gpus.csv")
    return result


# ---- price lists ------------------------------------------------------------------------

@functools.cache
def load_price_lists() -> dict[str, list[PriceRow]]:
    """Price lists by file stem (one dated provider snapshot per file)."""
    folder = catalog_dir() / "prices"
    gpus = load_gpus()
    out: dict[str, list[PriceRow]] = {}
    for path in sorted(folder.glob("*.csv")):
        rows = _read_rows(path, PriceRow)
        for line_no, r in enumerate(rows, start=2):
            if r.gpu_type.lower() not in gpus:
                raise CatalogError(f"{path}, line {line_no}: gpu_type {r.gpu_type!r} "
                                   "is not in the GPU catalog",
                                   hint="use a catalog GPU name (`shardmeter catalog gpus`).")
        out[path.stem] = rows
    return out


def price_rows(price_list: str | None = None) -> list[PriceRow]:
    """All price rows, or those of one list (by file stem, case-insensitive)."""
    lists = load_price_lists()
    if price_list is None:
        return [r for rows in lists.values() for r in rows]
    by_key = {k.lower(): k for k in lists}
    if price_list.lower() not in by_key:
        unknown = unknown_name("price list", price_list, list(lists), where="catalogs/prices")
        raise CatalogError(f"unknown price list {price_list!r}; "
                           + unknown.message.split("; ", 1)[1],
                           hint="use a name listed by `shardmeter catalog prices`.")
    return lists[by_key[price_list.lower()]]


def price_usd_per_gpu_hour(provider: str, gpu: str, tier: str, as_of: str | None = None) -> float:
    """Price of one GPU-hour from the price lists; the newest snapshot when `as_of` is None."""
    gpu_name = get_gpu(gpu).name
    if tier not in TIERS:
        raise CatalogError(f"unknown price tier {tier!r}", hint=f"use one of {', '.join(TIERS)}.")
    rows = [r for r in price_rows() if r.provider.lower() == provider.lower()]
    if not rows:
        providers = sorted({r.provider for r in price_rows()})
        raise unknown_name("price provider", provider, providers, where="catalogs/prices")
    rows = [r for r in rows if r.gpu_type == gpu_name and r.tier == tier
            and (as_of is None or r.as_of == as_of)]
    if not rows:
        raise CatalogError(f"no {tier} price for {gpu_name} from {provider}"
                           + (f" as of {as_of}" if as_of else ""),
                           hint="check `shardmeter catalog prices` for the offers that exist.")
    return max(rows, key=lambda r: r.as_of).usd_per_gpu_hour


def model_parameters(name_or_path: str) -> int:
    """Total parameters of a catalog model or Hugging Face config.json path (CatalogError or
    ConfigError when unknown)."""
    return get_model(name_or_path).total_params


def cluster_fabric(gpu: str) -> tuple[float, float] | None:
    """(bytes/s, latency s) of the inter-node fabric of a catalog GPU's node: the catalog
    inter-node link's bus bandwidth x NICs per node (per-NIC links) and its latency; None when
    the GPU is not in the catalog. The planner's σ for islands that share one cluster."""
    try:
        spec = get_gpu(gpu)
        link = get_link(spec.inter_node_link)
    except CatalogError:
        return None
    nics = spec.nics_per_node if link.per_nic else 1
    return link.busbw_bytes_per_s * nics, link.latency_s
