"""Issue 29 item 5: scenarios as users say them.

- `price_scale` scales a cluster's price, listed (`price:`) or explicit, so "H100s 30 % cheaper" is
  `--vary clusters.X.price_scale=0.7`; `gpu.NAME.FIELD` reaches every cluster of a GPU type.
- `--scenario NAME:PATH=V,PATH=V` is one linked scenario: halving both clusters' prices halves
  every frontier plan's cost and leaves its time (checked exactly on the hand-made instance of
  tests/test_scenarios.py).
- `strategy: streaming-diloco` in an instance is refused with the reason (the planner would price
  DiLoCo's blocking sync under streaming's name); `predict --strategy streaming-diloco` uses
  DiLoCo's H = 100 unless told otherwise.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from perfmodel.spec.errors import InstanceError, UserInputError
from planner.analysis.scenarios import (
    Scenario,
    apply_overrides,
    parse_linked,
    parse_vary,
    scenario_instance,
    scenarios_of,
    solve_all,
)
from planner.model.instance import gpu_prices, load_instance
from planner.model.island_table import load_island_table
from planner.model.starter import write_starter_instance
from tests.test_scenarios import _write

SMALL = ["Llama-3.2-1B", "--gpu", "A100-SXM4-80GB", "--seq-len", "1024", "--islands", "2"]


def _starter(tmp_path: Path) -> Path:
    return write_starter_instance(tmp_path / "starter.yaml")


def test_price_scale_reprices_a_list_priced_cluster(tmp_path: Path) -> None:
    path = _starter(tmp_path)
    base = scenario_instance(str(path), Scenario(name="base", overrides=()))
    cheap = scenario_instance(str(path), Scenario(
        name="cheap", overrides=(("clusters.lambda-h100.price_scale", 0.7),)))
    assert base.cluster("lambda-h100").price is not None  # a list price, not an explicit one
    listed, scaled = gpu_prices(base), gpu_prices(cheap)
    assert scaled["lambda-h100"] == pytest.approx(0.7 * listed["lambda-h100"], rel=1e-12)
    assert scaled["lambda-a100"] == listed["lambda-a100"]
    before, after = load_island_table(base), load_island_table(cheap)
    h100 = before["cluster"] == "lambda-h100"
    assert h100.any() and (~h100).any()
    assert list(after.loc[h100, "usd_per_hour"]) == pytest.approx(
        list(0.7 * before.loc[h100, "usd_per_hour"]), rel=1e-12)
    assert list(after.loc[~h100, "usd_per_hour"]) == list(before.loc[~h100, "usd_per_hour"])
    assert list(after["microstep_s"]) == list(before["microstep_s"])  # prices only


def test_gpu_path_reaches_every_cluster_of_that_type() -> None:
    raw = {"clusters": [{"name": "a", "gpu": "H100-SXM5-80GB"},
                        {"name": "b", "gpu": "A100-SXM4-80GB"},
                        {"name": "c", "gpu": "h100-sxm5-80gb"}]}
    out = apply_overrides(raw, [("gpu.H100-SXM5-80GB.price_scale", 0.7)], "x.yaml")
    assert [c.get("price_scale") for c in out["clusters"]] == [0.7, None, 0.7]
    assert "price_scale" not in raw["clusters"][0]  # a copy
    nested = apply_overrides(raw, [("gpu.A100-SXM4-80GB.price.tier", "spot")], "x.yaml")
    assert nested["clusters"][1]["price"] == {"tier": "spot"}
    with pytest.raises(UserInputError, match="no cluster with gpu 'H100-SXM5-80G'") as err:
        apply_overrides(raw, [("gpu.H100-SXM5-80G.price_scale", 0.7)], "x.yaml")
    assert "did you mean 'h100-sxm5-80gb'" in (err.value.hint or "").lower()


def test_price_scale_on_a_csv_table_scales_its_rows(tmp_path: Path) -> None:
    path = _write(tmp_path, price_b=0.5)
    raw = yaml.safe_load(path.read_text())
    raw["clusters"][1]["price_scale"] = 0.5  # in the file itself: the CSV still says 0.5 $/h
    path.write_text(yaml.safe_dump(raw))
    table = load_island_table(load_instance(path))
    assert list(table.sort_values("cluster")["usd_per_hour"]) == [2.0, 0.25]


def test_price_scale_reaches_a_cluster_only_the_table_prices(tmp_path: Path) -> None:
    path = _write(tmp_path, price_b=0.5)
    raw = yaml.safe_load(path.read_text())
    for cluster in raw["clusters"]:  # no price in the file: the CSV's usd_per_hour prices them
        del cluster["price_usd_per_gpu_hour"]
    path.write_text(yaml.safe_dump(raw))
    scenarios = scenarios_of([parse_vary("clusters.B.price_scale=1,4")])
    base, dear = solve_all([str(path)], scenarios, {}, executor="serial")
    assert [p.cost_usd for p in base.points] == pytest.approx([2.0, 1.0], rel=1e-6)
    assert [p.cost_usd for p in dear.points] == pytest.approx([2.0], rel=1e-6)  # B: 4 USD, 2 h


def test_a_linked_scenario_halves_every_cost_and_keeps_every_time(tmp_path: Path) -> None:
    path = _write(tmp_path, price_b=0.5)
    linked = parse_linked("half:clusters.A.price_scale=0.5,clusters.B.price_scale=0.5")
    assert linked.overrides == (("clusters.A.price_scale", 0.5), ("clusters.B.price_scale", 0.5))
    scenarios = scenarios_of([], [linked])
    assert [s.name for s in scenarios] == ["base", "half"]
    base, half = solve_all([str(path)], scenarios, {}, executor="serial")
    assert base.frontier is not None and half.frontier is not None
    assert [p.wall_time_s for p in half.points] == [p.wall_time_s for p in base.points]
    assert [p.cost_usd for p in half.points] == pytest.approx(
        [0.5 * p.cost_usd for p in base.points], rel=1e-6)
    assert [p.cost_usd for p in base.points] == pytest.approx([2.0, 1.0], rel=1e-6)  # module doc


def test_linked_scenarios_cross_the_vary_axes() -> None:
    names = [s.name for s in scenarios_of([parse_vary("limits.max_islands=1,2")],
                                          [parse_linked("cheap:clusters.A.price_scale=0.7")])]
    assert names == ["limits.max_islands=1", "limits.max_islands=2",
                     "cheap, limits.max_islands=1", "cheap, limits.max_islands=2"]


@pytest.mark.parametrize(("text", "words"), [
    ("clusters.A.price_scale=0.7", "NAME:PATH=V"),
    ("x:clusters.A.price_scale", "is not PATH=V"),
    ("x:a=1,a=2", "sets a path twice"),
])
def test_bad_linked_scenarios_say_how_to_write_them(text: str, words: str) -> None:
    with pytest.raises(UserInputError, match=words) as err:
        parse_linked(text)
    assert err.value.hint


def test_base_and_repeated_scenario_names_are_refused() -> None:
    for linked in (["base:a=1"], ["x:a=1", "x:b=2"]):
        with pytest.raises(UserInputError, match="--scenario names"):
            scenarios_of([], [parse_linked(t) for t in linked])
    with pytest.raises(UserInputError, match="both set"):
        scenarios_of([parse_vary("a=1,2")], [parse_linked("x:a=3")])


def test_cli_linked_scenarios_and_gpu_price_scale(run_cli, tmp_path: Path) -> None:
    path = _write(tmp_path, price_b=0.5)
    result = run_cli("pareto", str(path), "--scenario",
                     "half:clusters.A.price_scale=0.5,clusters.B.price_scale=0.5",
                     "--scenario", "dear-a100:gpu.A100-SXM4-80GB.price_scale=4",
                     "--format", "json")
    assert result.code == 0, result.err
    scenarios = json.loads(result.out)["instances"][0]["scenarios"]
    costs = {s["scenario"]: sorted(r["cost_usd"] for r in s["frontier"]) for s in scenarios}
    assert list(costs) == ["base", "half", "dear-a100"]
    assert costs["base"] == pytest.approx([1.0, 2.0], rel=1e-6)  # module doc of test_scenarios
    assert costs["half"] == pytest.approx([0.5, 1.0], rel=1e-6)
    # B at 4 x 0.5 $/h costs 4 USD for 2 h > A's 2 USD for 1 h: only A is left
    assert costs["dear-a100"] == pytest.approx([2.0], rel=1e-6)


def test_a_field_reached_twice_in_one_scenario_is_refused(run_cli, tmp_path: Path) -> None:
    path = _write(tmp_path, price_b=0.5)
    result = run_cli("pareto", str(path), "--scenario", "half:clusters.B.price_scale=0.5",
                     "--vary", "gpu.A100-SXM4-80GB.price_scale=1,4")
    assert result.code == 2
    assert "both set clusters.1.price_scale" in result.err and "To fix:" in result.err


def test_streaming_diloco_instances_are_refused_with_the_reason(run_cli, tmp_path: Path) -> None:
    path = _write(tmp_path)
    raw = yaml.safe_load(path.read_text())
    raw["training"]["strategy"] = "streaming-diloco"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(InstanceError, match="training.strategy") as err:
        load_instance(path)
    assert "blocking" in err.value.message and "shardmeter streaming" in (err.value.hint or "")
    result = run_cli("plan", str(path))
    assert result.code == 2 and "To fix:" in result.err and "strategy: diloco" in result.err


def test_predict_streaming_uses_dilocos_inner_steps(run_cli) -> None:
    streaming = json.loads(run_cli("predict", *SMALL, "--strategy", "streaming-diloco",
                                   "--format", "json").out)
    diloco = json.loads(run_cli("predict", *SMALL, "--strategy", "diloco",
                                "--format", "json").out)
    assert streaming["sync_every"] == diloco["inner_steps"] == 100
    told = json.loads(run_cli("predict", *SMALL, "--strategy", "streaming-diloco",
                              "--inner-steps", "12", "--format", "json").out)
    assert told["sync_every"] == 12
