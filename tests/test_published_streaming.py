"""The Streaming DiLoCo paper's bandwidth table as data, and the tool's figure for a cell.

The CSV must say what the paper's excerpt says, bad rows must be refused with the line and field,
and a cell's figure must be the one `shardmeter streaming --bandwidth-for-utilisation` prints.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from perfmodel.api.streaming import published_bandwidth_comparison
from perfmodel.diloco.published import METHODS, PUBLISHED_CSV, load_published_cells
from perfmodel.spec.errors import DatasetError
from perfmodel.spec.paths import catalog_dir

EXCERPT = catalog_dir() / "published" / "source" / "streaming-diloco-table4.txt"
LABELS = {
    "Data-Parallel": "data-parallel",
    "Vanilla DiLoCo": "diloco",
    "Streaming DiLoCo": "streaming",
    "Streaming DiLoCo w/ overlapped com.": "streaming-overlap",
    "Streaming DiLoCo w/ overlapped FP4 com.": "streaming-overlap-fp4",
}
TARGETS = (0.5, 0.8, 0.9, 0.95, 0.99)


def _excerpt_cells() -> dict[tuple[str, str, float], tuple[int, float, float]]:
    out = {}
    for line in EXCERPT.read_text().splitlines():
        match = re.fullmatch(r"(\d+B) \| (\d+) \| ([\d.]+)s \| (.+?) \| ([\d. ]+)", line)
        if match:
            size, layers, step, label, values = match.groups()
            for target, value in zip(TARGETS, values.split(), strict=True):
                out[(size, LABELS[label], target)] = (int(layers), float(step), float(value))
    return out


def test_every_cell_is_the_papers() -> None:
    cells = load_published_cells()
    excerpt = _excerpt_cells()
    assert len(excerpt) == len(cells) == 3 * len(METHODS) * len(TARGETS)
    for c in cells:
        assert excerpt[(c.model_size, c.method, c.target_utilisation)] == (
            c.num_layers, c.step_time_s, c.published_gbit_s)
        assert c.source_url == "https://arxiv.org/abs/2501.18512v1" and c.as_of == "2025-01-30"
        # the settings the caption and the supplementary text state
        streaming = c.method.startswith("streaming")
        assert c.sync_every == (1 if c.method == "data-parallel" else 100)
        assert c.layers_per_fragment == (3 if streaming else c.num_layers)
        assert c.delay_steps == (1 if "overlap" in c.method else 0)
        assert c.dtype == ("fp4" if c.method.endswith("fp4") else "bf16") and c.dtype_basis
    assert {c.fragments for c in cells if c.method == "streaming"} == {8, 16, 36}


def _write(tmp_path: Path, edit: dict[str, str], line: int = 0) -> Path:
    with open(catalog_dir() / PUBLISHED_CSV, newline="") as handle:
        rows = list(csv.DictReader(handle))
    rows[line].update(edit)
    path = tmp_path / "cells.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


@pytest.mark.parametrize(("edit", "needle"), [
    ({"dtype": "fp8"}, "line 4: field 'dtype'"),
    ({"published_gbit_s": "-1"}, "line 4: field 'published_gbit_s'"),
    ({"catalog_model": "Chinchila-1B"}, "line 4: field 'catalog_model'"),
    ({"num_layers": "25"}, "line 4: field"),
    ({"overlap_backward": "yes"}, "line 4: field 'overlap_backward'"),
    ({"source_url": " "}, "line 4: field 'source_url'"),
])
def test_bad_rows_name_the_line_and_field(tmp_path: Path, edit: dict[str, str],
                                          needle: str) -> None:
    with pytest.raises(DatasetError, match="To fix:") as err:
        load_published_cells(_write(tmp_path, edit, line=2))
    assert needle in str(err.value)


def test_a_cells_figure_is_the_cli_answer(tmp_path: Path, run_cli) -> None:
    """The comparison computes each cell the way the CLI does: same Gbit/s, same MAPE arithmetic.
    """
    with open(catalog_dir() / PUBLISHED_CSV, newline="") as handle:
        rows = [r for r in csv.DictReader(handle)
                if r["catalog_model"] == "Chinchilla-10B" and r["method"] == "diloco"]
    path = tmp_path / "cells.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    result = published_bandwidth_comparison(path)
    out = run_cli("streaming", "Chinchilla-10B", "--bandwidth-for-utilisation", "--step-time-s",
                  "0.8", "--fragments", "1", "--delay", "0", "--sync-every", "100",
                  "--islands", "2", "--wan-latency-ms", "0", "--pseudo-gradient-dtype", "bf16",
                  "--overlap-backward", "--fragment-pattern", "strided",
                  "--utilisation", ",".join(map(str, TARGETS)), "--format", "json")
    assert out.code == 0, out.err
    cli = [r["gbit_s"] for r in json.loads(out.out)["rows"]]
    assert [c.gbit_s for c in result.cells] == cli
    errors = [abs(g / float(r["published_gbit_s"]) - 1) * 100 for g, r in zip(cli, rows,
                                                                            strict=True)]
    assert result.mape_pct() == pytest.approx(sum(errors) / len(errors))
    assert result.count() == 5
    # the sensitivity override changes the dtype on the wire, and fp32 moves twice the bytes
    fp32 = published_bandwidth_comparison(path, dtype_override={"bf16": "fp32"})
    assert all(c.dtype == "fp32" for c in fp32.cells)
    for a, b in zip(result.cells, fp32.cells, strict=True):
        assert b.gbit_s is not None and a.gbit_s is not None
        assert b.gbit_s == pytest.approx(2 * a.gbit_s, rel=5e-4)
