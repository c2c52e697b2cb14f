"""Instance and island-table validation: each mistake exits 2 naming file, field and value."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfmodel.spec.catalog import get_model, price_usd_per_gpu_hour
from planner.model.instance import gpu_prices, load_instance
from planner.model.island_table import TABLE_COLUMNS, load_island_table

GOOD_TABLE = (
    "cluster,gpu_type,nodes,gpus_per_node,micro_batch,microstep_s,step_fixed_s,usd_per_hour,"
    "memory_gib,bound,model,seq_len,recipe\n"
    "A,H200-SXM-141GB,1,8,1,1.2,0.3,28.72,60,compute,Llama-3-8B,8192,torchtitan\n"
    "A,H200-SXM-141GB,1,8,2,2.3,0.3,28.72,80,compute,Llama-3-8B,8192,torchtitan\n"
)

GOOD_YAML = """name: t
model: llama-3-8b
training:
  seq_len: 8192
  global_batch_seqs: 16
  train_tokens: 1.0e9
  strategy: diloco
  inner_steps: 100
clusters:
  - name: A
    gpu: H200-SXM-141GB
    num_nodes: 2
    gpus_per_node: 8
    allowed_gpus_per_node: [8]
    price_usd_per_gpu_hour: 3.59
    wan_gbit_s: 10
    wan_latency_ms: 50
limits:
  max_islands: 2
islands_table: islands.csv
parameters: 8030261248
"""


def write(tmp_path: Path, yaml_text: str = GOOD_YAML, table: str | None = GOOD_TABLE) -> Path:
    if table is not None:
        (tmp_path / "islands.csv").write_text(table)
    path = tmp_path / "instance.yaml"
    path.write_text(yaml_text)
    return path


@pytest.mark.parametrize(
    ("name", "old", "new", "expected"),
    [
        (
            "unknown key, did you mean",
            "    num_nodes: 2\n",
            "    num_node: 2\n",
            ["clusters[0].num_node", "did you mean 'num_nodes'"],
        ),
        ("negative size", "num_nodes: 2", "num_nodes: -1", ["clusters[0].num_nodes", "-1"]),
        (
            "zero batch",
            "global_batch_seqs: 16",
            "global_batch_seqs: 0",
            ["training.global_batch_seqs", "0"],
        ),
        (
            "unknown strategy",
            "strategy: diloco",
            "strategy: diloko",
            ["training.strategy", "diloko"],
        ),
        (
            "allowed > gpus_per_node",
            "allowed_gpus_per_node: [8]",
            "allowed_gpus_per_node: [8, 16]",
            ["clusters[0].allowed_gpus_per_node", "16"],
        ),
        (
            "duplicate cluster",
            "limits:",
            "  - {name: A, gpu: X, num_nodes: 1, gpus_per_node: 1, "
            "price_usd_per_gpu_hour: 1, wan_gbit_s: 1, wan_latency_ms: 1}\nlimits:",
            ["clusters[1].name", "'A'"],
        ),
        (
            "missing table file",
            "islands_table: islands.csv",
            "islands_table: nope.csv",
            ["islands_table", "nope.csv"],
        ),
        ("table without parameters", "parameters: 8030261248", "", ["parameters", "required"]),
        (
            "two prices",
            "    price_usd_per_gpu_hour: 3.59\n",
            "    price_usd_per_gpu_hour: 3.59\n    price: {provider: RunPod}\n",
            ["clusters[0].price_usd_per_gpu_hour"],
        ),
        ("diloco without inner_steps", "  inner_steps: 100\n", "", ["training.inner_steps"]),
        ("bad YAML", "name: t", "name: [t", ["not valid YAML"]),
    ],
)
def test_instance_errors_exit_2(
    tmp_path: Path, run_cli, name: str, old: str, new: str, expected: list[str]
) -> None:
    assert old in GOOD_YAML
    path = write(tmp_path, GOOD_YAML.replace(old, new))
    code, _, err = run_cli("plan", str(path))
    assert code == 2, name
    assert str(path) in err and "To fix:" in err and "Traceback" not in err
    for text in expected:
        assert text in err, (name, text, err)


@pytest.mark.parametrize(
    ("name", "table", "expected"),
    [
        (
            "missing column",
            GOOD_TABLE.replace(",bound", "").replace(",compute", ""),
            ["lacks columns", "bound"],
        ),
        ("negative time", GOOD_TABLE.replace("2.3", "-2.3"), ["line 3", "microstep_s", "-2.3"]),
        ("zero price", GOOD_TABLE.replace("28.72,60", "0,60"), ["line 2", "usd_per_hour"]),
        ("not a number", GOOD_TABLE.replace("1.2,", "fast,"), ["line 2", "microstep_s", "fast"]),
        (
            "duplicate rows",
            GOOD_TABLE + "A,H200-SXM-141GB,1,8,1,1.2,0.3,28.72,60,compute\n",
            ["duplicate", "[2, 4]"],
        ),
        (
            "unknown cluster",
            GOOD_TABLE.replace("A,H200-SXM-141GB,1,8,2", "AA,H200-SXM-141GB,1,8,2"),
            ["line 3", "'AA'", "did you mean 'A'"],
        ),
        (
            "fractional nodes",
            GOOD_TABLE.replace("A,H200-SXM-141GB,1,8,2", "A,H200-SXM-141GB,1.5,8,2"),
            ["line 3", "nodes", "1.5"],
        ),
        ("price differs by micro-batch", GOOD_TABLE.replace("28.72,80", "30,80"), ["usd_per_hour"]),
    ],
)
def test_table_errors_exit_2(
    tmp_path: Path, run_cli, name: str, table: str, expected: list[str]
) -> None:
    path = write(tmp_path, table=table)
    code, _, err = run_cli("pareto", str(path))
    assert code == 2, name
    assert "islands.csv" in err and "To fix:" in err
    for text in expected:
        assert text in err, (name, text, err)


def test_missing_instance_file(tmp_path: Path, run_cli) -> None:
    code, _, err = run_cli("plan", str(tmp_path / "none.yaml"))
    assert code == 2 and "none.yaml" in err


def test_yaml_dates_and_floats_parse(tmp_path: Path) -> None:
    instance = load_instance(write(tmp_path))
    assert instance.training.train_tokens == 1e9 and instance.parameters == 8030261248
    # the table keeps what it was built for (issue 30: model, seq_len, recipe)
    assert list(load_island_table(instance).columns) == [*TABLE_COLUMNS, "model", "seq_len",
                                                         "recipe"]


PRICE_REF_YAML = GOOD_YAML.replace(
    "    price_usd_per_gpu_hour: 3.59\n",
    "    price: {provider: RunPod, tier: community, as_of: 2026-09-25}\n",
).replace("islands_table: islands.csv\n", "islands_table: null\n")


def test_price_reference_uses_injected_resolver(tmp_path: Path) -> None:
    asked = []

    def resolver(ref) -> float:
        asked.append(ref)
        return 2.5

    instance = load_instance(write(tmp_path, PRICE_REF_YAML, table=None), resolve_price=resolver)
    assert gpu_prices(instance, resolver) == {"A": 2.5}
    ref = asked[0]
    assert (ref.provider, ref.gpu, ref.tier, ref.as_of) == (
        "RunPod", "H200-SXM-141GB", "community", "2026-09-25",
    )


def test_table_is_built_from_the_instance(tmp_path: Path) -> None:
    """Without islands_table the performance model builds the table from the instance: its
    clusters, allowed GPUs per node and node counts, priced from the catalog list it names."""
    instance = load_instance(write(tmp_path, PRICE_REF_YAML, table=None))
    table = load_island_table(instance)
    price = price_usd_per_gpu_hour("RunPod", "H200-SXM-141GB", "community", "2026-09-25")
    assert set(table["cluster"]) == {"A"} and set(table["gpus_per_node"]) == {8}
    assert set(table["nodes"]) == {1, 2}
    assert (table["usd_per_hour"] == table["nodes"] * 8 * price).all()
    assert instance.parameters == get_model("llama-3-8b").total_params
