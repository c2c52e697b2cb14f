"""Reliability and cost catalogs (catalogs/reliability/, issue 28): failure and Spot preemption
rates, restart and checkpoint defaults, egress and billing per provider.

Every value keeps its source; rates are derived here from the published counts (events per
GPU-hour, the midpoint of a monthly interruption band), never typed as rates. Providers are keyed
by the first word of a price list's provider name, lower-cased ("AWS p5en.48xlarge" -> "aws"),
as `perfmodel.spec.energy_catalog.provider_pue` does.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from perfmodel.spec.catalog import get_gpu
from perfmodel.spec.errors import CatalogError
from perfmodel.spec.paths import catalog_dir

if TYPE_CHECKING:
    import pandas as pd

HOURS_PER_MONTH = 720.0
"""Hours in the 30-day month of the Spot interruption bands and the egress tiers."""
BYTES_PER_GB = 1e9
"""Egress is priced per decimal GB (the providers' published unit)."""
BYTES_PER_TB = 1e12


@dataclass(frozen=True, kw_only=True, slots=True)
class SourcedValue:
    """A catalog number with its provenance."""

    value: float
    """The number, in the unit its name or key states."""
    source: str
    """Where it comes from (`[assumption]` when nothing is published)."""


def _folder() -> str:
    return str(catalog_dir() / "reliability")


@functools.cache
def _table(name: str) -> pd.DataFrame:
    import pandas as pd  # lazy: the CLI starts without pandas (issue 29)
    path = catalog_dir() / "reliability" / name
    if not path.is_file():
        raise CatalogError(f"catalog file {path} not found",
                           hint="reinstall shardmeter or set SHARDMETER_CATALOGS.")
    return pd.read_csv(path, keep_default_na=False)


def provider_key(provider: str | None) -> str:
    """'AWS p5en.48xlarge' -> 'aws' (empty for None)."""
    return provider.split()[0].lower() if provider else ""


def _number(path: str, row: int, column: str, value: object) -> float:
    try:
        number = float(str(value))
    except ValueError:
        number = math.nan
    if not math.isfinite(number) or number < 0:
        raise CatalogError(f"{path}, row {row + 2}: {column} = {value!r} is not a number >= 0",
                           hint=f"fix {path}.")
    return number


def failures_per_gpu_hour(gpu: str) -> SourcedValue:
    """Interruptions per GPU-hour of a GPU type: events / (observed hours x GPUs) of its row in
    failure_rates.csv, else of the `default` row."""
    table = _table("failure_rates.csv")
    rows = table[table["gpu_type"].str.lower() == gpu.lower()]
    if rows.empty:
        rows = table[table["gpu_type"] == "default"]
    if rows.empty:
        raise CatalogError(f"{_folder()}/failure_rates.csv has no row for {gpu!r} and no default",
                           hint="add a `default` row.")
    i = int(rows.index[0])
    row = rows.iloc[0]
    path = f"{_folder()}/failure_rates.csv"
    events = _number(path, i, "events", row["events"])
    hours = _number(path, i, "observed_hours", row["observed_hours"])
    gpus = _number(path, i, "gpus", row["gpus"])
    if hours <= 0 or gpus <= 0:
        raise CatalogError(f"{path}, row {i + 2}: observed_hours and gpus must be > 0",
                           hint=f"fix {path}.")
    label = str(row["gpu_type"])
    return SourcedValue(value=events / (hours * gpus),
                        source=f"{label}: {events:g} events / ({hours:g} h x {gpus:g} GPUs); "
                               f"{row['source']}")


def preemptions_per_node_hour(provider: str | None, gpu: str) -> SourcedValue:
    """Spot interruptions per node-hour: the midpoint of the provider's monthly interruption band
    for the GPU (preemption_rates.csv), per 720 hours; `default` rows where none is published."""
    table = _table("preemption_rates.csv")
    key = provider_key(provider)
    for prov, g in ((key, gpu.lower()), (key, "default"), ("default", "default")):
        rows = table[(table["provider"].str.lower() == prov)
                     & (table["gpu_type"].str.lower() == g)]
        if not rows.empty:
            break
    else:
        raise CatalogError(f"{_folder()}/preemption_rates.csv has no default row",
                           hint="add a `default,default` row.")
    i = int(rows.index[0])
    row = rows.iloc[0]
    path = f"{_folder()}/preemption_rates.csv"
    low = _number(path, i, "interruption_pct_per_month_low", row["interruption_pct_per_month_low"])
    high = _number(path, i, "interruption_pct_per_month_high",
                   row["interruption_pct_per_month_high"])
    mid = (low + high) / 2.0
    return SourcedValue(value=mid / 100.0 / HOURS_PER_MONTH,
                        source=f"{row['provider']} {row['gpu_type']}: {low:g}-{high:g} % per month "
                               f"(midpoint / {HOURS_PER_MONTH:g} h); {row['source']}")


def _default(key: str) -> tuple[float, str]:
    table = _table("defaults.csv")
    rows = table[table["key"] == key]
    if rows.empty:
        raise CatalogError(f"{_folder()}/defaults.csv has no {key!r} row",
                           hint=f"add a {key} row with its source.")
    i = int(rows.index[0])
    return (_number(f"{_folder()}/defaults.csv", i, "value", rows.iloc[0]["value"]),
            str(rows.iloc[0]["source"]))


def restart_s() -> SourcedValue:
    """Default time to restart a job after an interruption, seconds."""
    value, source = _default("restart_s")
    return SourcedValue(value=value, source=source)


def checkpoint_write_gbit_s_per_node() -> SourcedValue:
    """Default checkpoint write bandwidth per node: the Llama 3 cluster's sustained storage
    throughput over the nodes of its 16,384-GPU job."""
    storage, source = _default("checkpoint_storage_bytes_per_s")
    nodes, nodes_source = _default("checkpoint_storage_nodes")
    return SourcedValue(value=storage * 8.0 / 1e9 / nodes,
                        source=f"{storage:g} B/s / {nodes:g} nodes; {source}; {nodes_source}")


def async_stall_fraction() -> SourcedValue:
    """Fraction of a synchronous checkpoint write an asynchronous one still stalls training."""
    stall, source = _default("async_stall_s")
    sync, _ = _default("sync_checkpoint_s")
    return SourcedValue(value=stall / sync, source=f"{stall:g} s / {sync:g} s; {source}")


def spot_capacity_wait_s() -> SourcedValue:
    """Default wait for new Spot capacity after a preemption, seconds (an assumption)."""
    value, source = _default("spot_capacity_wait_s")
    return SourcedValue(value=value, source=source)


@dataclass(frozen=True, kw_only=True, slots=True)
class EgressPrice:
    """A provider's internet egress price schedule."""

    provider: str
    """Provider key."""
    tiers: tuple[tuple[float, float], ...]
    """(from bytes per month, USD per byte), ascending."""
    source: str
    """Where the schedule comes from."""

    def usd(self, bytes_per_month: float) -> float:
        """USD of one month's egress volume under the tiers."""
        total, volume = 0.0, max(bytes_per_month, 0.0)
        for i, (start, price) in enumerate(self.tiers):
            end = self.tiers[i + 1][0] if i + 1 < len(self.tiers) else math.inf
            if volume > start:
                total += (min(volume, end) - start) * price
        return total

    @property
    def first_usd_per_gb(self) -> float:
        """Price of the first tier, USD per GB."""
        return self.tiers[0][1] * BYTES_PER_GB


def egress_price(provider: str | None) -> EgressPrice | None:
    """The provider's egress schedule (egress.csv), None when none is catalogued."""
    key = provider_key(provider)
    table = _table("egress.csv")
    rows = table[table["provider"].str.lower() == key]
    if rows.empty:
        return None
    path = f"{_folder()}/egress.csv"
    tiers = sorted((_number(path, i, "from_tb_per_month", tb) * BYTES_PER_TB,
                    _number(path, i, "usd_per_gb", usd) / BYTES_PER_GB)
                   for i, tb, usd in zip(rows.index.tolist(), rows["from_tb_per_month"],
                                         rows["usd_per_gb"], strict=True))
    if tiers[0][0] != 0.0:
        raise CatalogError(f"{path}: provider {key!r} has no tier from 0 TB",
                           hint="start every provider's schedule at from_tb_per_month 0.")
    return EgressPrice(provider=key, tiers=tuple(tiers), source=str(rows.iloc[0]["source"]))


@dataclass(frozen=True, kw_only=True, slots=True)
class Billing:
    """How a provider rounds rented time."""

    increment_s: float
    """Billed time is a multiple of this, seconds."""
    minimum_s: float
    """Least billed time of a rental, seconds."""
    source: str
    """Where it comes from."""

    def billed_s(self, wall_s: float) -> float:
        """Billed seconds of a rental lasting `wall_s`."""
        units = math.ceil(wall_s / self.increment_s - 1e-12) if self.increment_s > 0 else 0
        return max(self.minimum_s, units * self.increment_s if self.increment_s > 0 else wall_s)


def billing(provider: str | None) -> Billing | None:
    """The provider's billing increment and minimum (billing.csv), None when not catalogued."""
    key = provider_key(provider)
    table = _table("billing.csv")
    rows = table[table["provider"].str.lower() == key]
    if rows.empty:
        return None
    path = f"{_folder()}/billing.csv"
    i = int(rows.index[0])
    row = rows.iloc[0]
    return Billing(increment_s=_number(path, i, "billing_increment_s", row["billing_increment_s"]),
                   minimum_s=_number(path, i, "minimum_billed_s", row["minimum_billed_s"]),
                   source=str(row["source"]))


def offer_billing(provider: str, gpu: str, tier: str, as_of: str | None) -> Billing | None:
    """Billing of one price-list offer: the row's own optional `billing_increment_s` /
    `minimum_billed_s` columns when its list carries them (a committed-use offer's term, an
    hourly minimum), else the provider's (billing.csv), else None (billed exactly)."""
    import pandas as pd  # lazy: the CLI starts without pandas (issue 29)
    name = get_gpu(gpu).name
    default = billing(provider)
    best: tuple[str, float | None, float | None, str] | None = None
    for path in sorted((catalog_dir() / "prices").glob("*.csv")):
        frame = pd.read_csv(path, keep_default_na=False, dtype=str)
        if "billing_increment_s" not in frame and "minimum_billed_s" not in frame:
            continue
        for line, row in enumerate(frame.to_dict(orient="records")):
            if (row["provider"].lower() != provider.lower() or row["gpu_type"] != name
                    or row["tier"] != tier or (as_of is not None and row["as_of"] != as_of)):
                continue
            increment = row.get("billing_increment_s", "")
            minimum = row.get("minimum_billed_s", "")
            found = (row["as_of"],
                     _number(str(path), line, "billing_increment_s", increment)
                     if increment else None,
                     _number(str(path), line, "minimum_billed_s", minimum) if minimum else None,
                     f"price list {path.name}: {row['source']}")
            if best is None or found[0] > best[0]:
                best = found
    if best is None or (best[1] is None and best[2] is None):
        return default
    return Billing(increment_s=best[1] if best[1] is not None
                   else (default.increment_s if default else 0.0),
                   minimum_s=best[2] if best[2] is not None
                   else (default.minimum_s if default else 0.0),
                   source=best[3])
