"""DTensor's host dispatch under the tensor-parallel plan: the dataset `shardmeter bench
dispatch` writes (`perfmodel.bench.dispatch`) and its fit into a profile's `tp_dispatch_s`.

Claim: per layout (sequence parallel or not) and pass, the excess of the planned tiny model over
the plain one is root + layers · block (each block adds the same ops; the root's embedding, final
norm, LM head and loss add theirs once), so least squares of the excess on the layers gives the
root (intercept) and the block (slope); backward = step − forward; a negative estimate is noise
around a cost of 0 and is clipped there (the fit reports it at its bound).
Why: DTensor's host work is per op, so it does not grow with widths; the layers are the only
regressor the model needs.
Checked by: tests/test_tp_dispatch.py (known coefficients recovered; the shipped profile's table
is the fit of the shipped rows).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from perfmodel.spec.errors import DatasetError, UserInputError

COLUMNS = ("sequence_parallel", "layers", "pass", "plain_s", "tp_s", "excess_s", "iters")
"""Columns of a dispatch dataset."""
KEY_COLUMNS = ("sequence_parallel", "layers", "pass")
"""Columns naming one row (resume key)."""
PASSES = ("forward", "step")
"""forward: the forward alone; step: forward then backward."""


def load_dispatch_dataset(path: str) -> list[dict[str, Any]]:
    """The rows of a dispatch dataset as typed dicts; DatasetError naming file, line and column.
    """
    # lazy: pandas and the dataset reader are the fitting half's, not a prediction's
    from perfmodel.costs.datasets import read_dataset_csv

    frame = read_dataset_csv(path, COLUMNS, positive_int=("layers", "iters"),
                             positive_float=("plain_s", "tp_s"),
                             choices={"pass": PASSES,
                                      "sequence_parallel": ("true", "false", "True", "False")})
    rows = []
    for i, row in enumerate(frame.to_dict("records")):
        try:
            excess = float(row["excess_s"])
        except ValueError:
            excess = float("nan")
        if not np.isfinite(excess):
            raise DatasetError(f"{path}, line {i + 2}: column 'excess_s' = {row['excess_s']!r} is "
                               "not a finite number",
                               hint=f"fix that line of {path}, or measure it again "
                                    "(shardmeter bench dispatch resumes).")
        rows.append({"sequence_parallel": str(row["sequence_parallel"]).lower() == "true",
                     "layers": int(row["layers"]), "pass": row["pass"], "excess_s": excess})
    return rows


def dispatch_coefficients(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """{"sequence_parallel" | "no_sequence_parallel": {place: seconds}} from measured rows as
    `load_dispatch_dataset` returns them (sequence_parallel a bool; module doc).
    UserInputError when a layout or pass lacks two distinct layer counts."""
    out: dict[str, dict[str, float]] = {}
    for sp in (True, False):
        fitted: dict[str, tuple[float, float]] = {}
        for kind in PASSES:
            pts = [(float(r["layers"]), float(r["excess_s"])) for r in rows
                   if r["sequence_parallel"] is sp and r["pass"] == kind]
            if len({x for x, _ in pts}) < 2:
                raise UserInputError(
                    f"dispatch rows: {kind} pass with sequence_parallel {sp} has "
                    f"{len(pts)} row(s) over fewer than two layer counts",
                    hint="measure at least two layer counts (shardmeter bench dispatch).")
            x, y = np.array(pts).T
            slope, intercept = np.polyfit(x, y, 1)
            fitted[kind] = (float(slope), float(intercept))
        (fwd_block, fwd_root), (step_block, step_root) = fitted["forward"], fitted["step"]
        values = {"block_forward": fwd_block, "block_backward": step_block - fwd_block,
                  "root_forward": fwd_root, "root_backward": step_root - fwd_root}
        out["sequence_parallel" if sp else "no_sequence_parallel"] = {
            k: max(0.0, v) for k, v in values.items()}
    return out
