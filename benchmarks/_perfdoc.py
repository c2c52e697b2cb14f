"""docs/PERFORMANCE.md is written only by benchmark scripts: each owns one marked block."""

from __future__ import annotations

from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "PERFORMANCE.md"
HEADER = (
    "# Performance (measured)\n\n"
    "Every section below is written by the benchmark command it names, on this project's 2-core\n"
    "machine; rerun the command to refresh its section. Do not edit by hand.\n"
)


def replace_block(key: str, markdown: str, doc: Path = DOC) -> Path:
    """Replace (or append) the block between `<!-- key -->` and `<!-- /key -->` in `doc`."""
    start, end = f"<!-- {key} -->", f"<!-- /{key} -->"
    block = f"{start}\n{markdown.strip()}\n{end}"
    text = doc.read_text() if doc.is_file() else HEADER
    if start in text and end in text:
        text = text[: text.index(start)] + block + text[text.index(end) + len(end):]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(text)
    return doc
