"""Commands `predict`, `simulate` and `sweep`: one step, its timeline and micro-batch sweeps
(`streaming` lives in `planner.cli.streaming_cmd`). A thin layer: the numbers come from
`perfmodel.api.predict`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from perfmodel import api
from perfmodel.api.streaming import EXAMPLE_ACCUM, EXAMPLE_MICRO_BATCH, EXAMPLE_SEQ_LEN
from perfmodel.api.workload import (
    MAX_PLOTTED_SPANS,
    SIMULATED_ACCUM_MAX,
    Workload,
    simulate_inner_step,
)
from perfmodel.numbers import format_duration, format_number, format_percent
from perfmodel.sim import trace
from perfmodel.spec.errors import UserInputError
from perfmodel.spec.inputs import check_limit
from planner.cli.common import (
    PREDICT_SCHEMA_VERSION,
    CheckpointParam,
    allow_oom_option,
    compact_value,
    echo_does_not_fit,
    echo_wrapped,
    emit_compact,
    emit_interval_table,
    emit_json,
    emit_mapping,
    emit_records,
    emit_table,
    format_option,
    interval_options,
    prior_warning,
    provenance_lines,
    refuse_unused,
    terminal_width,
    wide_option,
)
from planner.cli.outer_opts import describe_outer, dtype_option, outer_option_list
from planner.cli.recipe_opts import (
    layout_option_list,
    recipe_from_options,
    recipe_option_list,
)

STRATEGIES = ("fsdp", "diloco", "streaming-diloco")
_PATH = click.Path(dir_okay=False, path_type=Path)
__all__ = ["EXAMPLE_ACCUM", "EXAMPLE_MICRO_BATCH", "EXAMPLE_SEQ_LEN", "MAX_PLOTTED_SPANS",
           "SIMULATED_ACCUM_MAX", "Workload", "predict", "simulate", "sweep"]


def _apply(options: list[Callable[..., Any]], func: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(options):
        func = option(func)
    return func


def _workload_option_list(*, examples: bool = False,
                          recipe: bool = False) -> list[Callable[..., Any]]:
    """Model-independent workload options; with `examples` the GPU and sizes may be left out;
    with `recipe` the training-recipe options too (`--ac` then defaults to the recipe's)."""
    sizes = (("(default 2048)", "(default 1; examples 2)", "(default 1; examples 8)") if examples
             else ("", "", ""))
    return [
        click.option("--gpu", "gpu_name", required=not examples,
                     help="Catalog GPU name"
                     + (" (required unless --example)." if examples else ".")),
        click.option("--nodes", type=int, default=1, show_default=True, help="Nodes per island."),
        click.option("--gpus-per-node", type=int, default=8, show_default=True,
                     help="GPUs used per node."),
        click.option("--seq-len", type=int, required=not examples, default=None,
                     help=f"Sequence length in tokens {sizes[0]}."),
        click.option("--micro-batch", type=int, default=None if examples else 1,
                     show_default=not examples,
                     help=f"Sequences per GPU per micro-step {sizes[1]}."),
        click.option("--accum", type=int, default=None if examples else 1,
                     show_default=not examples,
                     help=f"Gradient-accumulation micro-steps k {sizes[2]}."),
        click.option("--ac", type=CheckpointParam(), default=None if recipe else "none",
                     show_default=not recipe,
                     help="Activation checkpointing"
                     + (" (default: the recipe's)." if recipe else ".")),
        click.option("--profile", "profile_name", default=None,
                     help="Hardware profile name or YAML path (default: the GPU's, "
                          "measured beats prior)."),
        *(recipe_option_list(ac=False) if recipe else []),
        *(layout_option_list() if recipe else []),
    ]


def _workload_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Workload and training-recipe options (predict, simulate)."""
    return _apply(_workload_option_list(recipe=True), func)


def recipe_options_no_ac(func: Callable[..., Any]) -> Callable[..., Any]:
    """The recipe and layout options for a command that declares --ac itself (sweep)."""
    return _apply(recipe_option_list(ac=False) + layout_option_list(), func)


def _recipe_payload(payload: dict[str, Any], recipe: Any, fmt: str) -> dict[str, Any]:
    """`payload` with the recipe: the whole mapping in JSON, its one-line summary otherwise."""
    if fmt == "json":
        return {**payload, "recipe": recipe.to_dict()}
    layout = {"layout": recipe.parallel.describe()} if "layout" in payload else {}
    return {**payload, **layout, "recipe": recipe.summary()}


def _strategy_options(func: Callable[..., Any]) -> Callable[..., Any]:
    return _apply([
        click.option("--strategy", type=click.Choice(STRATEGIES), default="fsdp",
                     show_default=True),
        click.option("--islands", type=int, default=None,
                     help="Islands M (default 1 for fsdp, else 2)."),
        click.option("--inner-steps", type=int, default=None,
                     help="DiLoCo H (default: the recipe's, else 100, for diloco and "
                          "streaming-diloco alike)."),
        *_wan_options(),
        click.option("--fragments", type=int, default=None,
                     help="Streaming DiLoCo fragments F (default: the recipe's, else 3)."),
        click.option("--delay", type=int, default=None,
                     help="Streaming DiLoCo delay τ in inner steps "
                          "(default: the recipe's, else 2)."),
        *outer_option_list(),
    ], func)


def _wan_options() -> list[Callable[..., Any]]:
    return [
        click.option("--wan-gbit-s", type=float, default=10.0, show_default=True,
                     help="Slowest WAN uplink, Gbit/s."),
        click.option("--wan-latency-ms", type=float, default=50.0, show_default=True,
                     help="Largest WAN latency, ms."),
        dtype_option(),
    ]


def _spec(model_name: str, *, gpu_name: str, nodes: int, gpus_per_node: int, seq_len: int,
          micro_batch: int, accum: int, profile_name: str | None, recipe_name: str, ac: str | None,
          recipe_flags: dict[str, Any]) -> api.WorkloadSpec:
    return api.WorkloadSpec(model_name=model_name, gpu_name=gpu_name, nodes=nodes,
                            gpus_per_node=gpus_per_node, seq_len=seq_len, micro_batch=micro_batch,
                            accum=accum, profile_name=profile_name,
                            recipe=recipe_from_options(recipe_name, ac=ac, **recipe_flags))


def _outer_spec(strategy: str, *, islands: int | None, inner_steps: int | None,
                fragments: int | None, delay: int | None, dtype: str | None, wan_gbit_s: float,
                wan_latency_ms: float, flags: dict[str, Any]) -> api.OuterSpec:
    return api.OuterSpec(strategy=strategy, islands=islands, inner_steps=inner_steps,
                         fragments=fragments, delay_steps=delay, pseudo_gradient_dtype=dtype,
                         fragment_pattern=flags.get("fragment_pattern"),
                         overlap_backward=flags.get("overlap_backward"),
                         islands_same_cluster=bool(flags.get("islands_same_cluster")),
                         wan_gbit_s=wan_gbit_s, wan_latency_ms=wan_latency_ms)


def _refuse_strategy_flags(strategy: str, *, same_cluster: bool, simulate: bool = False) -> None:
    """Every flag acts or is refused: the outer settings a strategy does not read."""
    if strategy == "fsdp":
        refuse_unused(("inner_steps", "fragments", "delay", "wan_gbit_s", "wan_latency_ms",
                       "dtype", "fragment_pattern", "overlap_backward", "islands_same_cluster",
                       *(("steps",) if simulate else ())),
                      why="with --strategy fsdp (one island, no outer synchronisation)",
                      fix="drop them, or pass --strategy diloco or streaming-diloco.")
    elif strategy == "diloco":
        refuse_unused(("fragments", "delay", "fragment_pattern", "overlap_backward"),
                      why="with --strategy diloco (one blocking exchange of the whole model)",
                      fix="drop them, or pass --strategy streaming-diloco.")
    if same_cluster:
        refuse_unused(("wan_gbit_s", "wan_latency_ms"), why="with --islands-same-cluster (the "
                      "sync uses the cluster's inter-node fabric)",
                      fix="drop them, or drop --islands-same-cluster.")


# ---- predict ---------------------------------------------------------------------------------

def _prediction_row(record: dict[str, Any]) -> dict[str, str]:
    """The columns of a prediction that matter, units in the headers."""
    row = {"step (s)": format_number(record["step_time_s"]),
           "tok/s/GPU": format_number(record["tokens_per_s_per_gpu"]),
           "MFU %": format_number(record["mfu"] * 100, digits=3),
           "bound": str(record["bound"]),
           "exposed comm (s)": format_number(record["exposed_comm_s"])}
    if "bubble_fraction" in record:
        row["bubble %"] = format_number(record["bubble_fraction"] * 100, digits=3)
    for key, header in (("amortised_outer_sync_s", "outer sync/step (s)"),
                        ("amortised_blocked_s", "blocked/step (s)")):
        if key in record:
            row[header] = format_number(record[key])
    row["peak/usable GiB"] = (f"{format_number(record['peak_gib'])}/"
                              f"{format_number(record['usable_memory_gib'])}")
    if "goodput" in record:   # --failures: the expected share of wall time that trains
        row["goodput %"] = format_number(record["goodput"] * 100, digits=3)
    row["profile"] = str(record["provenance"])
    return row


def _emit_prediction(p: api.Prediction, payload: dict[str, Any], fmt: str, *, wide: bool,
                     title: str) -> None:
    """JSON / CSV / the full table (`--wide`) as before; else the answer first: the answer
    sentence, the profile it rests on, the columns that matter."""
    if fmt == "json":
        emit_json({"schema_version": PREDICT_SCHEMA_VERSION, **payload})
        return
    if fmt != "table" or wide:
        emit_mapping(payload, fmt, title=title)
        return
    record = p.record
    echo_wrapped(api.prediction_answer(record))
    for line in provenance_lines(record):
        echo_wrapped(line)
    if "worst_stage" in record:
        echo_wrapped(f"slowest stage: {record['worst_stage']}")
    echo_wrapped(f"recipe {p.workload.recipe.summary()}")
    if "outer" in payload:
        echo_wrapped(str(payload["outer"]))
    click.echo("")
    emit_compact([_prediction_row(record)], width=terminal_width())
    click.echo("")
    emit_interval_table(record)
    click.echo("")
    click.echo("every field: --wide or --format json")


FAILURE_FLAGS = ("failures_per_gpu_hour", "restart_s", "checkpoint_write_gbit_s_per_node",
                 "checkpoint_mode", "train_tokens", "usd_per_gpu_hour")
"""`predict` options of the failure model (they need --failures)."""


def _failure_options(func: Callable[..., Any]) -> Callable[..., Any]:
    return _apply([
        click.option("--failures", is_flag=True, default=False,
                     help="Add the run's expected goodput under failures: checkpoint interval "
                          "(Young/Daly), expected wall time and cost (catalogs/reliability/)."),
        click.option("--failures-per-gpu-hour", type=float, default=None,
                     help="Interruptions per GPU-hour (default: the GPU's published figure)."),
        click.option("--restart-s", type=float, default=None,
                     help="Seconds from an interruption to training again (default: catalog)."),
        click.option("--checkpoint-write-gbit-s-per-node", type=float, default=None,
                     help="Checkpoint write bandwidth per node, Gbit/s (default: catalog)."),
        click.option("--checkpoint-mode", type=click.Choice(api.CHECKPOINT_MODES), default=None,
                     help="sync: training stalls for the whole checkpoint write; async: for a "
                          "snapshot, the write finishes in the background (default: sync)."),
        click.option("--train-tokens", type=float, default=None,
                     help="Tokens of the run: adds wall_time_s and expected_wall_time_s."),
        click.option("--usd-per-gpu-hour", type=float, default=None,
                     help="GPU-hour price: adds cost_usd and expected_cost_usd (with "
                          "--train-tokens)."),
    ], func)


def _failure_spec(enabled: bool, values: dict[str, Any]) -> api.FailureSpec | None:
    given = [k for k in FAILURE_FLAGS if values.get(k) is not None]
    if not enabled:
        if given:
            raise UserInputError(f"--{given[0].replace('_', '-')} needs --failures",
                                 hint="add --failures (the failure model is off by default).")
        return None
    return api.FailureSpec(**{k: values.get(k) for k in FAILURE_FLAGS})


@click.command()
@click.argument("model_name", metavar="MODEL")
@_workload_options
@_strategy_options
@allow_oom_option()
@wide_option()
@_failure_options
@interval_options
@format_option()
def predict(model_name: str, gpu_name: str, nodes: int, gpus_per_node: int, seq_len: int,
            micro_batch: int, accum: int, ac: str, profile_name: str | None, strategy: str,
            islands: int | None, inner_steps: int, wan_gbit_s: float, wan_latency_ms: float,
            dtype: str, fragments: int, delay: int, allow_oom: bool, wide: bool, fmt: str,
            recipe_name: str, failures: bool, interval_level: float | None,
            fit_probability: float | None, **recipe_flags: Any) -> None:
    """Predict one training step of MODEL: time, throughput, MFU, memory and what bounds it
    (with --failures: the run's expected goodput, wall time and cost). A configuration whose
    peak exceeds the GPU's usable memory exits 1 with the smallest fix that fits (computed),
    unless --allow-oom."""
    _refuse_strategy_flags(strategy, same_cluster=bool(recipe_flags.get("islands_same_cluster")))
    failure = _failure_spec(failures, {k: recipe_flags.pop(k) for k in FAILURE_FLAGS})
    try:
        p = api.predict(_spec(model_name, gpu_name=gpu_name, nodes=nodes,
                              gpus_per_node=gpus_per_node, seq_len=seq_len,
                              micro_batch=micro_batch, accum=accum, profile_name=profile_name,
                              recipe_name=recipe_name, ac=ac, recipe_flags=recipe_flags),
                        _outer_spec(strategy, islands=islands, inner_steps=inner_steps,
                                    fragments=fragments, delay=delay, dtype=dtype,
                                    wan_gbit_s=wan_gbit_s, wan_latency_ms=wan_latency_ms,
                                    flags=recipe_flags), failure, allow_oom=allow_oom,
                        interval_level=interval_level, fit_probability=fit_probability)
    except api.DoesNotFitError as err:
        echo_does_not_fit(err.answer, fmt)
        raise
    payload = dict(p.record)
    if strategy != "fsdp":
        payload["outer"] = describe_outer(p.outer, p.link)
    w = p.workload
    _emit_prediction(p, _recipe_payload(payload, w.recipe, fmt), fmt, wide=wide,
                     title=f"{w.model.name} on {p.islands} x {nodes}x{gpus_per_node} "
                           f"{w.gpu.name} ({strategy})")


# ---- simulate --------------------------------------------------------------------------------

@click.command()
@click.argument("model_name", metavar="MODEL")
@_workload_options
@_strategy_options
@click.option("--steps", type=int, default=None,
              help="Inner steps to simulate (diloco: H; streaming: H+τ+1).")
@click.option("--trace", "trace_path", type=_PATH, default=None,
              help="Write a Chrome/Perfetto trace JSON here.")
@click.option("--plot", "plot_path", type=_PATH, default=None, help="Write a PNG timeline here.")
@wide_option()
@format_option()
def simulate(model_name: str, gpu_name: str, nodes: int, gpus_per_node: int, seq_len: int,
             micro_batch: int, accum: int, ac: str, profile_name: str | None, strategy: str,
             islands: int | None, inner_steps: int, wan_gbit_s: float, wan_latency_ms: float,
             dtype: str, fragments: int, delay: int, steps: int | None, trace_path: Path | None,
             plot_path: Path | None, wide: bool, fmt: str, recipe_name: str,
             **recipe_flags: Any) -> None:
    """Simulate MODEL's step timeline (or a DiLoCo / Streaming DiLoCo run) and export it."""
    _refuse_strategy_flags(strategy, same_cluster=bool(recipe_flags.get("islands_same_cluster")),
                           simulate=True)

    sim = api.simulate(_spec(model_name, gpu_name=gpu_name, nodes=nodes,
                             gpus_per_node=gpus_per_node, seq_len=seq_len, micro_batch=micro_batch,
                             accum=accum, profile_name=profile_name, recipe_name=recipe_name, ac=ac,
                             recipe_flags=recipe_flags),
                       _outer_spec(strategy, islands=islands, inner_steps=inner_steps,
                                   fragments=fragments, delay=delay, dtype=dtype,
                                   wan_gbit_s=wan_gbit_s, wan_latency_ms=wan_latency_ms,
                                   flags=recipe_flags), steps=steps)
    w, summary = sim.workload, dict(sim.summary)
    title = (f"{w.model.name}, {nodes}x{gpus_per_node} {w.gpu.name}, m={micro_batch}, "
             f"k={accum} ({strategy})")
    if strategy != "fsdp":
        summary["outer"] = describe_outer(sim.outer, sim.link)
    summary["provenance"] = w.profile.provenance
    if trace_path:
        summary["trace"] = str(trace.write_chrome_trace(sim.spans, trace_path,
                                                        metadata={"title": title}))
    if plot_path:
        summary["plot"] = str(trace.plot_timelines([(title, sim.spans)], plot_path))
    if fmt != "table" or wide:
        emit_mapping(_recipe_payload(summary, w.recipe, fmt), fmt, title=title)
        return
    echo_wrapped(f"{title}: {_simulation_answer(summary)}")
    echo_wrapped(f"profile {w.profile.name} ({w.profile.provenance})")
    if w.profile.provenance == "prior":
        echo_wrapped(prior_warning(w.gpu.name))
    echo_wrapped(f"recipe {w.recipe.summary()}")
    if "outer" in summary:
        echo_wrapped(str(summary["outer"]))
    click.echo("")
    shown = [k for k, v in summary.items() if k not in _NOT_IN_COMPACT
             and not isinstance(v, dict | list)]
    emit_compact([{"quantity": k.removesuffix("_s").replace("_s_", "_").replace("_", " "),
                   "value": compact_value(k, summary[k])} for k in shown],
                 width=terminal_width())
    click.echo("")
    for key in ("trace", "plot"):
        if key in summary:
            click.echo(f"wrote {summary[key]}")
    click.echo("every field: --wide or --format json")


_NOT_IN_COMPACT = frozenset({"outer", "provenance", "trace", "plot"})
"""Summary keys the answer-first view of `simulate` prints on their own lines."""


def _simulation_answer(summary: dict[str, Any]) -> str:
    """The headline figure of a simulation summary (FSDP step, DiLoCo amortised step, Streaming
    DiLoCo run)."""
    if "amortised_step_s" in summary:
        return (f"{format_duration(summary['amortised_step_s'])} per inner step amortised "
                f"(outer step {format_duration(summary['outer_step_s'])} every "
                f"{summary['inner_steps']} inner steps)")
    if "total_s" in summary:
        return (f"{summary['steps']} inner steps of "
                f"{format_duration(summary['inner_step_time_s'])} take "
                f"{format_duration(summary['total_s'])}, "
                f"{format_duration(summary['blocked_s'])} blocked on the exchange")
    return (f"{format_duration(summary['step_time_s'])} per step, "
            f"{summary['bound']}-bound, exposed comm "
            f"{format_duration(summary['exposed_comm_s'])}")


# ---- sweep -----------------------------------------------------------------------------------

MAX_SWEEP_VALUES = 256
"""Most values one list option of `sweep` may expand to (each is a simulated point)."""
_LIST_LIMITS = {"--micro-batches": "micro_batch", "--nodes": "nodes", "--gpus-per-node": "nodes"}


def _int_list(option: str, text: str) -> list[int]:
    """'1..32' (powers of two), '1-8' (every integer) or '1,2,4'; at most MAX_SWEEP_VALUES
    values, each within its LIMITS entry (a range is checked before it is expanded)."""
    short = text if len(text) <= 60 else text[:60] + "…"
    kind = ".." if ".." in text else "-" if "-" in text.strip("-") else ","
    try:
        numbers = [int(x) for x in text.split(kind) if x.strip()]
    except ValueError as err:
        raise UserInputError(f"{option} {short!r}: not a list of integers",
                             hint=f"write {option} 1..32 (powers of two), 1-8 or 1,2,4.") from err
    if kind != "," and len(numbers) != 2:
        raise UserInputError(f"{option} {short!r}: a range is LOW{kind}HIGH",
                             hint=f"write {option} 1..32 (powers of two), 1-8 or 1,2,4.")
    if not numbers or min(numbers) < 1:
        raise UserInputError(f"{option} {short!r}: values must be >= 1",
                             hint=f"write {option} 1..32 or 1,2,4.")
    check_limit(_LIST_LIMITS.get(option, "micro_batch"), max(numbers), field=option)
    count = numbers[1] - numbers[0] + 1 if kind == "-" else len(numbers)
    if count > MAX_SWEEP_VALUES:  # checked before a range is expanded
        raise UserInputError(f"{option} {short!r}: {count:,} values, at most "
                             f"{MAX_SWEEP_VALUES} (each is a simulated point)",
                             hint=f"give {option} fewer values, e.g. 1..1024 (powers of two).")
    if kind == "..":
        lo, hi = numbers
        values = [v for v in (2**i for i in range(hi.bit_length() + 1)) if lo <= v <= hi]
    else:
        values = list(range(numbers[0], numbers[1] + 1)) if kind == "-" else numbers
    if not values:
        raise UserInputError(f"{option} {short!r}: the range holds no value",
                             hint=f"write {option} LOW-HIGH with LOW <= HIGH, e.g. 1-8.")
    return values


@click.command()
@click.argument("model_names", metavar="MODEL...", nargs=-1)
@click.option("--models", default=None, help="Comma-separated models (added to MODEL...).")
@click.option("--gpu", "gpu_name", required=True, help="Catalog GPU name.")
@click.option("--nodes", "nodes_text", default="1", show_default=True,
              help="Nodes per island (list).")
@click.option("--gpus-per-node", "gpn_text", default="8", show_default=True,
              help="GPUs per node (list, e.g. 4,8).")
@click.option("--seq-len", type=int, required=True, help="Sequence length in tokens.")
@click.option("--micro-batches", "mb_text", default="1..32", show_default=True,
              help="Micro-batches: 1..32 (powers of two), 1-8 or 1,2,4.")
@click.option("--accum", type=int, default=1, show_default=True,
              help="Gradient-accumulation micro-steps k.")
@click.option("--ac", type=CheckpointParam(), default=None,
              help="Activation checkpointing (default: the recipe's).")
@click.option("--profile", "profile_name", default=None, help="Hardware profile name or YAML path.")
@click.option("--plot", "plot_path", type=_PATH, default=None,
              help="Figure 4 PNG here; figure 5 (throughput vs runtime) next to it as "
                   "*_throughput.png.")
@click.option("--timelines", "timeline_path", type=_PATH, default=None,
              help="Figure 3 PNG: step timelines of the first model/island at up to "
                   "4 micro-batches.")
@recipe_options_no_ac
@format_option()
@wide_option()
def sweep(model_names: tuple[str, ...], models: str | None, gpu_name: str, nodes_text: str,
          gpn_text: str, seq_len: int, mb_text: str, accum: int, ac: str | None,
          profile_name: str | None, plot_path: Path | None, timeline_path: Path | None, fmt: str,
          wide: bool, recipe_name: str, **recipe_flags: Any) -> None:
    """Sweep micro-batch sizes: iteration time, throughput and where compute-bound begins."""

    names = list(model_names) + [m.strip() for m in (models or "").split(",") if m.strip()]
    if not names:
        raise UserInputError("no model given", hint="pass MODEL... or --models A,B,C.")
    micro_batches = _int_list("--micro-batches", mb_text)
    recipe = recipe_from_options(recipe_name, ac=ac, **recipe_flags)
    result = api.sweep(names, gpu_name=gpu_name, nodes=_int_list("--nodes", nodes_text),
                       gpus_per_node=_int_list("--gpus-per-node", gpn_text), seq_len=seq_len,
                       micro_batches=micro_batches, accum=accum, profile_name=profile_name,
                       recipe=recipe)
    table = result.table
    outputs = _sweep_plots(table, result.workloads[0], micro_batches, plot_path, timeline_path)
    if fmt == "json":
        emit_json({"points": table.to_dict(orient="records"), "summary": result.summary,
                   "outputs": outputs, "recipe": recipe.to_dict()})
    elif fmt == "csv":
        emit_records(table, "csv")
    elif not wide:
        _sweep_view(table.to_dict(orient="records"), result.summary, gpu_name=gpu_name,
                    seq_len=seq_len)
        for path in outputs:
            echo_wrapped(f"wrote {path}")
    else:
        emit_table(table.drop(columns=["nodes", "gpus_per_node"]), title="micro-batch sweep")
        echo_wrapped(f"recipe: {recipe.summary()}")
        import pandas as pd  # lazy: `predict` starts without pandas (issue 29)

        emit_table(pd.DataFrame(result.summary), title="regime transitions")
        for path in outputs:
            click.echo(f"wrote {path}")


def _sweep_view(points: list[dict[Any, Any]], summary: list[dict[str, Any]], *, gpu_name: str,
                seq_len: int) -> None:
    """Answer first: per model and GPU count the fastest micro-batch that fits (time per step,
    tok/s/GPU, bound) and the profile's provenance, then the sweep as a compact table
    (`--wide`: every column)."""
    several = len({p["model"] for p in points}) > 1
    for row in summary:
        fitting = [p for p in points if p["model"] == row["model"] and p["gpus"] == row["gpus"]
                   and p["fits"]]
        head = f"{row['model']} on {row['gpus']} {gpu_name}, S {seq_len:,}: "
        if not fitting:
            echo_wrapped(head + "no micro-batch of the sweep fits the GPU's memory")
            continue
        best = max(fitting, key=lambda p: p["tokens_per_s_per_gpu"])
        echo_wrapped(head + f"best fitting micro-batch {best['micro_batch']}: "
                     f"{compact_value('step_time_s', best['step_time_s'])} per step, "
                     f"{format_number(best['tokens_per_s_per_gpu'])} tok/s/GPU, "
                     f"{best['bound']}-bound; largest that fits {row['max_micro_batch']}"
                     + (f", compute-bound from m {row['transition_micro_batch']}"
                        if row.get("transition_micro_batch") else ""))
    provenances = sorted({str(r.get("provenance")) for r in summary if r.get("provenance")})
    echo_wrapped(f"profile of {gpu_name}: {', '.join(provenances) or 'unknown'}")
    if "prior" in provenances:
        echo_wrapped(prior_warning(gpu_name))
    click.echo("")
    rows = []
    for p in points:
        row = {"model": str(p["model"])} if several else {}
        row.update({"GPUs": str(p["gpus"]), "m": str(p["micro_batch"]),
                    "step": compact_value("step_time_s", p["step_time_s"]),
                    "rel. step": format_number(p["relative_step_time"], digits=3),
                    "tok/s/GPU": format_number(p["tokens_per_s_per_gpu"]),
                    "compute idle": format_percent(p["compute_idle_frac"]),
                    "bound": str(p["bound"]), "fits": "yes" if p["fits"] else "no"})
        rows.append(row)
    emit_compact(rows)
    click.echo("every column and the regime transitions: --wide or --format json")


def _sweep_plots(table: Any, first: Workload, micro_batches: list[int], plot_path: Path | None,
                 timeline_path: Path | None) -> list[str]:


    out = []
    if plot_path:
        out.append(str(trace.plot_sweep(table, plot_path)))
        out.append(str(trace.plot_throughput(
            table, plot_path.with_name(plot_path.stem + "_throughput.png"))))
    if timeline_path:
        panels = []
        for m in micro_batches[:4]:
            step = simulate_inner_step(replace(first, micro_batch=m))
            panels.append((f"micro-batch {m}: {step.step_time_s:.3g} s, "
                           f"compute idle {step.compute_idle_s:.3g} s",
                           trace.schedule_spans(step.schedule)))
        out.append(str(trace.plot_timelines(panels, timeline_path, title=f"{first.model.name} on "
                                            f"{first.island.num_gpus} x {first.gpu.name}")))
    return out
