"""Part (e) of docs/VALIDATION.md (imported by python -m scripts.make_validation): ShardMeter's
tokens/s/GPU against published training runs it was never fitted to — parallel layouts
(`scripts.validate_layouts`), FP8 (`scripts.validate_fp8`) and mixture-of-experts runs
(`scripts.validate_moe`) — each source's MAPE apart, every row predicted through
`perfmodel.api.predict` with the shipped profiles or listed with why it cannot be.

Claim: every figure is recomputed here from catalogs/published/layout-runs.csv (and
validation-fp8.csv); none is typed. Why a generated part: the notes of issues 23-26 quote these
MAPEs per source, and `make_validation --check` (a test) now fails when they go stale.
"""

from __future__ import annotations

import functools
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from perfmodel.uncertainty.coverage import PrintedCase
from scripts import validate_fp8, validate_layouts, validate_moe


def _demoted(text: str) -> str:
    """The scripts' markdown one heading level down (they open with `##`)."""
    return re.sub(r"^(#+) ", lambda m: "#" + m.group(1) + " ", text.strip(), flags=re.M)


@dataclass(frozen=True, kw_only=True, slots=True)
class PublishedResults:
    """Every published run predicted (or refused) by the three validation scripts."""

    layouts: list[validate_layouts.RowResult]
    fp8: list[validate_fp8.Fp8Result]
    moe: list[validate_layouts.RowResult]

    def printed_cases(self) -> list[PrintedCase]:
        """Each predicted run once (the FP8 rows' own predictions; their bf16 partners are
        layout rows already) against the interval ShardMeter printed for it."""
        results = [*self.layouts, *(r.fp8 for r in self.fp8), *self.moe]
        cases = {c.case: c for r in results if (c := r.printed_case()) is not None}
        return list(cases.values())


@functools.cache
def published_results() -> PublishedResults:
    """The predictions of parts (d) and (e), made once per process (a few seconds each)."""
    with tempfile.TemporaryDirectory() as tmp:
        inputs = Path(tmp)
        for name in ("layouts", "fp8", "moe"):
            (inputs / name).mkdir()
        return PublishedResults(
            layouts=validate_layouts.evaluate_all(validate_layouts.load_runs(),
                                                  inputs / "layouts"),
            fp8=validate_fp8.evaluate_fp8(validate_fp8.load_fp8_rows(), inputs / "fp8"),
            moe=validate_moe.evaluate_moe(validate_layouts.load_runs(), inputs / "moe"))


def part_published() -> str:
    """(e) Published layout, FP8 and MoE runs (validation only)."""
    results = published_results()
    layouts, fp8, moe = results.layouts, results.fp8, results.moe
    return "\n\n".join([
        "## (e) Published parallel-layout, FP8 and MoE runs (validation only)",
        "ShardMeter's tokens/s/GPU against published training runs that no fit reads "
        "(`catalogs/published/layout-runs.csv`, each row with its source, table and a quote of "
        "the fetched text; `catalogs/published/README.md` gives the rules that fill unstated "
        "settings, fixed before any comparison). The goal is a MAPE <= 15 % per source. "
        "Rerun one table with `python -m scripts.validate_layouts`, `scripts.validate_fp8` or "
        "`scripts.validate_moe` (`--csv` / `--json` for every row and its command).",
        _demoted(validate_layouts.markdown(layouts)),
        _demoted(validate_fp8.markdown(fp8)),
        _demoted(validate_moe.markdown(moe)),
    ])
