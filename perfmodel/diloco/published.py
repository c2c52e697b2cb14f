"""The Streaming DiLoCo paper's bandwidth-for-utilisation table as data (validation only).

`catalogs/published/streaming-diloco-bandwidth.csv` holds every cell of Douillard et al. 2025
(arXiv:2501.18512v1), appendix Table 4: the Gbit/s each method needs for a compute utilisation,
with the settings the row needs (model, step time, H, fragments, τ, pattern, dtype, islands,
latency) and where each comes from (catalogs/published/README.md). The tool's figure for a cell
is `perfmodel.api.streaming.published_bandwidth_comparison`; nothing is fitted to these cells.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfmodel.diloco.fragments import FRAGMENT_PATTERNS, StreamingConfig
from perfmodel.spec.catalog import get_model
from perfmodel.spec.errors import CatalogError, DatasetError
from perfmodel.spec.paths import catalog_dir
from perfmodel.spec.recipe import PSEUDO_GRADIENT_DTYPES

PUBLISHED_CSV = "published/streaming-diloco-bandwidth.csv"
"""The cells, relative to the catalog folder."""
METHODS = ("data-parallel", "diloco", "streaming", "streaming-overlap", "streaming-overlap-fp4")
"""Method keys of the table's rows, in its order."""
SOURCE_COLUMNS = ("source_url", "source_table", "as_of")
"""Where every cell comes from."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PublishedCell:
    """One published cell and the settings that reproduce its scenario."""

    source_url: str
    """The paper (its version)."""
    source_table: str
    """Table of the paper the cell is in."""
    as_of: str
    """Date of that version (ISO)."""
    model_size: str
    """Nominal size as the paper names it (1B, 10B, 100B)."""
    num_layers: int
    """Layers as published."""
    step_time_s: float
    """Inner-step compute time as published (pure compute, forward + backward)."""
    method: str
    """Row key (`METHODS`)."""
    method_published: str
    """Row label as published."""
    catalog_model: str
    """The catalog model of that shape (`catalogs/models.csv`)."""
    sync_every: int
    """H (1 for Data-Parallel: every step)."""
    fragments: int
    """F (1 = the whole model at once)."""
    layers_per_fragment: int
    """Layers per fragment as published (3 for the streaming rows)."""
    delay_steps: int
    """τ."""
    fragment_pattern: str
    """contiguous or strided."""
    overlap_backward: bool
    """Each layer's exchange starts when its backward is done (the paper's per-layer DAG)."""
    dtype: str
    """Dtype on the wire."""
    dtype_basis: str
    """Stated, or how it follows from the paper."""
    islands: int
    """Replicas M."""
    latency_ms: float
    """Link latency (the paper states none)."""
    target_utilisation: float
    """Compute utilisation the cell is for (0..1)."""
    published_gbit_s: float
    """Gbit/s the paper needs for it."""

    def __post_init__(self) -> None:
        checks = [
            ("method", self.method in METHODS, f"one of {METHODS}"),
            ("fragment_pattern", self.fragment_pattern in FRAGMENT_PATTERNS,
             f"one of {FRAGMENT_PATTERNS}"),
            ("dtype", self.dtype in PSEUDO_GRADIENT_DTYPES, f"one of {PSEUDO_GRADIENT_DTYPES}"),
            ("target_utilisation", 0 < self.target_utilisation < 1, "in (0, 1)"),
            ("published_gbit_s", self.published_gbit_s > 0, "> 0"),
            ("step_time_s", self.step_time_s > 0, "> 0"),
            ("latency_ms", self.latency_ms >= 0, ">= 0"),
            ("islands", self.islands >= 2, ">= 2"),
            ("fragments", self.fragments * self.layers_per_fragment == self.num_layers,
             "num_layers / layers_per_fragment"),
        ] + [(name, bool(getattr(self, name).strip()), "non-empty") for name in SOURCE_COLUMNS]
        for name, ok, want in checks:
            if not ok:
                raise ValueError(f"field {name!r} is {getattr(self, name)!r}; expected {want}")

    def config(self) -> StreamingConfig:
        """The cell's fragment schedule."""
        return StreamingConfig(num_fragments=self.fragments, sync_every=self.sync_every,
                               delay_steps=self.delay_steps, overlap_backward=self.overlap_backward,
                               fragment_pattern=self.fragment_pattern)


_INT = ("num_layers", "sync_every", "fragments", "layers_per_fragment", "delay_steps", "islands")
_FLOAT = ("step_time_s", "latency_ms", "target_utilisation", "published_gbit_s")


def _parse(record: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = dict(record)
    for name in _INT:
        out[name] = int(record[name])
    for name in _FLOAT:
        out[name] = float(record[name])
    flag = str(record["overlap_backward"]).strip().lower()
    if flag not in ("true", "false"):
        raise ValueError(f"field 'overlap_backward' is {record['overlap_backward']!r}; "
                         "expected true or false")
    out["overlap_backward"] = flag == "true"
    return out


def load_published_cells(path: str | Path | None = None) -> tuple[PublishedCell, ...]:
    """Every cell, validated: a bad value raises DatasetError naming the file, line and field;
    the catalog model must exist and have the published layer count."""
    path = Path(path) if path is not None else catalog_dir() / PUBLISHED_CSV
    hint = ("fix the row against the paper (catalogs/published/source/"
            "streaming-diloco-table4.txt).")
    try:
        with open(path, newline="") as handle:
            records = list(csv.DictReader(handle))
    except OSError as err:
        raise DatasetError(f"{path}: cannot read the published cells ({err})",
                           hint="restore catalogs/published/streaming-diloco-bandwidth.csv "
                                "from the repository.") from err
    names = set(PublishedCell.__dataclass_fields__)
    cells = []
    for line, record in enumerate(records, start=2):
        missing = sorted(names - set(record))
        if missing:
            raise DatasetError(f"{path}, line {line}: missing column(s) {missing}", hint=hint)
        try:
            cell = PublishedCell(**_parse({k: record[k] for k in names}))
        except (ValueError, TypeError) as err:
            raise DatasetError(f"{path}, line {line}: {err}", hint=hint) from err
        try:
            model = get_model(cell.catalog_model)
        except CatalogError as err:
            raise DatasetError(f"{path}, line {line}: field 'catalog_model': {err.message}",
                               hint=hint) from err
        if model.num_layers != cell.num_layers:
            raise DatasetError(f"{path}, line {line}: field 'num_layers' is {cell.num_layers}, "
                               f"but {model.name} has {model.num_layers}", hint=hint)
        cells.append(cell)
    if not cells:
        raise DatasetError(f"{path}: no cells", hint=hint)
    return tuple(cells)
