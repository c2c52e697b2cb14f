#!/usr/bin/env python
"""Regenerate docs/FINDINGS.md: the paper's qualitative findings (§IV-C, §IV-D), each shown by a
`shardmeter` command whose output is pasted verbatim, and the Streaming DiLoCo bandwidth-for-
utilisation study (Douillard et al. 2025, Table 4 / Figure 4) recomputed with this simulator.

Nothing in the document is typed by hand except headings and the sentences saying what to look
for; every conclusion sentence is formatted from results computed here. Published figures come
from catalogs/published/streaming-diloco-bandwidth.csv, appear only in the validation part, apart
from ours (`scripts.streaming_published`), and are never used to tune anything.

    .venv/bin/python -m scripts.make_findings           # rewrite docs/FINDINGS.md (+ its figure)
    .venv/bin/python -m scripts.make_findings --check   # exit 1 if docs/FINDINGS.md is stale
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from perfmodel.api.streaming import (
    CellComparison,
    PublishedComparison,
    published_bandwidth_comparison,
)
from perfmodel.diloco.fragments import StreamingConfig
from perfmodel.diloco.published import PublishedCell
from perfmodel.diloco.tuner import (
    UTILISATION_TARGETS,
    WanLink,
    bandwidth_for_utilisation,
    streaming_utilisation,
)
from perfmodel.formatting import markdown_table
from perfmodel.numbers import format_number
from perfmodel.spec import formulas
from perfmodel.spec.catalog import get_model
from scripts import streaming_published as sp
from scripts._docgen import check_or_write

ROOT = Path(__file__).resolve().parent.parent



OUT = ROOT / "docs" / "FINDINGS.md"
FIGURE = ROOT / "docs" / "figures" / "bandwidth-vs-utilisation.png"
SM = os.environ.get("SHARDMETER", str(ROOT / ".venv" / "bin" / "shardmeter"))

# ---- the published study (validation only) ---------------------------------------------------

OPTION_MODEL = "Chinchilla-10B"
"""The model whose overlapped row the option table varies one setting of."""
OPTION_CHANGES: dict[str, str] = {}
"""Factors the option table found, quoted by the validation sentence."""


def _link(cell: PublishedCell, dtype: str) -> WanLink:
    return WanLink(num_islands=cell.islands, bw_bytes_per_s=1.0,
                   latency_s=cell.latency_ms / 1e3, dtype=dtype)


def _gbit(cell: PublishedCell, config: StreamingConfig, dtype: str) -> list[float | None]:
    rows = bandwidth_for_utilisation(
        get_model(cell.catalog_model), step_s=cell.step_time_s, wan=_link(cell, dtype),
        config=config,
    )
    return [r.gbit_s for r in rows]


def _groups(result: PublishedComparison) -> dict[tuple[str, str], list[CellComparison]]:
    """(catalog model, method) -> its cells, in the table's order."""
    out: dict[tuple[str, str], list[CellComparison]] = {}
    for c in result.cells:
        out.setdefault((c.cell.catalog_model, c.cell.method), []).append(c)
    return out


# ---- document pieces ------------------------------------------------------------------------


class Doc:
    """Markdown lines plus the commands that produced them."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def say(self, *lines: str) -> None:
        self.lines.extend(lines)

    def run(self, *args: str) -> str:
        """Run `shardmeter args`, paste command and output, return the output."""
        out = _shardmeter(*args)
        self.paste(args, out)
        return out

    def paste(self, args: Sequence[str], out: str) -> None:
        """Paste the console block of `shardmeter args` printing `out`."""
        self.say(
            "```console", "$ shardmeter " + " ".join(args), *out.rstrip("\n").split("\n"), "```", ""
        )

    def text(self) -> str:
        return "\n".join(self.lines).rstrip("\n") + "\n"


CONSOLE_ENV = {"COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}
"""The console every pasted command prints to: 200 columns, no colour."""


def _shardmeter(*args: str) -> str:
    env = {**os.environ, **CONSOLE_ENV}
    done = subprocess.run(
        [SM, *args], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"shardmeter {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
    return done.stdout + done.stderr


def _json(*args: str) -> Any:
    return json.loads(_shardmeter(*args, "--format", "json"))


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return [*markdown_table(header, rows, rule=" --- ").split("\n"), ""]


def _pct(t: float) -> str:
    return f"{t:.0%}"


# ---- sections 1-4: the ShardMeter paper's findings -------------------------------------------


def _section_sweeps(doc: Doc) -> None:
    doc.say(
        "## 1. Small micro-batches are communication-bound and turn compute-bound as the batch "
        "grows (§IV-C, Fig. 3/4)",
        "",
        "The all_gathers and reduce_scatters of a step do not depend on the micro-batch; compute "
        "grows with it.",
        "Look at `bound` going from communication to compute, `compute_idle_frac` shrinking, and "
        "the step",
        "time staying almost flat while communication-bound (then growing in proportion once "
        "compute-bound).",
        "",
    )
    args = (
        "sweep",
        "Llama-3.2-1B",
        "--gpu",
        "A100-PCIe-80GB",
        "--gpus-per-node",
        "8",
        "--seq-len",
        "1024",
        "--micro-batches",
        "1..32",
    )
    doc.run(*args, "--wide")  # the full tables the text reads (the default view answers first)
    summary = _json(*args)["summary"][0]
    doc.say(
        f"Result: {summary['changes'] or 'no regime change'}; first compute-bound micro-batch "
        f"{summary['transition_micro_batch']}.",
        "",
    )
    doc.say(
        "## 2. More GPUs shift the transition to larger micro-batches (§IV-C, Fig. 5)",
        "",
        "Ring collectives over more GPUs take longer while per-GPU compute stays the same, so more "
        "work per",
        "GPU is needed to hide them. Compare `transition_micro_batch` for 4 and 8 GPUs of each "
        "model in the",
        "second table; grey markers in the `--plot` figures (not pasted) are micro-batches that do "
        "not fit.",
        "",
    )
    args = (
        "sweep",
        "--models",
        "SmolLM-360M,Llama-3.2-1B,Gemma-2B",
        "--gpu",
        "A100-PCIe-80GB",
        "--gpus-per-node",
        "4,8",
        "--seq-len",
        "1024",
        "--micro-batches",
        "1..32",
    )
    doc.run(*args, "--wide")
    rows = _json(*args)["summary"]
    by_model: dict[str, dict[int, Any]] = {}
    for r in rows:
        by_model.setdefault(r["model"], {})[r["gpus"]] = r["transition_micro_batch"]
    later = [m for m, t in by_model.items() if (t.get(8) or 0) > (t.get(4) or 0)]
    same = [m for m, t in by_model.items() if t.get(8) == t.get(4)]
    doc.say(
        f"Result: the transition moves to a larger micro-batch from 4 to 8 GPUs for "
        f"{', '.join(later) or 'no model'}"
        + (f"; it stays put for {', '.join(same)}" if same else "")
        + ".",
        "",
    )


def _section_diloco(doc: Doc) -> None:
    doc.say(
        "## 3. DiLoCo islands stay compute-bound where FSDP across nodes is communication-bound "
        "(§IV-C)",
        "",
        "Sixteen A100-SXM4 GPUs as one FSDP island span two nodes, so every all_gather and "
        "reduce_scatter",
        "crosses InfiniBand. As two DiLoCo islands of one node each, FSDP traffic stays on NVLink "
        "and only",
        "the pseudo-gradient crosses the WAN every H = 500 steps (`amortised_outer_sync_s`; the "
        "Nesterov",
        "outer step is `outer_optimizer_s`). Compare, at the same per-GPU micro-batch, "
        "`island_bound` (the",
        "FSDP island alone), `bound` (the whole step, amortised WAN sync counted as "
        "communication),",
        "`compute_idle_s` and `tokens_per_s`.",
        "",
    )
    results = []
    for mb in ("1", "2"):
        fsdp = (
            "predict",
            "Llama-3.2-1B",
            "--gpu",
            "A100-SXM4-80GB",
            "--nodes",
            "2",
            "--gpus-per-node",
            "8",
            "--seq-len",
            "1024",
            "--micro-batch",
            mb,
        )
        dl = (
            "predict",
            "Llama-3.2-1B",
            "--gpu",
            "A100-SXM4-80GB",
            "--nodes",
            "1",
            "--gpus-per-node",
            "8",
            "--seq-len",
            "1024",
            "--micro-batch",
            mb,
            "--strategy",
            "diloco",
            "--islands",
            "2",
            "--inner-steps",
            "500",
        )
        # --wide: the full record, whose field names the text above compares
        doc.run(*fsdp, "--wide")
        doc.run(*dl, "--wide")
        a, b = _json(*fsdp), _json(*dl)
        results.append(
            f"micro-batch {mb}: FSDP island {a['island_bound']}, "
            f"{format_number(a['tokens_per_s'])} tokens/s; "
            f"DiLoCo islands {b['island_bound']}, {format_number(b['tokens_per_s'])} tokens/s "
            f"({format_number(b['tokens_per_s'] / a['tokens_per_s'], digits=3)}x)"
        )
    doc.say("Result: " + "; ".join(results) + ".", "")


def _section_figure6(doc: Doc) -> None:
    doc.say(
        "## 4. Streaming DiLoCo blocks on a slow WAN; more fragments or a longer delay remove it "
        "(§IV-D, Fig. 6)",
        "",
        "The four situations of figure 6 (`--example all`; add `--plot fig6.png` for the "
        "timelines): A fast",
        "WAN; B the same schedule on a slow WAN; C doubles the fragments (and H) and D lengthens "
        "the delay",
        "from 2 to 3 steps (and H). As in the paper's figure, an exchange starts after its step "
        "here. The",
        "tuner keeps the H asked for and recommends one configuration (`tuned_*`, first remedy "
        "line): the",
        "shortest delay, then the fewest fragments, that never block within delay <= 5 steps; the "
        "other",
        "lines are single changes that also remove blocking, and it says why when nothing works.",
        "",
    )
    doc.run("streaming", "--example", "all", "--wide")
    cases = {c["case"]: c for c in _json("streaming", "--example", "all")["cases"]}
    verdict = ", ".join(
        f"{k} {'blocks' if c['blocks'] else 'does not block'}" for k, c in cases.items()
    )
    doc.say(f"Result: {verdict}.", "")
    doc.say(
        "The same tuner on a user configuration: Llama-3-8B, four islands, 5 Gbit/s WAN, four "
        "fragments,",
        "the recipe's backward overlap on.",
        "",
    )
    args = (
        "streaming",
        "Llama-3-8B",
        "--gpu",
        "H100-SXM5-80GB",
        "--seq-len",
        "2048",
        "--micro-batch",
        "2",
        "--accum",
        "8",
        "--islands",
        "4",
        "--wan-gbit-s",
        "5",
        "--fragments",
        "4",
        "--delay",
        "2",
    )
    doc.run(*args, "--wide")
    case = _json(*args)["cases"][0]
    tuned = (
        (
            f"F={case['tuned_fragments']}, τ={case['tuned_delay_steps']} at "
            f"H={case['tuned_sync_every']}"
        )
        if case["tuned_fragments"]
        else "no configuration"
    )
    doc.say(
        f"Result: blocked {format_number(case['blocked_s'], digits=3)} s over {case['steps']} "
        f"steps; the tuner "
        f"recommends {tuned}.",
        "",
    )


# ---- section 5: bandwidth for utilisation ------------------------------------------------------


def _section_bandwidth(doc: Doc, write_figure: bool) -> None:
    result = published_bandwidth_comparison()
    groups = _groups(result)
    cells = [c.cell for c in result.cells]
    one = next(c for c in cells if c.method == "streaming-overlap")
    h = sorted({c.sync_every for c in cells if c.method != "data-parallel"})
    steps = ", ".join(f"{s:g}" for s in dict.fromkeys(c.step_time_s for c in cells))
    layers = sorted({c.layers_per_fragment for c in cells if c.method.startswith("streaming")})
    doc.say(
        "## 5. WAN bandwidth for a compute utilisation (Streaming DiLoCo study, Table 4 / Fig. 4)",
        "",
        "The question a decentralized-training planner asks first: how many Gbit/s between islands "
        "keep",
        "the GPUs busy 50, 80, 90, 95 or 99 % of the time? `shardmeter streaming MODEL "
        "--bandwidth-for-utilisation`",
        "answers it by bisection on the simulator (steady state: one period of H steps after two "
        "warm-up",
        "periods). Here it is asked for the scenario of the published study, cell by cell from",
        "`catalogs/published/streaming-diloco-bandwidth.csv` (each setting and its source: "
        "catalogs/published/README.md):",
        "Chinchilla-shaped 1B/10B/100B models (catalog rows `Chinchilla-*`: the 1B shape is the "
        "study's Table 2 row;",
        "10B and 100B keep its 48 and 108 layers and take the hidden size, a multiple of 64, whose "
        "parameter count",
        f"is closest to 10e9 and 100e9), its inner-step compute times ({steps} s), H = "
        f"{', '.join(map(str, h))} (Data-Parallel:",
        f"every step), {one.islands} islands, no latency, fragments of "
        f"{', '.join(map(str, layers))} layers ({one.fragment_pattern}), each layer's exchange "
        "starting when",
        "its backward is done and merged when the next forward reaches it (the study's simulator "
        "is a DAG with one",
        "node per layer and pass), 16-bit exchanges unless FP4 (the study does not state the "
        "unquantised dtype;",
        "the CSV's `dtype_basis` says why 16-bit).",
        "One row as a command:",
        "",
    )
    doc.run(
        "streaming", one.catalog_model, "--bandwidth-for-utilisation", "--step-time-s",
        f"{one.step_time_s:g}", "--fragments", str(one.fragments), "--fragment-pattern",
        one.fragment_pattern, "--delay", str(one.delay_steps), "--sync-every",
        str(one.sync_every), "--islands", str(one.islands), "--wan-latency-ms",
        f"{one.latency_ms:g}", "--pseudo-gradient-dtype", one.dtype,
    )
    rows = []
    for (model, _), members in groups.items():
        c = members[0]
        rows.append([model, f"{c.cell.step_time_s:g}", c.cell.method_published,
                     str(c.cell.sync_every), str(c.cell.fragments), str(c.cell.delay_steps),
                     c.dtype, *(sp.format_gbit(m.gbit_s) for m in members)])
    targets = [m.cell.target_utilisation for m in next(iter(groups.values()))]
    doc.say("Gbit/s needed, computed by ShardMeter:", "")
    doc.say(*_table(["model", "step s", "method", "H", "F", "τ", "dtype",
                     *(_pct(t) for t in targets)], rows))
    doc.say(*_form_sentences(groups, targets))
    _options(doc, result)
    _validation(doc, result)
    if write_figure:
        _figure(groups)
    doc.say(
        "The figure `docs/figures/bandwidth-vs-utilisation.png` (regenerated with the document; "
        "not compared by `--check`) plots compute utilisation against bandwidth for the same "
        "scenario, the form of the study's Figure 4.",
        "",
    )


def _values(groups: dict[tuple[str, str], list[CellComparison]], model: str,
            method: str) -> list[float | None]:
    return [c.gbit_s for c in groups[(model, method)]]


def _form_sentences(groups: dict[tuple[str, str], list[CellComparison]],
                    targets: list[float]) -> list[str]:
    i95 = targets.index(0.95)
    names = list(dict.fromkeys(model for model, _ in groups))
    over = [_values(groups, n, "streaming-overlap")[i95] for n in names]
    dl = [_values(groups, n, "diloco")[i95] for n in names]
    falls = (over[-1] or 0) < (over[0] or 0)
    why = " (longer steps leave more time per fragment)" if falls else ""
    ratios = [a / b for n in names
              for a, b in [(_values(groups, n, "diloco")[-1],
                            _values(groups, n, "streaming-overlap")[-1])] if a and b]
    return [
        "Result: with the overlapped schedule the bandwidth for 95 % "
        f"{'falls' if falls else 'rises'} with scale, {sp.format_gbit(over[0])} → "
        f"{sp.format_gbit(over[1])} → "
        f"{sp.format_gbit(over[2])} Gbit/s for 1B → 10B → 100B{why}, while blocking DiLoCo needs "
        f"{sp.format_gbit(dl[0])} → {sp.format_gbit(dl[1])} → {sp.format_gbit(dl[2])}. At 99 % "
        f"the overlapped schedule needs "
        f"{_span(ratios)} less than DiLoCo.",
        "",
    ]


def _span(values: Sequence[float]) -> str:
    """'a x to b x', or one value when they agree to three digits."""
    if not values:
        return "n/a"
    lo, hi = f"{format_number(min(values), digits=3)}x", f"{format_number(max(values), digits=3)}x"
    return lo if lo == hi else f"{lo} to {hi}"


def _options(doc: Doc, result: PublishedComparison) -> None:
    base = next(c.cell for c in result.cells
                if c.cell.catalog_model == OPTION_MODEL and c.cell.method == "streaming-overlap")
    config = base.config()
    variants: list[tuple[str, StreamingConfig, str]] = [
        (f"overlapped, {config.fragment_pattern}, {base.dtype} (the row above)", config,
         base.dtype),
        ("fp32 pseudo-gradients", config, "fp32"),
        ("4-bit (fp4) pseudo-gradients", config, "fp4"),
        ("contiguous fragments", replace(config, fragment_pattern="contiguous"), base.dtype),
        (
            "no backward overlap (whole fragment after the step, merged when the forward "
            "reaches its first block)",
            replace(config, overlap_backward=False),
            base.dtype,
        ),
    ]
    values = {label: _gbit(base, cfg, dt) for label, cfg, dt in variants}
    doc.say(
        f"How the 4-bit, strided and overlap options change it ({OPTION_MODEL}, step "
        f"{base.step_time_s:g} s, F = {config.num_fragments}, τ = {config.delay_steps}, one "
        "setting changed per row):",
        "",
    )
    doc.say(
        *_table(
            ["variant", *(_pct(t) for t in UTILISATION_TARGETS)],
            [[label, *(sp.format_gbit(v) for v in vals)] for label, vals in values.items()],
        )
    )
    first = values[variants[0][0]]

    def change(label: str) -> str:
        return _span([v / f for v, f in zip(values[label], first, strict=True) if v and f])

    bytes_fp4 = (
        formulas.payload_bytes(formulas.QUANT_GROUP_ELEMENTS, "fp4") / formulas.QUANT_GROUP_ELEMENTS
    )
    OPTION_CHANGES["fp32"] = change(variants[1][0])
    doc.say(
        f"Result: fp4 pseudo-gradients ({format_number(bytes_fp4)} B per value with their "
        f"scales, against "
        f"{formulas.dtype_bytes(base.dtype):g} B for {base.dtype}) multiply the bandwidth by "
        f"{change(variants[2][0])} and fp32 by {change(variants[1][0])}; contiguous instead of "
        f"strided fragments by {change(variants[3][0])}; exchanges that wait for the whole step "
        f"by {change(variants[4][0])}. Those last ones gate only the forward of the fragment's "
        "own layers in the needing step (the blocks before its first one compute meanwhile), as "
        "every exchange does since issue 22; the study's per-layer schedule above already did, "
        "so the rows above and the validation below do not depend on that change.",
        "",
    )


def _validation(doc: Doc, result: PublishedComparison) -> None:
    first = result.cells[0].cell
    doc.say(
        "### Validation against the published figures (kept apart; nothing above is fitted to "
        "them)",
        "",
        f"Source: Douillard et al., Streaming DiLoCo with overlapping communication, "
        f"<{first.source_url}> ({first.as_of}), {first.source_table.split(':')[0]}; the cells "
        "with their settings are `catalogs/published/streaming-diloco-bandwidth.csv`. "
        "`python -m scripts.streaming_published` recomputes this comparison in seconds. Each "
        "cell is published Gbit/s / ShardMeter Gbit/s / ratio (ShardMeter ÷ published); "
        "Data-Parallel is the tool's H = 1, F = 1 schedule.",
        "",
    )
    doc.say(*sp.comparison_lines(result), "")
    fp32 = published_bandwidth_comparison(dtype_override={"bf16": "fp32"})
    median, low, high = sp.sixteen_bit_evidence(result)
    params = ", ".join(f"{n} has {format_number(get_model(n).total_params, digits=3)}"
                       for n in dict.fromkeys(c.cell.catalog_model for c in result.cells))
    dp = next(c for c in result.cells if c.cell.method == "data-parallel"
              and c.cell.model_size == first.model_size and c.cell.target_utilisation == 0.99)
    doc.say(
        f"Result: {sp.verdict(result)} With 32-bit exchanges instead (the study does not state "
        f"the dtype; its overlapped and overlapped-FP4 rows differ by {median:.2g}x, from "
        f"{low:.2g}x to {high:.2g}x: 16 against 4 bits, 32-bit would give 8x) the MAPE would be "
        f"{fp32.mape_pct():.0f} %. Differences the model knows of: the study's models are "
        f"nominal sizes (here {params} parameters), so the 1B block moves "
        f"{get_model(first.catalog_model).total_params / 1e9:.2f}x the nominal bytes; the "
        "study's DAG holds transformer layers only, while ShardMeter sends the embedding with "
        "block 0, whose gradient exists only when the backward ends and which the next forward "
        "needs first, so at 99 % it must cross in the 1 % of a step left idle (Data-Parallel on "
        f"1B: {dp.cell.published_gbit_s:g} published, {sp.format_gbit(dp.gbit_s)} here); "
        f"ShardMeter's fp4 "
        "carries one fp32 scale per 128 values; and the published cells are points of a "
        f"bandwidth grid x{sp.grid_step(result):.3f} apart.",
        "",
    )


def _figure(groups: dict[tuple[str, str], list[CellComparison]]) -> None:
    import matplotlib  # lazy: only when the figure is written (not under --check)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    grid = np.geomspace(0.1, 1000, 40)
    models = list(dict.fromkeys(model for model, _ in groups))
    fig, axes = plt.subplots(1, len(models), figsize=(15, 4.2), sharey=True)
    for ax, name in zip(axes, models, strict=True):
        model = get_model(name)
        rows = [members for (m_name, _), members in groups.items() if m_name == name]
        for members in rows:
            cell = members[0].cell
            cu = [
                streaming_utilisation(
                    model, step_s=cell.step_time_s,
                    wan=_link(cell, members[0].dtype).with_bandwidth(g * 1e9 / 8),
                    config=cell.config(),
                )
                for g in grid
            ]
            ax.plot(grid, cu, label=cell.method_published)
        ax.set_title(f"{name}, step {rows[0][0].cell.step_time_s:g} s")
        ax.set_xscale("log")
        ax.set_xlabel("WAN bandwidth (Gbit/s)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("compute utilisation")
    axes[0].legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    FIGURE.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(FIGURE, dpi=110)
    plt.close(fig)


# ---- section 6: the planner's layout choice (issue 25) ------------------------------------------

LAYOUT_QUERY = ("layout", "Llama-3.1-70B", "--gpu", "H100-SXM5-80GB", "--nodes", "4",
                "--gpus-per-node", "8", "--seq-len", "8192", "--global-batch", "512")
"""One island of `instances/llama-70b-multicloud.yaml` (4 nodes of 8 H100) with its model,
context and batch: the island the FSDP-only planner left out."""


def _layout_views(query: Sequence[str], *, shown: int) -> tuple[str, Any]:
    """One ranking of `shardmeter *query` (`rank_layouts`, in this process), seen two ways: what
    `shardmeter *query --top shown` prints (the command's own `emit_ranking` on the best
    `shown` entries, on the `CONSOLE_ENV` console) and the JSON of `--top 1000 --format json`
    (every entry, and the rejected candidates with why). The ranking is the costly part (it
    predicts every entry), so it is computed once; `--check` shows both views unchanged."""
    # lazy: the layout command (click, pandas) only for this section
    from unittest import mock

    from perfmodel.api.layout import rank_layouts
    from planner.cli.layout_cmd import emit_ranking, layout, layout_request

    params = layout.make_context(query[0], [*query[1:], "--top", "1000"]).params
    for option in ("named", "wide", "fmt"):
        params.pop(option)
    request = layout_request(**params)
    ranking = rank_layouts(request)
    # rank_layouts' entries are its ranked table's head(top): the first `shown` are --top shown's
    best = replace(ranking, entries=ranking.entries[:shown])
    out = {}
    for fmt, req, ranked in (("table", replace(request, top=shown), best),
                             ("json", request, ranking)):
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer), mock.patch.dict(os.environ, CONSOLE_ENV):
            emit_ranking(req, ranked, fmt=fmt, wide=False)
        out[fmt] = buffer.getvalue()
    return out["table"], json.loads(out["json"])


def _section_layouts(doc: Doc) -> None:
    """Why an island comes back when the layout and checkpointing are free: the layouts one
    island can run, ranked, and what the plain-FSDP recipe lacks. The whole-plan effect (which
    clusters return, the frontier's gain) is CASE_STUDY.md section 7, computed there."""
    doc.say(
        "## 6. An island plain FSDP cannot use comes back with another layout or checkpointing "
        "(issue 25)",
        "",
        "Llama-3.1-70B at 8k context, 512 sequences per step, on one island of 4 nodes x 8 "
        "H100 (an island of `instances/llama-70b-multicloud.yaml`): `shardmeter layout` ranks "
        "every (layout, checkpointing, micro-batch) that fits and says why each other one does "
        "not. Unlike sections 1-5 this uses the H100's shipped calibrated profile.",
        "",
    )
    text, result = _layout_views(LAYOUT_QUERY, shown=8)
    doc.paste((*LAYOUT_QUERY, "--top", "8"), text)
    ranked = result["layouts"]
    best = ranked[0]
    fsdp_op_sac = [r for r in result["rejected"]
                   if r["layout"] == f"dp_shard {4 * 8}" and r["ac"] == "op-sac"]
    with_tp = [r for r in ranked if r["layout"]["tp"] > 1]
    parts = [
        f"Result: {result['ranked']} of {result['considered']} (layout, checkpointing) "
        "candidates run this batch.",
    ]
    if fsdp_op_sac:
        parts.append(f"Plain FSDP with op-level selective checkpointing, the recipe the "
                     f"FSDP-only planner was pinned to, does not: {fsdp_op_sac[0]['why']}.")
    parts.append(
        f"The fastest is {best['layout_text']} with ac {best['ac']} (micro-batch "
        f"{best['micro_batch']}, {best['accum']} accumulation steps): "
        f"{format_number(best['tokens_per_s_per_gpu'])} tokens/s per GPU, MFU "
        f"{format_number(100 * best['mfu'], digits=3)} % "
        f"(80 % interval {format_number(100 * best['mfu_p10'], digits=3)}-"
        f"{format_number(100 * best['mfu_p90'], digits=3)} %).")
    if with_tp:
        slower = 100.0 * (1.0 - with_tp[0]["tokens_per_s_per_gpu"] / best["tokens_per_s_per_gpu"])
        parts.append(
            f"The fastest with tensor parallelism, {with_tp[0]['layout_text']} with ac "
            f"{with_tp[0]['ac']}, is {format_number(slower, digits=3)} % slower"
            + (" (it is the fastest)." if slower <= 0 else "."))
    else:
        parts.append("No layout with tensor parallelism fits.")
    parts.append("What this changes for a whole plan across six clusters is CASE_STUDY.md "
                 "section 7.")
    doc.say(" ".join(parts), "")


# ---- main --------------------------------------------------------------------------------------


def build(write_figure: bool) -> str:
    doc = Doc()
    version = _shardmeter("--version").split()[-1]
    doc.say(
        "# Findings of the paper, reproduced by the CLI",
        "",
        f"Generated by `python -m scripts.make_findings` with ShardMeter {version}; `--check` "
        "fails when this file is stale.",
        "Every console block below is a command and its unedited output; every `Result:` sentence "
        "is",
        "formatted from the same results. Profiles are the shipped datasheet priors (`provenance: "
        "prior`),",
        "so the numbers illustrate mechanisms rather than measured speeds; the `bound` labels "
        "follow",
        "`perfmodel.sim.analysis` (a stream idle at most 10 % of the step is saturated).",
        "",
    )
    sections: list[Callable[[Doc], None]] = [_section_sweeps, _section_diloco, _section_figure6]
    for section in sections:
        section(doc)
    _section_bandwidth(doc, write_figure)
    _section_layouts(doc)
    return doc.text()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if docs/FINDINGS.md differs from a rebuild"
    )
    args = parser.parse_args(argv)
    text = build(write_figure=not args.check)
    status = check_or_write(OUT, text, check=args.check,
                            generator="python -m scripts.make_findings")
    if not args.check:
        print(f"wrote {FIGURE.relative_to(ROOT)}")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
