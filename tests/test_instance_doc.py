"""docs/INSTANCE.md is generated from the instance models (scripts/make_instance_doc.py): every
field of every model is in it with its description and default, the unit suffixes read as units,
and the checked-in file is the generator's output."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.model import instance as model
from scripts import make_instance_doc as gen

ROOT = Path(__file__).resolve().parent.parent


def test_every_field_of_every_model_is_documented() -> None:
    text = gen.build()
    for section, cls in gen.SECTIONS:
        assert f"## `{section}`" in text or not section
        for name, field in cls.model_fields.items():
            assert field.description, f"{cls.__name__}.{name} has no docstring"
            rows = [line for line in text.splitlines() if line.startswith(f"| `{name}` |")]
            assert any(" ".join(field.description.split()).replace("|", "\\|") in row
                       for row in rows), name
    assert {cls for _, cls in gen.SECTIONS} >= {model.Instance, model.Training, model.Cluster,
                                                model.PriceRef, model.Alternative, model.Limits,
                                                model.Failures}


@pytest.mark.parametrize(("name", "unit"), [
    ("price_usd_per_gpu_hour", "USD/GPU-hour"), ("wan_gbit_s", "Gbit/s"), ("wan_latency_ms", "ms"),
    ("restart_s", "s"), ("deadline_hours", "h"), ("checkpoint_write_gbit_s_per_node",
                                                   "Gbit/s per node"), ("name", "")])
def test_units_come_from_the_names(name: str, unit: str) -> None:
    assert gen.unit(name) == unit


def test_examples_name_their_file() -> None:
    docs = gen.examples()
    seq_len = gen.example_text("training", "seq_len", docs)
    first = docs[0]
    assert seq_len == f"`{first[1]['training']['seq_len']}` ({first[0]})"
    assert gen.example_text("clusters[].price", "provider", docs).endswith(".yaml)")
    assert gen.example_text("limits", "no_such_field", docs) == "—"


def test_the_checked_in_doc_is_current() -> None:
    assert (ROOT / "docs" / "INSTANCE.md").read_text() == gen.build(), \
        "rerun python -m scripts.make_instance_doc"
