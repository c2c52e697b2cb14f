"""Collective-communication model (paper §III-B, DESIGN §2).

Ring all_gather / reduce_scatter of a D-byte UNSHARDED payload over P ranks:

    T = k_op · (P − 1) · (max α + D / (P · min B)),
    k_op = 1 (all_gather, reduce_scatter), 2 (all_reduce)

α (latency_s per ring step) and B (bandwidth_bytes_per_s) are coefficients per (backend, op, link);
the slowest link on the ring decides (largest α, smallest B). B is in nccl-tests "bus bandwidth"
terms (busbw = algbw·(P−1)/P for all_gather, ·2(P−1)/P for all_reduce), so catalog busbw figures
(catalogs/links.csv) are priors for it. Each op is fitted separately: where a backend implements
an op on top of another (Gloo on CPU runs reduce_scatter through all_reduce) the extra factor is
folded into that op's fitted α and B, and k_op stays as above.

Inter-node links carry bandwidth PER NIC: a node's ring bandwidth is n_nic x B, with n_nic =
min(NICs per node, GPUs per node) (NCCL runs one ring channel per NIC, rail-matched to one GPU
each). This reproduces the 84.8 GB/s busbw of 3 nodes x 8 A100 with 4 HDR-200 NICs
(shared/data/collectives.csv) from 21.2 GB/s per NIC.

Point-to-point (op `send_recv`, a pipeline stage boundary): one transfer of D bytes between two
ranks, T = α + D / B, whatever the size of the job (no ring: one step of the whole payload). Its
prior is the link's catalog latency and bus bandwidth, as for the collectives; its fit runs
through the same `fit_link` (the design columns of `formulas.ring_terms` are 1 and D), on the
`send_recv` rows of `shardmeter bench comm --ops send_recv`.

All-to-all (mixture-of-experts dispatch and combine over an expert-parallel group of P ranks,
`CommModel.all_to_all_time_s`): each rank sends D_send = (P − 1)/P of its D bytes to the P − 1
others, one message each, so a pairwise exchange takes T = (P − 1)·α + D_send / B; with
D_send = D·(P − 1)/P that is exactly the ring all_gather formula of an unsharded payload D. A
profile with fitted `all_to_all` coefficients for a link uses them; otherwise the link's
all_gather coefficients time it and the provenance says so (`all_to_all_provenance`). The
payload per rank is `all_to_all_payload_bytes` (tokens · k · h · bytes · (P − 1)/P). Checked by
tests/test_moe_step.py (payload formula; the time equals the all_gather fit's).

Inline collectives (a tensor- or context-parallel collective on the compute stream,
`perfmodel.sim.fsdp.inline_collectives`): the isolated sweep times each repetition after a barrier
and keeps the median, which is what an FSDP collective overlapped with compute sees. A collective
issued inline, right after compute and waited on before the next op, also pays the ranks' skew
and the collective library's wake-up; on the CPU (gloo's threads share the cores) that is
1.5-6.6x the isolated time (issue 23's TP diagnosis, scripts/profile_tp_step.py). A profile may
therefore carry a second table, `inline_coefficients`, fitted on `shardmeter bench comm --inline`
(each repetition a fixed matmul then the functional collective DTensor issues, then its wait; no
barrier; the mean excess over the matmul alone). `group_time_s(..., inline=True)` uses it where
it covers every link of the group, else the isolated coefficients (a GPU profile has none: NCCL
kernels queue on the stream without host wake-up, so its isolated fit stands for both).
Checked by tests/test_comm_inline.py (the table is used only inline and only where it covers the
group; the worker's rows fit back through `fit_link`).

The ring formula itself lives in `perfmodel.spec.formulas` (one home, shared with the planner):
`ring_time_s` times a collective, `ring_terms` is its linear form the fit uses.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from perfmodel.spec.catalog import get_link, load_links
from perfmodel.spec.errors import CatalogError, DatasetError, ProfileError
from perfmodel.spec.formulas import OP_MULTIPLIER, ring_terms, ring_time_s

if TYPE_CHECKING:
    import pandas as pd

    from perfmodel.spec.hardware import IslandSpec
    from perfmodel.spec.layout import CommGroup

logger = logging.getLogger(__name__)

OPS = tuple(OP_MULTIPLIER)
"""Operations the model times: the ring collectives and send_recv (k_op of each:
`perfmodel.spec.formulas.OP_MULTIPLIER`)."""
RING_OPS = tuple(op for op in OPS if op != "send_recv")
"""The ring collectives (all_gather, reduce_scatter, all_reduce): what a prior profile lists per
link. A profile without send_recv coefficients for a link times it with the link's catalog prior
(`CommModel.resolve`), the same figures a prior profile would list."""
BACKENDS = ("nccl", "gloo", "rccl")
COMM_COLUMNS = ("backend", "op", "link", "world_size", "payload_bytes", "time_s")
"""Required columns of a communication dataset (optional: nics_per_node)."""
COMM_KEY = ("backend", "op", "link", "world_size", "payload_bytes", "nics_per_node",
            "filler_side")
"""Columns naming one configuration of a collective: rows equal on them are repeats
(filler_side: the matmul an inline row's collective follows; 0 in an isolated dataset)."""


@dataclass(frozen=True, kw_only=True)
class LinkCoefficients:
    """Latency and bandwidth coefficients of one (op, link)."""

    latency_s: float
    """α: time per ring step independent of size, seconds."""
    bandwidth_bytes_per_s: float
    """B: bus bandwidth per rank (per NIC for per-NIC links), bytes/s."""
    per_nic: bool = False
    """B is per NIC: a node's ring bandwidth is NICs x B."""
    provenance: str = "prior"
    """'measured' (fitted from a dataset) or 'prior' (catalog datasheet figure)."""
    cv_mape_pct: float | None = None
    """Cross-validated MAPE of the fit, percent (measured only): k-fold over configurations
    (repeats of one configuration enter as their median, on one side of each split)."""
    rows: int = 0
    """Measurements the fit used (every repeat counted)."""
    wait_per_compute: float = 0.0
    """s: seconds an inline collective adds per second of compute since the ranks last
    synchronised (their skew, and compute slowed beside the collective library's threads);
    fitted on inline rows (module doc), 0 for isolated coefficients."""

    def __post_init__(self) -> None:
        if not self.wait_per_compute >= 0:
            raise ValueError(f"need wait_per_compute >= 0, got {self.wait_per_compute}")
        if not self.latency_s >= 0 or not self.bandwidth_bytes_per_s > 0:
            raise ValueError(f"need latency_s >= 0 and bandwidth_bytes_per_s > 0, got "
                             f"{self.latency_s}, {self.bandwidth_bytes_per_s}")


def prior_link_coefficients(link_name: str) -> LinkCoefficients:
    """Catalog prior of a link (catalogs/links.csv latency and busbw), the same for every op."""

    link = get_link(link_name)
    return LinkCoefficients(latency_s=link.latency_s, bandwidth_bytes_per_s=link.busbw_bytes_per_s,
                            per_nic=link.per_nic, provenance="prior")


@dataclass(frozen=True, kw_only=True)
class CommModel:
    """Fitted or prior coefficients per (op, link); links missing here fall back to the catalog."""

    backend: str
    """Collective library: nccl, gloo or rccl."""
    coefficients: Mapping[tuple[str, str], LinkCoefficients] = field(default_factory=dict)
    """(op, link name) -> coefficients."""
    inline_coefficients: Mapping[tuple[str, str], LinkCoefficients] = field(
        default_factory=dict)
    """(op, link name) -> coefficients of a collective issued inline on the compute stream
    (module doc); empty: the isolated coefficients time inline collectives too."""

    def _inline(self, op: str, links: Sequence[str]) -> CommModel | None:
        """The model that times an inline collective of `op` over `links`: the inline table as
        a model of its own where it has (op, link) for every link of the ring, else None (the
        isolated coefficients time it; module doc)."""
        table = self.inline_coefficients
        if not links or not all((op, n) in table or (op, n.lower()) in table for n in links):
            return None
        return CommModel(backend=self.backend, coefficients=table)

    def resolve(self, op: str, link: str) -> LinkCoefficients:
        """Coefficients of (op, link): the profile's own, else the catalog prior."""
        if op not in OP_MULTIPLIER and op != "all_to_all":   # all_to_all: fitted ones only
            raise ValueError(f"unknown collective {op!r}; expected one of {OPS}")
        found = self.coefficients.get((op, link)) or self.coefficients.get((op, link.lower()))
        if found is not None:
            return found
        try:
            return prior_link_coefficients(link)
        except CatalogError as err:
            raise ProfileError(
                f"no {op} coefficients for link {link!r} in the profile and no catalog prior for "
                f"it ({err.message})",
                hint="fit the link with `shardmeter fit comm`, or use a catalog link name "
                     "(`shardmeter catalog links`).") from err

    def effective(self, op: str, links: Sequence[str],
                  nics_per_node: float = 1) -> tuple[float, float]:
        """(max latency_s, min bandwidth_bytes_per_s) over the links a ring crosses; a per-NIC
        link gets `nics_per_node` NICs (a share below 1 when groups share a NIC)."""
        coefs = [self.resolve(op, name) for name in links]
        lat = max(c.latency_s for c in coefs)
        if not nics_per_node > 0:
            raise ValueError(f"nics_per_node must be > 0, got {nics_per_node}")
        # an island's ring uses whole NICs (at least one); a group's ring may share one
        share = max(nics_per_node, 1) if isinstance(nics_per_node, int) else nics_per_node
        bw = min(c.bandwidth_bytes_per_s * (share if c.per_nic else 1.0) for c in coefs)
        return lat, bw

    def group_time_s(self, op: str, group: CommGroup, payload_bytes: Any, *,
                     inline: bool = False, compute_s: Any = 0.0) -> Any:
        """One collective over a parallel group as placed on the nodes (`perfmodel.spec.layout`):
        a ring over its links with its NIC share; an all_reduce across nodes as NCCL's tree when
        that is faster (latency 2·(members per node − 1 + ⌈log2 nodes⌉)·α instead of the ring's
        2·(P − 1)·α, the same bus bandwidth): NCCL picks the faster algorithm per size, and a
        16k-rank ring's latency would otherwise dominate every large layout. `inline`: issued on
        the compute stream after `compute_s` of compute since the ranks last synchronised (the
        inline table where it covers the group, plus its wait_per_compute · compute_s; module
        doc)."""
        if group.size <= 1:
            zero = np.zeros(np.shape(payload_bytes))
            return float(zero) if zero.ndim == 0 else zero
        table = self._inline(op, group.links) if inline else None
        if table is not None:
            wait = max(table.resolve(op, name).wait_per_compute for name in group.links)
            out = (table.group_time_s(op, group, payload_bytes)
                   + wait * np.asarray(compute_s, dtype=float))
            return float(out) if np.ndim(out) == 0 else out
        lat, bw = self.effective(op, group.links, group.nics)
        ring = ring_time_s(op, group.size, payload_bytes, lat, bw)
        if op != "all_reduce" or not group.crosses_nodes:
            return ring
        depth = group.members_per_node - 1 + math.ceil(math.log2(group.nodes))
        tree = ring - OP_MULTIPLIER[op] * (group.size - 1) * lat + 2.0 * depth * lat
        return np.minimum(ring, tree) if np.ndim(ring) else min(ring, tree)

    def _all_to_all_op(self, links: Sequence[str]) -> str:
        """The op whose coefficients time an all-to-all over `links`: all_to_all where the
        profile fitted it on every link, else all_gather (module doc)."""
        fitted = all(("all_to_all", name) in self.coefficients
                     or ("all_to_all", name.lower()) in self.coefficients for name in links)
        return "all_to_all" if links and fitted else "all_gather"

    def all_to_all_time_s(self, group: CommGroup, send_bytes: Any) -> Any:
        """One all-to-all over an expert-parallel group: (P − 1)·α + send_bytes / B, where
        `send_bytes` is what one rank sends to the others (`all_to_all_payload_bytes`)."""
        if group.size <= 1:
            zero = np.zeros(np.shape(send_bytes))
            return float(zero) if zero.ndim == 0 else zero
        op = self._all_to_all_op(group.links)
        lat, bw = self.effective(op, group.links, group.nics)
        out = (group.size - 1) * lat + np.asarray(send_bytes, dtype=float) / bw
        return float(out) if out.ndim == 0 else out

    def all_to_all_provenance(self, group: CommGroup) -> str:
        """Where the all-to-all coefficients of `group` come from, in words."""
        if group.size <= 1:
            return "none (one rank)"
        op = self._all_to_all_op(group.links)
        kind = self.provenance(op, group.links)
        return (f"{kind} all_to_all" if op == "all_to_all" else
                f"{kind} all_gather coefficients (no all-to-all measured)")

    def time_s(self, op: str, links: Sequence[str], world_size: Any, payload_bytes: Any,
               nics_per_node: float = 1) -> Any:
        """Predicted time of one ring collective; 0 for an empty ring or world_size 1."""
        if not links:
            P = np.asarray(world_size, dtype=float)
            if np.any(P > 1):
                raise ValueError("a ring over more than one rank must cross at least one link")
            zero = np.zeros(np.broadcast(P, np.asarray(payload_bytes)).shape)
            return float(zero) if zero.ndim == 0 else zero
        lat, bw = self.effective(op, links, nics_per_node)
        return ring_time_s(op, world_size, payload_bytes, lat, bw)

    def provenance(self, op: str, links: Sequence[str], *, inline: bool = False) -> str:
        """'measured', 'prior' or 'mixed' for the coefficients a prediction over `links` uses
        (`inline`: of a collective issued on the compute stream)."""
        table = self._inline(op, links) if inline else None
        if table is not None:
            return table.provenance(op, links)
        kinds = {self.resolve(op, name).provenance for name in links}
        if not kinds:
            return "none"
        return kinds.pop() if len(kinds) == 1 else "mixed"

    def island_time_s(self, op: str, island: IslandSpec, payload_bytes: Any) -> Any:
        """Ring collective over all GPUs of an island (intra link per GPU, inter link per NIC)."""
        return self.time_s(op, island.ring_links, island.num_gpus, payload_bytes,
                           island_nics(island))


def all_to_all_payload_bytes(tokens: Any, experts_per_token: int, hidden_size: int,
                             element_bytes: float, ep: int) -> Any:
    """Bytes one rank sends in one dispatch (or combine) all-to-all of an MoE layer: each of its
    `tokens` goes to k experts as an h-wide activation, and (ep − 1)/ep of the copies land on
    other ranks of the expert-parallel group (uniform routing)."""
    return (np.asarray(tokens, dtype=float) * experts_per_token * hidden_size * element_bytes
            * (ep - 1) / ep)


def island_nics(island: IslandSpec) -> int:
    """NICs a node's inter-node ring traffic uses: one per GPU in use, at most the node's NICs."""
    return max(1, min(island.nics_per_node, island.gpus_per_node))


# ---- datasets and fitting ------------------------------------------------------------------

def load_comm_dataset(path: str) -> pd.DataFrame:
    """A communication dataset (COMM_COLUMNS; payload_bytes is the full unsharded payload)."""
    # lazy: the fitting half imports pandas, scipy and sklearn here, not at module level: a
    # prediction only needs the coefficients and must not pay seconds of imports (issue 29)
    from perfmodel.costs.datasets import numeric_column, read_dataset_csv

    frame = read_dataset_csv(path, COMM_COLUMNS, positive_int=("world_size",),
                             positive_float=("payload_bytes", "time_s"),
                             choices={"backend": BACKENDS, "op": OPS})
    for column in ("filler_side", "compute_s"):   # inline rows only; 0 elsewhere
        if column not in frame.columns or (frame[column].str.strip() == "").all():
            frame[column] = 0
        else:
            frame[column] = numeric_column(frame, column, path, integer=column == "filler_side")
    if "nics_per_node" not in frame.columns:
        frame["nics_per_node"] = "1"
    frame["nics_per_node"] = frame["nics_per_node"].replace("", "1")
    frame["nics_per_node"] = numeric_column(frame, "nics_per_node", path, integer=True)
    frame["link"] = frame["link"].str.strip()
    empty = frame["link"] == ""
    if empty.any():
        i = int(np.argmax(empty.to_numpy()))
        raise DatasetError(f"{path}, line {i + 2}: column 'link' is empty",
                           hint="name the slowest link the ring crosses (e.g. nvlink4, ib-ndr400).")
    frame.attrs["path"] = str(path)
    return frame


def _design(op: str, world: np.ndarray, payload: np.ndarray, nics: np.ndarray,
            compute: np.ndarray | None = None) -> np.ndarray:
    """Columns multiplying α and 1/B (`formulas.ring_terms`); a per-NIC link's bandwidth is the
    node's NICs x B, so its bytes divide by the NICs; inline rows add the compute before each
    collective, which multiplies wait_per_compute."""
    steps, moved = ring_terms(op, world, payload)
    columns = [steps, moved / nics] + ([] if compute is None else [compute])
    return np.column_stack(columns)


def fit_link(op: str, frame: pd.DataFrame, *, per_nic: bool = False, n_splits: int = 5,
             seed: int = 0) -> tuple[LinkCoefficients, np.ndarray]:
    """Fit α, β (= 1/B) of one (op, link) by relative-error NNLS, and wait_per_compute on inline
    rows (a `compute_s` column > 0). Returns the coefficients and out-of-fold predictions
    (k-fold, seeded) of the rows."""
    from sklearn.model_selection import KFold  # lazy: see load_comm_dataset

    from perfmodel.costs.datasets import mape_pct  # lazy: see load_comm_dataset
    from perfmodel.costs.nnls import relative_nnls  # lazy: see load_comm_dataset

    world = frame["world_size"].to_numpy(float)
    inline = "compute_s" in frame.columns and bool((frame["compute_s"] > 0).any())
    X = _design(op, world, frame["payload_bytes"].to_numpy(float),
                frame["nics_per_node"].to_numpy(float) if per_nic else np.ones(len(frame)),
                frame["compute_s"].to_numpy(float) if inline else None)
    y = frame["time_s"].to_numpy(float)
    weights = relative_nnls(X, y)
    alpha, beta = weights[0], weights[1]
    oof = np.full(len(y), np.nan)
    k = min(n_splits, len(y))
    if k >= 2:

        for train, test in KFold(n_splits=k, shuffle=True, random_state=seed).split(X):
            oof[test] = X[test] @ relative_nnls(X[train], y[train])
    else:
        oof = X @ weights
    if beta <= 0:
        logger.warning("%s: fitted bandwidth term is zero (time independent of payload); "
                       "bandwidth set to infinity", op)

    coefs = LinkCoefficients(latency_s=float(alpha),
                             bandwidth_bytes_per_s=float(1.0 / beta) if beta > 0 else float("inf"),
                             per_nic=per_nic, provenance="measured",
                             cv_mape_pct=mape_pct(y, oof), rows=len(y),
                             wait_per_compute=float(weights[2]) if inline else 0.0)
    return coefs, oof


def fit_comm(frame: pd.DataFrame, *,
             n_splits: int = 5) -> tuple[dict[tuple[str, str], LinkCoefficients], np.ndarray]:
    """Fit every (op, link) of a one-backend dataset. Rows with world_size 1 are skipped (the
    model predicts 0 s for them). Repeated rows of one configuration (`COMM_KEY`) enter as their
    median (`perfmodel.costs.datasets.configurations`: each configuration once, its repeats on
    one side of every CV split); each row's out-of-fold prediction is its configuration's.
    Returns coefficients and out-of-fold predictions (NaN where skipped). Per-NIC links are those
    marked per_nic in the catalog."""
    from perfmodel.costs.datasets import configurations  # lazy: see load_comm_dataset

    links = load_links()
    out: dict[tuple[str, str], LinkCoefficients] = {}
    oof = np.full(len(frame), np.nan)
    usable = frame["world_size"].to_numpy() > 1
    if (~usable).any():
        logger.warning("%d row(s) with world_size 1 skipped", int((~usable).sum()))
    for op, link, idx in _op_link_groups(frame[usable]):
        rows = np.flatnonzero(usable)[idx]
        per_nic = bool(links[link.lower()].per_nic) if link.lower() in links else False
        configs, ids = configurations(frame.iloc[rows], COMM_KEY)
        coefs, config_oof = fit_link(op, configs, per_nic=per_nic, n_splits=n_splits)
        out[(op, link)], oof[rows] = replace(coefs, rows=len(rows)), config_oof[ids]
        logger.info("%s over %s: latency %.3g s, bandwidth %.3g B/s, CV MAPE %.2f%%", op, link,
                    out[(op, link)].latency_s, out[(op, link)].bandwidth_bytes_per_s,
                    out[(op, link)].cv_mape_pct)
    return out, oof


def _op_link_groups(frame: pd.DataFrame) -> Iterator[tuple[str, str, np.ndarray]]:
    """(op, link, row positions) of every (op, link) group of a communication dataset."""
    for key, idx in frame.groupby(["op", "link"], sort=False).indices.items():
        op, link = cast(tuple[str, str], key)  # pandas types group keys as Hashable
        yield op, link, np.asarray(idx)


def predict_comm_dataset(model: CommModel, frame: pd.DataFrame) -> np.ndarray:
    """Predictions of `model` for every row of a communication dataset (link = the ring's link)."""
    pred = np.zeros(len(frame))
    for op, link, idx in _op_link_groups(frame):
        rows = frame.iloc[idx]
        coef = model.resolve(op, link)
        nics = rows["nics_per_node"].to_numpy(float) if coef.per_nic else 1.0
        pred[idx] = ring_time_s(op, rows["world_size"].to_numpy(float),
                                rows["payload_bytes"].to_numpy(float), coef.latency_s,
                                coef.bandwidth_bytes_per_s * nics)
    return pred


def comm_mape_table(frame: pd.DataFrame, predicted_s: np.ndarray) -> pd.DataFrame:
    """Per (op, link) and per op MAPE (percent), paper §IV-B form."""
    import pandas as pd  # lazy: see load_comm_dataset

    from perfmodel.costs.datasets import mape_pct  # lazy: see load_comm_dataset

    data = frame.assign(predicted_s=predicted_s).dropna(subset=["predicted_s"])
    rows = [{"op": op, "link": link, "rows": len(g),
             "mape_pct": mape_pct(g["time_s"], g["predicted_s"])}
            for (op, link), g in data.groupby(["op", "link"], sort=False)]
    rows += [{"op": op, "link": "all", "rows": len(g),
              "mape_pct": mape_pct(g["time_s"], g["predicted_s"])}
             for op, g in data.groupby("op", sort=False)]
    return pd.DataFrame(rows, columns=["op", "link", "rows", "mape_pct"])


def synthetic_comm_dataset(coefficients: Mapping[tuple[str, str], LinkCoefficients], *,
                           backend: str = "nccl", world_sizes: Sequence[int] = (2, 4, 8),
                           payloads_bytes: Sequence[float] = (2**20, 2**24, 2**27),
                           nics_per_node: int = 1, noise: float = 0.02,
                           seed: int = 0) -> pd.DataFrame:
    """Rows in the comm-dataset format from known coefficients with seeded multiplicative noise."""
    import pandas as pd  # lazy: see load_comm_dataset

    rng = np.random.default_rng(seed)
    records = []
    for (op, link), c in coefficients.items():
        for P in world_sizes:
            for D in payloads_bytes:
                bw = c.bandwidth_bytes_per_s * (nics_per_node if c.per_nic else 1)
                t = ring_time_s(op, P, D, c.latency_s, bw) * float(np.exp(rng.normal(0, noise)))
                records.append({"backend": backend, "op": op, "link": link, "world_size": P,
                                "payload_bytes": int(D), "nics_per_node": nics_per_node,
                                "time_s": t})
    return pd.DataFrame.from_records(records)
