"""Regenerate catalogs/energy/carbon_intensity.csv from the data the `codecarbon` package ships.

    pip download --no-deps codecarbon==3.3.2 -d /tmp/cc && \
        python -m scripts.import_energy_data /tmp/cc/codecarbon-3.3.2-py3-none-any.whl

Rows (key `region`, one per row; source, data year (where the data states one) and `as_of`, the
date of codecarbon's data file, kept per row):
* ``gcp/<region>``: codecarbon's data/cloud/impact.csv (Google's published per-region grid
  intensity).
* ``country/<ISO3>``: codecarbon's data/private_infra/global_energy_mix.json (Our World in Data /
  Ember electricity mix, per country and year).
* ``us-state/<state>``: codecarbon's data/private_infra/2023/usa_emissions.json (EPA eGRID2023,
  lbs CO2e/MWh, converted once here: 1 lb/MWh = 0.453592 g/kWh).
* ``aws/<region>``, ``azure/<region>``, ``nebius/<region>``: the grid of the US state or country
  the provider documents for that region (`REGION_LOCATIONS`, with the provider's region page as
  source).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import logging
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "catalogs" / "energy" / "carbon_intensity.csv"
G_PER_KWH_PER_LB_PER_MWH = 0.453592
COLUMNS = ("region", "provider", "location", "country_iso", "gco2e_per_kwh", "year", "as_of",
           "source")

AWS_DOC = "docs.aws.amazon.com/global-infrastructure/latest/regions/aws-regions.html"
AZURE_DOC = "learn.microsoft.com/azure/reliability/regions-list"
NEBIUS_DOC = "docs.nebius.com/overview/regions"
REGION_LOCATIONS: dict[str, tuple[str, str]] = {
    # key -> ("us-state/<state>" | "country/<ISO3>", provider documentation)
    "aws/us-east-1": ("us-state/virginia", AWS_DOC),
    "aws/us-east-2": ("us-state/ohio", AWS_DOC),
    "aws/us-west-1": ("us-state/california", AWS_DOC),
    "aws/us-west-2": ("us-state/oregon", AWS_DOC),
    "aws/ca-central-1": ("country/CAN", AWS_DOC),
    "aws/eu-west-1": ("country/IRL", AWS_DOC),
    "aws/eu-west-2": ("country/GBR", AWS_DOC),
    "aws/eu-central-1": ("country/DEU", AWS_DOC),
    "aws/eu-north-1": ("country/SWE", AWS_DOC),
    "aws/ap-northeast-1": ("country/JPN", AWS_DOC),
    "aws/ap-southeast-1": ("country/SGP", AWS_DOC),
    "aws/ap-south-1": ("country/IND", AWS_DOC),
    "azure/eastus": ("us-state/virginia", AZURE_DOC),
    "azure/eastus2": ("us-state/virginia", AZURE_DOC),
    "azure/southcentralus": ("us-state/texas", AZURE_DOC),
    "azure/westus2": ("us-state/washington", AZURE_DOC),
    "azure/westus3": ("us-state/arizona", AZURE_DOC),
    "azure/northeurope": ("country/IRL", AZURE_DOC),
    "azure/westeurope": ("country/NLD", AZURE_DOC),
    "azure/swedencentral": ("country/SWE", AZURE_DOC),
    "azure/uksouth": ("country/GBR", AZURE_DOC),
    "azure/japaneast": ("country/JPN", AZURE_DOC),
    "nebius/eu-north1": ("country/FIN", NEBIUS_DOC),
    "nebius/eu-west1": ("country/FRA", NEBIUS_DOC),
    "nebius/us-central1": ("us-state/missouri", NEBIUS_DOC),
}

logger = logging.getLogger("import_energy_data")


def _read(wheel: zipfile.ZipFile, member: str) -> str:
    return wheel.read(f"codecarbon/data/{member}").decode("utf-8-sig")


def gcp_rows(wheel: zipfile.ZipFile) -> list[dict[str, object]]:
    rows = []
    for rec in csv.DictReader(io.StringIO(_read(wheel, "cloud/impact.csv"))):
        if rec["provider"] != "gcp":
            continue
        rows.append(
            {
                "region": f"gcp/{rec['region']}",
                "provider": "gcp",
                "location": rec["city"] or rec["country_name"],
                "country_iso": rec["countryIsoCode"],
                "gco2e_per_kwh": float(rec["impact"]),
                "year": "",
                "source": f"codecarbon 3.3.2 data/cloud/impact.csv ({rec['source']})",
            }
        )
    return rows


def country_rows(wheel: zipfile.ZipFile) -> list[dict[str, object]]:
    mix = json.loads(_read(wheel, "private_infra/global_energy_mix.json"))
    return [
        {
            "region": f"country/{iso}",
            "provider": "",
            "location": rec["country_name"],
            "country_iso": iso,
            "gco2e_per_kwh": float(rec["carbon_intensity"]),
            "year": rec["year"],
            "source": "codecarbon 3.3.2 data/private_infra/global_energy_mix.json "
            "(Our World in Data / Ember electricity mix)",
        }
        for iso, rec in sorted(mix.items())
        if rec.get("carbon_intensity") is not None
    ]


def state_rows(wheel: zipfile.ZipFile) -> list[dict[str, object]]:
    data = json.loads(_read(wheel, "private_infra/2023/usa_emissions.json"))
    source = data["_source"]
    return [
        {
            "region": f"us-state/{state}",
            "provider": "",
            "location": state,
            "country_iso": "USA",
            "gco2e_per_kwh": round(rec["emissions"] * G_PER_KWH_PER_LB_PER_MWH, 3),
            "year": source["year"],
            "source": (
                "codecarbon 3.3.2 data/private_infra/2023/usa_emissions.json "
                f"({source['name']}, {source['url']})"
            ),
        }
        for state, rec in sorted(data.items())
        if not state.startswith("_")
    ]


def provider_rows(base: dict[str, dict[str, object]]) -> list[dict[str, object]]:
    rows = []
    for key, (location_key, doc) in REGION_LOCATIONS.items():
        grid = base[location_key]
        rows.append({**grid, "region": key, "provider": key.split("/")[0],
                     "source": f"{doc} (region location) -> {grid['source']}"})
    return rows


def _file_date(wheel: zipfile.ZipFile, member: str) -> str:
    """Date codecarbon's data file carries in the wheel: the `as_of` of rows read from it (Google's
    per-region table states no year of its own)."""
    year, month, day = wheel.getinfo(f"codecarbon/data/{member}").date_time[:3]
    return f"{year:04d}-{month:02d}-{day:02d}"


def build(wheel_path: Path) -> list[dict[str, object]]:
    with zipfile.ZipFile(wheel_path) as wheel:
        dates = {"gcp": _file_date(wheel, "cloud/impact.csv"),
                 "country": _file_date(wheel, "private_infra/global_energy_mix.json"),
                 "us-state": _file_date(wheel, "private_infra/2023/usa_emissions.json")}
        base_rows = country_rows(wheel) + state_rows(wheel)
        rows = gcp_rows(wheel)
    for row in rows + base_rows:
        row["as_of"] = dates[str(row["region"]).split("/")[0]]
    base = {str(r["region"]): r for r in base_rows}
    return rows + provider_rows(base) + base_rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wheel", type=Path, help="codecarbon wheel file")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    rows = build(args.wheel)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with OUT.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    logger.info("wrote %d rows to %s", len(rows), OUT.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
