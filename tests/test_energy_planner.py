"""Energy and CO2 of plans (issue 14): the table's activity split, one plan by hand, the exact
time-vs-energy/CO2 frontier against brute force, caps, and the CLI."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfmodel.costs.power import (
    DEFAULT_POWER,
    StepActivity,
    activity_from_schedule,
    co2_kg,
    island_step_energy_j,
)
from perfmodel.profiles.profile import default_profile
from perfmodel.sim.fsdp import simulate_step, step_costs
from perfmodel.spec.catalog import get_gpu, get_model
from perfmodel.spec.energy_catalog import carbon_intensity_g_per_kwh, provider_pue
from perfmodel.spec.errors import InfeasibleError
from perfmodel.spec.hardware import ClusterSpec
from perfmodel.tables import build_island_table
from planner.analysis.energy import brute_energy_frontier, min_co2_within_cost, solve_energy
from planner.model.evaluate import build_problem
from planner.model.instance import Instance
from planner.model.island_table import ENERGY_COLUMNS, TABLE_COLUMNS, validate_island_table
from planner.solvers.baselines import BruteForce
from planner.solvers.energy_dp import energy_frontier

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
MODEL = get_model("Llama-3.2-1B")
SEQ = 4096
CLUSTERS = [
    ClusterSpec(
        name=name, gpu=get_gpu(gpu), num_nodes=nodes, gpus_per_node=8,
        allowed_gpus_per_node=allowed, usd_per_gpu_hour=1.0,
        intra_link=get_gpu(gpu).intra_node_link, inter_link=get_gpu(gpu).inter_node_link,
        nics_per_node=get_gpu(gpu).nics_per_node, wan_bw_bytes_per_s=1.25e9, wan_latency_s=0.05,
    )
    for name, gpu, nodes, allowed in (
        ("A", "H100-SXM5-80GB", 2, (1, 8)),
        ("B", "A100-PCIe-80GB", 1, (8,)),
    )
]
REGIONS = ("us-state/virginia", "country/FIN", "gcp/us-central1", "country/DEU")


def test_activity_split_is_linear_in_k_and_matches_the_graph() -> None:
    table = build_island_table(MODEL, seq_len=SEQ, ac="selective", clusters=CLUSTERS)
    assert set(ENERGY_COLUMNS) <= set(table.columns)
    for _, row in table.sample(5, random_state=1).iterrows():
        cluster = next(c for c in CLUSTERS if c.name == row.cluster)
        costs = step_costs(
            MODEL,
            default_profile(cluster.gpu.name),
            cluster.island(int(row.nodes), int(row.gpus_per_node)),
            seq_len=SEQ,
            micro_batch=int(row.micro_batch),
            ac="selective",
        )
        for k in (1, 2, 3):  # k = 3 was not used to build the columns: linearity is checked
            act = activity_from_schedule(simulate_step(costs, accum_steps=k).schedule)
            assert act.compute_s == pytest.approx(
                row.compute_fixed_s + k * row.compute_micro_s, rel=1e-9
            )
            assert act.comm_only_s == pytest.approx(
                row.comm_only_fixed_s + k * row.comm_only_micro_s, rel=1e-9, abs=1e-12
            )
            assert act.idle_s == pytest.approx(0.0, abs=1e-9)  # a list schedule has no gap
    assert set(table.tdp_w) == {700.0, 300.0}  # H100 SXM, A100 PCIe datasheet TDPs


def _instance(clusters: list[dict], batch: int, max_islands: int, inner_steps: int = 10) -> dict:
    return {
        "name": "energy",
        "model": "m",
        "parameters": 10**9,
        "training": {
            "seq_len": 4096, "global_batch_seqs": batch, "train_tokens": 1e9, "strategy": "diloco",
            "inner_steps": inner_steps, "pseudo_gradient_dtype": "bf16",
        },
        "clusters": clusters,
        "limits": {"max_islands": max_islands},
    }


def _row(cluster: str, nodes: int, g: int, m: int, micro: float, fixed: float, comm_frac: float,
         price: float, tdp: float) -> dict:
    comm = micro * comm_frac
    return {
        "cluster": cluster, "gpu_type": cluster.upper(), "nodes": nodes, "gpus_per_node": g,
        "micro_batch": m, "microstep_s": micro, "step_fixed_s": fixed,
        "usd_per_hour": price * nodes * g, "memory_gib": 10.0, "bound": "compute",
        "compute_fixed_s": fixed, "compute_micro_s": micro - comm, "comm_only_fixed_s": 0.0,
        "comm_only_micro_s": comm, "tdp_w": tdp,
    }


def _problem(inst: dict, rows: list[dict]):
    instance = Instance.model_validate(inst)
    table = validate_island_table(
        pd.DataFrame(rows, columns=[*TABLE_COLUMNS, *ENERGY_COLUMNS]), "t", instance
    )
    return instance, table, build_problem(instance, table)


def test_one_plan_by_hand_from_timeline_tdp_host_pue_and_intensity() -> None:
    clusters = [
        {
            "name": "a", "gpu": "A", "num_nodes": 1, "gpus_per_node": 8,
            "allowed_gpus_per_node": [8], "price_usd_per_gpu_hour": 3.0, "wan_gbit_s": 10,
            "wan_latency_ms": 50, "region": "country/FIN", "pue": 1.2,
        },
        {
            "name": "b", "gpu": "B", "num_nodes": 1, "gpus_per_node": 8,
            "allowed_gpus_per_node": [8], "price_usd_per_gpu_hour": 1.0, "wan_gbit_s": 10,
            "wan_latency_ms": 50, "region": "us-state/virginia", "price": None,
        },
    ]
    del clusters[1]["price"]
    rows = [
        _row("a", 1, 8, 1, 2.0, 0.5, 0.25, 3.0, 700.0),
        _row("b", 1, 8, 1, 3.0, 0.2, 0.1, 1.0, 400.0),
    ]
    _, _, problem = _problem(_instance(clusters, 16, 2), rows)
    from planner.model.energy import plan_energy
    from planner.model.evaluate import evaluate
    from planner.model.problem import IslandChoice

    plan = evaluate(
        problem,
        [IslandChoice(pair_index=0, accum_steps=1), IslandChoice(pair_index=1, accum_steps=1)],
    )
    steps = 1e9 / (16 * 4096)
    period = plan.inner_step_s + plan.sync_s / 10
    assert (
        plan.inner_step_s == pytest.approx(3.2)
        and plan.wall_time_s == pytest.approx(steps * period)
    )
    # by hand: island a computes 0.5 + 1.5 s, communicates only 0.5 s, idles 3.2 − 2.5 s + σ/H
    act_a = StepActivity(step_s=2.5, compute_s=2.0, comm_only_s=0.5)
    act_b = StepActivity(step_s=3.2, compute_s=0.2 + 2.7, comm_only_s=0.3)
    e_a = island_step_energy_j(act_a, num_gpus=8, tdp_w=700.0, pue=1.2, wait_s=period - 2.5) * steps
    pue_b = provider_pue(None)[0]  # no price list provider: the survey-average default
    e_b = (
        island_step_energy_j(act_b, num_gpus=8, tdp_w=400.0, pue=pue_b, wait_s=period - 3.2) * steps
    )
    assert plan.energy_kwh == pytest.approx((e_a + e_b) / 3.6e6, rel=1e-12)
    expected_co2 = co2_kg(e_a, carbon_intensity_g_per_kwh("country/FIN")) + co2_kg(
        e_b, carbon_intensity_g_per_kwh("us-state/virginia"))
    assert plan.co2_kg == pytest.approx(expected_co2, rel=1e-12)
    assert plan_energy(problem, plan.choices, plan.wall_time_s) == (plan.energy_kwh, plan.co2_kg)
    # per GPU-hour: between the idle draw and TDP + host, times the PUE
    per_gpu_hour = plan.energy_kwh / (plan.num_gpus * plan.wall_time_s / 3600)
    p = DEFAULT_POWER
    assert (
        1.0 * (400 * p.idle_frac + p.host_w_per_gpu) / 1000
        < per_gpu_hour
        < 1.57 * (700 + p.host_w_per_gpu) / 1000
    )


@st.composite
def energy_cases(draw: st.DrawFn) -> tuple[dict, list[dict]]:
    clusters, rows = [], []
    for c in range(draw(st.integers(1, 3))):
        gpn = draw(st.sampled_from([2, 4]))
        num_nodes = draw(st.integers(1, 2))
        price = draw(st.integers(50, 400)) / 100
        tdp = draw(st.sampled_from([300.0, 400.0, 700.0, 1000.0]))
        clusters.append(
            {
                "name": f"c{c}",
                "gpu": f"G{c}",
                "num_nodes": num_nodes,
                "gpus_per_node": gpn,
                "allowed_gpus_per_node": sorted({1, gpn}),
                "price_usd_per_gpu_hour": price,
                "wan_gbit_s": draw(st.sampled_from([1, 10])),
                "wan_latency_ms": draw(st.sampled_from([0, 50])),
                "region": draw(st.sampled_from(REGIONS)),
                "pue": draw(st.sampled_from([1.1, 1.5])),
            }
        )
        for n in range(1, num_nodes + 1):
            for g in sorted({1, gpn}):
                base = draw(st.integers(300, 3000)) / 1000
                for m in (1, 2):
                    if draw(st.integers(0, 3)) == 0:
                        continue
                    # similar speed per sequence, different communication shares: a slower
                    # (m, k) can then use less energy than the fastest one
                    micro = round(m * base * draw(st.integers(90, 110)) / 100, 4)
                    rows.append(_row(f"c{c}", n, g, m, micro, draw(st.integers(0, 800)) / 1000,
                                     draw(st.integers(0, 90)) / 100, price, tdp))
    inst = _instance(
        clusters,
        draw(st.sampled_from([4, 6, 8, 9, 12])),
        draw(st.sampled_from([1, 2, 3, 3])),
        draw(st.sampled_from([1, 10, 100])),
    )
    return inst, rows


def _points(plans, field):
    return [(p.wall_time_s, getattr(p, field)) for p in plans]


def _same(got: list[tuple[float, float]], want: list[tuple[float, float]]) -> None:
    assert len(got) == len(want), (got, want)
    for (w1, e1), (w2, e2) in zip(got, want, strict=True):
        assert w1 == pytest.approx(w2, rel=1e-12) and e1 == pytest.approx(e2, rel=1e-9)


@SETTINGS
@given(energy_cases(), st.sampled_from(["energy", "co2"]))
def test_frontier_and_caps_agree_with_brute_force(case, metric) -> None:
    inst, rows = case
    if not rows:
        return
    _, _, problem = _problem(inst, rows)
    field = {"energy": "energy_kwh", "co2": "co2_kg"}[metric]
    brute = brute_energy_frontier(problem, metric)
    dp = energy_frontier(problem, metric)
    assert dp.proven_exact
    want = _points(brute, field)
    _same(_points(dp.points, field), want)
    if len(want) >= 2:  # a cap between two frontier values: the fastest plan within it agrees
        cap = (want[-1][1] + want[-2][1]) / 2
        capped = energy_frontier(problem, metric, max_value=cap).points
        reference = brute_energy_frontier(problem, metric, max_value=cap)
        _same(_points(capped, field), _points(reference, field))
        assert all(getattr(p, field) <= cap for p in capped)


@SETTINGS
@given(energy_cases(), st.sampled_from([0.02, 0.5, 5.0]))
def test_cost_weighted_co2_and_cost_capped_bounds_agree_with_brute_force(case, weight) -> None:
    inst, rows = case
    if not rows:
        return
    _, _, problem = _problem(inst, rows)
    plans = BruteForce(problem, reduce=False).plans()
    if not plans:
        return
    points = energy_frontier(problem, "co2", usd_weight=weight).points
    assert min(p.co2_kg + weight * p.cost_usd for p in points) == pytest.approx(
        min(p.co2_kg + weight * p.cost_usd for p in plans), rel=1e-9)
    cheapest = min(plans, key=lambda p: (p.cost_usd, p.co2_kg))
    cap = cheapest.cost_usd * 1.05
    found = min_co2_within_cost(problem, cap, cheapest_plan=cheapest)
    truth = min(p.co2_kg for p in plans if p.cost_usd <= cap)
    assert found.best.cost_usd <= cap
    assert found.lower_bound_kg <= truth * (1 + 1e-9) and truth <= found.best.co2_kg * (1 + 1e-12)


def test_infeasible_cap_exits_1_naming_it() -> None:
    clusters = [
        {
            "name": "a", "gpu": "A", "num_nodes": 2, "gpus_per_node": 4,
            "allowed_gpus_per_node": [4], "price_usd_per_gpu_hour": 2.0, "wan_gbit_s": 10,
            "wan_latency_ms": 10, "region": "country/DEU",
        }
    ]
    rows = [_row("a", n, 4, 1, 1.0, 0.1, 0.2, 2.0, 700.0) for n in (1, 2)]
    instance, table, problem = _problem(_instance(clusters, 8, 2), rows)
    least = min(p.co2_kg for p in energy_frontier(problem, "co2").points)
    with pytest.raises(InfeasibleError) as err:
        solve_energy(instance, table, "co2", max_value=least * 0.99)
    assert err.value.binding == "max_co2_kg" and err.value.exit_code == 1
    _, frontier = solve_energy(instance, table, "co2", max_value=least)
    assert min(p.co2_kg for p in frontier.points) == least


def test_cli_co2_query_unknown_region_and_refusals(tmp_path) -> None:
    from planner.cli import cli

    runner = CliRunner()
    text = Path("instances/small-two-clusters.yaml").read_text()
    ok = runner.invoke(
        cli, ["plan", "instances/small-two-clusters.yaml", "--objective", "co2", "--format", "json"]
    )
    assert ok.exit_code == 0, ok.output
    assert '"co2_kg"' in ok.output and '"energy_kwh"' in ok.output
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        text.replace("region: country/FIN", "region: country/FNI").replace(
            "islands_table: tables/",
            "islands_table: " + str(Path("instances/tables").resolve()) + "/",
        )
    )
    out = runner.invoke(cli, ["plan", str(bad)])
    assert out.exit_code == 2 and "did you mean" in out.output.lower()
    refused = runner.invoke(
        cli,
        ["plan", "instances/small-two-clusters.yaml", "--objective", "co2", "--solver", "cpsat"],
    )
    assert refused.exit_code == 2 and "--solver dp or auto" in refused.output
    cap = runner.invoke(
        cli,
        [
            "pareto", "instances/small-two-clusters.yaml", "--objectives", "time,co2",
            "--max-co2-kg", "0.001",
        ],
    )
    assert cap.exit_code == 1 and "max_co2_kg" in cap.output
