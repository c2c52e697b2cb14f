"""`shardmeter catalog import-prices`: a dated price list from SkyPilot's catalog (issue 28).

SkyPilot keeps one `vms.csv` per cloud under `~/.sky/catalogs/<version>/<cloud>/` with the
columns InstanceType, AcceleratorName, AcceleratorCount, vCPUs, MemoryGiB, GpuInfo, Price,
SpotPrice, Region, AvailabilityZone (prices per instance-hour, one row per availability zone).
`import_prices` reads such a file and writes a price list in the format of `catalogs/prices/`
(`perfmodel.spec.catalog.PriceRow`): per instance type with GPUs, one on-demand row (the region's
Price) and one spot row where the file has spot prices (the median over the region's zones), per
GPU-hour = instance price / AcceleratorCount, provider "<Cloud> <InstanceType>", dated `as_of`,
and a source naming the file, its sha256 and the region. SkyPilot's accelerator names map to
catalog GPUs through catalogs/skypilot_gpus.csv (each mapping states its reading) unless
`gpu_map` says otherwise; rows of other accelerators are skipped and counted.
"""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import logging
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from perfmodel.spec.catalog import PriceRow, get_gpu
from perfmodel.spec.errors import CatalogError, UserInputError, did_you_mean
from perfmodel.spec.paths import catalog_dir

LOG = logging.getLogger(__name__)

SKYPILOT_COLUMNS = ("InstanceType", "AcceleratorName", "AcceleratorCount", "Price", "SpotPrice",
                    "Region", "AvailabilityZone")
"""Columns of SkyPilot's vms.csv the importer reads."""
PRICE_COLUMNS = ("provider", "offer", "gpu_type", "provider_gpu_name", "gpus_per_node", "tier",
                 "usd_per_gpu_hour", "as_of", "source")
"""Columns of a written price list (as catalogs/prices/*.csv)."""
CLOUD_LABELS = {"aws": "AWS", "gcp": "GCP", "azure": "Azure", "lambda": "Lambda",
                "runpod": "RunPod", "nebius": "Nebius", "vast": "Vast.ai", "oci": "OCI"}
"""Provider spelling of the clouds SkyPilot names in lower case."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ImportPricesRequest:
    """What to import and where to write it."""

    vms_csv: Path
    """SkyPilot's vms.csv of one cloud."""
    region: str | None = None
    """Region to import (required when the file has several)."""
    as_of: str | None = None
    """Date of the snapshot, YYYY-MM-DD (default: today)."""
    cloud: str | None = None
    """Cloud name (default: the file's parent folder, as SkyPilot lays them out)."""
    output_path: Path | None = None
    """Where to write the list (default: catalogs/prices/<cloud>-skypilot-<region>-<as_of>.csv)."""
    gpu_map: tuple[tuple[str, str], ...] = ()
    """(SkyPilot accelerator name, catalog GPU) pairs overriding catalogs/skypilot_gpus.csv."""

    def __post_init__(self) -> None:
        if self.as_of is not None:
            try:
                dt.date.fromisoformat(self.as_of)
            except ValueError:
                raise UserInputError(f"--as-of {self.as_of!r}: not a date YYYY-MM-DD",
                                     hint="give the date the catalog was fetched, e.g. "
                                          "2026-11-20.") from None
        for name, gpu in self.gpu_map:
            get_gpu(gpu)  # an unknown catalog GPU is a CatalogError with did-you-mean
            if not name:
                raise UserInputError("--gpu-map with an empty accelerator name",
                                     hint="write --gpu-map H100=H100-SXM5-80GB.")


@dataclass(frozen=True, kw_only=True, slots=True)
class ImportedPrices:
    """The written price list."""

    rows: list[dict[str, Any]] = field(repr=False)
    """The price rows, in file order."""
    path: Path
    """Where they were written."""
    skipped: dict[str, int]
    """Accelerator names without a catalog GPU, and their row counts."""
    region: str
    """The imported region."""


def _default_map() -> dict[str, str]:
    path = catalog_dir() / "skypilot_gpus.csv"
    frame = pd.read_csv(path, keep_default_na=False)
    return {str(a): str(g) for a, g in zip(frame["accelerator_name"], frame["gpu_type"],
                                           strict=True)}


def _number(path: Path, line: int, column: str, text: str) -> float | None:
    if text.strip() == "":
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise UserInputError(f"{path}, line {line}: {column} = {text!r} is not a price >= 0",
                             hint=f"fix line {line} or re-fetch the catalog (sky check).")
    return value


def _read(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        raise UserInputError(f"SkyPilot catalog {path} does not exist",
                             hint="give a vms.csv from ~/.sky/catalogs/<version>/<cloud>/.")
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in SKYPILOT_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise UserInputError(f"{path}: not a SkyPilot vms.csv, missing column(s) "
                                 f"{', '.join(missing)}",
                                 hint="give SkyPilot's vms.csv (columns "
                                      f"{', '.join(SKYPILOT_COLUMNS)}).")
        return list(reader)


def import_prices(request: ImportPricesRequest) -> ImportedPrices:
    """Read a SkyPilot vms.csv and write the dated price list (module docstring)."""
    path = request.vms_csv
    rows = _read(path)
    cloud = (request.cloud or path.parent.name).lower()
    label = CLOUD_LABELS.get(cloud, cloud.capitalize())
    regions = sorted({r["Region"] for r in rows if r["Region"]})
    region = request.region
    if region is None:
        if len(regions) != 1:
            raise UserInputError(f"{path} has {len(regions)} regions: pick one with --region",
                                 hint=f"e.g. --region {regions[0] if regions else 'us-east-1'}.")
        region = regions[0]
    elif region not in regions:
        raise UserInputError(f"--region {region!r} is not in {path}",
                             hint=did_you_mean(region, regions))
    as_of = request.as_of or dt.date.today().isoformat()
    mapping = {**_default_map(), **dict(request.gpu_map)}
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    offers: dict[str, dict[str, Any]] = {}
    skipped: dict[str, int] = {}
    for line, raw in enumerate(rows, start=2):
        name = raw["AcceleratorName"].strip()
        if raw["Region"] != region or not name:
            continue
        gpu = mapping.get(name)
        if gpu is None:
            skipped[name] = skipped.get(name, 0) + 1
            continue
        count = _number(path, line, "AcceleratorCount", raw["AcceleratorCount"])
        if count is None or count < 1 or not float(count).is_integer():
            raise UserInputError(f"{path}, line {line}: AcceleratorCount = "
                                 f"{raw['AcceleratorCount']!r} is not a whole GPU count",
                                 hint=f"fix line {line}.")
        offer = offers.setdefault(raw["InstanceType"], {"gpu": get_gpu(gpu).name, "name": name,
                                                         "count": int(count), "price": [],
                                                         "spot": [], "zones": 0})
        offer["zones"] += 1
        for key, column in (("price", "Price"), ("spot", "SpotPrice")):
            value = _number(path, line, column, raw[column])
            if value:
                offer[key].append(value)
    out: list[dict[str, Any]] = []
    source = (f"SkyPilot catalog {path.name} (sha256 {digest}…), {label} {region}, imported by "
              "shardmeter catalog import-prices")
    for instance, offer in sorted(offers.items()):
        reading = f"AcceleratorName {offer['name']} read as {offer['gpu']}"
        for tier, values in (("on-demand", offer["price"]), ("spot", offer["spot"])):
            if not values:
                continue
            usd = statistics.median(values)
            row = {"provider": f"{label} {instance}",
                   "offer": (f"{label} {instance} (instance ${usd:g}/h, median of {len(values)} "
                             f"of {offer['zones']} zones)"),
                   "gpu_type": offer["gpu"], "provider_gpu_name": offer["name"],
                   "gpus_per_node": offer["count"], "tier": tier,
                   "usd_per_gpu_hour": round(usd / offer["count"], 6), "as_of": as_of,
                   "source": f"{source}; {reading}; per-GPU = instance/{offer['count']}"}
            PriceRow.model_validate({k: str(v) for k, v in row.items()})
            out.append(row)
    if not out:
        raise CatalogError(f"{path}: no GPU offer of a catalog GPU in region {region}",
                           hint="map its accelerators with --gpu-map NAME=CATALOG_GPU "
                                "(shardmeter catalog gpus lists them).")
    target = request.output_path or (catalog_dir() / "prices"
                                     / f"{cloud}-skypilot-{region}-{as_of}.csv")
    target.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(out, columns=list(PRICE_COLUMNS)).to_csv(target, index=False)
    for name, count in sorted(skipped.items()):
        LOG.info("skipped %d rows of accelerator %s (no catalog GPU; --gpu-map)", count, name)
    return ImportedPrices(rows=out, path=target, skipped=skipped, region=region)
