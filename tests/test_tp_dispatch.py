"""DTensor's host dispatch under the tensor-parallel plan (`perfmodel.bench.dispatch`): the fit
of its rows, the profile field, and where the step adds it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from perfmodel.bench.dispatch import LAYERS
from perfmodel.profiles.dispatch import dispatch_coefficients, load_dispatch_dataset
from perfmodel.profiles.profile import load_profile, profile_from_dict
from perfmodel.sim.fsdp import layout_unit_durations
from perfmodel.spec.catalog import get_gpu, get_model
from perfmodel.spec.errors import ProfileError, UserInputError
from perfmodel.spec.hardware import IslandSpec
from perfmodel.spec.layout import ParallelLayout
from perfmodel.spec.paths import catalog_dir
from perfmodel.spec.recipe import TrainingRecipe
from planner.cli import cli

TRUE = {True: {"forward": (3e-3, 2e-3), "step": (8e-3, 5e-3)},     # (per block, root)
        False: {"forward": (2e-3, 1e-4), "step": (6e-3, 3e-3)}}


def _rows(noise: float = 0.0) -> list[dict[str, object]]:
    rows = []
    for sp, passes in TRUE.items():
        for kind, (block, root) in passes.items():
            for i, layers in enumerate(LAYERS):
                excess = root + layers * block + (noise if i % 2 else -noise)
                rows.append({"sequence_parallel": sp, "layers": layers, "pass": kind,
                             "plain_s": 1e-3, "tp_s": 1e-3 + excess, "excess_s": excess,
                             "iters": 5})
    return rows


def test_fit_recovers_block_and_root_per_pass() -> None:
    table = dispatch_coefficients(_rows())
    sp = table["sequence_parallel"]
    assert sp["block_forward"] == pytest.approx(3e-3)
    assert sp["block_backward"] == pytest.approx(5e-3)       # step - forward
    assert sp["root_forward"] == pytest.approx(2e-3)
    assert sp["root_backward"] == pytest.approx(3e-3)
    assert table["no_sequence_parallel"]["root_forward"] == pytest.approx(1e-4)


def test_fit_clips_a_negative_cost_and_refuses_one_layer_count() -> None:
    rows = [r | {"excess_s": float(r["excess_s"]) - 0.01}   # type: ignore[arg-type]
            if r["pass"] == "forward" and r["sequence_parallel"] is False else r
            for r in _rows()]
    assert dispatch_coefficients(rows)["no_sequence_parallel"]["root_forward"] == 0.0
    with pytest.raises(UserInputError, match="two layer counts"):
        dispatch_coefficients([r for r in _rows() if r["layers"] == 1])


def test_shipped_rows_fit_into_the_shipped_profile() -> None:
    rows = load_dispatch_dataset(str(catalog_dir() / "profiles" / "data" / "cpu-tp-dispatch.csv"))
    profile = load_profile("cpu-x86-2core")
    assert profile.tp_dispatch_s == dispatch_coefficients(rows)
    # the planned model is the slower one on every shipped row: the excess is real host work
    assert len(rows) == 20 and all(float(r["excess_s"]) > 0 for r in rows)
    assert profile_from_dict(profile.to_dict()).tp_dispatch_s == profile.tp_dispatch_s
    bad = profile.to_dict()
    bad["tp_dispatch_s"] = {"sequence_parallel": {"block_forward": 1e-3}}
    with pytest.raises(ProfileError, match="tp_dispatch_s"):
        profile_from_dict(bad)


def test_the_step_adds_dispatch_to_tensor_parallel_ranks_only() -> None:
    profile = load_profile("cpu-x86-2core")
    table = dispatch_coefficients(_rows())
    gpu = get_gpu(profile.hardware)
    island = IslandSpec(gpu=gpu, num_nodes=1, gpus_per_node=2, intra_link="gloo-loopback",
                        inter_link="gloo-loopback")
    model = get_model("small-llama")
    for tp, sp in ((2, True), (2, False), (1, True)):
        layout = ParallelLayout(tp=tp, dp_shard=1 if tp == 2 else 2, sequence_parallel=sp)
        recipe = replace(TrainingRecipe(parallel=layout), ac="none")

        without, with_ = (layout_unit_durations(model, replace(profile, tp_dispatch_s=t), island,
                                                seq_len=128, micro_batch=1, recipe=recipe,
                                                layout=layout) for t in ({}, table))
        key = "sequence_parallel" if sp else "no_sequence_parallel"
        for field, place in (("block_forward_s", "block_forward"),
                             ("root_forward_s", "root_forward"),
                             ("root_backward_s", "root_backward")):
            added = getattr(with_, field) - getattr(without, field)
            assert added == pytest.approx(table[key][place] if tp == 2 else 0.0), (tp, sp, field)


def test_fit_dispatch_command_updates_a_profile_and_refuses_another_dataset(
        tmp_path: Path) -> None:
    data = catalog_dir() / "profiles" / "data"
    out = tmp_path / "cpu.yaml"
    out.write_text((catalog_dir() / "profiles" / "cpu-x86-2core.yaml").read_text())
    done = CliRunner().invoke(cli, ["fit", "dispatch", str(data / "cpu-tp-dispatch.csv"),
                                    "-o", str(out), "--format", "json"])
    assert done.exit_code == 0, done.output
    assert load_profile(str(out)).tp_dispatch_s == load_profile("cpu-x86-2core").tp_dispatch_s
    refused = CliRunner().invoke(cli, ["fit", "dispatch", str(data / "cpu-comm.csv"),
                                       "-o", str(out)])
    assert refused.exit_code == 2 and "To fix:" in refused.output
    assert "sequence_parallel" in refused.output   # names the missing columns
