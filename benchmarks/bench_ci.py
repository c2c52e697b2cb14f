"""CI benchmark: `.ci/run` on a fresh clone of this repository's HEAD, timed, and written to
docs/PERFORMANCE.md (the README and the issues' ".ci/run stays <= 15 minutes (measured)" cite
this block instead of a figure typed by hand).

Run: python -m benchmarks.bench_ci [--log PATH] [--keep]

What it does: `git clone` of HEAD (committed work only: a dirty working tree is not what CI
sees, so it is named in the output and not measured) into a temporary folder, then `bash
.ci/run` there with nothing but the clone: its own venv, install, ruff, mypy and the whole test
suite, as CI runs it. Its stdout and stderr go to `--log` as they come (default: ci.log in the
clone's parent) and to this command's stderr (pytest's progress: the run takes minutes). The
wall seconds of the command, the seconds `.ci/run` itself reports at its end (`done at N s`)
and pytest's own summary (tests passed, seconds) are parsed from the log; a run that fails
(nonzero exit, or no `done at` line) writes nothing to the doc and exits 1 naming the log. Each
rerun replaces the block, so the doc holds the latest measurement and the commit it measured.
"""

from __future__ import annotations

import argparse
import logging
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUDGET_S = 900.0
"""The brief's limit on `.ci/run`: keep it under 15 minutes (a CI run over 90 does not land)."""
DONE = re.compile(r"^ci: .* done at (\d+) s$", re.M)
"""`.ci/run`'s last line: bash's SECONDS since the script started."""
PYTEST = re.compile(r"^[= ]*(?P<summary>[^=\n]*\b\d+ passed[^=\n]*?) in (?P<s>[\d.]+)s\b",
                    re.M)
"""pytest's closing summary line: `1411 passed, 3 skipped in 642.10s (0:10:42)` under `-q`
(the project's addopts), framed by `=` without it."""

logger = logging.getLogger("bench_ci")


@dataclass(frozen=True, kw_only=True, slots=True)
class CiRun:
    """One measured `.ci/run` of a fresh clone."""

    commit: str
    """The commit cloned (HEAD of this checkout)."""
    wall_s: float
    """Wall seconds of `bash .ci/run`, from its start to its exit."""
    inside_s: int
    """Seconds `.ci/run` reports at its end (bash's SECONDS)."""
    pytest_s: float | None
    """Seconds of the test suite as pytest reports them (None: no summary line found)."""
    pytest_summary: str
    """pytest's summary (passed, skipped, ...), '' when not found."""


def parse_log(text: str) -> tuple[int | None, float | None, str]:
    """(`.ci/run`'s own seconds, pytest's seconds, pytest's summary) from a log; None / '' for
    what the log does not hold."""
    done = DONE.findall(text)
    tests = list(PYTEST.finditer(text))
    return (int(done[-1]) if done else None,
            float(tests[-1]["s"]) if tests else None,
            tests[-1]["summary"] if tests else "")


def _git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


def run_ci(clone: Path, log: Path) -> CiRun:
    """Clone HEAD into `clone` and time `.ci/run` there, its output to `log` as it comes."""
    commit = _git("rev-parse", "HEAD")
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    logger.info("cloned %s into %s; running .ci/run (log: %s)", commit[:10], clone, log)
    start = time.perf_counter()
    with log.open("w") as handle, subprocess.Popen(
            ["bash", ".ci/run"], cwd=clone, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, errors="replace") as proc:
        assert proc.stdout is not None  # piped above
        for line in proc.stdout:  # the log as it comes, and the run's progress on stderr
            handle.write(line)
            handle.flush()
            sys.stderr.write(line)
        code = proc.wait()
    wall_s = time.perf_counter() - start
    inside_s, pytest_s, summary = parse_log(log.read_text(errors="replace"))
    if code != 0 or inside_s is None:
        raise RuntimeError(f".ci/run on a clone of {commit[:10]} failed (exit {code}) after "
                           f"{wall_s:.0f} s; see {log}")
    return CiRun(commit=commit, wall_s=wall_s, inside_s=inside_s, pytest_s=pytest_s,
                 pytest_summary=summary)


def section(run: CiRun) -> list[str]:
    """The block's lines below its title and command."""
    # lazy: numpy (machine_lines) only once a run has completed
    from benchmarks._perfdoc import reference_loop_s
    from benchmarks.bench_fastpath import machine_lines

    minutes = divmod(round(run.wall_s), 60)
    rows = [("commit", f"`{run.commit[:10]}`"),
            ("wall time of `bash .ci/run`", f"{run.wall_s:.0f} s ({minutes[0]} min "
                                            f"{minutes[1]} s)"),
            ("reported by `.ci/run` (`done at`)", f"{run.inside_s} s"),
            ("pytest", f"{run.pytest_s:.0f} s ({run.pytest_summary})" if run.pytest_s is not None
             else "no summary line found"),
            ("budget", f"{BUDGET_S:.0f} s: {'within' if run.wall_s <= BUDGET_S else 'OVER'}")]
    return [*machine_lines(),
            f"Host speed: reference loop {reference_loop_s():.2f} s "
            "(`benchmarks._perfdoc.reference_loop_s`; slower host, longer run).", "",
            "A fresh clone of the commit below with only Python 3.11 and the package index: its "
            "own venv and install, ruff, mypy and the whole suite (the generators' checks "
            "included), as CI runs it.", "",
            "| measured | value |", "| --- | --- |", *[f"| {a} | {b} |" for a, b in rows]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--log", type=Path, default=None,
                        help=".ci/run's output, written as it comes (default: ci.log beside the "
                             "temporary clone).")
    parser.add_argument("--keep", action="store_true", help="Keep the clone (its path is logged).")
    options = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if _git("status", "--porcelain", "--untracked-files=no"):
        logger.warning("the working tree has uncommitted changes: they are not measured (the "
                       "clone holds HEAD only)")
    tmp = Path(tempfile.mkdtemp(prefix="bench-ci-"))
    log = options.log or tmp / "ci.log"
    try:
        run = run_ci(tmp / "clone", log)
    except (RuntimeError, subprocess.CalledProcessError) as err:
        logger.error("error: %s", err)
        return 1
    finally:
        if not options.keep:
            shutil.rmtree(tmp / "clone", ignore_errors=True)
    from benchmarks.bench_fastpath import write_section

    doc = write_section("bench_ci", "CI: `.ci/run` on a fresh clone",
                        "python -m benchmarks.bench_ci", section(run))
    logger.info(".ci/run: %.0f s wall (%d s by its own count; budget %.0f s); wrote %s",
                run.wall_s, run.inside_s, BUDGET_S, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
