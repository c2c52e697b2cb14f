#!/usr/bin/env python
"""Regenerate docs/FINDINGS.md: the paper's qualitative findings (§IV-C, §IV-D), each shown by a
`shardmeter` command whose output is pasted verbatim, and the Streaming DiLoCo bandwidth-for-
utilisation study (Douillard et al. 2025, Table 4 / Figure 4) recomputed with this simulator.

Nothing in the document is typed by hand except headings and the sentences saying what to look
for; every conclusion sentence is formatted from results computed here. Published figures appear
only in the validation table, apart from ours, and are never used to tune anything.

    .venv/bin/python -m scripts.make_findings           # rewrite docs/FINDINGS.md (+ its figure)
    .venv/bin/python -m scripts.make_findings --check   # exit 1 if docs/FINDINGS.md is stale
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfmodel.diloco.fragments import StreamingConfig
from perfmodel.diloco.tuner import (
    UTILISATION_TARGETS,
    WanLink,
    bandwidth_for_utilisation,
    streaming_utilisation,
)
from perfmodel.formatting import markdown_table
from perfmodel.spec import formulas
from perfmodel.spec.catalog import get_model
from scripts._docgen import check_or_write

ROOT = Path(__file__).resolve().parent.parent



OUT = ROOT / "docs" / "FINDINGS.md"
FIGURE = ROOT / "docs" / "figures" / "bandwidth-vs-utilisation.png"
SM = os.environ.get("SHARDMETER", str(ROOT / ".venv" / "bin" / "shardmeter"))

# ---- the published study (validation only) ---------------------------------------------------

PUBLISHED_SOURCE = (
    "Douillard et al., Streaming DiLoCo with overlapping communication, arXiv:2501.18512 "
    "(2025), appendix Table 4"
)
"""Where the published figures come from."""
STUDY_MODELS = (("Chinchilla-1B", 0.1), ("Chinchilla-10B", 0.8), ("Chinchilla-100B", 4.9))
"""Catalog model and the pure-compute inner step time of the study (its Table 4: 0.1 s, 0.8 s,
4.9 s); these are inputs of the study's scenario, taken as given."""
STUDY_H, STUDY_ISLANDS, STUDY_LATENCY_S, LAYERS_PER_FRAGMENT = 100, 2, 0.0, 3
"""The study's H = 100 and fragments of 3 layers, with 2 replicas (its main setting); it gives no
latency, so none is assumed."""
PUBLISHED_GBIT_S: dict[str, dict[str, tuple[float, ...]]] = {
    "Chinchilla-1B": {
        "diloco": (1.4, 6.2, 13.3, 23.3, 86.8),
        "streaming": (1.4, 5.2, 9.1, 16.0, 28.1),
        "overlap": (1.4, 4.3, 6.2, 9.1, 11.0),
        "overlap-fp4": (0.4, 0.9, 1.7, 2.0, 3.0),
    },
    "Chinchilla-10B": {
        "diloco": (1.7, 7.5, 16.0, 33.9, 104.8),
        "streaming": (1.7, 5.2, 9.1, 13.3, 19.3),
        "overlap": (1.7, 3.6, 5.2, 6.2, 7.5),
        "overlap-fp4": (0.4, 0.9, 1.4, 1.4, 1.7),
    },
    "Chinchilla-100B": {
        "diloco": (3.0, 11.0, 23.3, 49.4, 184.2),
        "streaming": (2.4, 6.2, 9.1, 11.0, 19.3),
        "overlap": (1.7, 3.6, 4.3, 5.2, 5.2),
        "overlap-fp4": (0.5, 0.9, 1.1, 1.1, 1.4),
    },
}
"""Gbit/s the study needs for 50/80/90/95/99 % compute utilisation, per method (its Table 4)."""


@dataclass(frozen=True)
class Method:
    """One row of the study, as a ShardMeter outer recipe."""

    key: str
    label: str
    fragmented: bool
    delay: int
    dtype: str

    def config(
        self, num_layers: int, *, pattern: str = "strided", overlap: bool = True
    ) -> StreamingConfig:
        fragments = num_layers // LAYERS_PER_FRAGMENT if self.fragmented else 1
        return StreamingConfig(
            num_fragments=fragments,
            sync_every=STUDY_H,
            delay_steps=self.delay,
            overlap_backward=overlap,
            fragment_pattern=pattern,
        )


METHODS = (
    Method("diloco", "DiLoCo (F=1, τ=0)", False, 0, "fp32"),
    Method("streaming", "Streaming DiLoCo (3 layers per fragment, τ=0)", True, 0, "fp32"),
    Method("overlap", "Streaming DiLoCo, overlapped (τ=1)", True, 1, "fp32"),
    Method("overlap-fp4", "Streaming DiLoCo, overlapped, fp4 (τ=1)", True, 1, "fp4"),
)
"""The study's four DiLoCo rows. All overlap the exchange with backward (the study: "the
reduction of gradients or outer gradients is overlapped over the backward pass"), fragments are
strided (its default), pseudo-gradients fp32 unless quantised (it quantises from fp32)."""


def _link(dtype: str) -> WanLink:
    return WanLink(
        num_islands=STUDY_ISLANDS, bw_bytes_per_s=1.0, latency_s=STUDY_LATENCY_S, dtype=dtype
    )


def _gbit(
    model_name: str, step_s: float, config: StreamingConfig, dtype: str
) -> list[float | None]:
    rows = bandwidth_for_utilisation(
        get_model(model_name), step_s=step_s, wan=_link(dtype), config=config
    )
    return [r.gbit_s for r in rows]


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
        self.say(
            "```console", "$ shardmeter " + " ".join(args), *out.rstrip("\n").split("\n"), "```", ""
        )
        return out

    def text(self) -> str:
        return "\n".join(self.lines).rstrip("\n") + "\n"


def _shardmeter(*args: str) -> str:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}
    done = subprocess.run(
        [SM, *args], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"shardmeter {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
    return done.stdout + done.stderr


def _json(*args: str) -> Any:
    return json.loads(_shardmeter(*args, "--format", "json"))


def _fmt(value: float | None) -> str:
    return "unreachable" if value is None else f"{value:.3g}"


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
    doc.run(*args)
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
    doc.run(*args)
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
        doc.run(*fsdp)
        doc.run(*dl)
        a, b = _json(*fsdp), _json(*dl)
        results.append(
            f"micro-batch {mb}: FSDP island {a['island_bound']}, {a['tokens_per_s']:.4g} tokens/s; "
            f"DiLoCo islands {b['island_bound']}, {b['tokens_per_s']:.4g} tokens/s "
            f"({b['tokens_per_s'] / a['tokens_per_s']:.3g}x)"
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
    doc.run("streaming", "--example", "all")
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
    doc.run(*args)
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
        f"Result: blocked {case['blocked_s']:.3g} s over {case['steps']} steps; the tuner "
        f"recommends {tuned}.",
        "",
    )


# ---- section 5: bandwidth for utilisation ------------------------------------------------------


def _section_bandwidth(doc: Doc, write_figure: bool) -> None:
    doc.say(
        "## 5. WAN bandwidth for a compute utilisation (Streaming DiLoCo study, Table 4 / Fig. 4)",
        "",
        "The question a decentralized-training planner asks first: how many Gbit/s between islands "
        "keep",
        "the GPUs busy 50, 80, 90, 95 or 99 % of the time? `shardmeter streaming MODEL "
        "--bandwidth-for-utilisation`",
        "answers it by bisection on the simulator (steady state: one period of H steps after two "
        "warm-up",
        "periods). Here it is asked for the scenario of the published study: Chinchilla-shaped "
        "1B/10B/100B",
        "models (catalog rows `Chinchilla-*`: the 1B shape is the study's Table 2 row; 10B and "
        "100B keep its",
        "48 and 108 layers and take the hidden size, a multiple of 64, whose parameter count is "
        "closest to",
        "10e9 and 100e9, see `catalogs/models.csv`), its inner-step compute times (0.1, 0.8 and "
        "4.9 s),",
        f"H = {STUDY_H}, {STUDY_ISLANDS} islands, no latency, fragments of {LAYERS_PER_FRAGMENT} "
        "layers (strided), exchanges overlapped with",
        "the backward pass, pseudo-gradients in fp32 unless quantised. One row as a command:",
        "",
    )
    doc.run(
        "streaming",
        "Chinchilla-1B",
        "--bandwidth-for-utilisation",
        "--step-time-s",
        "0.1",
        "--fragments",
        "8",
        "--fragment-pattern",
        "strided",
        "--delay",
        "1",
        "--sync-every",
        str(STUDY_H),
        "--islands",
        str(STUDY_ISLANDS),
        "--wan-latency-ms",
        "0",
    )
    ours: dict[str, dict[str, list[float | None]]] = {}
    rows = []
    for name, step_s in STUDY_MODELS:
        model = get_model(name)
        ours[name] = {}
        for m in METHODS:
            config = m.config(model.num_layers)
            ours[name][m.key] = _gbit(name, step_s, config, m.dtype)
            rows.append(
                [
                    name,
                    f"{step_s:g}",
                    m.label,
                    f"{config.num_fragments}",
                    *(_fmt(v) for v in ours[name][m.key]),
                ]
            )
    doc.say("Gbit/s needed, computed by ShardMeter:", "")
    doc.say(
        *_table(["model", "step s", "method", "F", *(_pct(t) for t in UTILISATION_TARGETS)], rows)
    )
    doc.say(*_form_sentences(ours))
    _options(doc)
    _validation(doc, ours)
    if write_figure:
        _figure(doc)
    doc.say(
        "The figure `docs/figures/bandwidth-vs-utilisation.png` (regenerated with the document; "
        "not compared by `--check`) plots compute utilisation against bandwidth for the same "
        "scenario, the form of the study's Figure 4.",
        "",
    )


def _form_sentences(ours: dict[str, dict[str, list[float | None]]]) -> list[str]:
    i95 = UTILISATION_TARGETS.index(0.95)
    names = [n for n, _ in STUDY_MODELS]
    over = [ours[n]["overlap"][i95] for n in names]
    dl = [ours[n]["diloco"][i95] for n in names]
    falls = over[-1] < over[0]
    why = " (longer steps leave more time per fragment)" if falls else ""
    return [
        "Result: with the overlapped schedule the bandwidth for 95 % "
        f"{'falls' if falls else 'rises'} with scale, {_fmt(over[0])} → {_fmt(over[1])} → "
        f"{_fmt(over[2])} Gbit/s for 1B → 10B → 100B{why}, while blocking DiLoCo needs "
        f"{_fmt(dl[0])} → {_fmt(dl[1])} → {_fmt(dl[2])}. At 99 % the overlapped schedule needs "
        f"{_ratio(ours, 'diloco', 'overlap', -1)} less than DiLoCo.",
        "",
    ]


def _span(values: Sequence[float]) -> str:
    """'a x to b x', or one value when they agree to three digits."""
    if not values:
        return "n/a"
    lo, hi = f"{min(values):.3g}x", f"{max(values):.3g}x"
    return lo if lo == hi else f"{lo} to {hi}"


def _ratio(ours: dict[str, dict[str, list[float | None]]], a: str, b: str, index: int) -> str:
    return _span([x[index] / y[index] for m in ours.values() for x, y in [(m[a], m[b])] if x and y])


OPTION_MODEL, OPTION_STEP_S = "Chinchilla-10B", 0.8
"""The model the option table varies one setting of."""
OPTION_CHANGES: dict[str, str] = {}
"""Factors the option table found, quoted by the validation sentence."""


def _options(doc: Doc) -> None:
    model = get_model(OPTION_MODEL)
    base = METHODS[2]
    variants: list[tuple[str, StreamingConfig, str]] = [
        ("overlapped, strided, fp32 (the row above)", base.config(model.num_layers), "fp32"),
        ("bf16 pseudo-gradients", base.config(model.num_layers), "bf16"),
        ("4-bit (fp4) pseudo-gradients", base.config(model.num_layers), "fp4"),
        ("contiguous fragments", base.config(model.num_layers, pattern="contiguous"), "fp32"),
        (
            "no backward overlap (after / before whole steps)",
            base.config(model.num_layers, overlap=False),
            "fp32",
        ),
    ]
    values = {label: _gbit(OPTION_MODEL, OPTION_STEP_S, cfg, dt) for label, cfg, dt in variants}
    doc.say(
        f"How the 4-bit, strided and overlap options change it ({OPTION_MODEL}, step "
        f"{OPTION_STEP_S:g} s, F = {variants[0][1].num_fragments}, τ = 1, one setting changed per "
        "row):",
        "",
    )
    doc.say(
        *_table(
            ["variant", *(_pct(t) for t in UTILISATION_TARGETS)],
            [[label, *(_fmt(v) for v in vals)] for label, vals in values.items()],
        )
    )
    first = values[variants[0][0]]

    def change(label: str) -> str:
        return _span([v / f for v, f in zip(values[label], first, strict=True) if v and f])

    bytes_fp4 = (
        formulas.payload_bytes(formulas.QUANT_GROUP_ELEMENTS, "fp4") / formulas.QUANT_GROUP_ELEMENTS
    )
    OPTION_CHANGES["bf16"] = change(variants[1][0])
    doc.say(
        f"Result: fp4 pseudo-gradients ({bytes_fp4:.4g} B per value with their scales, against "
        f"{formulas.dtype_bytes('fp32'):g} B for fp32) multiply the bandwidth by "
        f"{change(variants[2][0])} of the fp32 figure and bf16 by {change(variants[1][0])}; "
        f"contiguous instead of strided fragments by {change(variants[3][0])}; exchanges that wait "
        "for the whole step and must be done before the next one starts by "
        f"{change(variants[4][0])}.",
        "",
    )


def _validation(doc: Doc, ours: dict[str, dict[str, list[float | None]]]) -> None:
    doc.say(
        "### Validation against the published figures (kept apart; nothing above is fitted to "
        "them)",
        "",
        f"Source: {PUBLISHED_SOURCE}. Each cell is published Gbit/s / ShardMeter Gbit/s / ratio "
        "(ShardMeter ÷ published). The study's Data-Parallel rows are not a DiLoCo schedule and "
        "are left out.",
        "",
    )
    rows, ratios = [], []
    labels = {m.key: m.label for m in METHODS}
    for name, _ in STUDY_MODELS:
        for key, published in PUBLISHED_GBIT_S[name].items():
            cells = []
            for pub, mine in zip(published, ours[name][key], strict=True):
                if mine is None:
                    cells.append(f"{pub:g} / unreachable")
                    continue
                ratios.append((key, mine / pub))
                cells.append(f"{pub:g} / {mine:.3g} / {mine / pub:.2g}")
            rows.append([name, labels[key], *cells])
    doc.say(*_table(["model", "method", *(_pct(t) for t in UTILISATION_TARGETS)], rows))
    fp4 = [r for k, r in ratios if k == "overlap-fp4"]
    fp32 = [r for k, r in ratios if k != "overlap-fp4"]
    doc.say(
        f"Result: ShardMeter needs {min(fp32):.2g}x to {max(fp32):.2g}x the published bandwidth "
        f"for the fp32 rows (median {statistics.median(fp32):.2g}x) and {min(fp4):.2g}x to "
        f"{max(fp4):.2g}x for the fp4 rows (median {statistics.median(fp4):.2g}x). Differences the "
        "model knows of: the study does not state the dtype of its unquantised rows (fp32 assumed "
        f"here; bf16 changes those figures by {OPTION_CHANGES.get('bf16', 'n/a')}, option table), "
        "its models are nominal sizes (here "
        + ", ".join(f"{n} has {get_model(n).total_params:.3g} parameters" for n, _ in STUDY_MODELS)
        + "), and its table reports points of a bandwidth grid.",
        "",
    )


def _figure(doc: Doc) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    grid = np.geomspace(0.1, 1000, 40)
    fig, axes = plt.subplots(1, len(STUDY_MODELS), figsize=(15, 4.2), sharey=True)
    for ax, (name, step_s) in zip(axes, STUDY_MODELS, strict=True):
        model = get_model(name)
        for m in METHODS:
            cfg = m.config(model.num_layers)
            cu = [
                streaming_utilisation(
                    model, step_s=step_s, wan=_link(m.dtype).with_bandwidth(g * 1e9 / 8), config=cfg
                )
                for g in grid
            ]
            ax.plot(grid, cu, label=m.label)
        ax.set_xscale("log")
        ax.set_title(f"{name}, step {step_s:g} s")
        ax.set_xlabel("WAN bandwidth (Gbit/s)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("compute utilisation")
    axes[0].legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    FIGURE.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(FIGURE, dpi=110)
    plt.close(fig)


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
