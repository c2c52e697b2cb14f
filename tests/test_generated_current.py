"""Every generated document, catalog and profile is its generator's output on the shipped data
and code: each generator's `--check` (it rebuilds in memory and compares; it never writes) runs
in its own process, as a user runs it, so a generator's module state (the cv-cache mode, lru
caches) cannot leak into other tests.

These used to be separate lines of `.ci/run` after the suite; as tests they run inside the
README's test command, in parallel with the rest (pytest-xdist), which is what keeps CI within
its 15 minutes on two cores. The nested cross-validations come from catalogs/cv-cache when
their keys (data + code sha256) hold; a stale key fails here, naming the refresh command.
Generators checked elsewhere with the same command: make_instance_doc
(tests/test_instance_doc.py), make_prior_profiles (tests/test_profile.py),
import_published_runs (tests/test_calibrate.py), make_residuals (tests/test_uncertainty.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

GENERATORS = (
    ("make_case_study", "--executor", "serial"),
    ("make_findings",),
    ("make_validation",),
    ("make_reliability",),
    ("make_energy_doc",),
    ("make_calibrated_profiles",),
)
"""(module under scripts/, extra arguments). make_case_study runs its scenarios serially here:
the suite already keeps every core busy."""


@pytest.mark.generated
@pytest.mark.parametrize("generator", GENERATORS, ids=lambda g: g[0])
def test_generated_file_is_current(generator: tuple[str, ...]) -> None:
    module, *extra = generator
    # as a user's shell runs it: pytest-xdist's workers set COLUMNS=80, which no generator reads
    # on purpose but a terminal-sized formatter would
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    done = subprocess.run([sys.executable, "-m", f"scripts.{module}", "--check", *extra],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800,
                          check=False)
    assert done.returncode == 0, (
        f"python -m scripts.{module} --check exited {done.returncode}; rerun it without --check "
        f"to regenerate.\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
