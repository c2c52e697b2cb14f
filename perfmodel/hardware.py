"""Hardware specs: GPUs, links, islands. SI units inside (bytes, bytes/s, FLOP/s, seconds).

Model, execution and system specs are kept apart (Calculon style): this module knows nothing of
transformers. Units are converted once, when catalogs are loaded (`perfmodel.catalog`).
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 1024**3


@dataclass(frozen=True, kw_only=True, slots=True)
class LinkSpec:
    """One interconnect type with its datasheet-derived prior latency and bus bandwidth."""

    name: str
    """Catalog name (pcie4, nvlink4, ib-ndr400, eth-100g, wan, ...)."""
    kind: str
    """'intra' (inside a node), 'inter' (between nodes, per NIC) or 'wan' (between islands)."""
    latency_s: float
    """Per ring-step latency prior, seconds."""
    busbw_bytes_per_s: float
    """Effective ring bus bandwidth per GPU (intra) or per NIC (inter), bytes/s."""
    line_rate_bytes_per_s: float
    """Datasheet line rate per direction, bytes/s."""
    per_nic: bool = False
    """Bandwidth is per NIC: a node's ring bandwidth is NICs x this."""
    source: str = ""
    """Where the figures come from."""

    def __post_init__(self) -> None:
        if self.latency_s < 0 or self.busbw_bytes_per_s <= 0:
            raise ValueError(f"link {self.name!r}: latency must be >= 0 and bandwidth > 0")


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuSpec:
    """One accelerator type and the node it usually sits in."""

    name: str
    """Catalog name (e.g. H200-SXM-141GB)."""
    memory_bytes: int
    """Device memory from the datasheet."""
    usable_memory_bytes: int
    """What training can allocate (device memory less context/communicator buffers)."""
    bf16_flops_per_s: float
    """Dense bf16 matrix peak, FLOP/s (no sparsity)."""
    hbm_bytes_per_s: float
    """Memory bandwidth, bytes/s."""
    intra_node_link: str
    """Link between GPUs of one node (catalog link name)."""
    inter_node_link: str
    """Default NIC type between nodes (catalog link name)."""
    nics_per_node: int
    """NICs per node for inter-node traffic."""
    max_gpus_per_node: int = 8
    """GPUs in a full node."""
    source: str = ""
    """Datasheet sources."""

    def __post_init__(self) -> None:
        if self.usable_memory_bytes <= 0 or self.bf16_flops_per_s <= 0:
            raise ValueError(f"gpu {self.name!r}: memory and FLOP/s must be positive")


@dataclass(frozen=True, kw_only=True, slots=True)
class IslandSpec:
    """An FSDP island: nodes x GPUs per node of one GPU type; collectives ring over all of them."""

    gpu: GpuSpec
    """Accelerator type."""
    num_nodes: int
    """Nodes in the island."""
    gpus_per_node: int
    """GPUs used per node."""
    intra_link: str
    """Link between GPUs of a node."""
    inter_link: str
    """NIC type between nodes (unused when num_nodes == 1)."""
    nics_per_node: int = 1
    """NICs per node."""

    def __post_init__(self) -> None:
        if self.num_nodes <= 0 or self.gpus_per_node <= 0:
            raise ValueError(f"island needs positive nodes and GPUs per node, got "
                             f"{self.num_nodes} x {self.gpus_per_node}")

    @property
    def num_gpus(self) -> int:
        return self.num_nodes * self.gpus_per_node

    @property
    def ring_links(self) -> tuple[str, ...]:
        """Link types a ring over the island crosses (the slowest decides)."""
        if self.num_gpus == 1:
            return ()
        links = []
        if self.gpus_per_node > 1:
            links.append(self.intra_link)
        if self.num_nodes > 1:
            links.append(self.inter_link)
        return tuple(links)
