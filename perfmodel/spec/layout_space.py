"""The layouts and checkpointing modes a planner may choose from (issue 25).

An instance's `training.parallel` section and `training.activation_checkpointing` (one mode or a
list) become a `LayoutSpace`; `LayoutSpace.candidates` enumerates, for one island of n nodes of g
GPUs, every `ParallelLayout` inside it that the island and the model allow. Each field either
pins a value (`tp: 8`), lists the values allowed (`tp: [4, 8]`) or bounds them (`max_tp: 8`).

What is enumerated when a field is left free (the defaults), and why:
  * tp: powers of two up to the GPUs of one node (tensor parallelism across nodes would put its
    per-block collectives on the inter-node link; torchtitan and Megatron keep it in a node);
  * pp: powers of two up to the number of blocks (and 1); stages are cut by
    `perfmodel.spec.pipeline.stage_blocks`, so pp need not divide the blocks;
  * cp: 1 (context parallelism runs only on CUDA and is a prior here; list values to enable it);
  * dp_replicate: 1 and the HSDP layout that shards within one node (dp_shard = the node's GPUs
    left by tp), the one torchtitan and OLMo use; list values for others;
  * schedules: 1f1b and interleaved-1f1b (GPipe holds all k micro-batches in flight and is never
    faster than 1F1B at equal k: list it to compare);
  * virtual stages (interleaved-1f1b): powers of two from 2 up to `max_virtual_stages`, default
    DEFAULT_MAX_VIRTUAL_STAGES (4), and at most the blocks per pipeline rank. V stages per rank
    divide the bubble by about V and multiply the stage-boundary sends by V. The table walks each
    rank's schedule for its memory, a walk V times as long at V stages, so the default stops at 4
    (a deeper search: `max_virtual_stages: 8`, `shardmeter layout --max-virtual-stages 8`);
  * sequence_parallel: on (it moves the bytes of tensor parallelism's all-reduces as an
    all-gather and a reduce-scatter and divides norm activations by tp);
  * async_tp: off (CUDA only, a prior);
  * ep (mixture-of-experts models only; 1 for dense ones): every divisor of dp_shard · cp that
    divides the routed experts (torchtitan borrows the EP ranks from dp_shard · cp);
  * checkpointing: the recipe's mode when `activation_checkpointing` is one mode or absent; every
    listed mode when it is a list;
  * compute_dtype: the recipe's when absent (FP8 is a prior and is refused on GPUs without it,
    so it is never switched on silently); `compute_dtype: fp8-tensorwise` pins one and a list
    (`[bf16, fp8-tensorwise]`) lets the planner choose, in `training.parallel` or `training`.
A layout is a candidate when `ParallelLayout.resolve` and `check_model` accept it on the island;
whether it fits memory is the table builder's test (it reports the options that fit nothing).
Checked by: tests/test_layout_space.py (parsing errors name the field, pinned values are the only
candidates, every candidate is valid, free defaults on a 16-GPU island enumerated by hand) and
tests/test_precision.py (compute_dtype parsed, enumerated when listed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from perfmodel.spec.errors import UserInputError
from perfmodel.spec.layout import PP_SCHEDULES, ParallelLayout
from perfmodel.spec.recipe import COMPUTE_DTYPES, canonical_ac

_DEGREES = ("tp", "pp", "cp", "dp_replicate", "virtual_stages", "ep")
_KEYS = (*_DEGREES, *(f"max_{d}" for d in _DEGREES), "schedules", "sequence_parallel",
         "async_tp", "compute_dtype")


DEFAULT_MAX_VIRTUAL_STAGES = 4
"""The most virtual stages per pipeline rank the default space tries (module doc)."""


def _powers_of_two(limit: int) -> tuple[int, ...]:
    out, p = [], 1
    while p <= limit:
        out.append(p)
        p *= 2
    return tuple(out)


@dataclass(frozen=True, kw_only=True, slots=True)
class LayoutSpace:
    """What an instance lets the planner choose (module doc); None: the default rule."""

    tp: tuple[int, ...] | None = None
    """Tensor-parallel degrees allowed (None: powers of two up to the node's GPUs)."""
    pp: tuple[int, ...] | None = None
    """Pipeline degrees allowed (None: 1 and powers of two up to the blocks)."""
    cp: tuple[int, ...] = (1,)
    """Context-parallel degrees allowed."""
    dp_replicate: tuple[int, ...] | None = None
    """HSDP replica counts allowed (None: 1 and the shard-within-a-node layout)."""
    virtual_stages: tuple[int, ...] | None = None
    """Virtual stages tried with interleaved-1f1b (None: powers of two from 2 up to
    max_virtual_stages, default DEFAULT_MAX_VIRTUAL_STAGES)."""
    ep: tuple[int, ...] | None = None
    """Expert-parallel degrees allowed (None: for an MoE model every divisor of dp_shard · cp
    that divides its routed experts; 1 for a dense model)."""
    maxima: Mapping[str, int] = field(default_factory=dict)
    """max_tp, max_pp, max_cp, max_dp_replicate, max_virtual_stages given by the instance."""
    schedules: tuple[str, ...] = ("1f1b", "interleaved-1f1b")
    """Pipeline schedules tried when pp > 1."""
    sequence_parallel: tuple[bool, ...] = (True,)
    """Sequence-parallel settings tried when tp > 1."""
    async_tp: tuple[bool, ...] = (False,)
    """Async-TP settings tried when tp > 1 with sequence parallelism."""
    checkpointing: tuple[str, ...] = ()
    """Checkpointing modes tried (empty: the recipe's)."""
    compute_dtypes: tuple[str, ...] = ()
    """Compute dtypes tried (`perfmodel.spec.recipe.COMPUTE_DTYPES`; empty: the recipe's)."""

    @classmethod
    def fsdp(cls, checkpointing: Sequence[str] = (),
             compute_dtypes: Sequence[str] = ()) -> LayoutSpace:
        """Plain FSDP over every GPU (what an instance without `training.parallel` plans)."""
        return cls(tp=(1,), pp=(1,), cp=(1,), dp_replicate=(1,), ep=(1,), schedules=("1f1b",),
                   checkpointing=tuple(checkpointing), compute_dtypes=tuple(compute_dtypes))

    @classmethod
    def parse(cls, section: Mapping[str, Any] | None, checkpointing: Any = None, *,
              source: str = "training", compute_dtype: Any = None) -> LayoutSpace:
        """The space of an instance's `parallel:` mapping (None: plain FSDP), its
        `activation_checkpointing` (a mode, a list of modes, or None: the recipe's) and its
        `compute_dtype` (a dtype, a list, or None: the recipe's; `parallel.compute_dtype` too)."""
        modes = _modes(checkpointing, source)
        inner = section.get("compute_dtype") if isinstance(section, Mapping) else None
        if inner is not None and compute_dtype is not None:
            raise UserInputError(f"{source}.compute_dtype and {source}.parallel.compute_dtype "
                                 "are both set", hint="keep one of them.")
        dtypes = _dtypes(compute_dtype if inner is None else inner,
                         f"{source}.compute_dtype" if inner is None
                         else f"{source}.parallel.compute_dtype")
        if section is None:
            return cls.fsdp(modes, dtypes)
        if not isinstance(section, Mapping):
            raise UserInputError(f"{source}.parallel must be a mapping, got {section!r}",
                                 hint="write e.g. parallel: {max_tp: 8, schedules: [1f1b]} "
                                      "(an empty mapping lets the planner choose freely).")
        unknown = sorted(set(section) - set(_KEYS))
        if unknown:
            raise UserInputError(f"{source}.parallel: unknown field(s) {unknown}",
                                 hint=f"use {', '.join(_KEYS)}.")
        values: dict[str, Any] = {}
        for name in _DEGREES:
            if name in section:
                values[name] = _ints(section[name], f"{source}.parallel.{name}")
        maxima = {}
        for name in _DEGREES:
            key = f"max_{name}"
            if key in section:
                (maxima[key],) = _ints(section[key], f"{source}.parallel.{key}", single=True)
        if "schedules" in section:
            raw = section["schedules"]
            items = [raw] if isinstance(raw, str) else raw
            if not isinstance(items, list) or not items or any(s not in PP_SCHEDULES
                                                              for s in items):
                raise UserInputError(f"{source}.parallel.schedules is {raw!r}",
                                     hint=f"list some of {', '.join(PP_SCHEDULES)}.")
            values["schedules"] = tuple(dict.fromkeys(items))
        for name in ("sequence_parallel", "async_tp"):
            if name in section:
                raw = section[name]
                items = [raw] if isinstance(raw, bool) else raw
                if not isinstance(items, list) or not items or any(
                        not isinstance(v, bool) for v in items):
                    raise UserInputError(f"{source}.parallel.{name} is {raw!r}",
                                         hint=f"give true, false or [true, false] for {name}.")
                values[name] = tuple(dict.fromkeys(items))
        return cls(**values, maxima=maxima, checkpointing=modes, compute_dtypes=dtypes)

    # ---- enumeration ---------------------------------------------------------------------------
    def _allowed(self, name: str, given: tuple[int, ...] | None, default: Sequence[int]
                 ) -> tuple[int, ...]:
        values = given if given is not None else tuple(default)
        cap = self.maxima.get(f"max_{name}")
        return tuple(v for v in values if cap is None or v <= cap)

    def candidates(self, *, num_layers: int, num_heads: int, num_kv_heads: int,
                   intermediate_size: int, seq_len: int, nodes: int,
                   gpus_per_node: int, num_experts: int = 0) -> list[ParallelLayout]:
        """Every layout of the space that an island of `nodes` x `gpus_per_node` GPUs and the
        model (`num_experts` routed experts; 0: dense) accept (module doc), in a stable
        order."""
        world = nodes * gpus_per_node
        out: list[ParallelLayout] = []
        for tp in self._allowed("tp", self.tp, _powers_of_two(gpus_per_node)):
            for cp in self._allowed("cp", self.cp, (1,)):
                for pp in self._allowed("pp", self.pp, _powers_of_two(num_layers)):
                    rest = world // (tp * cp * pp) if world % (tp * cp * pp) == 0 else 0
                    if rest == 0:
                        continue
                    node_shard = max(1, gpus_per_node // (tp * cp))
                    default_r = (1,) + ((rest // node_shard,) if rest % node_shard == 0
                                        and rest // node_shard > 1 else ())
                    for r in self._allowed("dp_replicate", self.dp_replicate, default_r):
                        if rest % r:
                            continue
                        for extra in self._pipeline_options(pp, num_layers):
                            for sp in self.sequence_parallel if tp > 1 else (True,):
                                for atp in self.async_tp if tp > 1 and sp else (False,):
                                    layout = ParallelLayout(tp=tp, cp=cp, pp=pp, dp_replicate=r,
                                                            sequence_parallel=sp, async_tp=atp,
                                                            **extra)
                                    try:
                                        layout = layout.resolve(world)
                                        layout.check_model(
                                            num_layers=num_layers, num_heads=num_heads,
                                            num_kv_heads=num_kv_heads,
                                            intermediate_size=intermediate_size,
                                            seq_len=seq_len)
                                    except UserInputError:
                                        continue
                                    out += self._expert_options(layout, num_experts)
        return out

    def _expert_options(self, layout: ParallelLayout, num_experts: int) -> list[ParallelLayout]:
        """`layout` with every allowed ep (module doc) that it and the model accept."""
        degree = layout.fsdp_degree
        default = ([d for d in range(1, degree + 1) if degree % d == 0 and num_experts % d == 0]
                   if num_experts else [1])
        out = []
        for ep in self._allowed("ep", self.ep, default):
            candidate = replace(layout, ep=ep)
            try:
                candidate.check_ep()
                candidate.check_experts(num_experts)
            except UserInputError:
                continue
            out.append(candidate)
        return out

    def _pipeline_options(self, pp: int, num_layers: int) -> list[dict[str, Any]]:
        if pp == 1:
            return [{}]
        out: list[dict[str, Any]] = []
        for schedule in self.schedules:
            if schedule != "interleaved-1f1b":
                out.append({"pp_schedule": schedule})
                continue
            most = self.maxima.get("max_virtual_stages", DEFAULT_MAX_VIRTUAL_STAGES)
            for v in self._allowed("virtual_stages", self.virtual_stages, _powers_of_two(most)):
                if v >= 2 and pp * v <= num_layers:
                    out.append({"pp_schedule": schedule, "virtual_stages": v})
        return out


def _ints(raw: Any, where: str, *, single: bool = False) -> tuple[int, ...]:
    items = [raw] if not isinstance(raw, list) else raw
    if (not items or (single and len(items) != 1)
            or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in items)):
        kind = "an integer >= 1" if single else "an integer >= 1 or a list of them"
        raise UserInputError(f"{where} is {raw!r}", hint=f"give {kind}.")
    return tuple(dict.fromkeys(items))


def _modes(raw: Any, source: str) -> tuple[str, ...]:
    if raw is None:
        return ()
    items = [raw] if not isinstance(raw, list) else raw
    if not items:
        raise UserInputError(f"{source}.activation_checkpointing is an empty list",
                             hint="give one mode or a list of modes (none, full, op-sac, attn, "
                                  "layer:N).")
    return tuple(dict.fromkeys(canonical_ac(m, where=f"{source}.activation_checkpointing")
                               for m in items))


def _dtypes(raw: Any, where: str) -> tuple[str, ...]:
    if raw is None:
        return ()
    items = [raw] if not isinstance(raw, list) else raw
    if not items or any(not isinstance(v, str) or v not in COMPUTE_DTYPES for v in items):
        raise UserInputError(f"{where} is {raw!r}",
                             hint=f"give one of {', '.join(COMPUTE_DTYPES)} or a list of them.")
    return tuple(dict.fromkeys(items))
