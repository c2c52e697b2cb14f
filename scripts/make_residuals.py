"""Write catalogs/uncertainty/residuals.csv and ranges.json: the out-of-sample (prediction,
measurement) pairs the prediction intervals are formed from, and what each group covers.

    .venv/bin/python -m scripts.make_residuals          # (re)write both files
    .venv/bin/python -m scripts.make_residuals --check  # exit 1 if either is stale

Seconds, not minutes: the CPU compute LOAO predictions are read from catalogs/cv-cache/
compute-loao.json in check mode (never recomputed: a stale cache fails here naming the refresh,
`python -m scripts.make_validation --refresh`); the rest re-predicts the shipped data
(`perfmodel.uncertainty.residuals` says which rows form the intervals and which only score them).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from perfmodel.spec.errors import ShardMeterError
from perfmodel.uncertainty.residuals import collect, coverage_json, csv_text
from scripts.cache import cv_cache, set_cache_mode

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "catalogs" / "uncertainty"
RESIDUALS, RANGES = OUT / "residuals.csv", OUT / "ranges.json"

logger = logging.getLogger("make_residuals")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    set_cache_mode("check")  # never recompute a cross-validation here
    try:
        residuals = collect(cv_cache("make_validation"))
    except ShardMeterError as err:
        logger.error("error: %s", err)
        return err.exit_code
    texts = {RESIDUALS: csv_text(residuals), RANGES: coverage_json(residuals)}
    stale = []
    for path, text in texts.items():
        if args.check:
            if not path.is_file() or path.read_text() != text:
                stale.append(path)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        logger.info("wrote %s (%d residuals)", path.relative_to(ROOT), len(residuals))
    for path in stale:
        logger.error("stale: %s (rerun python -m scripts.make_residuals)", path.relative_to(ROOT))
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
