"""Streaming DiLoCo studies of the public API: simulate and tune a fragment schedule (or the paper's
figure 6 examples), the link bandwidth each compute utilisation needs, and that bandwidth for
every cell of the Streaming DiLoCo paper's table (`published_bandwidth_comparison`)."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfmodel.api.workload import (
    MAX_PLOTTED_SPANS,
    OuterSpec,
    Workload,
    check_simulated_steps,
    describe_outer,
    positive,
    resolve_workload,
    simulate_inner_step,
    streaming_outer,
    sync_link,
)
from perfmodel.diloco import examples as ex
from perfmodel.diloco import tuner as st
from perfmodel.diloco.fragments import DEFAULT_SEQ_LEN, StreamingConfig, utilisation_steps
from perfmodel.diloco.published import PublishedCell, load_published_cells
from perfmodel.diloco.streaming import COMPUTE_STREAM, TRAIN_ISLAND
from perfmodel.diloco.tuner import run_streaming
from perfmodel.sim import trace
from perfmodel.spec import catalog
from perfmodel.spec.errors import UserInputError
from perfmodel.spec.inputs import check_limit
from perfmodel.spec.recipe import DEFAULT_RECIPE, OuterRecipe, TrainingRecipe

if TYPE_CHECKING:
    from perfmodel.diloco.tuner import WanLink
    from perfmodel.sim.fsdp import StepResult

MAX_UTILISATION_TARGETS = 20
"""Most utilisation targets of one --bandwidth-for-utilisation run (each is a bisection)."""
BISECTION_PROBES = 60
"""Simulations one bisection may run (two bracket ends, then log2(1e15 / 1e3 / 1e-4) halvings)."""
EXAMPLE_SEQ_LEN, EXAMPLE_MICRO_BATCH, EXAMPLE_ACCUM = 2048, 2, 8
"""Workload of the examples unless overridden: long enough inner steps (several seconds) that the
derived 'slow WAN' is a plausible inter-site bandwidth."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StreamingStudy:
    """Per case (the user's settings or a figure 6 example): the simulated run, the tuner's
    recommendation (`records`, in output order) and the timeline (`panels`, `spans`)."""

    workload: Workload
    records: list[dict[str, Any]]
    panels: list[tuple[str, list[Any]]]
    """(title, spans) per case, for a timeline figure."""
    spans: list[Any]
    """Every case's spans (islands prefixed with the case label when there are several)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class BandwidthTable:
    """The link Gbit/s each compute utilisation target needs."""

    header: dict[str, Any]
    """model, params, step_time_s, outer_optimizer, recipe, outer (in output order)."""
    details: dict[str, Any]
    """outer_recipe, islands, latency_ms, link (JSON only)."""
    rows: list[dict[str, Any]]
    link_kind: str
    step_time_s: float


def streaming(model_name: str | None, outer: OuterSpec, *, gpu_name: str | None, nodes: int = 1,
              gpus_per_node: int = 8, seq_len: int | None = None, micro_batch: int | None = None,
              accum: int | None = None, profile_name: str | None = None, recipe: TrainingRecipe,
              steps: int | None = None, max_delay_steps: int | None = None,
              max_sync_every: int | None = None, example: str | None = None) -> StreamingStudy:
    """Simulate a Streaming DiLoCo schedule, find blocking and tune it (`example`: figure 6's
    A/B/C/D/all instead of the user's link and settings)."""

    w, step, cases, settings = _cases(model_name, outer, gpu_name=gpu_name, nodes=nodes,
                                      gpus_per_node=gpus_per_node, seq_len=seq_len,
                                      micro_batch=micro_batch, accum=accum,
                                      profile_name=profile_name, recipe=recipe, example=example)
    records, panels, spans_all = [], [], []
    for label, (wan, config, note) in cases.items():
        worst_delay = st.DEFAULT_MAX_DELAY_STEPS if max_delay_steps is None else max_delay_steps
        h = min(config.sync_every, max_sync_every or max(st.DEFAULT_MAX_SYNC_EVERY,
                                                         config.sync_every))
        check_limit("tuner_steps", (worst_delay + 1) * w.model.num_layers
                    * (2 * h + worst_delay + 1),
                    field="--max-delay-steps, --sync-every and the model's layers")
        tuning = st.tune_streaming(
            w.model, step_s=step.step_time_s, wan=wan, current=config,
            max_delay_steps=(st.DEFAULT_MAX_DELAY_STEPS if max_delay_steps is None
                             else max_delay_steps),
            max_sync_every=max_sync_every or max(st.DEFAULT_MAX_SYNC_EVERY, config.sync_every),
            seq_len=w.seq_len)
        spans, summary = streaming_spans(w.model, step, wan, config, steps)
        best = tuning.config
        case_outer = replace(settings, num_fragments=config.num_fragments,
                             delay_steps=config.delay_steps, inner_steps=config.sync_every,
                             overlap_backward=config.overlap_backward)
        records.append({"case": label, "note": note, "wan_gbit_s": wan.bw_bytes_per_s * 8 / 1e9,
                        **summary, "tuned_fragments": best.num_fragments if best else None,
                        "tuned_delay_steps": best.delay_steps if best else None,
                        "tuned_sync_every": best.sync_every if best else None,
                        "tuner": tuning.reason, "remedies": list(tuning.remedies),
                        "outer": describe_outer(case_outer, wan), "recipe": recipe.summary(),
                        "provenance": w.profile.provenance})
        verdict = f"blocked {summary['blocked_s']:.3g} s" if summary["blocks"] else "no blocking"
        panels.append((f"{label}) F={config.num_fragments}, τ={config.delay_steps}, "
                       f"H={config.sync_every}, WAN {wan.bw_bytes_per_s * 8 / 1e9:.3g} "
                       f"Gbit/s: {verdict}", spans))
        spans_all += ([replace(s, island=f"{label}: {s.island}") for s in spans]
                      if len(cases) > 1 else spans)
    return StreamingStudy(workload=w, records=records, panels=panels, spans=spans_all)


def _cases(model_name: str | None, spec: OuterSpec, *, gpu_name: str | None, nodes: int,
           gpus_per_node: int, seq_len: int | None, micro_batch: int | None, accum: int | None,
           profile_name: str | None, recipe: TrainingRecipe,
           example: str | None) -> tuple[Workload, Any, dict[str, Any], OuterRecipe]:
    """The workload, its simulated inner step, the cases (label -> (link, config, note)) and the
    outer settings."""

    def pick(value: int | None, default: int) -> int:
        return default if value is None else value

    if example is None and (gpu_name is None or model_name is None):
        raise UserInputError(
            "streaming needs MODEL and --gpu (or --example A|B|C|D|all)",
            hint="e.g. `shardmeter streaming Llama-3.2-1B --gpu H100-SXM5-80GB` or --example B.",
        )
    w = resolve_workload(model_name or ex.EXAMPLE_MODEL, gpu_name=gpu_name or ex.EXAMPLE_GPU,
                         nodes=nodes, gpus_per_node=gpus_per_node,
                         seq_len=pick(seq_len, EXAMPLE_SEQ_LEN),
                         micro_batch=pick(micro_batch, EXAMPLE_MICRO_BATCH if example else 1),
                         accum=pick(accum, EXAMPLE_ACCUM if example else 1),
                         profile_name=profile_name, recipe=recipe)
    outer = streaming_outer(recipe, model=w.model, fragments=spec.fragments, delay=spec.delay_steps,
                            sync_every=spec.inner_steps, dtype=spec.pseudo_gradient_dtype,
                            fragment_pattern=spec.fragment_pattern,
                            overlap_backward=spec.overlap_backward)
    step = simulate_inner_step(w)
    islands = 2 if spec.islands is None else spec.islands
    if example is None:
        link = sync_link(w.island, islands=islands, wan_gbit_s=spec.wan_gbit_s,
                         wan_latency_ms=spec.wan_latency_ms, dtype=outer.pseudo_gradient_dtype,
                         same_cluster=spec.islands_same_cluster)
        return w, step, {"user": (link, StreamingConfig.from_recipe(outer), "")}, outer
    positive("--wan-latency-ms", spec.wan_latency_ms, zero_ok=True)
    if islands < 2:
        raise UserInputError(f"--islands {islands}: "
                             "the examples exchange fragments between islands",
                             hint="pass --islands 2 or more.")
    try:
        cases = ex.streaming_examples(w.model, step_s=step.step_time_s,
                                      latency_s=spec.wan_latency_ms / 1e3, num_islands=islands,
                                      dtype=outer.pseudo_gradient_dtype)
    except ValueError as err:
        raise UserInputError(f"--example {example}: {err}",
                             hint="lower --wan-latency-ms or lengthen the inner step "
                                  "(--micro-batch, --accum).") from err
    # figure 6 keeps whole-step exchanges unless asked
    if spec.overlap_backward or spec.fragment_pattern:
        cases = {k: (wan, replace(c, overlap_backward=bool(spec.overlap_backward),
                                  fragment_pattern=spec.fragment_pattern or c.fragment_pattern),
                     note)
                 for k, (wan, c, note) in cases.items()}
    return w, step, cases if example == "all" else {example: cases[example]}, outer


def _needs_step_source() -> UserInputError:
    return UserInputError(
        "--bandwidth-for-utilisation needs MODEL and --gpu or --step-time-s",
        hint="e.g. `shardmeter streaming Chinchilla-1B --bandwidth-for-utilisation "
        "--step-time-s 0.1 --fragments 8 --delay 1 --sync-every 100`.",
    )


def bandwidth_for_utilisation(model_name: str | None, outer: OuterSpec, *, targets: list[float],
                              gpu_name: str | None, nodes: int = 1, gpus_per_node: int = 8,
                              seq_len: int | None = None, micro_batch: int | None = None,
                              accum: int | None = None, profile_name: str | None = None,
                              recipe: TrainingRecipe,
                              step_time_s: float | None = None) -> BandwidthTable:
    """The link bandwidth reaching each compute utilisation in `targets` (bisection on the
    simulator); the inner step is `step_time_s`, else simulated on `gpu_name`."""

    if model_name is None or (gpu_name is None and step_time_s is None):
        raise _needs_step_source()
    if step_time_s is not None:
        positive("--step-time-s", step_time_s, limit="step_time_s")
    if outer.islands is not None and outer.islands < 2:
        raise UserInputError(f"--islands {outer.islands}: a single island exchanges nothing, so "
                             "every link reaches every utilisation",
                             hint="pass --islands 2 or more.")
    if len(targets) > MAX_UTILISATION_TARGETS:
        raise UserInputError(f"--utilisation: {len(targets)} targets, at most "
                             f"{MAX_UTILISATION_TARGETS} (each is a bisection on the simulator)",
                             hint="ask for fewer targets per run.")
    model, gpu, island, opt_per_param = catalog.get_model(model_name), None, None, 0.0
    model.check_step_modelled("a Streaming DiLoCo schedule")
    length = seq_len or DEFAULT_SEQ_LEN
    if gpu_name is not None:
        w = resolve_workload(model_name, gpu_name=gpu_name, nodes=nodes,
                             gpus_per_node=gpus_per_node, seq_len=length,
                             micro_batch=micro_batch or 1, accum=accum or 1,
                             profile_name=profile_name, recipe=recipe)
        gpu, island = w.gpu, w.island
        opt_per_param = st.outer_opt_s_per_param(num_gpus=island.num_gpus,
                                                 hbm_bytes_per_s=gpu.hbm_bytes_per_s)
        if step_time_s is None:
            step_time_s = simulate_inner_step(w).step_time_s
    if step_time_s is None:  # unreachable: the first check demands --gpu or --step-time-s
        raise _needs_step_source()
    settings = streaming_outer(recipe, model=model, fragments=outer.fragments,
                               delay=outer.delay_steps, sync_every=outer.inner_steps,
                               dtype=outer.pseudo_gradient_dtype,
                               fragment_pattern=outer.fragment_pattern,
                               overlap_backward=outer.overlap_backward)
    if outer.islands_same_cluster and island is None:
        raise UserInputError("--islands-same-cluster needs --gpu (the cluster's inter-node link)",
                             hint="add --gpu, or drop --islands-same-cluster.")
    link = sync_link(island, islands=2 if outer.islands is None else outer.islands,
                     wan_gbit_s=outer.wan_gbit_s, wan_latency_ms=outer.wan_latency_ms,
                     dtype=settings.pseudo_gradient_dtype, same_cluster=outer.islands_same_cluster)
    config = StreamingConfig.from_recipe(settings)
    probe_steps = utilisation_steps(config)[0]
    check_limit("bisection_steps", probe_steps * len(targets) * BISECTION_PROBES,
                field="--sync-every, --delay and --utilisation")
    rows = st.bandwidth_for_utilisation(model, step_s=step_time_s, wan=link, config=config,
                                        targets=targets, seq_len=length,
                                        opt_s_per_param=opt_per_param)
    floor = st.BANDWIDTH_RANGE_BYTES_PER_S[0]
    records = [{"model": model.name, "utilisation": r.target,
                "gbit_s": None if r.bw_bytes_per_s is not None and r.bw_bytes_per_s <= floor
                else r.gbit_s,
                "reached_utilisation": r.utilisation, "note": _bandwidth_note(r, floor)}
               for r in rows]
    header = {
        "model": model.name, "params": model.total_params, "step_time_s": step_time_s,
        "outer_optimizer": "not modelled (no --gpu)" if gpu is None or island is None
        else f"{opt_per_param * model.total_params:.3g} s per full outer step on "
             f"{island.num_gpus} x {gpu.name}",
        "recipe": recipe.summary(), "outer": describe_outer(settings, link, bandwidth=False),
    }
    details = {"outer_recipe": asdict(settings), "islands": link.num_islands,
               "latency_ms": link.latency_s * 1e3, "link": link.kind}
    return BandwidthTable(header=header, details=details, rows=records, link_kind=link.kind,
                          step_time_s=step_time_s)


def _bandwidth_note(row: Any, floor_bytes_per_s: float) -> str:
    """Why a bandwidth row has no number: unreachable, or reached already at the search floor
    (the smallest bandwidth lies below it, so the floor is no answer)."""
    if row.bw_bytes_per_s is None:
        return "unreachable: latency or outer step too long"
    if row.bw_bytes_per_s <= floor_bytes_per_s:
        return (f"reached by any link of at least {floor_bytes_per_s * 8 / 1e9:.3g} Gbit/s (the "
                "search floor); the smallest bandwidth lies below it")
    return ""


def streaming_spans(model: Any, step: StepResult, wan: WanLink, config: Any,
                    steps: int | None) -> tuple[list[Any], dict[str, Any]]:
    """Timeline spans and summary of `steps` (default H+τ+1) Streaming DiLoCo inner steps."""

    if steps is not None:
        positive("--steps", steps)
    num_steps = steps or config.sync_every + config.delay_steps + 1
    check_simulated_steps(num_steps, field="--steps" if steps else "the H+τ+1 simulated steps "
                                                                   "(--sync-every, --delay)")
    run = run_streaming(model, step_s=step.step_time_s, wan=wan, config=config,
                        num_steps=num_steps)
    # steps cut at exchange points (backward overlap) are drawn whole-step, without FSDP detail
    detailed = (not run.split_steps
                and len(step.schedule.intervals) * run.num_steps <= MAX_PLOTTED_SPANS)
    spans = (trace.expand_steps(run.schedule, step.schedule) if detailed
             else trace.schedule_spans(run.schedule))
    spans += trace.blocked_spans(run.schedule, island=TRAIN_ISLAND, stream=COMPUTE_STREAM)
    return spans, _streaming_summary(run) | {"fsdp_detail": detailed}


def _streaming_summary(run: Any) -> dict[str, Any]:
    c = run.config
    return {"fragments": c.num_fragments, "delay_steps": c.delay_steps, "sync_every": c.sync_every,
            "send_interval": c.send_interval, "steps": run.num_steps,
            "inner_step_time_s": run.compute_s / run.num_steps,
            "exchange_s_max": (max(e.end_s - e.start_s for e in run.exchanges) if run.exchanges
                               else 0.0),
            "total_s": run.total_s, "blocked_s": run.blocked_s, "blocks": run.blocks,
            "link_bound": run.link_bound}


# ---- the Streaming DiLoCo paper's table, cell by cell (validation only) -------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class CellComparison:
    """One published cell and the tool's figure for its scenario."""

    cell: PublishedCell
    """The published cell and its settings."""
    gbit_s: float | None
    """What `shardmeter streaming --bandwidth-for-utilisation` answers for it (None:
    unreachable)."""
    dtype: str
    """Dtype the figure was computed with (the cell's, unless overridden)."""

    @property
    def ratio(self) -> float | None:
        """ShardMeter ÷ published."""
        return None if self.gbit_s is None else self.gbit_s / self.cell.published_gbit_s

    @property
    def ape_pct(self) -> float | None:
        """Absolute percentage error against the published figure."""
        return None if self.ratio is None else abs(self.ratio - 1) * 100


@dataclass(frozen=True, kw_only=True, slots=True)
class PublishedComparison:
    """Every published cell with the tool's figure; MAPEs over any subset."""

    cells: tuple[CellComparison, ...]
    """In the CSV's order."""
    source: str
    """The CSV read."""

    def mape_pct(self, keep: Callable[[CellComparison], bool] = lambda c: True) -> float:
        """Mean absolute percentage error over the kept cells the tool can express (NaN if none).
        """
        errors = [c.ape_pct for c in self.cells if keep(c) and c.ape_pct is not None]
        return statistics.fmean(errors) if errors else float("nan")

    def count(self, keep: Callable[[CellComparison], bool] = lambda c: True) -> int:
        """Kept cells with a figure."""
        return sum(1 for c in self.cells if keep(c) and c.gbit_s is not None)


def published_bandwidth_comparison(path: str | Path | None = None, *,
                                   dtype_override: Mapping[str, str] | None = None
                                   ) -> PublishedComparison:
    """`bandwidth_for_utilisation` (the function behind `shardmeter streaming
    --bandwidth-for-utilisation --step-time-s`) for every cell of the published table, with the
    cell's own settings; `dtype_override` maps a cell dtype to another (a sensitivity check)."""

    cells = load_published_cells(path)
    groups: dict[tuple[Any, ...], list[PublishedCell]] = {}
    for cell in cells:
        key = (cell.catalog_model, cell.method, cell.step_time_s, cell.config(), cell.dtype,
               cell.islands, cell.latency_ms)
        groups.setdefault(key, []).append(cell)
    figures: dict[int, tuple[float | None, str]] = {}
    for members in groups.values():
        first = members[0]
        dtype = (dtype_override or {}).get(first.dtype, first.dtype)
        outer = OuterSpec(strategy="streaming-diloco", islands=first.islands,
                          inner_steps=first.sync_every, fragments=first.fragments,
                          delay_steps=first.delay_steps, pseudo_gradient_dtype=dtype,
                          fragment_pattern=first.fragment_pattern,
                          overlap_backward=first.overlap_backward,
                          wan_latency_ms=first.latency_ms)
        table = bandwidth_for_utilisation(first.catalog_model, outer,
                                          targets=[c.target_utilisation for c in members],
                                          gpu_name=None, recipe=DEFAULT_RECIPE,
                                          step_time_s=first.step_time_s)
        for cell, row in zip(members, table.rows, strict=True):
            figures[id(cell)] = (row["gbit_s"], dtype)
    return PublishedComparison(
        cells=tuple(CellComparison(cell=c, gbit_s=figures[id(c)][0], dtype=figures[id(c)][1])
                    for c in cells),
        source=str(path) if path is not None else "catalogs/published/"
                                                  "streaming-diloco-bandwidth.csv")
