"""benchmarks.bench_ci reads `.ci/run`'s log: its own closing seconds and pytest's summary."""

from __future__ import annotations

import pytest

from benchmarks.bench_ci import parse_log


@pytest.mark.parametrize("summary_line", [
    "1411 passed, 3 skipped, 2 warnings in 642.10s (0:10:42)",
    "========= 1411 passed, 3 skipped, 2 warnings in 642.10s (0:10:42) =========",
])
def test_the_log_gives_ci_seconds_and_pytest_summary(summary_line: str) -> None:
    log = "\n".join(["All checks passed!", "Success: no issues found in 160 source files",
                     "........ [ 99%]", summary_line,
                     "ci: install, ruff, mypy, pytest (generators' checks included) done at 731 s",
                     ""])
    inside_s, pytest_s, summary = parse_log(log)
    assert (inside_s, pytest_s) == (731, 642.10)
    assert summary == "1411 passed, 3 skipped, 2 warnings"


def test_a_log_without_its_end_gives_none() -> None:
    """A run killed before `.ci/run`'s last line, or before pytest's summary."""
    assert parse_log("collected 1411 items\n.....\n3 failed, 10 passed\n") == (None, None, "")
