"""Prediction intervals (issue 27): split-conformal multipliers of the multiplicative error
measured / predicted per residual group (`perfmodel.uncertainty.conformal`), the residuals they come
from (`perfmodel.uncertainty.residuals`, written by python -m scripts.make_residuals) and the
intervals and fit probabilities of a prediction (`perfmodel.uncertainty.intervals`)."""

from perfmodel.uncertainty.intervals import multiplier, ratios

__all__ = ["multiplier", "ratios"]
