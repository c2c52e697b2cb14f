"""Collective model: the paper's ring formula by hand, slowest link, NICs, WAN, fitting."""

from __future__ import annotations

import numpy as np
import pytest

from perfmodel.costs.comm import (
    OPS,
    RING_OPS,
    CommModel,
    LinkCoefficients,
    comm_mape_table,
    fit_comm,
    load_comm_dataset,
    ring_time_s,
    synthetic_comm_dataset,
)
from perfmodel.profiles.fit import with_comm_fit
from perfmodel.profiles.profile import make_prior_profile
from perfmodel.spec.catalog import get_gpu, get_link
from perfmodel.spec.errors import ProfileError
from perfmodel.spec.formulas import ring_terms, sync_time_s
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


# ---- point-to-point (pipeline stage boundaries) -------------------------------------------------

def test_send_recv_is_one_step_of_the_whole_payload_at_any_world_size() -> None:
    # 2 MiB between two ranks over 25 GB/s with 20 us: 20e-6 + 2^21 / 25e9 = 1.0389e-4 s
    m = CommModel(backend="nccl", coefficients={("send_recv", "slow"): SLOW})
    for world in (2, 3, 8, 16384):
        t = m.time_s("send_recv", ["slow"], world, 2**21)
        assert t == pytest.approx(20e-6 + 2**21 / 25e9)
        assert t == pytest.approx(1.0389e-4, rel=1e-4)
    assert ring_time_s("send_recv", 1, 2**21, 20e-6, 25e9) == 0.0
    assert list(ring_time_s("send_recv", np.array([1, 2, 4]), 1e6, 1e-5, 1e9)) == \
        pytest.approx([0.0, 1e-5 + 1e-3, 1e-5 + 1e-3])
    steps, moved = ring_terms("send_recv", np.array([1, 2, 64]), 1e6)
    assert list(steps) == [0, 1, 1] and list(moved) == [0, 1e6, 1e6]


def test_the_ring_collectives_are_unchanged_by_send_recv() -> None:
    """k_op·(P−1)·(α + D/(P·B)) for the three collectives, bit for bit (the formula written out
    independently)."""
    P, D, lat, bw = np.array([1.0, 2.0, 3.0, 8.0, 512.0]), 3.3e7, 1.7e-5, 4.4e10
    for op, k in (("all_gather", 1.0), ("reduce_scatter", 1.0), ("all_reduce", 2.0)):
        expected = k * np.maximum(P - 1.0, 0.0) * (lat + D / (np.maximum(P, 1.0) * bw))
        assert np.array_equal(ring_time_s(op, P, D, lat, bw), expected)
        steps, moved = ring_terms(op, P, D)
        assert np.array_equal(steps, k * np.maximum(P - 1.0, 0.0))
        assert np.array_equal(moved, steps / np.maximum(P, 1.0) * D)


def test_send_recv_prior_is_the_links_catalog_figures() -> None:
    link = get_link("gloo-loopback")
    m = CommModel(backend="gloo")
    assert m.provenance("send_recv", ["gloo-loopback"]) == "prior"
    assert m.time_s("send_recv", ["gloo-loopback"], 2, 1e6) == pytest.approx(
        link.latency_s + 1e6 / link.busbw_bytes_per_s)
    # prior profiles list the ring collectives only: send_recv reads the same catalog figures
    prior = make_prior_profile("H100-SXM5-80GB")
    assert {op for op, _ in prior.comm.coefficients} == set(RING_OPS)
    assert prior.comm_time_s("send_recv", ["ib-ndr400"], 2, 1e8) == pytest.approx(
        get_link("ib-ndr400").latency_s + 1e8 / get_link("ib-ndr400").busbw_bytes_per_s)


def test_fit_recovers_send_recv_through_ring_terms(tmp_path) -> None:
    true = {("send_recv", "gloo-loopback"): LinkCoefficients(latency_s=60e-6,
                                                             bandwidth_bytes_per_s=1.5e9)}
    frame = synthetic_comm_dataset(true, backend="gloo", world_sizes=(2,),
                                   payloads_bytes=(2**14, 2**17, 2**20, 2**23, 2**26),
                                   noise=0.01, seed=2)
    path = tmp_path / "p2p.csv"
    frame.to_csv(path, index=False)
    loaded = load_comm_dataset(str(path))  # the dataset reader accepts the op
    fitted, _ = fit_comm(loaded, n_splits=5)
    c = fitted[("send_recv", "gloo-loopback")]
    assert c.latency_s == pytest.approx(60e-6, rel=0.1)
    assert c.bandwidth_bytes_per_s == pytest.approx(1.5e9, rel=0.05)


def test_a_second_comm_fit_keeps_the_first_datasets_provenance() -> None:
    """Fitting send_recv from its own dataset (cpu-p2p.csv) after the collectives (cpu-comm.csv)
    adds coefficients and a cited dataset; refitting a file replaces its own entry only."""
    ring = LinkCoefficients(latency_s=5e-5, bandwidth_bytes_per_s=1e9, provenance="measured",
                            cv_mape_pct=8.0, rows=36)
    p2p = LinkCoefficients(latency_s=4e-5, bandwidth_bytes_per_s=2e9, provenance="measured",
                           cv_mape_pct=5.0, rows=12)

    def fit(base, coefs, path):
        flags = [{"fit": "comm", "parameter": f"{op}/{link}.latency_s", "value": 0.0}
                 for op, link in coefs]
        return with_comm_fit(base, name="cpu", hardware="CPU-x86-2core", backend="gloo",
                             coefficients=coefs,
                             dataset={"kind": "comm", "path": path, "sha256": "0" * 64,
                                      "rows": 1},
                             command=f"fit comm {path}", fit_date="2026-12-02",
                             at_bound=flags, repeats={"rows": len(coefs)})

    first = fit(None, {(op, "gloo-loopback"): ring for op in RING_OPS}, "comm.csv")
    both = fit(first, {("send_recv", "gloo-loopback"): p2p}, "p2p.csv")
    detail = both.provenance_detail
    assert [(d["path"], d["fits"]) for d in detail["datasets"]] == [
        ("comm.csv", sorted(f"{op}/gloo-loopback" for op in RING_OPS)),
        ("p2p.csv", ["send_recv/gloo-loopback"])]
    assert set(detail["cv_mape_pct"]) == {f"{op}/gloo-loopback" for op in OPS}
    assert sorted(f["parameter"] for f in detail["at_bound"]) == sorted(
        f"{op}/gloo-loopback.latency_s" for op in OPS)
    assert detail["repeats"] == {"comm": {"rows": 3}, "comm:p2p.csv": {"rows": 1}}
    assert both.comm.resolve("all_gather", "gloo-loopback") == ring
    assert both.comm.resolve("send_recv", "gloo-loopback") == p2p
    again = fit(both, {(op, "gloo-loopback"): ring for op in RING_OPS}, "comm.csv")
    assert [d["path"] for d in again.provenance_detail["datasets"]] == ["p2p.csv", "comm.csv"]
