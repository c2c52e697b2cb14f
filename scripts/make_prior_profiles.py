"""Generate the prior hardware profiles in catalogs/profiles/ from the GPU and link catalogs.

    .venv/bin/python -m scripts.make_prior_profiles  # (re)write catalogs/profiles/*-prior.yaml
    .venv/bin/python -m scripts.make_prior_profiles --check  # exit 1 if a committed file is stale

Every number comes from catalogs/gpus.csv (peak bf16 FLOP/s, HBM bandwidth, links, NICs),
catalogs/links.csv (latency and bus-bandwidth priors with sources) and the stated assumptions of
perfmodel.costs.compute.PriorAssumptions (matmul efficiency from shared/data/training_mfu.csv, byte
counts, kernel gaps); each YAML repeats them under provenance_detail.

GPUs with published runs (A100 40/80GB, H100) keep this datasheet prior: it is what their
calibrated profiles are compared against. GPUs without published runs (perfmodel.profiles.calibrate
PRIOR_REFERENCE: H200, B200, MI300X, L40S, A100 PCIe) get a prior SCALED from the calibrated
profile of a reference GPU by datasheet ratios (run python -m scripts.make_calibrated_profiles
first); their YAML says so under provenance_detail.scaled_from.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import yaml

from perfmodel.profiles.calibrate import PRIOR_REFERENCE, scaled_prior_profile
from perfmodel.profiles.profile import load_profile, make_prior_profile, save_profile

ROOT = Path(__file__).resolve().parent.parent


GPUS = ("A100-SXM4-80GB", "A100-SXM4-40GB", "A100-PCIe-80GB", "H100-SXM5-80GB", "H200-SXM-141GB",
        "B200", "L40S", "AMD-MI300X")
"""The hardware that ships with a prior profile."""


def prior_for(gpu: str, folder: Path):
    """The scaled prior when the GPU has a calibrated reference in `folder`, else the datasheet
    one."""
    reference = PRIOR_REFERENCE.get(gpu)
    path = folder / f"{reference}-calibrated.yaml"
    if reference and path.is_file():
        return scaled_prior_profile(gpu, load_profile(str(path)))
    return make_prior_profile(gpu)


logger = logging.getLogger("make_prior_profiles")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "catalogs" / "profiles")
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    stale = []
    for gpu in GPUS:
        profile = prior_for(gpu, args.out)
        path = args.out / f"{profile.name}.yaml"
        if args.check:
            current = yaml.safe_load(path.read_text()) if path.is_file() else None
            if current != yaml.safe_load(
                yaml.safe_dump(profile.to_dict(), sort_keys=False, allow_unicode=True)
            ):
                stale.append(path)
            continue
        save_profile(profile, path)
        logger.info("wrote %s", path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
    for path in stale:
        logger.error("stale: %s (rerun python -m scripts.make_prior_profiles)", path)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
