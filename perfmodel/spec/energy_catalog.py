"""Energy catalogs: grid carbon intensity per region and PUE per provider (catalogs/energy/)."""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any

from perfmodel.spec.errors import CatalogError, did_you_mean
from perfmodel.spec.paths import catalog_dir

if TYPE_CHECKING:
    import pandas as pd


@functools.cache
def carbon_table() -> pd.DataFrame:
    """catalogs/energy/carbon_intensity.csv, indexed by region key."""
    import pandas as pd  # lazy: the CLI starts without pandas (issue 29)
    path = catalog_dir() / "energy" / "carbon_intensity.csv"
    frame = pd.read_csv(path, keep_default_na=False)
    values = pd.to_numeric(frame["gco2e_per_kwh"], errors="coerce")
    if values.isna().any() or (values < 0).any() or frame["region"].duplicated().any():
        raise CatalogError(f"{path}: gco2e_per_kwh must be a number >= 0 and regions unique",
                           hint="regenerate it with `python -m scripts.import_energy_data`.")
    return frame.assign(gco2e_per_kwh=values).set_index("region")


@functools.cache
def pue_table() -> pd.DataFrame:
    """catalogs/energy/pue.csv, indexed by provider (lower case), with a `default` row."""
    import pandas as pd  # lazy: the CLI starts without pandas (issue 29)
    path = catalog_dir() / "energy" / "pue.csv"
    frame = pd.read_csv(path, keep_default_na=False)
    frame["provider"] = frame["provider"].str.lower()
    return frame.set_index("provider")


def _cell(table: pd.DataFrame, row: str, column: str) -> Any:
    """One cell of a catalog table (pandas types it as any scalar; callers convert it)."""
    return table.loc[row, column]


def carbon_intensity_g_per_kwh(region: str) -> float:
    """Grid intensity of a region key (e.g. `gcp/us-central1`, `country/FIN`); did-you-mean on
    typos."""
    table = carbon_table()
    if region not in table.index:
        raise CatalogError(f"unknown region {region!r}",
                           hint=did_you_mean(region, list(table.index))
                           + " Region keys are listed in catalogs/energy/carbon_intensity.csv.")
    value = float(_cell(table, region, "gco2e_per_kwh"))
    if not math.isfinite(value):
        raise CatalogError(f"region {region!r} has no finite carbon intensity",
                           hint="fix the catalog.")
    return value


def provider_pue(provider: str | None) -> tuple[float, str]:
    """(PUE, provenance) of a provider; the survey-average `default` row when it publishes none."""
    table = pue_table()
    key = (provider or "").lower().split()[0] if provider else ""
    for name in table.index:
        if name != "default" and key.startswith(name):
            return float(_cell(table, name, "pue")), f"{name}: {_cell(table, name, 'source')}"
    return float(_cell(table, "default", "pue")), f"default: {_cell(table, 'default', 'source')}"


@functools.cache
def _tdp_by_gpu() -> dict[str, float]:
    import pandas as pd  # lazy: the CLI starts without pandas (issue 29)
    out: dict[str, float] = {}
    for name in ("gpus.csv", "gpus_local.csv"):
        path = catalog_dir() / name
        if not path.is_file():
            continue
        frame = pd.read_csv(path, keep_default_na=False)
        for gpu, tdp in zip(frame["gpu_type"], pd.to_numeric(frame["tdp_w"], errors="coerce"),
                            strict=True):
            if math.isfinite(tdp) and tdp > 0:
                out[str(gpu).lower()] = float(tdp)
    return out


def gpu_tdp_w(gpu: str) -> float | None:
    """Datasheet TDP (board power) of a catalog GPU in watts (catalogs/gpus.csv `tdp_w`, sourced
    per row there); None when the GPU is not in the catalog or its row gives no TDP."""
    return _tdp_by_gpu().get(gpu.lower())
