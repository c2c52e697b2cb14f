"""Parallel layouts: how the GPUs of an island split one training job (DESIGN §2 "Parallel
layouts"), and which links each parallel group's collectives cross.

A `ParallelLayout` names the degree of every parallelism; their product is the world size:

    world = dp_replicate · pp · dp_shard · cp · tp

Placement (`placement_order`) follows torchtitan's device mesh and the design card: ranks are
numbered with tp innermost (consecutive ranks, inside a node), then cp, dp_shard, pp and
dp_replicate outermost. The members of a group of dimension X are then the ranks
`base + i · stride(X)`, `stride(X)` the product of the sizes inside X, so:

* a group whose members fit in one node (stride · size <= GPUs per node, dividing it) rings over
  the node's intra-node link only;
* a group whose stride is a multiple of the node size has one member per node: it rings over the
  inter-node link, and the GPUs of a node, each in a different group of X, share the node's NICs;
* anything between spans several nodes with several members on each: the ring crosses both links
  and the slowest decides, as for an FSDP island (`perfmodel.costs.comm`).

`CommGroup` records that placement (links, members per node, NIC share) and the cost model times
collectives over it. Plain DDP is dp_shard = 1; FSDP is dp_replicate = 1; HSDP is both > 1.
FSDP2 shards parameters over dp_shard · cp (torchtitan's `dp_shard_cp` mesh), so `fsdp_degree`
is that product. Checked by: tests/test_layout.py (validation, world size, placement of every
group on nodes of 8 and of 4 GPUs against a rank-by-rank enumeration).

Expert parallelism (`ep`, mixture-of-experts models only) borrows its ranks from dp_shard · cp
as torchtitan's ParallelDims does, so the world size is unchanged: the ep ranks of one EP group
are consecutive in the (cp, dp_shard) block (stride tp, torchtitan's `dp_shard_in_ep` x cp
mesh), each holds E/ep routed experts, and the expert weights are further FSDP-sharded over the
fsdp_degree/ep ranks holding the same experts (`expert_fsdp_degree`, stride tp·ep: torchtitan's
`dp_shard_mod_ep`). Checked by: tests/test_moe_step.py (ep validation and group placement).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from perfmodel.spec.errors import ConfigError, UserInputError

PP_SCHEDULES = ("gpipe", "1f1b", "interleaved-1f1b")
"""Pipeline schedules: GPipe, 1F1B and interleaved 1F1B with virtual stages."""
DIMENSIONS = ("tp", "cp", "dp_shard", "pp", "dp_replicate")
"""Parallel dimensions from innermost (consecutive ranks) to outermost."""


def _positive_int(name: str, value: Any, *, allow_infer: bool = False) -> None:
    ok = not isinstance(value, bool) and isinstance(value, int) and (
        value >= 1 or (allow_infer and value == -1))
    if not ok:
        hint = (f"set {name} to an integer >= 1" + (" (or -1: the GPUs left)" if allow_infer
                                                    else "") + ".")
        raise UserInputError(f"ParallelLayout.{name} is {value!r}", hint=hint)


@dataclass(frozen=True, kw_only=True, slots=True)
class ParallelLayout:
    """The parallel degrees of one training job (torchtitan's ParallelDims, plus the schedule
    and the tensor-parallel options)."""

    dp_shard: int = -1
    """FSDP sharding degree; -1: every GPU the other degrees leave (resolved against the island
    by `resolve`)."""
    dp_replicate: int = 1
    """Replicas of the FSDP group (HSDP when > 1 together with dp_shard > 1; plain DDP when
    dp_shard is 1)."""
    tp: int = 1
    """Tensor-parallel degree: every block's linears split column/row-wise over tp GPUs."""
    pp: int = 1
    """Pipeline-parallel degree: stages of consecutive blocks."""
    cp: int = 1
    """Context-parallel degree: the sequence split over cp GPUs (attention exchanges K and V)."""
    virtual_stages: int = 1
    """Pipeline stages per GPU (interleaved 1F1B when > 1)."""
    pp_schedule: str = "1f1b"
    """gpipe, 1f1b or interleaved-1f1b (the latter with virtual_stages > 1)."""
    sequence_parallel: bool = True
    """Under tp > 1, norms, residuals and dropout also run on 1/tp of the sequence (all-gather +
    reduce-scatter around each block half instead of one all-reduce), as torchtitan's plan does."""
    async_tp: bool = False
    """Under tp > 1, tensor-parallel collectives overlap the matmuls they feed (torch's async TP,
    CUDA only) instead of running inline on the compute stream."""
    ep: int = 1
    """Expert-parallel degree (mixture-of-experts models only): the routed experts split over ep
    ranks borrowed from dp_shard · cp (it divides that product; the world size is unchanged)."""

    def __post_init__(self) -> None:
        _positive_int("dp_shard", self.dp_shard, allow_infer=True)
        for name in ("dp_replicate", "tp", "pp", "cp", "virtual_stages", "ep"):
            _positive_int(name, getattr(self, name))
        if self.pp_schedule not in PP_SCHEDULES:
            raise UserInputError(f"ParallelLayout.pp_schedule is {self.pp_schedule!r}",
                                 hint=f"use one of {', '.join(PP_SCHEDULES)}.")
        for name in ("sequence_parallel", "async_tp"):
            if not isinstance(getattr(self, name), bool):
                raise UserInputError(f"ParallelLayout.{name} is {getattr(self, name)!r}",
                                     hint=f"set {name} to true or false.")
        if self.async_tp and (self.tp == 1 or not self.sequence_parallel):
            raise UserInputError(
                f"ParallelLayout: async_tp with tp {self.tp} and sequence_parallel "
                f"{self.sequence_parallel}",
                hint="async TP overlaps sequence-parallel collectives: give tp >= 2 with "
                     "sequence_parallel true, or set async_tp false.")
        if self.virtual_stages > 1 and self.pp == 1:
            raise UserInputError(
                f"ParallelLayout: virtual_stages {self.virtual_stages} with pp 1",
                hint="virtual stages split a pipeline rank's blocks: give pp >= 2 (e.g. pp 2, "
                     f"virtual_stages {self.virtual_stages}), or set virtual_stages 1.")
        if self.virtual_stages > 1 and self.pp_schedule != "interleaved-1f1b":
            raise UserInputError(
                f"ParallelLayout: virtual_stages {self.virtual_stages} with pp_schedule "
                f"{self.pp_schedule!r}",
                hint="virtual stages need pp_schedule interleaved-1f1b (or set virtual_stages 1).")
        if self.pp_schedule == "interleaved-1f1b" and self.virtual_stages < 2:
            raise UserInputError(
                "ParallelLayout: pp_schedule interleaved-1f1b with 1 virtual stage",
                hint="give virtual_stages >= 2, or use pp_schedule 1f1b.")

    @property
    def prior_only(self) -> tuple[str, ...]:
        """The parallelisms of this layout whose timing has no measured ground truth: torch's
        ring attention (cp) and async TP run only on CUDA, so until a GPU measures them they
        are modelled from their published algorithms alone."""
        return tuple(name for name, on in (("cp", self.cp > 1), ("async_tp", self.async_tp))
                     if on)

    # ---- sizes -----------------------------------------------------------------------------
    @property
    def model_parallel(self) -> int:
        """GPUs one model replica's shard spans besides data parallelism: tp · cp · pp."""
        return self.tp * self.cp * self.pp

    @property
    def fsdp_degree(self) -> int:
        """Ranks FSDP2 shards parameters and optimizer states over: dp_shard · cp."""
        return self._known_dp_shard() * self.cp

    @property
    def expert_fsdp_degree(self) -> int:
        """Ranks FSDP2 shards each expert's weights over: the fsdp_degree / ep ranks that hold
        the same experts (torchtitan's dp_shard_mod_ep)."""
        return self.fsdp_degree // self.ep

    @property
    def dp(self) -> int:
        """Data-parallel replicas of the batch: dp_shard · dp_replicate."""
        return self._known_dp_shard() * self.dp_replicate

    @property
    def world_size(self) -> int:
        """dp_replicate · pp · dp_shard · cp · tp."""
        return self.dp * self.model_parallel

    def size(self, dimension: str) -> int:
        """The degree of one of DIMENSIONS."""
        if dimension not in DIMENSIONS:
            raise ValueError(f"unknown dimension {dimension!r}; expected one of {DIMENSIONS}")
        return self._known_dp_shard() if dimension == "dp_shard" else int(getattr(self, dimension))

    def _known_dp_shard(self) -> int:
        if self.dp_shard == -1:
            raise ValueError("dp_shard is not resolved yet: call ParallelLayout.resolve(world)")
        return self.dp_shard

    @property
    def is_default(self) -> bool:
        """Plain FSDP over every GPU (no tp, pp, cp, ep or replication)."""
        return (self.tp, self.pp, self.cp, self.dp_replicate, self.ep) == (1, 1, 1, 1, 1)

    def resolve(self, world_size: int) -> ParallelLayout:
        """This layout with dp_shard fixed so that the product is `world_size`; UserInputError
        naming the rule and the nearest valid dp_shard otherwise."""
        others = self.dp_replicate * self.model_parallel
        if self.dp_shard == -1:
            if world_size % others:
                raise UserInputError(
                    f"{world_size} GPUs cannot be split as dp_replicate {self.dp_replicate} x "
                    f"tp {self.tp} x pp {self.pp} x cp {self.cp} x dp_shard (their product "
                    f"{others} does not divide {world_size})",
                    hint=f"{self._nearest(world_size)}, or a GPU count that is a multiple of "
                         f"{others} (e.g. {max(others, world_size // others * others)}).")
            return replace(self, dp_shard=world_size // others).check_ep()
        if self.world_size != world_size:
            raise UserInputError(
                f"the layout covers {self.world_size} GPUs (dp_replicate {self.dp_replicate} x "
                f"dp_shard {self.dp_shard} x tp {self.tp} x pp {self.pp} x cp {self.cp}) but the "
                f"island has {world_size}",
                hint="leave dp_shard unset (-1) to use every GPU the other degrees leave, or "
                     f"change the island to {self.world_size} GPUs.")
        return self.check_ep()

    def check_ep(self) -> ParallelLayout:
        """This (resolved) layout; UserInputError when ep does not divide dp_shard · cp."""
        if self.fsdp_degree % self.ep:
            divisors = [d for d in range(1, self.fsdp_degree + 1) if self.fsdp_degree % d == 0]
            raise UserInputError(
                f"ep {self.ep} does not divide dp_shard {self.dp_shard} x cp {self.cp} = "
                f"{self.fsdp_degree} (expert parallelism borrows its ranks from dp_shard · cp)",
                hint=f"use an ep that divides {self.fsdp_degree} (one of "
                     f"{', '.join(map(str, divisors[:12]))}).")
        return self

    def _nearest(self, world_size: int) -> str:
        """The valid layouts nearest this one on `world_size` GPUs that change one degree (to
        the closest value whose product with the others divides the world), as a hint."""
        options = []
        for name in ("tp", "cp", "pp", "dp_replicate"):
            size = int(getattr(self, name))
            rest = self.dp_replicate * self.model_parallel // size
            if size == 1 or world_size % rest:
                continue
            valid = [d for d in range(1, world_size // rest + 1) if (world_size // rest) % d == 0]
            best = min(valid, key=lambda d: (abs(math.log(d / size)), d))
            options.append(f"{name} {best} (dp_shard {world_size // (rest * best)})")
        if not options:
            return "use smaller tp/pp/cp/dp_replicate degrees"
        return "nearest valid layouts: " + "; ".join(options)

    def check_model(self, *, num_layers: int, num_heads: int, num_kv_heads: int,
                    intermediate_size: int, seq_len: int, num_experts: int = 0) -> None:
        """UserInputError naming the rule a model breaks under this layout (tp divides the query
        heads and the MLP width, kv heads divide or are replicated, cp splits the sequence into
        2·cp load-balanced chunks, every pipeline stage holds a block); ConfigError for ep > 1
        on a dense model (`num_experts` 0) or an ep that does not divide the routed experts."""
        self.check_experts(num_experts)
        if num_heads % self.tp:
            raise UserInputError(
                f"tp {self.tp} does not divide the {num_heads} query heads",
                hint=f"use a tp that divides {num_heads} "
                     f"(e.g. {_largest_divisor(num_heads, self.tp)}).")
        if num_kv_heads % self.tp and self.tp % num_kv_heads:
            raise UserInputError(
                f"tp {self.tp} neither divides the {num_kv_heads} key/value heads nor is a "
                "multiple of them (to replicate each over tp/kv ranks)",
                hint=f"use a tp that divides {num_kv_heads} or is a multiple of it.")
        if intermediate_size % self.tp:
            raise UserInputError(
                f"tp {self.tp} does not divide the MLP width {intermediate_size}",
                hint=f"use a tp that divides {intermediate_size}.")
        if seq_len % (2 * self.cp) and self.cp > 1:
            raise UserInputError(
                f"cp {self.cp} cannot split the sequence {seq_len} into {2 * self.cp} equal "
                "chunks (load-balanced causal context parallelism)",
                hint=f"use a sequence length that is a multiple of {2 * self.cp}, or another cp.")
        stages = self.pp * self.virtual_stages
        if stages > num_layers:
            raise UserInputError(
                f"{stages} pipeline stages (pp {self.pp} x virtual_stages "
                f"{self.virtual_stages}) for {num_layers} blocks: a stage would hold none",
                hint=_fewer_stages_hint(num_layers, self.pp))

    def check_experts(self, num_experts: int) -> None:
        """ConfigError unless ep is 1 or divides the `num_experts` routed experts of an MoE
        model (0: a dense model, which has no experts to split)."""
        if num_experts and self.tp > 1:
            raise UserInputError(
                f"tensor parallelism (tp {self.tp}) of a mixture-of-experts model is not "
                "modelled yet (expert tensor parallelism: how the experts' weights split over "
                "tp is planned, not built)",
                hint="use tp 1 with ep, dp_shard and pp for a mixture-of-experts model.")
        if self.ep == 1:
            return
        if not num_experts:
            raise ConfigError(f"ep {self.ep} given for a dense model: expert parallelism splits "
                              "the routed experts of a mixture-of-experts model",
                              hint="set ep to 1 (--ep 1) or use a mixture-of-experts model.")
        if num_experts % self.ep:
            raise ConfigError(f"ep {self.ep} does not divide the {num_experts} routed experts",
                              hint=f"use an ep that divides {num_experts} "
                                   f"(e.g. {_largest_divisor(num_experts, self.ep)}).")

    # ---- placement -------------------------------------------------------------------------
    def ep_groups(self, *, gpus_per_node: int, intra_link: str, inter_link: str,
                  nics_per_node: int) -> tuple[CommGroup, CommGroup]:
        """(EP group, expert FSDP group) on nodes of `gpus_per_node` GPUs: the ep ranks of one
        expert-parallel group sit tp apart inside the (cp, dp_shard) block; the ranks holding
        the same experts sit tp·ep apart (module docstring)."""
        def place(dimension: str, size: int, stride: int) -> CommGroup:
            return place_group(dimension, size=size, stride=stride, gpus_per_node=gpus_per_node,
                               intra_link=intra_link, inter_link=inter_link,
                               nics_per_node=nics_per_node)

        return (place("ep", self.ep, self.tp),
                place("expert_fsdp", self.expert_fsdp_degree, self.tp * self.ep))
    def stride(self, dimension: str) -> int:
        """Distance between consecutive ranks of one group of `dimension` (the product of the
        dimensions placed inside it)."""
        inner = DIMENSIONS[:DIMENSIONS.index(dimension)]
        return math.prod(self.size(d) for d in inner)

    def group(self, dimension: str, *, gpus_per_node: int, intra_link: str, inter_link: str,
              nics_per_node: int) -> CommGroup:
        """Where one group of `dimension` sits on nodes of `gpus_per_node` GPUs."""
        size, stride = self.size(dimension), self.stride(dimension)
        return place_group(dimension, size=size, stride=stride, gpus_per_node=gpus_per_node,
                           intra_link=intra_link, inter_link=inter_link,
                           nics_per_node=nics_per_node)

    def describe(self) -> str:
        """One line, e.g. 'tp 8 x pp 16 x dp_shard 128 (1f1b)'."""
        # an unresolved dp_shard is every GPU the other degrees leave: shown as '*'
        parts = [("dp_shard *" if d == "dp_shard" and self.dp_shard == -1
                  else f"{d} {self.size(d)}") for d in reversed(DIMENSIONS)
                 if (d == "dp_shard" and self.dp_shard == -1) or self.size(d) > 1]
        text = " x ".join(parts) or "1 GPU"
        if self.pp > 1:
            text += f" ({self.pp_schedule}" + (f", {self.virtual_stages} virtual stages"
                                               if self.virtual_stages > 1 else "") + ")"
        if self.ep > 1:
            text += f", ep {self.ep}"
        if self.tp > 1:
            text += ", sequence parallel" if self.sequence_parallel else ", no sequence parallel"
            text += ", async TP" if self.async_tp else ""
        return text

    def to_dict(self) -> dict[str, Any]:
        """The fields by name (the JSON `layout` object)."""
        return {f: getattr(self, f) for f in self.__dataclass_fields__}


def _fewer_stages_hint(num_layers: int, pp: int) -> str:
    """The nearest layouts whose pp · virtual_stages stages each hold a block."""
    if pp > num_layers:
        return (f"use pp {num_layers} or less (each stage holds at least one of the "
                f"{num_layers} blocks).")
    most = num_layers // pp
    fix = (f"--virtual-stages {most} (pp {pp} x {most} = {pp * most} stages)" if most > 1
           else "--virtual-stages 1 (plain 1f1b)")
    return f"use {fix}, or a smaller pp: at most {num_layers} stages in all."


def with_layout_fields(base: ParallelLayout, **given: Any) -> ParallelLayout:
    """`base` with the given fields replaced, the schedule following the virtual stages when
    it is not given itself: virtual_stages > 1 picks interleaved-1f1b (the only schedule that
    runs them), virtual_stages 1 on an interleaved base falls back to 1f1b. So `--virtual-stages
    4` alone, a recipe's `parallel: {virtual_stages: 4}` and `--explain v=4` all mean the
    interleaved schedule; a schedule that is given is kept (and validated as given)."""
    stages = given.get("virtual_stages")
    # a non-integer is left for ParallelLayout's own check to name
    if isinstance(stages, int) and not isinstance(stages, bool) and "pp_schedule" not in given:
        if stages > 1:
            given["pp_schedule"] = "interleaved-1f1b"
        elif base.pp_schedule == "interleaved-1f1b":
            given["pp_schedule"] = "1f1b"
    return replace(base, **given) if given else base


def _largest_divisor(n: int, below: int) -> int:
    return max(d for d in range(1, min(n, below) + 1) if n % d == 0)


@dataclass(frozen=True, kw_only=True, slots=True)
class CommGroup:
    """One parallel group's ring as placed on the island's nodes."""

    dimension: str
    """One of DIMENSIONS."""
    size: int
    """Ranks in the group."""
    links: tuple[str, ...]
    """Link types the ring crosses (the slowest decides); empty for a group of one."""
    nodes: int
    """Nodes the group spans."""
    members_per_node: int
    """Ranks of the group on each node it spans."""
    nics: float
    """NICs one group's ring may use per node: the node's NICs shared by the groups of this
    dimension that cross it, at most one per member (per-NIC links only)."""

    @property
    def crosses_nodes(self) -> bool:
        return self.nodes > 1


def place_group(dimension: str, *, size: int, stride: int, gpus_per_node: int, intra_link: str,
                inter_link: str, nics_per_node: int) -> CommGroup:
    """The placement of ranks {b + i·stride : i < size} on nodes of `gpus_per_node` GPUs
    (module docstring). Groups that straddle node boundaries unevenly are placed as their worst
    node: the slowest link and the fewest NICs decide."""
    if size <= 1:
        return CommGroup(dimension=dimension, size=1, links=(), nodes=1, members_per_node=1,
                         nics=float(nics_per_node))
    span = stride * (size - 1) + 1        # ranks from the first member to the last
    if span <= gpus_per_node and gpus_per_node % (stride * size) == 0:
        return CommGroup(dimension=dimension, size=size, links=(intra_link,), nodes=1,
                         members_per_node=size, nics=float(nics_per_node))
    members = max(1, gpus_per_node // stride) if stride < gpus_per_node else 1
    members = min(members, size)
    nodes = math.ceil(size / members)
    # Groups of this dimension crossing one node: one per inner offset held by the node.
    concurrent = min(stride, gpus_per_node)
    nics = min(float(members), nics_per_node / concurrent)
    links = (intra_link, inter_link) if members > 1 else (inter_link,)
    return CommGroup(dimension=dimension, size=size, links=links, nodes=nodes,
                     members_per_node=members, nics=nics)
