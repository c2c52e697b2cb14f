"""The MoE memory-tracker datasets (perfmodel/bench/memory_moe.py, scripts/make_memory_moe.py):
their columns and draws, and a tiny case tracked live (the sharding of experts over ep x
efsdp ranks is what the tracker sees)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from perfmodel.bench.common import CsvLog
from perfmodel.bench.memory import MemoryCase
from perfmodel.bench.memory_moe import (
    COLUMNS,
    CONFIGS,
    GRID_CASES,
    HELDOUT_CASES,
    KEY_COLUMNS,
    MoeMemoryCase,
    case_key,
    grid_cases,
    heldout_cases,
    load_spec,
    run_moe_cases,
)
from perfmodel.bench.moe import check_moe_buildable
from perfmodel.spec.arch import ModelSpec, MoeSpec
from perfmodel.spec.errors import UserInputError
from perfmodel.spec.paths import catalog_dir
from perfmodel.spec.recipe import DEFAULT_RECIPE

DATA = catalog_dir() / "profiles" / "data"
LAYOUT_COLUMNS = next(csv.reader((DATA / "memory-tracker-layouts.csv").open()))


def _header(path: Path) -> list[str]:
    return next(csv.reader(path.open()))


def test_columns_are_the_layouts_plus_the_moe_ones() -> None:
    extra = [c for c in COLUMNS if c not in LAYOUT_COLUMNS]
    assert [c for c in COLUMNS if c in LAYOUT_COLUMNS] == LAYOUT_COLUMNS
    assert {"ep", "num_experts", "experts_per_token", "expert_intermediate_size",
            "num_shared_experts", "capacity_factor"} <= set(extra)


@pytest.mark.parametrize(("name", "cases"), [
    ("memory-tracker-moe.csv", grid_cases), ("memory-tracker-moe-heldout.csv", heldout_cases)])
def test_shipped_dataset_is_its_draw(name: str, cases: object) -> None:
    path = DATA / name
    assert _header(path) == list(COLUMNS)
    log = CsvLog(path, COLUMNS, KEY_COLUMNS)
    drawn = {log.key_of(case_key(c)) for c in cases()}  # type: ignore[operator]
    assert log.done_keys() == drawn
    for row in log.rows():
        assert row["ground_truth"] == "fsdp-mem-tracker/fake"
        assert int(row["peak_bytes"]) > int(row["optimizer_bytes"]) > 0


def test_grid_spans_ep_1_to_8_for_both_shapes_and_heldout_is_disjoint() -> None:
    grid, held = grid_cases(), heldout_cases()
    assert len(grid) == GRID_CASES and len(held) == HELDOUT_CASES
    for config in {c.case.config_id for c in grid}:
        assert {c.ep for c in grid if c.case.config_id == config} == {1, 2, 4, 8}
    assert len({c.case.config_id for c in grid}) == 2
    assert max(c.case.world_size for c in grid) == 16
    for field in ("world_size", "seq_len"):
        assert not {getattr(c.case, field) for c in grid} & {getattr(c.case, field) for c in held}
    assert not {c.capacity_factor for c in grid} & {c.capacity_factor for c in held}


TINY = ModelSpec(name="tiny-moe", family="mixtral", hidden_size=32, num_layers=2, num_heads=4,
                 num_kv_heads=2, intermediate_size=64, vocab_size=128,
                 moe=MoeSpec(num_experts=4, experts_per_token=2, expert_intermediate_size=16,
                             moe_layers=(0, 1)))


def _tiny(ep: int, world: int = 4, ac: str = "none") -> MoeMemoryCase:
    case = MemoryCase(config_id="tiny-moe", spec=TINY, world_size=world, seq_len=16,
                      micro_batch=2, accum_steps=1, steps=1,
                      recipe=DEFAULT_RECIPE.with_overrides(ac=ac))
    return MoeMemoryCase(case=case, ep=ep, capacity_factor=1.0)


def test_uneven_dim1_expert_shards_are_refused() -> None:
    # Mixtral on 12 ranks shards its 8 experts on dim 1 (world > E) over 6 efsdp ranks: FSDP2
    # refuses 4096 / 6; on 16 ranks (8 per ep 2 group) it divides
    mixtral = load_spec(CONFIGS["mixtral-8x7b"])
    with pytest.raises(UserInputError, match="dim 1"):
        check_moe_buildable(mixtral, 2, 1.0, 12)
    check_moe_buildable(mixtral, 2, 1.0, 16)


def test_ep_must_divide_the_world_and_op_sac_is_refused() -> None:
    with pytest.raises(UserInputError, match="world size"):
        _tiny(4, world=6)
    with pytest.raises(UserInputError, match="op-sac"):
        _tiny(2, ac="op-sac")


@pytest.mark.slow
def test_tiny_case_holds_its_shard_of_every_parameter(tmp_path: Path) -> None:
    out = tmp_path / "moe.csv"
    counts = run_moe_cases([_tiny(2), _tiny(4)], out)
    assert counts == {"measured": 2, "skipped": 0}
    assert run_moe_cases([_tiny(2)], out) == {"measured": 0, "skipped": 1}
    for row in CsvLog(out, COLUMNS, KEY_COLUMNS).rows():
        # fp32 master weights, every parameter (experts: E/ep per rank, over world/ep efsdp
        # ranks) divides evenly over the 4 ranks: a quarter of the model each
        assert int(row["local_param_bytes"]) == TINY.total_params * 4 // 4
        assert int(row["optimizer_bytes"]) >= 2 * int(row["local_param_bytes"])
        assert int(row["expert_capacity"]) == 16   # ceil(32 tokens x 2 / 4 x 1.0)
