"""The typed boundary between what things cost and how they overlap: `CostModel`.

The step builders (`perfmodel.sim`) read durations and the profile's effective coefficients
through this Protocol only; `perfmodel.profiles.profile.HardwareProfile` satisfies it, and so does
any test double that declares every member. A member missing from an implementation is a type
error (mypy) or an AttributeError at the first call — never a silent default, which would read a
misspelt coefficient as "no contention". Coefficients for the coming parallelisms (tensor-,
pipeline-
and expert-parallel collectives, point-to-point) join this Protocol, not ad-hoc attribute reads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from perfmodel.costs.features import RankShard
from perfmodel.spec.arch import ModelSpec
from perfmodel.spec.hardware import IslandSpec
from perfmodel.spec.layout import CommGroup


class CostModel(Protocol):
    """Compute and communication durations of one hardware type, and the effective coefficients
    the step graph applies (all read-only)."""

    @property
    def overlap_slowdown(self) -> float:
        """Compute runs this many times slower while a collective of its island is in flight
        (>= 1; 1 = no contention)."""
        ...

    @property
    def recompute_factor(self) -> float:
        """Time of an activation recompute as a multiple of the forward time of the FLOPs it
        recomputes (> 0)."""
        ...

    @property
    def fsdp_copy_s_per_byte(self) -> float:
        """Seconds per byte of FSDP2's copies around each collective (>= 0; 0 = not modelled)."""
        ...

    @property
    def tp_dispatch_s(self) -> Mapping[str, Mapping[str, float]]:
        """DTensor's host dispatch per pass under tensor parallelism, by layout and place
        (`perfmodel.profiles.profile.HardwareProfile.tp_dispatch_s`; empty: not modelled)."""
        ...

    def compute_time_s(self, phase: str, model: ModelSpec, seq_len: int, micro_batch: Any,
                       unit: str = "model", num_shards: Any = 1,
                       shard: RankShard | None = None) -> Any:
        """Forward, backward or optimizer time of the model, one block or the root (arrays
        broadcast); of one rank's share when `shard` splits the work (parallel layouts)."""
        ...

    def comm_time_s(self, op: str, links: Sequence[str], world_size: Any, payload_bytes: Any,
                    nics_per_node: int = 1) -> Any:
        """A collective over `world_size` ranks whose ring crosses `links` (the slowest decides);
        `payload_bytes` is the unsharded payload."""
        ...

    def island_comm_time_s(self, op: str, island: IslandSpec, payload_bytes: Any) -> Any:
        """A collective over every GPU of an island."""
        ...

    def group_comm_time_s(self, op: str, group: CommGroup, payload_bytes: Any, *,
                          inline: bool = False, compute_s: Any = 0.0) -> Any:
        """A collective over one parallel group as placed on the island's nodes
        (`perfmodel.spec.layout.CommGroup`); `inline`: issued on the compute stream after
        `compute_s` of compute since the ranks last synchronised."""
        ...

    def all_to_all_time_s(self, group: CommGroup, send_bytes: Any) -> Any:
        """One all-to-all over an expert-parallel group, `send_bytes` sent by each rank
        (`perfmodel.costs.comm.CommModel.all_to_all_time_s`)."""
        ...

    def all_to_all_provenance(self, group: CommGroup) -> str:
        """Where the all-to-all coefficients come from (the all_gather fit where no
        all-to-all was measured)."""
        ...
