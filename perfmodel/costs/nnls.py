"""Relative-error non-negative least squares: the one fit behind the compute regression and the
collective model.

Claim: `relative_nnls(X, y)` returns w >= 0 minimising Σ_i ((X w − y)_i / y_i)², the sum of
squared relative errors (times span orders of magnitude; an absolute fit would only see the
largest rows).
Why: dividing row i by y_i > 0 turns the relative error into the residual of the design R = X / y
against a vector of ones, so scipy's NNLS on (R, 1) solves it exactly. Columns are scaled to unit
norm first (NNLS's active-set steps are scale-sensitive); the scale is undone on the weights, and a
column that is zero everywhere gets weight 0.
Checked by: tests/test_compute.py and tests/test_comm.py recover known coefficients from synthetic
and measured-shape data.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import nnls


def relative_design(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(R / scale, scale): the relative design X / y with unit-norm columns, and the column norms
    (1 for all-zero columns). ValueError unless every time is positive."""
    y = np.asarray(y, dtype=float)
    if np.any(y <= 0):
        raise ValueError("times must be positive (relative-error fit)")
    rel = np.asarray(X, dtype=float) / y[:, None]
    scale = np.linalg.norm(rel, axis=0)
    scale[scale == 0] = 1.0
    return rel / scale, scale


def solve_scaled(rel: np.ndarray) -> np.ndarray:
    """w >= 0 minimising ||rel @ w − 1||² for a design from `relative_design` (scaled units)."""
    w, _ = nnls(rel, np.ones(len(rel)))
    return np.asarray(w, dtype=float)


def relative_nnls(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """w >= 0 minimising Σ ((X w − y) / y)², in the units of X's columns."""
    rel, scale = relative_design(X, y)
    result: np.ndarray = solve_scaled(rel) / scale
    return result
