"""Catalog loading: names, unit conversion, did-you-mean, and errors naming file/line/field."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from perfmodel.spec import catalog as cat
from perfmodel.spec.errors import CatalogError, ConfigError
from perfmodel.spec.formulas import GIB

CONFIGS = Path(__file__).parent / "data" / "configs"


def _rewrite_row(path: Path, key: str, value: str, change: dict[str, str | None]) -> int:
    """Change fields of the row whose `key` column equals `value`; return its line number."""
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        fieldnames = list(reader.fieldnames or [])
        rows = list(reader)
    index = next(i for i, r in enumerate(rows) if r[key] == value)
    rows[index].update(change)
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fieldnames)
        writer.writeheader()
        writer.writerows(rows)
    return index + 2  # header is line 1


def test_model_lookup_is_case_insensitive() -> None:
    assert cat.get_model("llama-3-8b") is cat.get_model("Llama-3-8B")


def test_model_from_config_path() -> None:
    spec = cat.get_model(str(CONFIGS / "qwen25_7b.json"))
    assert spec.family == "qwen2" and spec.qkv_bias


def test_missing_config_path_is_config_error() -> None:
    with pytest.raises(ConfigError, match="not found"):
        cat.get_model(str(CONFIGS / "does_not_exist.json"))


def test_published_params_kept_in_catalog() -> None:
    assert cat.get_model("Qwen2.5-7B").published_params == pytest.approx(7.61e9)
    assert cat.get_model("tiny-llama").published_params is None


@pytest.mark.parametrize(("getter", "name", "suggestion"), [
    (cat.get_model, "llama-3-8", "Llama-3-8B"),
    (cat.get_gpu, "H100-SXM", "H100-SXM5-80GB"),
    (cat.get_link, "nvlink", "nvlink"),
])
def test_unknown_names_suggest(getter, name: str, suggestion: str) -> None:
    with pytest.raises(CatalogError) as info:
        getter(name)
    assert "did you mean" in str(info.value) and suggestion in str(info.value)
    assert "To fix:" in str(info.value)


def test_gpu_units_converted_from_catalog_row() -> None:
    rows = {r["gpu_type"]: r for r in csv.DictReader((cat.catalog_dir() / "gpus.csv").open())}
    gpu = cat.get_gpu("H100-SXM5-80GB")
    row = rows["H100-SXM5-80GB"]
    assert gpu.usable_memory_bytes == int(float(row["usable_memory_gib"]) * GIB)
    assert gpu.bf16_flops_per_s == pytest.approx(float(row["bf16_dense_tflops"]) * 1e12)
    assert gpu.usable_memory_bytes < gpu.memory_bytes


def test_every_gpu_link_is_a_catalog_link() -> None:
    links = cat.load_links()
    for gpu in cat.load_gpus().values():
        assert gpu.intra_node_link.lower() in links and gpu.inter_node_link.lower() in links


def test_price_rows_filter_by_list() -> None:
    lists = cat.load_price_lists()
    name = next(iter(lists))
    assert cat.price_rows(name.upper()) == lists[name]
    assert len(cat.price_rows()) == sum(len(v) for v in lists.values())


def test_unknown_price_list_suggests() -> None:
    name = next(iter(cat.load_price_lists()))
    with pytest.raises(CatalogError, match="did you mean"):
        cat.price_rows(name[:-2] + "xx")


def test_price_lookup_takes_newest_snapshot() -> None:
    rows = [r for r in cat.price_rows() if r.provider == "Lambda"
            and r.gpu_type == "H100-SXM5-80GB" and r.tier == "on-demand"]
    newest = max(rows, key=lambda r: r.as_of)
    assert (
        cat.price_usd_per_gpu_hour("lambda", "H100-SXM5-80GB", "on-demand")
        == newest.usd_per_gpu_hour
    )


def test_broken_model_row_names_file_line_field(tmp_catalogs: Path) -> None:
    path = tmp_catalogs / "models.csv"
    line = _rewrite_row(path, "name", "Mistral-7B-v0.1", {"hidden_size": ""})
    with pytest.raises(CatalogError) as info:
        cat.load_models()
    message = str(info.value)
    assert str(path) in message and f"line {line}" in message and "hidden_size" in message


def test_negative_gpu_memory_names_value(tmp_catalogs: Path) -> None:
    path = tmp_catalogs / "gpus.csv"
    line = _rewrite_row(path, "gpu_type", "L40S", {"usable_memory_gib": "-4"})
    with pytest.raises(CatalogError) as info:
        cat.load_gpus()
    assert f"line {line}" in str(info.value) and "usable_memory_gib" in str(info.value)
    assert "'-4'" in str(info.value)


def test_gpu_with_unknown_link(tmp_catalogs: Path) -> None:
    path = tmp_catalogs / "gpus.csv"
    line = _rewrite_row(path, "gpu_type", "B200", {"intra_node_link": "nvlink9"})
    with pytest.raises(CatalogError, match=f"line {line}.*intra_node_link.*nvlink9"):
        cat.load_gpus()


def test_missing_column(tmp_catalogs: Path) -> None:
    path = tmp_catalogs / "links.csv"
    text = path.read_text().splitlines()
    path.write_text("\n".join([text[0].replace("busbw_gb_s", "busbw")] + text[1:]) + "\n")
    with pytest.raises(CatalogError, match="missing column.*busbw_gb_s"):
        cat.load_links()


def test_price_row_with_unknown_gpu(tmp_catalogs: Path) -> None:
    path = next((tmp_catalogs / "prices").glob("lambda-*.csv"))
    line = _rewrite_row(path, "tier", "on-demand", {"gpu_type": "H1000"})
    with pytest.raises(CatalogError, match=f"line {line}.*H1000"):
        cat.load_price_lists()


def test_bad_price_tier(tmp_catalogs: Path) -> None:
    path = next((tmp_catalogs / "prices").glob("lambda-*.csv"))
    line = _rewrite_row(path, "tier", "on-demand", {"tier": "reserved"})
    with pytest.raises(CatalogError, match=f"line {line}.*tier.*reserved"):
        cat.load_price_lists()
