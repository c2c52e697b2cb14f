"""What a tracked file recorded in earlier commits, read from git (for the generated docs).

A figure that moved across refits (the CPU profile's contention factor) or that an earlier
version of a generated doc reported is read from the commits that recorded it, never typed:
`recorded(path, read)` lists every commit where `read(file)` changed, oldest first.
Without git or history (an exported tarball) the functions return nothing and the docs say so.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _git(*args: str) -> str | None:
    """stdout of `git ARGS` in this checkout, or None when git or the object is unavailable."""
    try:
        done = subprocess.run(["git", *args], cwd=ROOT, check=True, text=True,
                              capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return done.stdout


def commits(path: str) -> list[tuple[str, str, str]]:
    """(commit, date YYYY-MM-DD, the file's path in that commit) of every commit that touched
    `path` (renames followed), oldest first."""
    out = _git("log", "--follow", "--format=@@%H %cs", "--name-only", "--", path)
    if not out:
        return []
    found = []
    for block in out.split("@@")[1:]:
        lines = [line for line in block.splitlines() if line.strip()]
        commit, date = lines[0].split()
        found.append((commit, date, lines[-1] if len(lines) > 1 else path))
    return found[::-1]


def show(commit: str, path: str) -> str | None:
    """The file `path` as commit `commit` recorded it (None when it did not exist there)."""
    return _git("show", f"{commit}:{path}")


@dataclass(frozen=True, kw_only=True, slots=True)
class Recorded:
    """A value as one commit recorded it."""

    commit: str
    """The commit (full hash)."""
    date: str
    """Its commit date, YYYY-MM-DD."""
    value: Any
    """What `read` found in the file at that commit."""

    @property
    def short(self) -> str:
        return self.commit[:7]


def recorded(path: str, read: Callable[[str], Any]) -> list[Recorded]:
    """Every commit where `read(text of the file)` differs from the commit before (None results
    skipped), oldest first."""
    out: list[Recorded] = []
    for commit, date, name in commits(path):
        text = show(commit, name)
        value = read(text) if text is not None else None
        if value is None or (out and out[-1].value == value):
            continue
        out.append(Recorded(commit=commit, date=date, value=value))
    return out


def earlier_than_current(history: list[Recorded], current: Any) -> list[Recorded]:
    """The recorded values before the current one: the history without its newest entry when
    that entry is the value the checkout holds now (so the list is the same before and after the
    commit that introduces a new value)."""
    return history[:-1] if history and history[-1].value == current else history
