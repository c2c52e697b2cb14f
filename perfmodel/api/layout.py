"""`shardmeter layout`: the valid layouts of one island ranked by throughput, and why a named
layout ranks where it does (issue 25).

For an island (n nodes of g GPUs) and a global batch of B sequences, every (layout,
checkpointing mode, micro-batch m) of `perfmodel.sim.layouts` whose data-parallel ranks can take
the batch in whole micro-steps — B = k·m·dp for an admissible k — is a way to run the job; each
(layout, mode) is ranked by its best m. Its figures are `perfmodel.api.predict`'s for that
(layout, mode, m, k) (the same graph, so `predict` with those flags prints the same numbers);
the ranking itself reads the affine rows, and only the entries shown are simulated in full
(bubble, exposed communication, worst stage). A layout outside the enumerated space can still be
explained (`explain`): it is priced the same way and placed in the ranking.
Checked by: tests/test_layout_command.py (entries equal `predict`; the order is by throughput;
explain of the best is rank 1 with gap 0; a layout that cannot run or does not fit says why).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pandas as pd

from perfmodel.api.predict import predict
from perfmodel.api.workload import OuterSpec, WorkloadSpec, positive, resolve_workload
from perfmodel.sim.layouts import IslandLayouts, Rejected, island_layout_rows
from perfmodel.spec.errors import InfeasibleError, UserInputError
from perfmodel.spec.layout import PP_SCHEDULES, ParallelLayout, with_layout_fields
from perfmodel.spec.layout_space import LayoutSpace
from perfmodel.spec.recipe import TrainingRecipe, canonical_ac

DEFAULT_TOP = 10
"""Entries `rank_layouts` simulates in full and returns by default."""
BANDED = ("step_time_s", "tokens_per_s_per_gpu", "mfu", "peak_gib")
"""Figures of an entry that carry `predict`'s p10 / p90 beside them (issue 27)."""
RECORD_KEYS = ("rank", "layout", "layout_text", "ac", "micro_batch", "accum",
               *(f"{k}{q}" for k in BANDED for q in ("", "_p10", "_p90")), "p_fits", "bound",
               "bubble_fraction", "exposed_comm_s", "worst_stage", "interval_group", "why")
"""Keys of one ranked entry (`predict`'s names where `predict` has them)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LayoutRequest:
    """One island and one global batch to lay out."""

    workload: WorkloadSpec
    """Model, GPU, island (nodes x GPUs per node), sequence length, profile and recipe
    (micro_batch and accum are chosen here, not read)."""
    global_batch_seqs: int
    """Sequences per optimizer step B: k·m·dp = B."""
    parallel: Mapping[str, Any] | None = field(default_factory=dict)
    """The layouts to consider (`perfmodel.spec.layout_space`; empty: every default layout)."""
    checkpointing: Sequence[str] | None = None
    """Checkpointing modes to consider (None: every mode, none, op-sac, layer:2 and full)."""
    top: int = DEFAULT_TOP
    """Entries to return (simulated in full)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LayoutRanking:
    """Ranked layouts of one island."""

    entries: list[dict[str, Any]]
    """The best `top` (RECORD_KEYS each)."""
    total: int
    """(layout, mode) pairs that can run the batch on the island."""
    rejected: list[dict[str, str]]
    """(layout, mode) pairs that cannot, with why (memory, batch)."""
    candidates: int
    """(layout, mode) pairs considered."""
    table: pd.DataFrame = field(repr=False)
    """Every (layout, mode) with its best m and k, ranked (the affine rows' figures)."""
    closest: Rejected | None = None
    """The rejected (layout, mode) nearest to running: the least memory over (a batch limit,
    0 bytes over, first); None when none was rejected for memory or the batch."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Explanation:
    """Where a named layout ranks, and what beating the best would take."""

    entry: dict[str, Any] | None
    """Its record (None when it cannot run the batch on the island)."""
    rank: int | None
    """Its 1-based rank among the ranked layouts (None: it cannot run)."""
    of: int
    """How many layouts it is ranked among."""
    best: dict[str, Any]
    """The best entry."""
    gap_pct: float | None
    """How much more throughput the best has, percent (0 when it is the best)."""
    lines: list[str]
    """The explanation, one sentence a line."""


DEFAULT_MODES = ("none", "op-sac", "layer:2", "full")


def _candidates(request: LayoutRequest) -> tuple[Any, IslandLayouts, TrainingRecipe]:
    w = request.workload
    workload = resolve_workload(w.model_name, gpu_name=w.gpu_name, nodes=w.nodes,
                                gpus_per_node=w.gpus_per_node, seq_len=w.seq_len,
                                micro_batch=1, accum=1, profile_name=w.profile_name,
                                recipe=replace(w.recipe or TrainingRecipe(),
                                               parallel=ParallelLayout()))
    positive("--global-batch", request.global_batch_seqs, limit="global_batch_seqs")
    space = LayoutSpace.parse(request.parallel, list(request.checkpointing or DEFAULT_MODES),
                              source="layout")
    rows = island_layout_rows(workload.model, workload.profile, workload.island,
                              seq_len=w.seq_len, space=space, recipe=workload.recipe,
                              global_batch_seqs=request.global_batch_seqs)
    return workload, rows, workload.recipe


def _admissible_k(row: Any, batch: int) -> int | None:
    """The k with k·m·dp = batch if the row admits it."""
    per = int(row["micro_batch"]) * int(row["dp"])
    if batch % per:
        return None
    k = batch // per
    cap = int(row["max_accum"]) or math.inf
    if not bool(row["accum_fits"]) and k > 1:
        return None
    if k < int(row["min_accum"]) or k > cap or k % int(row["accum_multiple"]):
        return None
    return k


def _ranked(rows: pd.DataFrame, batch: int, world: int, seq_len: int) -> pd.DataFrame:
    if rows.empty:
        return rows.assign(accum=[], step_time_s=[], tokens_per_s_per_gpu=[])
    ks = pd.Series([_admissible_k(r, batch) for _, r in rows.iterrows()], index=rows.index,
                   dtype="float64")
    data = rows.assign(accum=ks).dropna(subset=["accum"])
    if data.empty:
        return data.assign(step_time_s=[], tokens_per_s_per_gpu=[])
    data = data.assign(accum=data["accum"].astype(int))
    data = data.assign(step_time_s=data["step_fixed_s"] + data["accum"] * data["microstep_s"])
    data = data.assign(tokens_per_s_per_gpu=batch * seq_len / data["step_time_s"] / world)
    keys = ["layout", "ac"]
    best = data.sort_values(["tokens_per_s_per_gpu", "memory_gib"],
                            ascending=[False, True]).drop_duplicates(keys)
    return best.reset_index(drop=True)


def rank_layouts(request: LayoutRequest) -> LayoutRanking:
    """Every (layout, mode) that can run the batch on the island, best first (module doc)."""
    if request.top < 1:
        raise UserInputError(f"--top {request.top}: must be >= 1", hint="pass --top 1 or more.")
    workload, rows, recipe = _candidates(request)
    ranked = _ranked(rows.rows, request.global_batch_seqs, workload.island.num_gpus,
                     workload.seq_len)
    # closest first (the least memory over, or a batch limit), so the first names the nearest fix
    nearest = sorted(rows.rejected, key=lambda r: r.over_bytes)
    rejected = [{"layout": r.layout.describe(), "ac": r.ac, "why": r.reason} for r in nearest]
    unmatched = _unmatched(rows.rows, ranked, request.global_batch_seqs)
    entries = [_entry(request, recipe, row, rank + 1)
               for rank, (_, row) in enumerate(ranked.head(request.top).iterrows())]
    return LayoutRanking(entries=entries, total=len(ranked), rejected=rejected + unmatched,
                         candidates=rows.candidates, table=ranked,
                         closest=nearest[0] if nearest else None)


def require_a_layout(request: LayoutRequest, ranking: LayoutRanking) -> None:
    """An InfeasibleError (exit 1) when no layout runs the batch on the island, naming the
    closest candidate's binding limit (GPU memory when it is over, else the global batch)."""
    if ranking.total:
        return
    w, closest = request.workload, ranking.closest
    raise InfeasibleError(
        f"no layout of {w.nodes} x {w.gpus_per_node} {w.gpu_name} runs a batch of "
        f"{request.global_batch_seqs} sequences of {w.model_name}"
        + (f"; the closest, {closest.layout.describe()} ac {closest.ac}: {closest.reason}"
           if closest else ""),
        binding="GPU memory" if closest and closest.over_bytes > 0 else "global batch",
        hint="more GPUs (--nodes), a GPU with more memory (--gpu), more checkpointing (--ac "
             "full) or another --global-batch; `--format json` lists why each layout cannot.")


def _unmatched(rows: pd.DataFrame, ranked: pd.DataFrame, batch: int) -> list[dict[str, str]]:
    """(layout, mode) pairs with rows but no m, k that make the batch exactly."""
    if rows.empty:
        return []
    have = set(zip(ranked.get("layout", []), ranked.get("ac", []), strict=False))
    out = []
    for (layout, ac), group in rows.groupby(["layout", "ac"], sort=False):
        if (layout, ac) in have:
            continue
        dp = int(group["dp"].iloc[0])
        out.append({"layout": str(layout), "ac": str(ac),
                    "why": f"no micro-batch m and admissible k give k x m x {dp} "
                           f"data-parallel ranks = {batch} sequences"})
    return out


def _entry(request: LayoutRequest, recipe: TrainingRecipe, row: Any, rank: int) -> dict[str, Any]:
    """The full prediction of a ranked row (predict's figures and names)."""
    w = request.workload
    layout = ParallelLayout(
        tp=int(row["tp"]), pp=int(row["pp"]), cp=int(row["cp"]),
        dp_replicate=int(row["dp_replicate"]), dp_shard=int(row["dp_shard"]),
        virtual_stages=int(row["virtual_stages"]),
        pp_schedule=str(row["pp_schedule"]) or "1f1b",
        sequence_parallel=bool(row["sequence_parallel"]) or int(row["tp"]) == 1,
        async_tp=bool(row["async_tp"]), ep=int(row["ep"]) if "ep" in row else 1)
    spec = replace(w, micro_batch=int(row["micro_batch"]), accum=int(row["accum"]),
                   recipe=replace(recipe, parallel=layout, ac=str(row["ac"])))
    p = predict(spec, OuterSpec())
    rec = p.record
    bubble = float(rec.get("bubble_fraction", 0.0))
    return {
        "rank": rank, "layout": layout.to_dict(), "layout_text": layout.describe(),
        "ac": str(row["ac"]), "micro_batch": int(row["micro_batch"]),
        "accum": int(row["accum"]),
        **{f"{k}{q}": rec[f"{k}{q}"] for k in BANDED for q in ("", "_p10", "_p90")},
        "p_fits": rec["p_fits"], "bound": rec["bound"], "bubble_fraction": bubble,
        "exposed_comm_s": rec["exposed_comm_s"], "worst_stage": rec.get("worst_stage", ""),
        "interval_group": rec["interval_group"], "why": _why(rec, bubble),
    }


def _why(rec: Mapping[str, Any], bubble: float) -> str:
    """One line: what the step time goes to."""
    step = float(rec["step_time_s"])
    parts = [f"{rec['bound']}-bound" if rec["bound"] != "mixed" else "mixed"]
    if bubble > 0.005:
        parts.append(f"pipeline bubble {bubble:.0%}")
    exposed = float(rec["exposed_comm_s"]) / step if step else 0.0
    if exposed > 0.005:
        parts.append(f"exposed communication {exposed:.0%}")
    parts.append(f"{rec['peak_gib']:.0f}/{rec['usable_memory_gib']:.0f} GiB")
    return "; ".join(parts)


def parse_named_layout(text: str) -> tuple[ParallelLayout, str | None]:
    """'tp=8,pp=16,dp_shard=128[,dp_replicate=1,cp=1,v=1,schedule=1f1b,sp=true,ac=full]' ->
    (layout, checkpointing mode or None); UserInputError naming the bad item."""
    fields: dict[str, Any] = {}
    ac = None
    aliases = {"v": "virtual_stages", "schedule": "pp_schedule", "sp": "sequence_parallel"}
    for item in (p.strip() for p in text.split(",") if p.strip()):
        key, sep, value = item.partition("=")
        key = aliases.get(key.strip(), key.strip())
        value = value.strip()
        if not sep or not value:
            raise UserInputError(f"--explain: {item!r} is not key=value",
                                 hint="write e.g. tp=8,pp=16,dp_shard=128,ac=full.")
        if key == "ac":
            ac = canonical_ac(value, where="--explain ac")
        elif key == "pp_schedule":
            if value not in PP_SCHEDULES:
                raise UserInputError(f"--explain: schedule {value!r}",
                                     hint=f"use one of {', '.join(PP_SCHEDULES)}.")
            fields[key] = value
        elif key in ("sequence_parallel", "async_tp"):
            if value.lower() not in ("true", "false"):
                raise UserInputError(f"--explain: {key}={value!r}", hint="write true or false.")
            fields[key] = value.lower() == "true"
        elif key in ("tp", "pp", "cp", "dp_shard", "dp_replicate", "virtual_stages", "ep"):
            try:
                fields[key] = int(value)
            except ValueError:
                raise UserInputError(f"--explain: {key}={value!r} is not an integer",
                                     hint=f"give {key} as a whole number.") from None
        else:
            raise UserInputError(f"--explain: unknown key {key!r}",
                                 hint="use tp, pp, cp, dp_shard, dp_replicate, ep, v, schedule, "
                                      "sp, async_tp, ac.")
    return with_layout_fields(ParallelLayout(), **fields), ac


def explain(request: LayoutRequest, named: str) -> Explanation:
    """Where the layout `named` (`parse_named_layout`) ranks among `rank_layouts` of the same
    island and batch, and what it would take to beat the best."""
    layout, ac = parse_named_layout(named)
    workload, rows, recipe = _candidates(request)
    world = workload.island.num_gpus
    layout = layout.resolve(world)
    layout.check_model(num_layers=workload.model.num_layers, num_heads=workload.model.num_heads,
                       num_kv_heads=workload.model.num_kv_heads,
                       intermediate_size=workload.model.intermediate_size,
                       seq_len=workload.seq_len,
                       num_experts=workload.model.num_experts)
    mode = ac or recipe.ac
    own_space = LayoutSpace(tp=(layout.tp,), pp=(layout.pp,), cp=(layout.cp,),
                            dp_replicate=(layout.dp_replicate,),
                            virtual_stages=(layout.virtual_stages,),
                            schedules=(layout.pp_schedule,),
                            sequence_parallel=(layout.sequence_parallel,),
                            async_tp=(layout.async_tp,), checkpointing=(mode,))
    mine = island_layout_rows(workload.model, workload.profile, workload.island,
                              seq_len=workload.seq_len, space=own_space, recipe=recipe,
                              global_batch_seqs=request.global_batch_seqs)
    everyone = pd.concat([rows.rows, mine.rows], ignore_index=True).drop_duplicates(
        subset=["layout", "ac", "micro_batch"])
    ranked = _ranked(everyone, request.global_batch_seqs, world, workload.seq_len)
    if ranked.empty:
        raise UserInputError("no layout of this island can run the batch",
                             hint="change the island size or the global batch.")
    best = _entry(request, recipe, ranked.iloc[0], 1)
    text = layout.describe()
    hit = ranked.index[(ranked["layout"] == text) & (ranked["ac"] == mode)]
    if len(hit) == 0:
        why = ([r.reason for r in mine.rejected] or _unmatched_reasons(mine.rows, request))
        lines = [f"{text} with ac {mode} cannot run this batch on {world} GPUs: "
                 + (why[0] if why else "it is not a valid layout here") + "."]
        lines.append(f"The best is {best['layout_text']} (ac {best['ac']}, m "
                     f"{best['micro_batch']}, k {best['accum']}): "
                     f"{best['tokens_per_s_per_gpu']:.0f} tokens/s/GPU, MFU {best['mfu']:.1%}.")
        return Explanation(entry=None, rank=None, of=len(ranked), best=best, gap_pct=None,
                           lines=lines)
    rank = int(hit[0]) + 1
    entry = _entry(request, recipe, ranked.loc[hit[0]], rank)
    gap = (best["tokens_per_s_per_gpu"] / entry["tokens_per_s_per_gpu"] - 1.0) * 100.0
    lines = [f"{text} with ac {mode} ranks {rank} of {len(ranked)}: "
             f"{entry['tokens_per_s_per_gpu']:.0f} tokens/s/GPU, MFU {entry['mfu']:.1%} "
             f"(m {entry['micro_batch']}, k {entry['accum']}; {entry['why']})."]
    searched = set(rows.rows["layout"]) | {r.layout.describe() for r in rows.rejected}
    if text not in searched:  # ranked among the searched layouts, which hold none like it
        lines.append("It lies outside the layouts searched (the default space or the limits "
                     "given), so layouts like it were not ranked: widen the search (e.g. "
                     "--max-virtual-stages, --max-tp, --max-pp) to compare them.")
    if rank == 1:
        lines.append("It is the best layout of the ones considered.")
    else:
        target = entry["step_time_s"] * entry["tokens_per_s_per_gpu"] / best[
            "tokens_per_s_per_gpu"]
        lines.append(f"The best, {best['layout_text']} with ac {best['ac']} (m "
                     f"{best['micro_batch']}, k {best['accum']}), is {gap:.1f} % faster "
                     f"({best['why']}).")
        lines.append(f"To beat it, this layout's step must fall from {entry['step_time_s']:.3f} "
                     f"s to below {target:.3f} s" + _difference(entry, best) + ".")
    return Explanation(entry=entry, rank=rank, of=len(ranked), best=best, gap_pct=gap,
                       lines=lines)


def _unmatched_reasons(rows: pd.DataFrame, request: LayoutRequest) -> list[str]:
    return [u["why"] for u in _unmatched(rows, rows.iloc[0:0], request.global_batch_seqs)]


def _difference(entry: Mapping[str, Any], best: Mapping[str, Any]) -> str:
    """What the step loses to, compared with the best (bubble, exposed communication)."""
    notes = []
    if entry["bubble_fraction"] - best["bubble_fraction"] > 0.01:
        notes.append(f"its pipeline bubble is {entry['bubble_fraction']:.0%} against "
                     f"{best['bubble_fraction']:.0%}")
    own = entry["exposed_comm_s"] / entry["step_time_s"]
    theirs = best["exposed_comm_s"] / best["step_time_s"]
    if own - theirs > 0.01:
        notes.append(f"its exposed communication is {own:.0%} of the step against {theirs:.0%}")
    return (": " + "; ".join(notes)) if notes else ""
