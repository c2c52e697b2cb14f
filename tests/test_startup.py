"""Start-up cost of the light commands (issue 29: `predict` <= 1.5 s in a fresh process).

The wall time itself is measured by benchmarks/bench_startup.py (machine-dependent, so not a test);
these tests hold the two causes it removed: the fitting libraries imported by every command, and
the strict parse of every shipped profile on each `default_profile` call.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from perfmodel.profiles import profile as profile_mod
from perfmodel.profiles.profile import default_profile, load_profile
from perfmodel.spec.errors import ProfileError
from perfmodel.spec.paths import REPO_ROOT

HEAVY = ("pandas", "scipy", "sklearn", "matplotlib", "ortools", "torch")
"""Libraries a single prediction does not need (only fits, sweeps, plots and solvers do)."""


def test_predict_imports_no_fitting_library() -> None:
    # a fresh process, as a user runs it: the command's output and the modules it loaded
    probe = ("import sys\nfrom planner.cli import main\n"
             "sys.argv = ['shardmeter', 'predict', 'Llama-3-8B', '--gpu', 'H100-SXM5-80GB',"
             " '--seq-len', '8192']\n"
             "try:\n    main()\nexcept SystemExit as e:\n    code = e.code\n"
             f"print('LOADED', sorted(m for m in {HEAVY!r} if m in sys.modules),"
             " file=sys.stderr)\n")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "COLUMNS": "80"}
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, check=False, timeout=60)
    assert "Llama-3-8B on 8 x H100-SXM5-80GB" in done.stdout, done.stderr
    assert "LOADED []" in done.stderr, done.stderr


def test_declared_hardware_prefilter_picks_as_a_full_parse(
        tmp_catalogs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the pick over pre-filtered files equals the pick when every file is parsed strictly (the
    # behaviour before the pre-filter: `_declared_hardware` answering None for every file)
    gpus = sorted({load_profile(str(f)).hardware
                   for f in (tmp_catalogs / "profiles").glob("*.yaml")})
    filtered = {gpu: default_profile(gpu).name for gpu in gpus}
    monkeypatch.setattr(profile_mod, "_declared_hardware", lambda path, mtime_ns: None)
    assert filtered == {gpu: default_profile(gpu).name for gpu in gpus}
    assert filtered["H100-SXM5-80GB"] == "H100-SXM5-80GB-calibrated"


def test_prefilter_skips_other_gpus_and_still_reports_broken_files(tmp_catalogs: Path) -> None:
    folder = tmp_catalogs / "profiles"
    # invalid for its schema but declaring another GPU: skipped without a strict parse
    doc = yaml.safe_load((folder / "L40S-prior.yaml").read_text())
    doc["comm"][0]["bandwidth_bytes_per_s"] = -1
    (folder / "l40s-broken.yaml").write_text(yaml.safe_dump(doc))
    assert default_profile("H100-SXM5-80GB").name == "H100-SXM5-80GB-calibrated"
    # the same file for the GPU asked for is parsed and its error named
    with pytest.raises(ProfileError, match=r"comm\.0\.bandwidth_bytes_per_s"):
        default_profile("L40S")
    (folder / "l40s-broken.yaml").unlink()
    # a duplicate `hardware` key cannot be read cheaply: the strict parse reports it
    text = (folder / "B200-prior.yaml").read_text()
    (folder / "zz-dup.yaml").write_text(text + "hardware: L40S\n")
    with pytest.raises(ProfileError, match="duplicate key 'hardware'"):
        default_profile("H100-SXM5-80GB")


def test_declared_hardware_does_not_expand_aliases(tmp_path: Path) -> None:
    # an alias bomb is composed as shared nodes, never expanded; its hardware is still read
    bomb = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    bomb += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 12)]
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(["hardware: L40S", *bomb]) + "\n")
    assert profile_mod._declared_hardware(str(path), path.stat().st_mtime_ns) == "l40s"
    path.write_text("{hardware: [1, 2]}\n")
    assert profile_mod._declared_hardware(str(path), path.stat().st_mtime_ns) is None
