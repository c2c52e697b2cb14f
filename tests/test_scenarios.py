"""What-if scenarios (`--vary`) on instances small enough to check by hand.

Instance `two-offers`: one sequence per inner step (B = 1, so every plan is one island and σ = 0),
D/(B·S) = 3600 inner steps. Cluster A: t = 1 s at 2 USD/h → W = 1 h, C = 2 USD. Cluster B:
t = 2 s at p USD/h → W = 2 h, C = 2p USD.

* p = 0.5: frontier {A (1 h, 2 USD), B (2 h, 1 USD)}.
* p = 3:   B costs 6 USD > A's 2 USD at a longer time: frontier {A}.

Frontier regret (extra cost over the cheapest plan at least as fast, in hindsight): A is 0 in both;
B is 0 at p = 0.5 and 6/2 − 1 = 200 % at p = 3. Robust choice: A.
`plan --objective cost`: answers B (p = 0.5) and A (p = 3); cost regret of A: 2/1 − 1 = 100 % at
p = 0.5, 0 at p = 3 (max 100 %); of B: 0 and 200 % (max 200 %). Robust choice: A.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
import yaml

from perfmodel.spec.errors import UserInputError
from planner.analysis.scenarios import (
    apply_overrides,
    parse_vary,
    rescore,
    robust,
    scenarios_of,
    score_frontiers,
    solve_all,
)

HOURS = 3600.0
IDENTITY = {"model": "Llama-3.2-1B", "seq_len": 100, "recipe": "torchtitan"}
"""What the hand-made tables below were built for (a fixed table must say it, issue 30)."""


H100_PLAN = "1x1x1 H100-SXM5-80GB @ A"
"""The label of the one-island plan on cluster A (GPU variant and cluster, priced in the file)."""
A100_PLAN = "1x1x1 A100-SXM4-80GB @ B"
"""The label of the one-island plan on cluster B."""


def _write(tmp_path: Path, *, price_b: float = 0.5, extra_cluster: dict | None = None) -> Path:
    rows = [
        {
            "cluster": "A", "gpu_type": "H100-SXM5-80GB", "nodes": 1, "gpus_per_node": 1,
            "micro_batch": 1, "microstep_s": 1.0, "step_fixed_s": 0.0, "usd_per_hour": 2.0,
            "memory_gib": 1.0, "bound": "compute", **IDENTITY,
        },
        {
            "cluster": "B", "gpu_type": "A100-SXM4-80GB", "nodes": 1, "gpus_per_node": 1,
            "micro_batch": 1, "microstep_s": 2.0, "step_fixed_s": 0.0, "usd_per_hour": price_b,
            "memory_gib": 1.0, "bound": "compute", **IDENTITY,
        },
    ]
    pd.DataFrame(rows).to_csv(tmp_path / "two.csv", index=False)
    clusters = [
        {
            "name": "A", "gpu": "H100-SXM5-80GB", "num_nodes": 1, "gpus_per_node": 1,
            "price_usd_per_gpu_hour": 2.0, "wan_gbit_s": 10, "wan_latency_ms": 10,
        },
        {
            "name": "B", "gpu": "A100-SXM4-80GB", "num_nodes": 1, "gpus_per_node": 1,
            "price_usd_per_gpu_hour": price_b, "wan_gbit_s": 10, "wan_latency_ms": 10,
        },
    ]
    instance = {"name": "two-offers", "model": "Llama-3.2-1B", "parameters": 1000,
                "training": {"seq_len": 100, "global_batch_seqs": 1, "train_tokens": 3600 * 100,
                             "strategy": "diloco", "inner_steps": 10},
                "clusters": clusters, "limits": {"max_islands": 1}, "islands_table": "two.csv"}
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump(instance))
    return path


def test_parse_vary_reads_yaml_values() -> None:
    v = parse_vary("clusters.A.wan_gbit_s=1,10,2.5,null")
    assert v.path == "clusters.A.wan_gbit_s" and v.values == (1, 10, 2.5, None)
    assert parse_vary("clusters.B.price.as_of=2026-09-25").values == ("2026-09-25",)
    with pytest.raises(UserInputError):
        parse_vary("clusters.A.wan_gbit_s")


def test_scenarios_are_the_cartesian_product() -> None:
    names = [s.name for s in scenarios_of([parse_vary("a.b=1,2"), parse_vary("c=x,y")])]
    assert names == ["a.b=1, c=x", "a.b=1, c=y", "a.b=2, c=x", "a.b=2, c=y"]
    assert [s.name for s in scenarios_of([])] == ["base"]


def test_overrides_address_clusters_by_name_or_index() -> None:
    raw = {
        "clusters": [{"name": "A", "wan_gbit_s": 1}, {"name": "B", "wan_gbit_s": 2}],
        "training": {"H": 1},
    }
    out = apply_overrides(raw, [("clusters.B.wan_gbit_s", 9), ("clusters.0.price.tier", "spot"),
                                ("training.H", 5)], "x.yaml")
    assert out["clusters"][1]["wan_gbit_s"] == 9 and out["clusters"][0]["price"] == {"tier": "spot"}
    # the input is untouched
    assert out["training"]["H"] == 5 and raw["clusters"][1]["wan_gbit_s"] == 2
    with pytest.raises(UserInputError, match="no entry 'C'"):
        apply_overrides(raw, [("clusters.C.wan_gbit_s", 1)], "x.yaml")


def test_frontier_regret_and_robust_choice_by_hand(tmp_path: Path) -> None:
    path = _write(tmp_path)
    scenarios = scenarios_of([parse_vary("clusters.B.price_usd_per_gpu_hour=0.5,3")])
    results = solve_all([str(path)], scenarios, {"solver": "brute"}, executor="serial")
    assert [(p.wall_time_s / HOURS, p.cost_usd) for p in results[0].points] == [
        (1.0, 2.0),
        (2.0, 1.0),
    ]
    assert [(p.wall_time_s / HOURS, p.cost_usd) for p in results[1].points] == [(1.0, 2.0)]
    scored = {s.label: s for s in score_frontiers(results)}
    a, b = scored[H100_PLAN], scored[A100_PLAN]
    assert a.regret == (0.0, 0.0)
    assert b.regret[0] == 0.0 and math.isclose(b.regret[1], 2.0)
    assert b.cost_usd == (1.0, 6.0)
    assert robust(list(scored.values())) is a


def test_plan_cost_regret_through_the_cli(tmp_path: Path, run_cli) -> None:
    path = _write(tmp_path)
    result = run_cli(
        "plan", str(path), "--objective", "cost",
        "--vary", "clusters.B.price_usd_per_gpu_hour=0.5,3", "--format", "json",
    )
    assert result.code == 0, result.err
    payload = json.loads(result.out)
    assert [row["label"] for row in payload["summary"]] == [A100_PLAN, H100_PLAN]
    plans = {p["label"]: p for p in payload["instances"][0]["plans"]}
    assert [s["regret"] for s in plans[H100_PLAN]["by_scenario"]] == pytest.approx([1.0, 0.0])
    assert [s["regret"] for s in plans[A100_PLAN]["by_scenario"]] == pytest.approx([0.0, 2.0])
    assert payload["instances"][0]["robust"] == H100_PLAN


def test_vary_latency_changes_sigma_by_hand(tmp_path: Path) -> None:
    """The plan A + B (B = 2) rescored: σ = 2·(1/2)·P/bw + 2·lat, P = 1000 fp32 values = 4000 B,
    bw = 10 Gbit/s = 1.25e9 B/s, lat = the larger latency (A's 10 ms or B's varied one)."""
    path = _write(tmp_path)
    raw = yaml.safe_load(path.read_text())
    raw["training"]["global_batch_seqs"] = 2
    raw["limits"]["max_islands"] = 2
    path.write_text(yaml.safe_dump(raw))
    scenarios = scenarios_of([parse_vary("clusters.B.wan_latency_ms=0,1000")])
    results = solve_all([str(path)], scenarios, {"solver": "dp"}, executor="local:2")
    key = (("A", 1, 1, 1, 1), ("B", 1, 1, 1, 1))
    sigma = [rescore(r.problem, key).sync_s for r in results]
    assert sigma == pytest.approx([4000 / 1.25e9 + 2 * 0.010, 4000 / 1.25e9 + 2 * 1.0])
    assert rescore(results[0].problem, (("A", 1, 1, 1, 9),)) is None  # k = 9 exceeds B: infeasible


def test_bad_vary_path_exits_2(tmp_path: Path, run_cli) -> None:
    path = _write(tmp_path)
    result = run_cli("pareto", str(path), "--vary", "clusters.Z.wan_gbit_s=1,2")
    assert result.code == 2 and "no entry 'Z'" in result.err
    result = run_cli("pareto", str(path), "--vary", "training.inner_stepz=1,2")
    assert result.code == 2 and "inner_stepz" in result.err


def test_infeasible_scenario_is_an_answer(tmp_path: Path, run_cli) -> None:
    path = _write(tmp_path)
    result = run_cli(
        "pareto", str(path), "--vary", "limits.budget_usd=null,0.5", "--format", "json"
    )
    assert result.code == 0, result.err
    summary = json.loads(result.out)["summary"]
    assert summary[0]["points"] == 2 and summary[1]["points"] == 0 and summary[1]["note"]


def test_several_instances_give_one_summary_row_each(tmp_path: Path, run_cli) -> None:
    first = _write(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    second = _write(other, price_b=3.0)
    result = run_cli("pareto", str(first), str(second), "--format", "json")
    assert result.code == 0, result.err
    summary = json.loads(result.out)["summary"]
    assert [row["points"] for row in summary] == [2, 1]
    assert [row["cheapest_usd"] for row in summary] == pytest.approx([1.0, 2.0])
