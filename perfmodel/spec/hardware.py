"""Hardware specs: GPUs, links, islands. SI units inside (bytes, bytes/s, FLOP/s, seconds).

Model, execution and system specs are kept apart (Calculon style): this module knows nothing of
transformers. Units are converted once, when catalogs are loaded (`perfmodel.spec.catalog`).
"""

from __future__ import annotations

from dataclasses import dataclass


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
    fp8_flops_per_s: float | None = None
    """Dense FP8 matrix peak, FLOP/s (no sparsity); None where the datasheet lists no FP8 (A100
    and older: no FP8 tensor cores)."""

    def __post_init__(self) -> None:
        if self.usable_memory_bytes <= 0 or self.bf16_flops_per_s <= 0:
            raise ValueError(f"gpu {self.name!r}: memory and FLOP/s must be positive")
        if self.fp8_flops_per_s is not None and not self.fp8_flops_per_s > 0:
            raise ValueError(f"gpu {self.name!r}: the FP8 FLOP/s must be positive or absent")


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


@dataclass(frozen=True, kw_only=True, slots=True)
class ClusterSpec:
    """A pool of identical nodes the planner may carve islands from (DESIGN §3)."""

    name: str
    """Cluster name as the user calls it (A, B, aws-us-east-1, ...)."""
    gpu: GpuSpec
    """Accelerator type of every node."""
    num_nodes: int
    """Nodes available."""
    gpus_per_node: int
    """GPUs per node available."""
    allowed_gpus_per_node: tuple[int, ...]
    """GPUs-per-node counts an island may use."""
    usd_per_gpu_hour: float
    """Price of one GPU-hour."""
    intra_link: str
    """Link between the GPUs of a node."""
    inter_link: str
    """NIC type between nodes."""
    nics_per_node: int
    """NICs per node."""
    wan_bw_bytes_per_s: float
    """Uplink bandwidth of the cluster to other islands, bytes/s."""
    wan_latency_s: float
    """One-way WAN latency to other islands, seconds."""

    def __post_init__(self) -> None:
        if self.num_nodes <= 0 or self.gpus_per_node <= 0 or self.usd_per_gpu_hour < 0:
            raise ValueError(f"cluster {self.name!r}: sizes must be positive and price >= 0")
        bad = [g for g in self.allowed_gpus_per_node if g <= 0 or g > self.gpus_per_node]
        if bad or not self.allowed_gpus_per_node:
            raise ValueError(f"cluster {self.name!r}: allowed_gpus_per_node "
                             f"{self.allowed_gpus_per_node} must be non-empty and within "
                             f"1..{self.gpus_per_node}")

    def island(self, num_nodes: int, gpus_per_node: int) -> IslandSpec:
        """The island of `num_nodes` x `gpus_per_node` GPUs of this cluster."""
        return IslandSpec(gpu=self.gpu, num_nodes=num_nodes, gpus_per_node=gpus_per_node,
                          intra_link=self.intra_link, inter_link=self.inter_link,
                          nics_per_node=self.nics_per_node)
