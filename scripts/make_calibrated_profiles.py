#!/usr/bin/env python3
"""Fit the calibrated GPU profiles on the published FSDP runs (perfmodel.profiles.calibrate).

    .venv/bin/python -m scripts.make_calibrated_profiles            # write profiles + CV table
    .venv/bin/python -m scripts.make_calibrated_profiles --check    # exit 1 if stale
    .venv/bin/python -m scripts.make_calibrated_profiles --refresh  # refit (not the cached fits)

For every GPU with rows in catalogs/published/llm-foundry.csv: fit the physical parameters on
all of its runs, cross-validate leaving one model size out, and write
catalogs/profiles/<GPU>-calibrated.yaml (provenance: calibrated, parameters, sources, CV and
prior errors) and catalogs/published/calibration-cv.csv (one row per run: published, CV,
in-sample and prior tokens/s/GPU), which docs/VALIDATION.md reports. Rerun
`python -m scripts.make_prior_profiles` afterwards: the priors of GPUs without runs scale from
these. The least-squares fits (all runs, and one per held-out model size) are cached in
catalogs/cv-cache/ under the sha256 of the runs and of the calibration code
(`perfmodel.profiles.cache`): `--check` re-renders from them and fails if their key changed.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import pandas as pd
import yaml

from perfmodel.profiles.calibrate import (
    LLM_FOUNDRY_CSV,
    PUBLISHED_DIR,
    calibrate_gpu,
    load_published_runs,
    profile_from_calibration,
)
from perfmodel.profiles.fit import dataset_record
from perfmodel.profiles.profile import save_profile
from perfmodel.spec.errors import ShardMeterError
from scripts.cache import cv_cache, set_cache_mode

ROOT = Path(__file__).resolve().parent.parent

CV_CSV = PUBLISHED_DIR / "calibration-cv.csv"
CV_COLUMNS = ["gpu", "model", "seq_len", "nodes", "gpus_per_node", "micro_batch", "accum_steps",
              "activation_checkpointing", "pure_bf16", "tokens_per_s_per_gpu", "cv_pred",
              "fit_pred", "prior_pred"]
RTOL = 1e-4
"""Relative tolerance of --check (least squares on another BLAS may differ in late digits)."""

logger = logging.getLogger("make_calibrated_profiles")


def _close(a: object, b: object) -> bool:
    """Structural equality with a relative tolerance on numbers."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, int | float) and isinstance(b, int | float) and not isinstance(a, bool):
        return abs(a - b) <= RTOL * max(abs(a), abs(b), 1e-300)
    return a == b


def build(gpus: list[str] | None) -> tuple[dict[Path, dict], pd.DataFrame]:
    runs = load_published_runs()
    dataset = dataset_record(LLM_FOUNDRY_CSV, "published", len(runs))
    docs, tables = {}, []
    for gpu in gpus or sorted(runs["gpu"].unique()):
        calib = calibrate_gpu(runs, gpu, cache=cv_cache("make_calibrated_profiles"))
        profile = profile_from_calibration(calib, dataset)
        docs[ROOT / "catalogs" / "profiles" / f"{profile.name}.yaml"] = profile
        tables.append(calib.runs[CV_COLUMNS])
    return docs, pd.concat(tables, ignore_index=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    parser.add_argument("--refresh", action="store_true",
                        help="refit instead of using the cached fits (catalogs/cv-cache)")
    parser.add_argument("--gpu", action="append", help="only this GPU (repeatable)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.check and args.refresh:
        parser.error("--refresh rewrites the cache; it cannot be combined with --check")
    set_cache_mode("check" if args.check else "refresh" if args.refresh else "use")
    try:
        profiles, table = build(args.gpu)
    except ShardMeterError as err:  # a stale cache under --check: say what changed
        logger.error("error: %s", err)
        return err.exit_code
    if args.check:
        stale = [p for p, prof in profiles.items()
                 if not p.is_file() or not _close(yaml.safe_load(p.read_text()),
                                                  yaml.safe_load(yaml.safe_dump(prof.to_dict())))]
        if not args.gpu:
            shipped = pd.read_csv(CV_CSV) if CV_CSV.is_file() else None
            if shipped is None or not _close(shipped.to_dict("list"), table.to_dict("list")):
                stale.append(CV_CSV)
        for path in stale:
            logger.error("stale: %s (rerun python -m scripts.make_calibrated_profiles)", path)
        return 1 if stale else 0
    for path, profile in profiles.items():
        save_profile(profile, path)
        logger.info("wrote %s", path.relative_to(ROOT))
    if not args.gpu:
        table.to_csv(CV_CSV, index=False, float_format="%.6g")
        logger.info("wrote %s", CV_CSV.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
