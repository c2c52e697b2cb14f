"""The exact DP (`planner.solvers.dp`), the same-cluster fabric σ, accumulation limits, island node
caps, the infeasible-step cross-check and default solver choice. Expected values come from DESIGN §3
formulas or the brute-force enumeration, never from a solver run."""

from __future__ import annotations

import dataclasses
import math

import pandas as pd
import pytest

from planner.analysis.pareto import compute_frontier, epsilon_frontier
from planner.model.evaluate import build_problem
from planner.model.instance import Instance
from planner.model.island_table import TABLE_COLUMNS, validate_island_table
from planner.model.problem import SubResult
from planner.solvers.baselines import BruteForce
from planner.solvers.cpsat import CpSatSubsolver
from planner.solvers.dp import dp_frontier, dp_unsupported
from planner.solvers.oracle import StaircaseOracle, dp_checker


def _row(cluster: str, nodes: int, gpn: int, m: int, microstep: float, usd: float, **extra) -> dict:
    return {"cluster": cluster, "gpu_type": f"G{cluster}", "nodes": nodes, "gpus_per_node": gpn,
            "micro_batch": m, "microstep_s": microstep, "step_fixed_s": 0.0, "usd_per_hour": usd,
            "memory_gib": 1.0, "bound": "compute", **extra}


def _problem(rows: list[dict], clusters: list[dict], *, batch: int, islands: int, **limits):
    inst = Instance.model_validate(
        {
            "name": "t",
            "model": "m",
            "parameters": 10**9,
            "training": {
                "seq_len": 1000,
                "global_batch_seqs": batch,
                "train_tokens": 1e9,
                "inner_steps": 10,
            },
            "clusters": clusters,
            "limits": {"max_islands": islands, **limits},
        }
    )
    columns = [*TABLE_COLUMNS, *(["accum_fits"] if any("accum_fits" in r for r in rows) else [])]
    table = validate_island_table(pd.DataFrame(rows, columns=columns), "t", inst)
    return build_problem(inst, table)


def _cluster(name: str, nodes: int, **extra) -> dict:
    return {
        "name": name, "gpu": f"G{name}", "num_nodes": nodes, "gpus_per_node": 1,
        "price_usd_per_gpu_hour": 1.0, "wan_gbit_s": 1, "wan_latency_ms": 100, **extra,
    }


def keys(plans) -> list[tuple[float, float]]:
    return [(p.wall_time_s, p.cost_usd) for p in plans]


def test_same_cluster_islands_sync_over_the_fabric() -> None:
    """Two 1-GPU islands of one cluster: σ = 2·(1/2)·P/bw + 2·lat with the fabric's bw and lat
    (P = 1e9 fp32 values = 4e9 B); across clusters the WAN's (1 Gbit/s, 100 ms)."""
    rows = [_row("a", 1, 1, 1, 1.0, 1.0), _row("b", 1, 1, 1, 1.0, 1.0)]
    problem = _problem(
        rows,
        [_cluster("a", 2, fabric_gbit_s=400, fabric_latency_ms=0.01), _cluster("b", 1)],
        batch=2,
        islands=2,
    )
    plans = BruteForce(problem).plans()
    by_clusters = {tuple(sorted(i.cluster for i in p.islands)): p for p in plans}
    assert by_clusters[("a", "a")].sync_s == pytest.approx(4e9 / 50e9 + 2 * 1e-5)
    assert by_clusters[("a", "b")].sync_s == pytest.approx(4e9 / 0.125e9 + 2 * 0.1)
    assert keys(dp_frontier(problem).points) == keys(BruteForce(problem).nondominated())


def test_rows_that_cannot_accumulate_run_k_1_only() -> None:
    rows = [
        _row("a", 1, 1, 1, 1.0, 1.0, accum_fits=False),
        _row("a", 1, 1, 2, 1.5, 1.0, accum_fits=True),
    ]
    problem = _problem(rows, [_cluster("a", 1)], batch=4, islands=1)
    ks = {(problem.pairs[item.pair_index].micro_batch, item.accum_steps) for item in problem.menu}
    assert ks == {(1, 1), (2, 1), (2, 2)}  # m = 1 never accumulates; s = 4 only as 2 x m = 2


def test_missing_accum_fits_column_allows_every_k() -> None:
    problem = _problem([_row("a", 1, 1, 1, 1.0, 1.0)], [_cluster("a", 1)], batch=3, islands=1)
    assert [item.accum_steps for item in problem.menu] == [1, 2, 3]


def test_max_nodes_per_island_drops_multi_node_islands() -> None:
    rows = [_row("a", 1, 1, 1, 2.0, 1.0), _row("a", 2, 1, 1, 1.0, 2.0)]
    capped = _problem(rows, [_cluster("a", 2, max_nodes_per_island=1)], batch=2, islands=2)
    assert {o.nodes for o in capped.options} == {1}
    free = _problem(rows, [_cluster("a", 2)], batch=2, islands=2)
    assert {o.nodes for o in free.options} == {1, 2}


def test_a_gpu_cap_sends_auto_to_cpsat() -> None:
    rows = [_row("a", 1, 1, 1, 1.0, 1.0)]
    problem = _problem(rows, [_cluster("a", 2)], batch=2, islands=2, max_gpus=2)
    assert "GPU cap" in dp_unsupported(problem)
    assert compute_frontier(problem).solver == "cpsat"
    assert compute_frontier(dataclasses.replace(problem, max_gpus=None)).solver == "dp"


def test_dp_respects_budget_and_deadline_like_the_epsilon_loop() -> None:
    rows = [_row("a", 1, 1, 1, 1.0, 1.0), _row("b", 1, 1, 1, 3.0, 0.2)]
    problem = _problem(rows, [_cluster("a", 2), _cluster("b", 2)], batch=4, islands=4)
    full = BruteForce(problem).nondominated()
    assert len(full) >= 3
    middle = full[len(full) // 2]
    capped = dataclasses.replace(
        problem, budget_usd=middle.cost_usd, deadline_s=full[-1].wall_time_s
    )
    expected = keys(epsilon_frontier(capped, BruteForce(capped)))
    assert keys(dp_frontier(capped).points) == expected


class _FaultyInfeasible:
    """A real CP-SAT step solver that reports its second answer infeasible (a backend bug, as CBC
    showed): the cross-check must catch it."""

    name = "cpsat-faulty"

    def __init__(self, problem) -> None:
        self.inner = CpSatSubsolver(problem)
        self.calls = 0

    def min_price(self, *args, **kwargs) -> SubResult:
        self.calls += 1
        result = self.inner.min_price(*args, **kwargs)
        return SubResult(status="infeasible") if self.calls == 2 and result.choices else result


def test_an_infeasible_step_after_a_feasible_one_is_cross_checked() -> None:
    rows = [
        _row("a", 1, 1, 1, 1.0, 1.0),
        _row("b", 1, 1, 1, 3.0, 0.2),
        _row("a", 2, 1, 1, 0.6, 2.0),
    ]
    problem = _problem(rows, [_cluster("a", 2), _cluster("b", 2)], batch=4, islands=4)
    reference = keys(BruteForce(problem).nondominated())
    honest = StaircaseOracle(problem, CpSatSubsolver(problem), checker=dp_checker(problem))
    assert keys(epsilon_frontier(problem, honest)) == reference
    assert honest.proven_exact and honest.cross_checks >= 1
    faulty = StaircaseOracle(problem, _FaultyInfeasible(problem), checker=dp_checker(problem))
    points = epsilon_frontier(problem, faulty)
    assert not faulty.proven_exact and "infeasible" in faulty.note
    assert keys(points) == reference  # the witness let the walk go on
    unchecked = StaircaseOracle(problem, _FaultyInfeasible(problem), checker=None)
    epsilon_frontier(problem, unchecked)
    assert not unchecked.proven_exact


def test_time_limit_leaves_the_dp_unproven() -> None:
    rows = [_row("a", 1, 1, 1, 1.0 + i / 10, 1.0 + i) for i in range(1)]
    rows += [_row("b", 1, 1, 1, 3.0, 0.2)]
    problem = _problem(rows, [_cluster("a", 3), _cluster("b", 3)], batch=6, islands=6)
    assert dp_frontier(problem).proven_exact
    limited = dp_frontier(problem, time_limit_s=0.0)
    assert not limited.proven_exact and limited.levels_swept < limited.levels_total
    assert all(math.isfinite(p.cost_usd) for p in limited.points)


def test_per_instance_size_prices_use_the_listed_size(tmp_path) -> None:
    """Lambda lists H100 SXM as a 1-GPU and an 8-GPU instance at different per-GPU rates: with
    per_instance_size a 1-GPU island pays the 1-GPU rate, an 8-GPU island the 8-GPU rate, and a
    2-GPU island (no such instance listed) the cluster's resolved price."""
    from perfmodel.spec.catalog import price_rows, price_usd_per_gpu_hour
    from planner.model.instance import load_instance
    from planner.model.island_table import load_island_table

    gpu = "H100-SXM5-80GB"
    listed = {
        r.gpus_per_node: r.usd_per_gpu_hour
        for r in price_rows()
        if r.provider == "Lambda"
        and r.gpu_type == gpu
        and r.tier == "on-demand"
        and r.gpus_per_node
    }
    assert {1, 8} <= set(listed)
    base = price_usd_per_gpu_hour("Lambda", gpu, "on-demand")
    rows = [dict(_row("a", 1, g, 1, 1.0, round(base * g, 6)), gpu_type=gpu, model="Llama-3.2-1B",
                 seq_len=100, recipe="torchtitan") for g in (1, 2, 8)]
    pd.DataFrame(rows).to_csv(tmp_path / "t.csv", index=False)
    (tmp_path / "i.yaml").write_text(
        "name: sizes\nmodel: Llama-3.2-1B\nparameters: 1000\nislands_table: t.csv\n"
        "training: {seq_len: 100, global_batch_seqs: 8, train_tokens: 1.0e6, inner_steps: 10}\n"
        f"clusters:\n  - {{name: a, gpu: {gpu}, num_nodes: 1, gpus_per_node: 8, "
        "allowed_gpus_per_node: [1, 2, 8],\n"
        "     price: {provider: Lambda, tier: on-demand, per_instance_size: true}, wan_gbit_s: 1, "
        "wan_latency_ms: 1}\n"
    )
    instance = load_instance(tmp_path / "i.yaml")
    problem = build_problem(instance, load_island_table(instance))
    usd = {o.gpus_per_node: o.usd_per_hour for o in problem.options}
    assert usd[1] == pytest.approx(listed[1]) and usd[8] == pytest.approx(8 * listed[8])
    assert usd[2] == pytest.approx(2 * base)
