"""Shared tail of the doc generators: write the rebuilt doc, or `--check` it against the file."""

from __future__ import annotations

import difflib
import sys
from pathlib import Path

DIFF_LINES = 60
"""Lines of the unified diff shown when a doc is stale."""


def check_or_write(doc: Path, text: str, *, check: bool, generator: str) -> int:
    """With `check`, exit status 1 (and a diff on stderr) when `doc` differs from `text`, else 0;
    without it, write `text` to `doc`. `generator` is the script to rerun, named in the message."""
    name = doc.name
    if not check:
        doc.write_text(text)
        sys.stderr.write(f"wrote {doc}\n")
        return 0
    current = doc.read_text() if doc.is_file() else ""
    if current == text:
        sys.stderr.write(f"docs/{name} is current\n")
        return 0
    diff = difflib.unified_diff(
        current.splitlines(), text.splitlines(), f"docs/{name}", "regenerated", lineterm="", n=1
    )
    sys.stderr.write("\n".join(list(diff)[:DIFF_LINES])
                     + f"\ndocs/{name} is not current: rerun {generator}\n")
    return 1
