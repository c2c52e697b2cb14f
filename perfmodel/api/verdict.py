"""The verdict of a prediction or a memory report: its one-line answer and, when the step does
not fit the GPU's usable memory, where it binds and the smallest change that fits.

Claim: every fix `memory_fixes` returns fits: each is a candidate configuration evaluated with the
same memory model the prediction used (`memory_breakdown`; for pp > 1 the worst pipeline rank of
`pipeline_memory`), and it is returned only when that peak is within the GPU's usable memory.
Why: a fix that is guessed ("add nodes") sends the user round a loop; a fix computed by the model
can be copied and run. The work is bounded: at most one candidate per halving of the micro-batch,
the checkpointing modes that recompute more than the current one, two doublings each of tp and
pp, NODE_DOUBLINGS doublings of the nodes and the catalog GPUs with more usable memory; each
candidate costs one analytic memory evaluation (no simulation).
Checked by: tests/test_terminal.py (a non-fitting predict and memory exit 1 with "To fix:", and
the suggested flags, applied and run, fit).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from perfmodel.api.workload import WorkloadSpec, resolve_placement
from perfmodel.costs.memory import memory_breakdown, pipeline_memory
from perfmodel.numbers import format_duration, format_number, format_percent, format_rate
from perfmodel.sim.fsdp import resolve_recipe
from perfmodel.spec import catalog
from perfmodel.spec.errors import InfeasibleError, ShardMeterError
from perfmodel.spec.formulas import GIB
from perfmodel.spec.layout import ParallelLayout
from perfmodel.spec.recipe import TrainingRecipe

logger = logging.getLogger(__name__)

AC_LADDER = ("none", "attn", "op-sac", "full")
"""Checkpointing modes from the least to the most recomputation: a fix tries only the modes after
the current one (a `layer:N` policy sits between op-sac and full)."""
NODE_DOUBLINGS = 6
"""The node-count fix tries 2x, 4x, ... up to 64x the nodes (and within LIMITS['step_nodes'])."""
DEGREE_DOUBLINGS = 2
"""The tp and pp fixes try 2x and 4x the current degree (tp within one node)."""
FIX_ORDER = ("micro-batch", "checkpointing", "tensor parallel", "pipeline parallel", "nodes",
             "gpu", "smaller batch", "nodes and layout")
"""The kinds of fix from the smallest change to the largest: the same GPUs and batch first (a
smaller micro-batch with more accumulation, more recomputation, more model parallelism), then
more GPUs, then different hardware, then (pipelines) fewer micro-batches per step, which changes
the batch: torch's pipeline runtime holds receive buffers for every micro-batch of the step, so
a pipeline's peak grows with k whatever carries the batch; only when no single change fits, the
fewest nodes (2x ... 64x) with one layout change (a checkpointing mode, tp or pp 2x or 4x, or tp
4x with full checkpointing). The first fix found is the one `To fix:` names."""


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryFix:
    """One change to a configuration that makes its peak fit the GPU's usable memory."""

    kind: str
    """Which kind of change (one of FIX_ORDER)."""
    flags: tuple[str, ...]
    """The command-line flags and values that apply it, e.g. ('--ac', 'full')."""
    peak_gib: float
    """Peak GiB per GPU of the changed configuration (its worst pipeline rank for pp > 1)."""
    usable_memory_gib: float
    """Usable GiB per GPU of the changed configuration's GPU."""

    def describe(self) -> str:
        """e.g. '--ac full (checkpointing: peak 30.12 of 37.5 GiB)'."""
        return (f"{' '.join(self.flags)} ({self.kind}: peak {format_number(self.peak_gib)} of "
                f"{format_number(self.usable_memory_gib)} GiB)")


@dataclass(frozen=True, kw_only=True, slots=True)
class PeakMemory:
    """Where the peak of one configuration is, and whether it fits."""

    peak_gib: float
    """Peak GiB per GPU (the worst pipeline rank for pp > 1)."""
    usable_memory_gib: float
    """The GPU's usable GiB."""
    phase: str
    """The phase of the step at the peak."""
    where: str
    """The worst pipeline rank and its stages for pp > 1, else ''."""

    @property
    def fits(self) -> bool:
        """The peak is within the usable memory."""
        return self.peak_gib <= self.usable_memory_gib


class DoesNotFitError(InfeasibleError):
    """A prediction or memory report whose peak exceeds the GPU's usable memory (exit 1); `answer`
    is the answer line of what was asked, `fixes` the computed changes that fit."""

    def __init__(self, message: str, *, binding: str, hint: str, answer: str,
                 fixes: tuple[MemoryFix, ...]) -> None:
        self.answer = answer
        self.fixes = fixes
        super().__init__(message, binding=binding, hint=hint)


def peak_memory(spec: WorkloadSpec) -> PeakMemory:
    """The peak per GPU of `spec` as its recipe trains it (the same memory model `predict` and
    `memory_report` use) and where it occurs."""
    model, gpu, island, recipe = resolve_placement(
        spec.model_name, gpu_name=spec.gpu_name, nodes=spec.nodes,
        gpus_per_node=spec.gpus_per_node, seq_len=spec.seq_len, micro_batch=spec.micro_batch,
        accum=spec.accum, recipe=spec.recipe)
    usable = gpu.usable_memory_bytes / GIB
    if recipe.parallel.pp > 1:
        pipe = pipeline_memory(model, num_gpus=island.num_gpus, seq_len=spec.seq_len,
                               micro_batch=spec.micro_batch, recipe=recipe,
                               accum_steps=spec.accum)
        worst = pipe.ranks[pipe.worst_rank]
        return PeakMemory(peak_gib=worst.breakdown.peak_bytes / GIB, usable_memory_gib=usable,
                          phase=worst.breakdown.phase, where=worst.describe())
    breakdown = memory_breakdown(model, num_gpus=island.num_gpus, seq_len=spec.seq_len,
                                 micro_batch=spec.micro_batch, recipe=recipe,
                                 accum_steps=spec.accum)
    return PeakMemory(peak_gib=breakdown.peak_bytes / GIB, usable_memory_gib=usable,
                      phase=breakdown.phase, where="")


def _candidates(spec: WorkloadSpec) -> Iterator[tuple[str, tuple[str, ...], WorkloadSpec]]:
    """(kind, flags, changed spec) in FIX_ORDER, each kind from its smallest change up."""
    recipe: TrainingRecipe = resolve_recipe(spec.recipe, None)
    layout = recipe.parallel
    m, k = spec.micro_batch, spec.accum
    for smaller in (m >> i for i in range(1, m.bit_length())):
        if smaller >= 1 and m % smaller == 0:  # the same sequences per step: k grows
            more = k * (m // smaller)
            yield ("micro-batch", ("--micro-batch", str(smaller), "--accum", str(more)),
                   replace(spec, micro_batch=smaller, accum=more))
    current = recipe.ac
    rank = (AC_LADDER.index(current) if current in AC_LADDER
            else AC_LADDER.index("op-sac"))  # layer:N recomputes at most what full does
    for mode in AC_LADDER[rank + 1:]:
        yield ("checkpointing", ("--ac", mode),
               replace(spec, recipe=replace(recipe, ac=mode)))
    for i in range(1, DEGREE_DOUBLINGS + 1):
        tp = layout.tp * 2**i
        if tp > spec.gpus_per_node:
            break
        yield ("tensor parallel", ("--tp", str(tp)),
               replace(spec, recipe=replace(recipe, parallel=replace(layout, tp=tp, dp_shard=-1))))
    for i in range(1, DEGREE_DOUBLINGS + 1):
        pp = layout.pp * 2**i
        accum = max(k, pp) if layout.pp_schedule != "gpipe" else k
        flags = ("--pp", str(pp)) + (("--accum", str(accum)) if accum != k else ())
        yield ("pipeline parallel", flags,
               replace(spec, accum=accum,
                       recipe=replace(recipe, parallel=replace(layout, pp=pp, dp_shard=-1))))
    for i in range(1, NODE_DOUBLINGS + 1):
        nodes = spec.nodes * 2**i
        yield ("nodes", ("--nodes", str(nodes)),
               replace(spec, nodes=nodes,
                       recipe=replace(recipe, parallel=replace(layout, dp_shard=-1))))
    gpu = catalog.get_gpu(spec.gpu_name)
    bigger = sorted((g for g in catalog.load_gpus().values()
                     if g.usable_memory_bytes > gpu.usable_memory_bytes),
                    key=lambda g: (g.usable_memory_bytes, g.name))
    for other in bigger:
        per_node = min(spec.gpus_per_node, other.max_gpus_per_node)
        flags = ("--gpu", other.name) + (("--gpus-per-node", str(per_node))
                                         if per_node != spec.gpus_per_node else ())
        yield ("gpu", flags, replace(spec, gpu_name=other.name, gpus_per_node=per_node))
    if layout.pp > 1:   # a pipeline rank holds every micro-batch's receive buffers (FIX_ORDER)
        for fewer in (k >> i for i in range(1, k.bit_length())):
            yield ("smaller batch", ("--accum", str(fewer)), replace(spec, accum=fewer))


def _combined(spec: WorkloadSpec) -> Iterator[tuple[str, tuple[str, ...], WorkloadSpec]]:
    """More nodes with one layout change, from the fewest nodes up (used when no single change
    fits): per node count the checkpointing modes, tp and pp 2x / 4x, tp 4x with full
    checkpointing."""
    layout_changes = [(kind, flags, changed) for kind, flags, changed in _candidates(spec)
                      if kind in ("checkpointing", "tensor parallel", "pipeline parallel")]
    strongest = [c for c in layout_changes if c[0] == "tensor parallel"][-1:]
    for _, tp_flags, tp_spec in strongest:
        if resolve_recipe(spec.recipe, None).ac != "full" and tp_spec.recipe is not None:
            layout_changes.append(("tp and checkpointing", (*tp_flags, "--ac", "full"),
                                   replace(tp_spec, recipe=replace(tp_spec.recipe, ac="full"))))
    for i in range(1, NODE_DOUBLINGS + 1):
        nodes = spec.nodes * 2**i
        for _, flags, changed in layout_changes:
            recipe = resolve_recipe(changed.recipe, None)
            yield ("nodes and layout", ("--nodes", str(nodes), *flags),
                   replace(changed, nodes=nodes,
                           recipe=replace(recipe, parallel=replace(recipe.parallel,
                                                                   dp_shard=-1))))


def _first_fits(candidates: Iterator[tuple[str, tuple[str, ...], WorkloadSpec]]
                ) -> dict[str, MemoryFix]:
    """Per kind, the first candidate whose peak fits (invalid candidates are skipped)."""
    found: dict[str, MemoryFix] = {}
    for kind, flags, candidate in candidates:
        if kind in found:
            continue
        try:
            peak = peak_memory(candidate)
        except ShardMeterError as err:  # the change breaks a layout rule or a limit: not a fix
            logger.debug("memory fix %s: %s", " ".join(flags), err.message)
            continue
        if peak.fits:
            found[kind] = MemoryFix(kind=kind, flags=flags, peak_gib=peak.peak_gib,
                                    usable_memory_gib=peak.usable_memory_gib)
    return found


def memory_fixes(spec: WorkloadSpec) -> tuple[MemoryFix, ...]:
    """Per kind of change (FIX_ORDER), the smallest one that makes `spec` fit, computed by
    evaluating the candidates (module docstring); kinds with no fitting candidate are left out.
    When no single change fits, the fewest nodes with one layout change that fit."""
    found = _first_fits(_candidates(spec)) or _first_fits(_combined(spec))
    return tuple(found[kind] for kind in FIX_ORDER if kind in found)


def does_not_fit(spec: WorkloadSpec, *, answer: str, what: str) -> DoesNotFitError:
    """The error for `spec`, whose peak exceeds its GPU's usable memory: the binding phase (and
    worst pipeline rank), the smallest fix first and the other kinds of fix after it; `what` is
    the command that asked ('predict', 'memory')."""
    peak = peak_memory(spec)
    fixes = memory_fixes(spec)
    where = f" ({peak.where})" if peak.where else ""
    binding = (f"GPU memory: peak {format_number(peak.peak_gib)} GiB per GPU > "
               f"{format_number(peak.usable_memory_gib)} GiB usable on {spec.gpu_name}, "
               f"at {peak.phase}{where}")
    oom = f"--allow-oom prints the {what} anyway."
    if fixes:
        others = "; ".join(f.describe() for f in fixes[1:])
        hint = (f"pass {fixes[0].describe()}." + (f" Other changes that fit: {others}." if others
                                                  else "") + f" {oom}")
    else:
        hint = ("no change tried fits (a smaller micro-batch, more checkpointing, tp or pp "
                f"{2**DEGREE_DOUBLINGS}x, up to {2**NODE_DOUBLINGS}x the nodes alone or with one "
                f"of those, a bigger catalog GPU): shorten --seq-len or use context parallelism "
                f"(--cp). {oom}")
    return DoesNotFitError(f"{spec.model_name} does not fit in {spec.gpu_name} memory",
                           binding=binding, hint=hint, answer=answer, fixes=fixes)


# ---- answer lines ------------------------------------------------------------------------------

def _verdict(record: dict[str, Any]) -> str:
    return "fits" if record["fits"] else "does NOT fit"


def _placement(record: dict[str, Any], gpus: int, strategy: str = "fsdp") -> str:
    layout = ParallelLayout(**record["layout"]).describe()
    islands = int(record.get("islands", 1))
    outer = f"{islands} islands of " if islands > 1 else ""
    how = f", {strategy}" if strategy != "fsdp" else ""
    return f"{record['model']} on {gpus:,} x {record['gpu']} ({outer}{layout}{how})"


def prediction_answer(record: dict[str, Any]) -> str:
    """The answer of a `predict` record in one sentence: '<model> on <N> x <GPU> (<layout>):
    <step time> per step, <tok/s/GPU>, MFU <x %>; peak <GiB> of <usable> GiB — fits'."""
    gpus = int(record.get("islands", 1)) * int(record["nodes"]) * int(record["gpus_per_node"])
    return (f"{_placement(record, gpus, str(record.get('strategy', 'fsdp')))}: "
            f"{format_duration(record['step_time_s'])} per step, "
            f"{format_rate(record['tokens_per_s_per_gpu'], 'tok/s/GPU')}, "
            f"MFU {format_percent(record['mfu'])}; peak {format_number(record['peak_gib'])} of "
            f"{format_number(record['usable_memory_gib'])} GiB — {_verdict(record)}")


def memory_answer(record: dict[str, Any]) -> str:
    """The answer of a `memory` record in one sentence: '<model> on <N> x <GPU> (<layout>): peak
    <GiB> per GPU of <usable> GiB usable — fits; largest micro-batch that fits: <m>'."""
    return (f"{_placement(record, int(record['num_gpus']))}: peak "
            f"{format_number(record['peak_gib'])} GiB per GPU of "
            f"{format_number(record['usable_memory_gib'])} GiB usable — {_verdict(record)}; "
            f"largest micro-batch that fits: {record['max_micro_batch']}")
