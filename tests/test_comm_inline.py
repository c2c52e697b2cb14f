"""Inline collectives (issue 23's CPU TP miss): the profile's second table, its fit, its use.

`perfmodel.costs.comm` module doc: a tensor- or context-parallel collective issued on the compute
stream is timed by the profile's inline table where it covers the group, plus wait_per_compute
times the compute since the ranks last synchronised; FSDP's collectives keep the isolated fit.
"""

from __future__ import annotations

import csv
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfmodel.costs.comm import CommModel, LinkCoefficients, fit_comm, load_comm_dataset
from perfmodel.profiles.profile import load_profile, profile_from_dict
from perfmodel.sim.fsdp import INLINE_PLACES, inline_collectives, layout_unit_durations
from perfmodel.spec.catalog import get_gpu, get_model
from perfmodel.spec.errors import ProfileError
from perfmodel.spec.hardware import IslandSpec
from perfmodel.spec.layout import CommGroup, ParallelLayout
from perfmodel.spec.paths import REPO_ROOT, catalog_dir
from perfmodel.spec.recipe import TrainingRecipe

ISOLATED = LinkCoefficients(latency_s=1e-5, bandwidth_bytes_per_s=1e9, provenance="measured")
INLINE = LinkCoefficients(latency_s=1e-3, bandwidth_bytes_per_s=5e8, provenance="measured",
                          wait_per_compute=0.5)


def _group(link: str = "gloo-loopback") -> CommGroup:
    return CommGroup(dimension="tp", size=2, links=(link,), nodes=1, members_per_node=2, nics=1)


def test_inline_table_is_used_only_inline_and_where_it_covers_the_group() -> None:
    model = CommModel(backend="gloo", coefficients={("all_gather", "gloo-loopback"): ISOLATED},
                      inline_coefficients={("all_gather", "gloo-loopback"): INLINE})
    payload = 1e6
    isolated = 1e-5 + payload / (2 * 1e9)
    inline = 1e-3 + payload / (2 * 5e8)
    assert model.group_time_s("all_gather", _group(), payload) == pytest.approx(isolated)
    assert model.group_time_s("all_gather", _group(), payload, inline=True) == \
        pytest.approx(inline)
    # the wait on the skew grows with the compute since the last synchronisation
    assert model.group_time_s("all_gather", _group(), payload, inline=True, compute_s=0.01) == \
        pytest.approx(inline + 0.5 * 0.01)
    # an op or link the table lacks: the isolated coefficients (no wait term)
    assert model.group_time_s("all_reduce", _group(), payload, inline=True, compute_s=0.01) == \
        pytest.approx(model.group_time_s("all_reduce", _group(), payload))
    assert model.provenance("all_gather", ("gloo-loopback",), inline=True) == "measured"
    # arrays broadcast like the isolated model's
    many = model.group_time_s("all_gather", _group(), np.array([1e6, 2e6]), inline=True,
                              compute_s=np.array([0.0, 0.01]))
    assert many == pytest.approx([inline, 1e-3 + 2e6 / 1e9 + 0.005])


def test_fit_recovers_latency_bandwidth_and_wait_per_compute() -> None:
    rows = []
    for payload in np.geomspace(4096, 3.2e7, 8):
        for compute in (1e-4, 1e-3, 4e-3, 1e-2):
            time = 2e-3 + payload / 4e8 + 0.6 * compute   # all_reduce, P = 2: 2α + D/B
            rows.append({"backend": "gloo", "op": "all_reduce", "link": "gloo-loopback",
                         "world_size": 2, "payload_bytes": payload, "time_s": time,
                         "nics_per_node": 1, "filler_side": int(compute * 1e5),
                         "compute_s": compute})
    coefs, oof = fit_comm(pd.DataFrame(rows))
    fitted = coefs[("all_reduce", "gloo-loopback")]
    assert fitted.latency_s == pytest.approx(1e-3, rel=1e-6)
    assert fitted.bandwidth_bytes_per_s == pytest.approx(4e8, rel=1e-6)
    assert fitted.wait_per_compute == pytest.approx(0.6, rel=1e-6)
    assert np.isfinite(oof).all()


def test_shipped_inline_dataset_loads_and_the_profile_round_trips() -> None:
    data = catalog_dir() / "profiles" / "data" / "cpu-comm-inline.csv"
    frame = load_comm_dataset(str(data))
    assert (frame["compute_s"] > 0).all() and (frame["filler_side"] > 0).all()
    profile = load_profile("cpu-x86-2core")
    assert profile.comm.inline_coefficients, "the CPU profile carries its inline table"
    assert all(c.wait_per_compute > 0 for c in profile.comm.inline_coefficients.values())
    again = profile_from_dict(profile.to_dict())
    assert again.comm == profile.comm
    doc = profile.to_dict()
    doc["comm"] = [{**doc["comm"][0], "issue": "sideways"}, *doc["comm"][1:]]
    with pytest.raises(ProfileError, match="issue"):
        profile_from_dict(doc)


def test_fit_comm_refuses_a_dataset_of_the_other_kind(tmp_path: Path) -> None:
    from perfmodel.api.fit import CommFitRequest
    from perfmodel.api.fit import fit_comm as api_fit_comm
    from perfmodel.spec.errors import UserInputError

    data = catalog_dir() / "profiles" / "data"
    out = tmp_path / "p.yaml"
    with pytest.raises(UserInputError, match="--inline is set"):
        api_fit_comm(CommFitRequest(data_path=str(data / "cpu-comm.csv"), output_path=str(out),
                                    hardware="CPU-x86-2core", inline=True))
    with pytest.raises(UserInputError, match="--inline is not set"):
        api_fit_comm(CommFitRequest(data_path=str(data / "cpu-comm-inline.csv"),
                                    output_path=str(out), hardware="CPU-x86-2core"))
    assert not out.exists()


def test_inline_waits_add_wait_per_compute_times_each_pass_compute() -> None:
    """`inline_place_compute_s`' claim: a pass's tp collectives split its compute, so with zero
    latency and unbounded bandwidth their inline times sum to wait_per_compute x that compute."""
    base = load_profile("cpu-x86-2core")
    free = LinkCoefficients(latency_s=0.0, bandwidth_bytes_per_s=1e30, provenance="measured",
                            wait_per_compute=0.25)
    table = {(op, "gloo-loopback"): free for op in ("all_gather", "reduce_scatter", "all_reduce")}
    profile = replace(base, comm=replace(base.comm, inline_coefficients=table), tp_dispatch_s={})
    gpu = get_gpu(base.hardware)
    island = IslandSpec(gpu=gpu, num_nodes=1, gpus_per_node=2, intra_link="gloo-loopback",
                        inter_link="gloo-loopback")
    model = get_model("small-llama")
    for sp in (True, False):
        layout = ParallelLayout(tp=2, dp_shard=1, sequence_parallel=sp)
        recipe = replace(TrainingRecipe(parallel=layout), ac="none")
        d = layout_unit_durations(model, profile, island, seq_len=128, micro_batch=2,
                                  recipe=recipe, layout=layout)
        for where, pass_s in (("block_forward", d.block_forward_s),
                              ("block_backward", d.block_backward_s),
                              ("root_forward", d.root_forward_s),
                              ("root_backward", d.root_backward_s)):
            assert inline_collectives(recipe, where), where
            assert sum(d.inline[where]) == pytest.approx(0.25 * pass_s, rel=1e-9), (sp, where)
        assert set(d.inline) == set(INLINE_PLACES)
        # without the inline table the isolated coefficients time them, with no wait term: the
        # rank's compute (here grown by a dispatch table) does not reach them
        isolated = replace(profile, comm=CommModel(backend="gloo",
                                                   coefficients=base.comm.coefficients))
        slow = {k: dict.fromkeys(v, 1.0) for k, v in base.tp_dispatch_s.items()}
        a, b = (layout_unit_durations(model, replace(isolated, tp_dispatch_s=t), island,
                                      seq_len=128, micro_batch=2, recipe=recipe, layout=layout)
                for t in ({}, slow))
        assert a.inline == b.inline and a.block_forward_s < b.block_forward_s


def test_inline_sweep_writes_rows_from_real_gloo_ranks(tmp_path: Path) -> None:
    """The worker on 2 real gloo ranks (torchrun): every filler side a row, its compute timed."""
    pytest.importorskip("torch")
    from perfmodel.bench.comm_worker import INLINE_FILLER_SIDES

    out = tmp_path / "inline.csv"
    shardmeter = shutil.which("shardmeter", path=str(Path(sys.executable).parent))
    cmd = ([shardmeter] if shardmeter else [sys.executable, "-m", "planner.cli"]) + [
        "bench", "comm", "--inline", "-o", str(out), "--ops", "all_reduce", "--points", "1",
        "--min-mib", "0.0625", "--max-mib", "0.0625", "--iters", "2", "--warmup", "0"]
    subprocess.run(cmd, check=True, cwd=REPO_ROOT, capture_output=True, timeout=300)
    with out.open() as f:
        rows = list(csv.DictReader(f))
    assert [int(r["filler_side"]) for r in rows] == list(INLINE_FILLER_SIDES)
    assert all(float(r["compute_s"]) > 0 for r in rows)
    # a larger matmul takes longer: the compute column measures the filler
    computes = [float(r["compute_s"]) for r in rows]
    assert computes[-1] > computes[0]
