"""Collective model: the paper's ring formula by hand, slowest link, NICs, WAN, fitting."""

from __future__ import annotations

import numpy as np
import pytest

from perfmodel.costs.comm import (
    CommModel,
    LinkCoefficients,
    comm_mape_table,
    fit_comm,
    ring_time_s,
    synthetic_comm_dataset,
)
from perfmodel.spec.catalog import get_gpu, get_link
from perfmodel.spec.errors import ProfileError
from perfmodel.spec.formulas import sync_time_s
from perfmodel.spec.hardware import IslandSpec

FAST = LinkCoefficients(latency_s=5e-6, bandwidth_bytes_per_s=300e9, provenance="measured")
SLOW = LinkCoefficients(latency_s=20e-6, bandwidth_bytes_per_s=25e9, provenance="measured")


def model(**links: LinkCoefficients) -> CommModel:
    return CommModel(backend="nccl", coefficients={
        (op, name): c for name, c in links.items()
        for op in ("all_gather", "reduce_scatter", "all_reduce")})


def test_all_gather_by_hand() -> None:
    # P = 8 ranks, D = 1 GiB unsharded: 7 steps of (5 us + 2^30 B / (8 x 300 GB/s))
    # = 7 x (5e-6 + 4.4739e-4) = 3.1667e-3 s
    t = model(fast=FAST).time_s("all_gather", ["fast"], 8, 2**30)
    assert t == pytest.approx(7 * (5e-6 + 2**30 / (8 * 300e9)))
    assert t == pytest.approx(3.1667e-3, rel=1e-4)


def test_all_reduce_is_twice_reduce_scatter_and_world_one_is_free() -> None:
    m = model(fast=FAST)
    rs = m.time_s("reduce_scatter", ["fast"], 4, 1e8)
    assert m.time_s("all_reduce", ["fast"], 4, 1e8) == pytest.approx(2 * rs)
    assert rs == pytest.approx(3 * (5e-6 + 1e8 / (4 * 300e9)))
    assert m.time_s("all_gather", ["fast"], 1, 1e8) == 0.0
    assert m.time_s("all_gather", [], 1, 1e8) == 0.0


def test_slowest_link_decides_latency_and_bandwidth_separately() -> None:
    high_lat = LinkCoefficients(latency_s=30e-6, bandwidth_bytes_per_s=100e9)
    low_bw = LinkCoefficients(latency_s=5e-6, bandwidth_bytes_per_s=10e9)
    m = model(a=high_lat, b=low_bw)
    # 16 ranks, 64 MiB: 15 x (30 us + 2^26 / (16 x 10 GB/s)) = 15 x (3e-5 + 4.194e-4) = 6.741e-3 s
    t = m.time_s("all_gather", ["a", "b"], 16, 2**26)
    assert t == pytest.approx(15 * (30e-6 + 2**26 / (16 * 10e9)))
    assert t == pytest.approx(6.741e-3, rel=1e-3)


def test_vectorised_over_world_size_and_payload() -> None:
    m = model(slow=SLOW)
    P = np.array([2, 4, 8])
    D = np.array([1e6, 1e7, 1e8])
    got = m.time_s("all_gather", ["slow"], P, D)
    want = [m.time_s("all_gather", ["slow"], int(p), float(d)) for p, d in zip(P, D, strict=True)]
    np.testing.assert_allclose(got, want)
    assert m.time_s("all_gather", ["slow"], P, 1e6).shape == (3,)


def test_hierarchical_island_uses_nics_times_per_nic_bandwidth() -> None:
    # shared/data/collectives.csv: 3 nodes x 8 A100, 4 HDR-200 NICs per node: busbw 84.8 GB/s
    prior = CommModel(backend="nccl")
    gpu = get_gpu("A100-SXM4-80GB")
    island = IslandSpec(gpu=gpu, num_nodes=3, gpus_per_node=8, intra_link="nvlink3",
                        inter_link="ib-hdr200", nics_per_node=4)
    lat, bw = prior.effective("all_reduce", island.ring_links, 4)
    assert bw == pytest.approx(84.8e9)
    assert lat == max(get_link("nvlink3").latency_s, get_link("ib-hdr200").latency_s)
    D = 8e9
    t = prior.island_time_s("all_reduce", island, D)
    busbw = 2 * (24 - 1) / 24 * D / t  # nccl-tests convention for all_reduce
    assert busbw == pytest.approx(84.8e9, rel=0.01)  # latency costs < 1% at 8 GB
    # two GPUs per node drive two of the four NICs
    half = IslandSpec(gpu=gpu, num_nodes=2, gpus_per_node=2, intra_link="nvlink3",
                      inter_link="ib-hdr200", nics_per_node=4)
    t2 = prior.island_time_s("all_gather", half, D)
    per_nic = get_link("ib-hdr200").busbw_bytes_per_s
    assert t2 == pytest.approx(ring_time_s("all_gather", 4, D, lat, 2 * per_nic))


def test_wan_all_reduce_matches_design_sigma() -> None:
    # M = 4 islands, P = 1 GB, 10 Gbit/s, 50 ms: 2·3/4·1e9/1.25e9 + 2·3·0.05 = 1.2 + 0.3 = 1.5 s
    assert sync_time_s(4, 1e9, 1.25e9, 0.05) == pytest.approx(1.5)
    got = sync_time_s(np.array([1, 2, 4]), 1e9, 1.25e9, 0.05)
    np.testing.assert_allclose(got, [0.0, 0.8 + 0.1, 1.5])


def test_fallback_to_catalog_prior_is_reported() -> None:
    m = CommModel(backend="nccl", coefficients={("all_gather", "nvlink4"): FAST})
    assert m.provenance("all_gather", ["nvlink4"]) == "measured"
    assert m.provenance("all_gather", ["nvlink4", "ib-ndr400"]) == "mixed"
    assert m.provenance("reduce_scatter", ["nvlink4"]) == "prior"
    prior = m.resolve("reduce_scatter", "nvlink4")
    assert prior.bandwidth_bytes_per_s == get_link("nvlink4").busbw_bytes_per_s
    with pytest.raises(ProfileError, match="warp-drive"):
        m.resolve("all_gather", "warp-drive")


def test_fit_recovers_coefficients_per_op() -> None:
    true = {
        ("all_gather", "loopback"): LinkCoefficients(latency_s=40e-6, bandwidth_bytes_per_s=5e9),
        # a backend that runs reduce_scatter through all_reduce: twice the cost, folded in
        ("reduce_scatter", "loopback"): LinkCoefficients(
            latency_s=80e-6, bandwidth_bytes_per_s=2.5e9
        ),
        ("all_reduce", "ib-hdr200"): LinkCoefficients(
            latency_s=12e-6, bandwidth_bytes_per_s=21.2e9, per_nic=True
        ),
    }
    frame = synthetic_comm_dataset(true, backend="gloo", world_sizes=(2, 3, 4, 8),
                                   payloads_bytes=(2**10, 2**16, 2**20, 2**24, 2**27),
                                   nics_per_node=4, noise=0.01, seed=1)
    fitted, oof = fit_comm(frame)
    assert set(fitted) == set(true)
    for key, c in true.items():
        assert fitted[key].latency_s == pytest.approx(c.latency_s, rel=0.1)
        assert fitted[key].bandwidth_bytes_per_s == pytest.approx(c.bandwidth_bytes_per_s, rel=0.05)
        assert fitted[key].provenance == "measured" and fitted[key].cv_mape_pct < 3
    assert fitted[("all_reduce", "ib-hdr200")].per_nic  # per-NIC bandwidth (4 NICs divided out)
    table = comm_mape_table(frame, oof)
    assert set(table[table["link"] == "all"]["op"]) == {
        "all_gather",
        "reduce_scatter",
        "all_reduce",
    }
    assert (table["mape_pct"] < 3).all()
