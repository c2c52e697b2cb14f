"""Where the shipped data lives, whether the package is installed editable or not.

`catalogs/` and `instances/` sit at the repository root. A regular (non-editable) install ships
them as the packages `shardmeter_catalogs` and `shardmeter_instances` (see pyproject.toml).
`SHARDMETER_CATALOGS` overrides the catalog folder.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
"""The checkout (or site-packages folder) holding `perfmodel/`."""


def _locate(folder: str, package: str) -> Path:
    local = REPO_ROOT / folder
    if local.is_dir():
        return local
    spec = importlib.util.find_spec(package)
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return local


def catalog_dir() -> Path:
    """Folder of the catalogs (models, gpus, links, prices, profiles, spaces)."""
    override = os.environ.get("SHARDMETER_CATALOGS")
    return Path(override) if override else _locate("catalogs", "shardmeter_catalogs")


def instances_dir() -> Path:
    """Folder of the shipped planner instances."""
    return _locate("instances", "shardmeter_instances")


def profiles_dir() -> Path:
    """Folder of the hardware profiles."""
    return catalog_dir() / "profiles"
