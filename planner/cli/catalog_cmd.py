"""Commands `catalog` (list models, GPUs, links, price lists; import SkyPilot prices) and
`memory` (per-GPU memory)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import pandas as pd

from perfmodel import api
from perfmodel.api.models import REPORT_SEQ_LEN, catalog_models, parameter_report
from perfmodel.api.prices import ImportPricesRequest, import_prices
from perfmodel.numbers import format_number, format_usd
from perfmodel.spec import catalog as cat
from perfmodel.spec.errors import UserInputError
from perfmodel.spec.formulas import GIB
from perfmodel.spec.layout import ParallelLayout
from planner.cli.common import (
    SCHEMA_VERSION,
    allow_oom_option,
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
    terminal_width,
    wide_option,
)
from planner.cli.recipe_opts import layout_options, recipe_from_options, recipe_options

_SOURCE_CHARS = 60
"""Sources are long; the table shows their start, json/csv the whole text."""


@click.group()
def catalog() -> None:
    """List catalog models, GPUs, links and price lists."""


def _short(text: str, fmt: str) -> str:
    if fmt != "table" or len(text) <= _SOURCE_CHARS:
        return text
    return text[: _SOURCE_CHARS - 1] + "…"


@catalog.command("models")
@click.option("--config", "configs", multiple=True, metavar="PATH",
              help="Report the parameters of this Hugging Face config.json (or catalog model) "
                   "instead of listing the catalog: total and active parameters, family, "
                   "components, FLOPs per token; mixture-of-experts models included. Repeatable.")
@click.option("--seq-len", type=int, default=REPORT_SEQ_LEN, show_default=True,
              help="Sequence length of the reported FLOPs per token (with --config).")
@wide_option()
@format_option()
def models_cmd(configs: tuple[str, ...], seq_len: int, wide: bool, fmt: str) -> None:
    """Catalog models with their shapes, total and active parameter counts and family; with
    --config, the parameter report of each given config.json."""
    if not configs:
        records = catalog_models()
        if fmt == "table" and not wide:
            _emit_models_answer(records)
            return
        emit_records(records, fmt, title="models")
        return
    records = [parameter_report(path, seq_len=seq_len).record for path in configs]
    if len(records) == 1:
        emit_mapping(records[0], fmt, title=f"parameters of {records[0]['model']}")
    else:
        emit_records(records, fmt, title="parameters")


def _billions(count: float) -> str:
    return format_number(count / 1e9, digits=3)


def _emit_models_answer(records: list[dict[str, Any]]) -> None:
    """The answer first: how many models of which sizes, then one row per model."""
    sizes = [float(r["total_params"]) for r in records]
    families = sorted({str(r["model_family"]) for r in records})
    echo_wrapped(f"{len(records)} catalog models, {_billions(min(sizes))} B to "
                 f"{_billions(max(sizes))} B parameters; families: {', '.join(families)}")
    click.echo("")
    emit_compact([{"model": str(r["name"]), "family": str(r["model_family"]),
                   "layers": format_number(int(r["num_layers"])),
                   "hidden": format_number(int(r["hidden_size"])),
                   "heads/kv": f"{r['num_heads']}/{r['num_kv_heads']}",
                   "params (B)": _billions(float(r["total_params"])),
                   "active (B)": _billions(float(r["active_params"]))} for r in records],
                 width=terminal_width())
    click.echo("")
    click.echo("every column: --wide or --format json")


@catalog.command("gpus")
@wide_option()
@format_option()
def gpus_cmd(wide: bool, fmt: str) -> None:
    """Catalog GPUs: memory, usable memory, bf16 TFLOP/s, links."""
    records = [{
        "name": g.name, "memory_gib": g.memory_bytes / GIB,
        "usable_memory_gib": g.usable_memory_bytes / GIB,
        "bf16_tflops": g.bf16_flops_per_s / 1e12, "hbm_tb_s": g.hbm_bytes_per_s / 1e12,
        "intra_node_link": g.intra_node_link, "inter_node_link": g.inter_node_link,
        "nics_per_node": g.nics_per_node, "max_gpus_per_node": g.max_gpus_per_node,
        "source": _short(g.source, fmt),
    } for g in cat.load_gpus().values()]
    if fmt == "table" and not wide:
        _emit_gpus_answer(records)
        return
    emit_records(records, fmt, title="gpus")


def _emit_gpus_answer(records: list[dict[str, Any]]) -> None:
    """The answer first: how many GPUs with how much memory, then one row per GPU."""
    usable = [float(r["usable_memory_gib"]) for r in records]
    echo_wrapped(f"{len(records)} catalog GPUs, {format_number(min(usable))} to "
                 f"{format_number(max(usable))} GiB usable each; TFLOP/s: dense bf16; "
                 "GPUs per node and sources: --wide")
    click.echo("")
    emit_compact([{"gpu": str(r["name"]),
                   "usable GiB": format_number(float(r["usable_memory_gib"])),
                   "TFLOP/s": format_number(float(r["bf16_tflops"])),
                   "HBM TB/s": format_number(float(r["hbm_tb_s"])),
                   "links (node/fabric)": f"{r['intra_node_link']}/{r['inter_node_link']}"}
                  for r in records],
                 width=terminal_width())
    click.echo("")
    click.echo("every column: --wide or --format json")


@catalog.command("links")
@wide_option()
@format_option()
def links_cmd(wide: bool, fmt: str) -> None:
    """Catalog links: prior latency and bus bandwidth, with their source."""
    records = [{
        "name": link.name, "kind": link.kind, "latency_us": link.latency_s * 1e6,
        "busbw_gb_s": link.busbw_bytes_per_s / 1e9,
        "line_rate_gb_s": link.line_rate_bytes_per_s / 1e9, "per_nic": link.per_nic,
        "source": _short(link.source, fmt),
    } for link in cat.load_links().values()]
    if fmt == "table" and not wide:
        echo_wrapped(f"{len(records)} catalog links, prior latency and bus bandwidth (a "
                     "profile's fit replaces them); sources: --wide")
        click.echo("")
        emit_compact([{"link": link.name, "kind": link.kind,
                       "latency µs": format_number(link.latency_s * 1e6),
                       "busbw GB/s": format_number(link.busbw_bytes_per_s / 1e9),
                       "line rate GB/s": format_number(link.line_rate_bytes_per_s / 1e9),
                       "per NIC": "yes" if link.per_nic else "no"}
                      for link in cat.load_links().values()], width=terminal_width())
        click.echo("")
        click.echo("every column: --wide or --format json")
        return
    emit_records(records, fmt, title="links")


@catalog.command("prices")
@click.option("--list", "list_name", default=None, help="Only this price list (file stem).")
@wide_option()
@format_option()
def prices_cmd(list_name: str | None, wide: bool, fmt: str) -> None:
    """Price-list rows: provider, GPU, tier, USD per GPU-hour, date."""
    lists = cat.load_price_lists()
    if list_name is not None:
        rows = cat.price_rows(list_name)  # unknown list: CatalogError with did-you-mean
        lists = {k: v for k, v in lists.items() if v is rows}
    records = [{
        "list": name, "provider": r.provider, "gpu": r.gpu_type, "tier": r.tier,
        "usd_per_gpu_hour": r.usd_per_gpu_hour, "as_of": r.as_of,
        "gpus_per_node": r.gpus_per_node, "offer": r.offer,
    } for name, rows in lists.items() for r in rows]
    if fmt == "table" and not wide:
        _emit_prices_answer(records)
        return
    emit_records(records, fmt, title="prices")


PRICE_ROWS_SHOWN = 30
"""Up to this many price rows the compact view lists them; beyond, one row per GPU and tier."""


def _emit_prices_answer(records: list[dict[str, Any]]) -> None:
    """The answer first: the cheapest offer per GPU; then every row when they are few, else the
    cheapest and the number of offers per GPU and tier (every row: --wide or --list NAME)."""
    if not records:
        click.echo("no price rows")
        return
    cheapest: dict[str, dict[str, Any]] = {}
    for r in records:
        best = cheapest.get(r["gpu"])
        if best is None or r["usd_per_gpu_hour"] < best["usd_per_gpu_hour"]:
            cheapest[r["gpu"]] = r
    lists = len({r["list"] for r in records})
    echo_wrapped(f"{len(records)} prices from {lists} price lists for {len(cheapest)} GPUs; "
                 "cheapest per GPU-hour: " + ", ".join(
                     f"{gpu} {format_usd(r['usd_per_gpu_hour'])} ({r['provider']}, {r['tier']})"
                     for gpu, r in sorted(cheapest.items(),
                                          key=lambda kv: kv[1]["usd_per_gpu_hour"])[:3]))
    click.echo("")
    if len(records) <= PRICE_ROWS_SHOWN:
        emit_compact([{"provider": str(r["provider"]), "gpu": str(r["gpu"]),
                       "tier": str(r["tier"]), "$/GPU-h": format_usd(r["usd_per_gpu_hour"]),
                       "as of": str(r["as_of"])} for r in records], width=terminal_width())
        click.echo("")
        click.echo("every column: --wide or --format json")
        return
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault((str(r["gpu"]), str(r["tier"])), []).append(r)
    rows = []
    for (gpu, tier), offers in sorted(groups.items()):
        low = min(offers, key=lambda r: r["usd_per_gpu_hour"])
        high = max(float(r["usd_per_gpu_hour"]) for r in offers)
        rows.append({"gpu": gpu, "tier": tier, "offers": str(len(offers)),
                     "from $/GPU-h": format_usd(low["usd_per_gpu_hour"]),
                     "to $/GPU-h": format_usd(high), "cheapest": str(low["provider"])})
    emit_compact(rows, width=terminal_width())
    click.echo("")
    click.echo("every price row: --wide, --format csv, or --list NAME")
def _gpu_map(values: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    out = []
    for text in values:
        name, sep, gpu = text.partition("=")
        if not sep or not name.strip() or not gpu.strip():
            raise UserInputError(f"--gpu-map {text!r}: expected NAME=CATALOG_GPU",
                                 hint="write e.g. --gpu-map H100=H100-PCIe.")
        out.append((name.strip(), gpu.strip()))
    return tuple(out)


@catalog.command("import-prices")
@click.argument("vms_csv", metavar="VMS_CSV", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--region", default=None, help="Region to import (required if the file has several).")
@click.option("--as-of", "as_of", default=None, help="Snapshot date YYYY-MM-DD (default: today).")
@click.option("--cloud", default=None,
              help="Cloud name (default: the file's folder, as ~/.sky/catalogs/v7/<cloud>/).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Where to write the price list (default: catalogs/prices/"
                   "<cloud>-skypilot-<region>-<as_of>.csv).")
@click.option("--gpu-map", "gpu_map", multiple=True, metavar="NAME=CATALOG_GPU",
              help="Read a SkyPilot accelerator name as this catalog GPU (repeatable; default "
                   "readings: catalogs/skypilot_gpus.csv).")
@format_option()
def import_prices_cmd(vms_csv: Path, region: str | None, as_of: str | None, cloud: str | None,
                      output: Path | None, gpu_map: tuple[str, ...], fmt: str) -> None:
    """Write a dated price list from SkyPilot's catalog VMS_CSV (vms.csv with InstanceType,
    AcceleratorName, AcceleratorCount, Price, SpotPrice, Region, AvailabilityZone): on-demand
    and spot per GPU-hour of every GPU instance of one region."""
    result = import_prices(ImportPricesRequest(vms_csv=vms_csv, region=region, as_of=as_of,
                                               cloud=cloud, output_path=output,
                                               gpu_map=_gpu_map(gpu_map)))
    records = [{k: (_short(str(v), fmt) if k == "source" else v) for k, v in row.items()}
               for row in result.rows]
    emit_records(records, fmt, title=f"prices written to {result.path}")
    if result.skipped:
        click.echo("skipped accelerators without a catalog GPU: "
                   + ", ".join(f"{n} ({c} rows)" for n, c in sorted(result.skipped.items()))
                   + " (map them with --gpu-map)", err=True)


# ---- memory ---------------------------------------------------------------------------------

def _emit_memory(payload: dict[str, Any], fmt: str, *, wide: bool = False) -> None:
    if fmt == "json":
        emit_json({"schema_version": SCHEMA_VERSION, **payload})
        return
    if fmt == "csv":
        flat = {k: v for k, v in payload.items() if k != "breakdown_gib"}  # lists: emit_mapping
        flat.update({f"{k}_gib": v for k, v in payload["breakdown_gib"].items()})
        emit_mapping(flat, "csv")
        return
    if not wide:
        _emit_memory_answer(payload)
        return

    layout = ParallelLayout(**payload["layout"])
    rows = [{"component": k, "GiB": v} for k, v in payload["breakdown_gib"].items()]
    rows.append({"component": "peak", "GiB": payload["peak_gib"]})
    title = (f"{payload['model']} on {payload['num_gpus']} x {payload['gpu']} "
             f"({payload['nodes']} node(s) x {payload['gpus_per_node']}), S={payload['seq_len']}, "
             f"m={payload['micro_batch']}, k={payload['accum_steps']} ({payload['accum_mode']}), "
             f"ac={payload['ac']}, recipe {payload['recipe']}; peak at {payload['peak_phase']}")
    echo_wrapped(title)
    if not layout.is_default:
        echo_wrapped(f"layout: {layout.describe()}")
    echo_wrapped(f"{payload['model_family']} layout: {payload['total_params']:,} parameters "
               f"({payload['active_params']:,} active)"
               + (f", the text model of a {payload['text_model_of']} checkpoint"
                  if payload.get("text_model_of") else ""))
    emit_table(pd.DataFrame(rows))
    verdict = "fits" if payload["fits"] else "does NOT fit"
    echo_wrapped(f"peak {payload['peak_gib']:.2f} GiB {verdict} in "
               f"{payload['usable_memory_gib']:.2f} GiB usable; "
               f"largest micro-batch that fits: {payload['max_micro_batch']}")


def _emit_memory_answer(payload: dict[str, Any]) -> None:
    """The answer first: the verdict sentence, where the peak is, the profile, the nonzero
    components of the peak."""
    echo_wrapped(api.memory_answer(payload))
    echo_wrapped(f"peak at {payload['peak_phase']}; S={payload['seq_len']}, "
                 f"m={payload['micro_batch']}, k={payload['accum_steps']} "
                 f"({payload['accum_mode']}), ac={payload['ac']}, recipe {payload['recipe']}")
    echo_wrapped(f"{payload['model_family']}: {format_number(payload['total_params'])} parameters"
                 + (f" ({format_number(payload['active_params'])} active)"
                    if payload["active_params"] != payload["total_params"] else "")
                 + (f", the text model of a {payload['text_model_of']} checkpoint"
                    if payload.get("text_model_of") else ""))
    echo_wrapped(f"GPU profile {payload['profile']} ({payload['provenance']}); the memory model "
                 "is analytic and does not use it")
    click.echo("")
    peak = payload["peak_gib"]
    rows = [{"component": name.replace("_", " "), "GiB": format_number(gib),
             "% of peak": format_number(100 * gib / peak, digits=3) if peak else "-"}
            for name, gib in payload["breakdown_gib"].items() if gib > 0]
    rows.append({"component": "peak", "GiB": format_number(peak), "% of peak": "100"})
    emit_compact(rows, width=terminal_width())
    click.echo("")
    emit_interval_table(payload)
    click.echo("")
    click.echo("every field: --wide or --format json")


@click.command()
@click.argument("model_name", metavar="MODEL")
@click.option("--gpu", "gpu_name", required=True, help="Catalog GPU name.")
@click.option("--nodes", type=int, default=1, show_default=True, help="Nodes in the island.")
@click.option("--gpus-per-node", type=int, default=8, show_default=True, help="GPUs used per node.")
@click.option("--seq-len", type=int, required=True, help="Sequence length in tokens.")
@click.option("--micro-batch", type=int, default=1, show_default=True,
              help="Sequences per data-parallel rank per micro-step.")
@click.option("--accum", "accum_steps", type=int, default=1, show_default=True,
              help="Micro-steps k per optimizer step (gradient accumulation).")
@recipe_options
@layout_options
@allow_oom_option()
@wide_option()
@interval_options
@format_option()
def memory(model_name: str, gpu_name: str, nodes: int, gpus_per_node: int, seq_len: int,
           micro_batch: int, accum_steps: int, recipe_name: str, allow_oom: bool, wide: bool,
           fmt: str, interval_level: float | None, fit_probability: float | None,
           **flags: Any) -> None:
    """Per-GPU memory of training MODEL (catalog name or config.json path) as the training
    recipe trains it (default torchtitan, FSDP over every GPU unless a layout is given), at
    k = --accum micro-steps. A peak beyond the GPU's usable memory exits 1 with the smallest
    fix that fits (computed), unless --allow-oom."""
    try:
        report = api.memory_report(api.WorkloadSpec(
            model_name=model_name, gpu_name=gpu_name, nodes=nodes, gpus_per_node=gpus_per_node,
            seq_len=seq_len, micro_batch=micro_batch, accum=accum_steps,
            recipe=recipe_from_options(recipe_name, **flags)), allow_oom=allow_oom,
            interval_level=interval_level, fit_probability=fit_probability)
    except api.DoesNotFitError as err:
        echo_does_not_fit(err.answer, fmt)
        raise
    _emit_memory(report.record, fmt, wide=wide)
