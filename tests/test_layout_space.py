"""`perfmodel.spec.layout_space.LayoutSpace`: parsing errors name the field, pinned values are
the only candidates, every candidate is a valid layout of the island, and the free defaults on a
16-GPU island (2 nodes x 8, a 4-block model) are the ones its module doc states."""

from __future__ import annotations

import pytest

from perfmodel.spec.errors import UserInputError
from perfmodel.spec.layout_space import LayoutSpace

MODEL = {"num_layers": 4, "num_heads": 8, "num_kv_heads": 8, "intermediate_size": 1024,
         "seq_len": 128}
ISLAND = {"nodes": 2, "gpus_per_node": 8}


@pytest.mark.parametrize(("section", "field"), [
    ({"tp": 0}, "parallel.tp"), ({"max_pp": False}, "parallel.max_pp"),
    ({"schedules": ["zero-bubble"]}, "parallel.schedules"),
    ({"sequence_parallel": "yes"}, "parallel.sequence_parallel"),
    ({"tensor": 2}, "unknown field"), ("tp=8", "parallel must be a mapping"),
])
def test_parsing_errors_name_the_field(section: object, field: str) -> None:
    with pytest.raises(UserInputError) as err:
        LayoutSpace.parse(section, source="training")  # type: ignore[arg-type]
    assert field in str(err.value) and "To fix:" in str(err.value)


def test_pinned_values_are_the_only_candidates() -> None:
    space = LayoutSpace.parse({"tp": 2, "pp": 2, "schedules": ["1f1b"], "dp_replicate": 1})
    found = space.candidates(**MODEL, **ISLAND)
    assert found and {(c.tp, c.pp, c.pp_schedule, c.dp_replicate) for c in found} == {
        (2, 2, "1f1b", 1)}


def test_every_candidate_is_a_valid_layout_of_the_island() -> None:
    for c in LayoutSpace.parse({}).candidates(**MODEL, **ISLAND):
        assert c.dp_shard * c.dp_replicate * c.tp * c.pp * c.cp == 16
        c.check_model(**MODEL)  # raises if the model does not allow it


def test_free_defaults_on_a_16_gpu_island() -> None:
    """tp: powers of two up to a node's 8 GPUs; pp: 1 and powers of two up to the 4 blocks; cp 1;
    dp_replicate 1 and the HSDP layout sharding within a node; pipelines as 1f1b and as
    interleaved-1f1b with 2 or 4 virtual stages where pp·V <= blocks (here only pp 2 x 2);
    sequence parallel on."""
    found = LayoutSpace.parse({}).candidates(**MODEL, **ISLAND)
    assert {c.tp for c in found} == {1, 2, 4, 8}
    assert {c.pp for c in found} == {1, 2, 4}
    assert {c.cp for c in found} == {1}
    assert all(c.sequence_parallel and not c.async_tp for c in found)
    for c in found:
        node_shard = 8 // c.tp
        assert c.dp_replicate == 1 or c.dp_shard == node_shard, c.describe()
    pipelines = {(c.pp, c.pp_schedule, c.virtual_stages) for c in found if c.pp > 1}
    assert pipelines == {(2, "1f1b", 1), (2, "interleaved-1f1b", 2), (4, "1f1b", 1)}
    assert len(found) == len({c.describe() for c in found})  # no layout twice


@pytest.mark.parametrize(("section", "expected"), [
    ({}, {2, 4}),                                   # the default: 2 up to 4
    ({"max_virtual_stages": 8}, {2, 4, 8}),         # a deeper search
    ({"max_virtual_stages": 16}, {2, 4, 8}),        # 16 x pp 2 > the 16 blocks
    ({"max_virtual_stages": 3}, {2}),               # powers of two only
    ({"max_virtual_stages": 1}, set()),             # no interleaving
    ({"virtual_stages": [3, 8]}, {3, 8}),           # a list is taken as given
    ({"virtual_stages": [2, 8], "max_virtual_stages": 4}, {2}),   # ... and capped
])
def test_virtual_stages_tried(section: dict[str, object], expected: set[int]) -> None:
    """Interleaved 1F1B on a 16-block model at pp 2: powers of two from 2 up to
    max_virtual_stages (default DEFAULT_MAX_VIRTUAL_STAGES = 4), never more stages than blocks."""
    found = LayoutSpace.parse({"pp": 2, "tp": 8, **section}).candidates(
        **{**MODEL, "num_layers": 16}, **ISLAND)
    assert {c.virtual_stages for c in found if c.pp_schedule == "interleaved-1f1b"} == expected
