"""Power model: energy of a simulated timeline, by hand, and the energy catalogs."""

from __future__ import annotations

import math

import pytest

from perfmodel.costs.power import (
    DEFAULT_POWER,
    PowerAssumptions,
    StepActivity,
    activity_from_schedule,
    co2_kg,
    island_step_energy_j,
)
from perfmodel.sim.graph import TaskGraph
from perfmodel.spec.energy_catalog import carbon_intensity_g_per_kwh, carbon_table, provider_pue
from perfmodel.spec.errors import CatalogError, UserInputError


def _two_stream_schedule():
    """AG 1 s, then forward 3 s overlapped by RS 2 s, then an exposed AG of 1.5 s, then 1 s of
    compute."""
    g = TaskGraph()
    ag = g.add("ag0", island="i", stream="comm", kind="all_gather", duration_s=1.0)
    fwd = g.add("fwd", island="i", stream="compute", kind="forward", duration_s=3.0, deps=[ag])
    rs = g.add("rs", island="i", stream="comm", kind="reduce_scatter", duration_s=2.0, deps=[ag])
    ag1 = g.add("ag1", island="i", stream="comm", kind="all_gather", duration_s=1.5, deps=[fwd, rs])
    g.add("bwd", island="i", stream="compute", kind="backward", duration_s=1.0, deps=[ag1])
    return g.simulate()


def test_activity_is_read_off_the_timeline():
    act = activity_from_schedule(_two_stream_schedule(), "i")
    # timeline: [0,1] AG alone, [1,4] fwd (RS under it until 3), [4,5.5] AG alone, [5.5,6.5] bwd
    assert act.step_s == pytest.approx(6.5)
    assert act.compute_s == pytest.approx(4.0)
    assert act.comm_only_s == pytest.approx(2.5)
    assert act.idle_s == pytest.approx(0.0)


def test_island_energy_by_hand():
    act = activity_from_schedule(_two_stream_schedule(), "i")
    tdp, pue, gpus, wait = 700.0, 1.2, 8, 3.5
    p = DEFAULT_POWER
    per_gpu_w_s = (tdp * p.compute_frac * 4.0 + tdp * p.comm_frac * 2.5 + p.host_w_per_gpu * 6.5
                   + (tdp * p.idle_frac + p.host_w_per_gpu) * wait)
    expected = pue * gpus * per_gpu_w_s
    got = island_step_energy_j(act, num_gpus=gpus, tdp_w=tdp, pue=pue, wait_s=wait)
    assert got == pytest.approx(expected)
    # kg CO2e at 400 g/kWh
    assert co2_kg(got, 400.0) == pytest.approx(expected / 3.6e6 * 0.4)


def test_busy_gpu_hour_is_physically_plausible():
    """One H100 GPU-hour at full compute: 0.7 kW GPU + host, times a hyperscaler PUE -> ~1.1 kWh."""
    act = StepActivity(step_s=3600.0, compute_s=3600.0, comm_only_s=0.0)
    kwh = island_step_energy_j(act, num_gpus=1, tdp_w=700.0, pue=1.15) / 3.6e6
    assert 0.7 < kwh < 1.5


@pytest.mark.parametrize("kwargs", [dict(idle_frac=0.5, comm_frac=0.3), dict(compute_frac=math.nan),
                                    dict(host_w_per_gpu=-1.0), dict(idle_frac=True)])
def test_bad_assumptions_are_rejected(kwargs):
    with pytest.raises(UserInputError):
        PowerAssumptions(**kwargs)


def test_bad_pue_and_intensity():
    act = StepActivity(step_s=1.0, compute_s=1.0, comm_only_s=0.0)
    with pytest.raises(UserInputError):
        island_step_energy_j(act, num_gpus=1, tdp_w=700.0, pue=0.9)
    with pytest.raises(UserInputError):
        co2_kg(1.0, math.nan)


def test_carbon_catalog_has_sources_and_years():
    table = carbon_table()
    assert len(table) > 300
    assert (table["source"].str.len() > 20).all()
    assert table["as_of"].str.fullmatch(r"\d{4}-\d{2}-\d{2}").all()
    # EPA eGRID state rows convert lbs/MWh once: Virginia 2023 is 539.599 lb/MWh
    assert carbon_intensity_g_per_kwh("us-state/virginia") == pytest.approx(
        539.599 * 0.453592, rel=1e-5
    )
    assert carbon_intensity_g_per_kwh("aws/us-east-1") == carbon_intensity_g_per_kwh(
        "us-state/virginia"
    )


def test_unknown_region_suggests():
    with pytest.raises(CatalogError, match="did you mean"):
        carbon_intensity_g_per_kwh("gcp/us-central")


def test_pue_lookup():
    assert provider_pue("AWS p5.48xlarge")[0] == pytest.approx(1.15)
    pue, provenance = provider_pue("RunPod")
    assert pue == pytest.approx(1.57) and provenance.startswith("default")


def test_bench_sidecar_records_energy_or_says_what_is_missing(tmp_path):
    import json

    from perfmodel.bench.environment import (
        _record_energy_at_exit,
        append_environment,
        energy_counters,
    )

    start = energy_counters()
    assert start.get("nvml") or start.get("rapl_uj") or start["energy_unavailable"]
    path = append_environment(tmp_path / "x.csv", {"benchmark": "test"})
    session = json.loads(path.read_text())["sessions"][0]
    assert "energy_at_start" in session
    _record_energy_at_exit(path, 0, session["energy_at_start"], 0.0)  # what atexit does
    measured = json.loads(path.read_text())["sessions"][0]["energy_measured"]
    assert measured["window_s"] > 0
    if "nvml" in measured:
        assert all(d["energy_j"] >= 0 for d in measured["nvml"])
    else:
        assert measured.get("rapl_j") or any("NVML" in m for m in measured["energy_unavailable"])
