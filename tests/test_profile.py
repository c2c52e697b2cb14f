"""Hardware profiles: prior sanity, per-unit predictions, YAML round trip, lookup rules."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from synthetic import synthetic_compute_dataset

from perfmodel.costs.comm import LinkCoefficients
from perfmodel.costs.compute import fit_phases
from perfmodel.profiles.fit import with_comm_fit, with_compute_fit
from perfmodel.profiles.profile import (
    PhaseCoefficients,
    default_profile,
    load_profile,
    make_prior_profile,
    save_profile,
)
from perfmodel.spec.catalog import get_gpu, get_model
from perfmodel.spec.errors import ProfileError
from perfmodel.spec.hardware import IslandSpec

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ("A100-SXM4-80GB", "A100-SXM4-40GB", "A100-PCIe-80GB", "H100-SXM5-80GB", "H200-SXM-141GB",
           "B200", "L40S", "AMD-MI300X")
DATASHEET_PRIORS = ("A100-SXM4-80GB", "A100-SXM4-40GB", "H100-SXM5-80GB")
"""GPUs with published runs keep the datasheet prior; the others' priors scale from a calibrated
one."""


@pytest.mark.parametrize("gpu", SHIPPED)
def test_shipped_priors_load_with_provenance(gpu: str) -> None:
    profile = load_profile(f"{gpu}-prior")
    assert profile.hardware == gpu and profile.provenance == "prior"
    detail = profile.provenance_detail
    assert detail["datasheet"]["gpu"]["bf16_dense_flops_per_s"] == get_gpu(gpu).bf16_flops_per_s
    if gpu in DATASHEET_PRIORS:
        assert "matmul_efficiency" in detail["assumptions"]
    else:  # scaled from a calibrated GPU's physical parameters, and saying so
        assert detail["scaled_from"]["provenance"] == "calibrated"
        assert "not calibrated" in detail["method"] and "matmul_efficiency" in detail["params"]
    assert all(a["note"] for a in detail["assumptions"].values())
    assert set(profile.compute) == {"forward", "backward", "optimizer"}
    assert profile.backend == ("rccl" if gpu.startswith("AMD") else "nccl")


def test_prior_files_are_the_scripts_output() -> None:
    from scripts import make_prior_profiles

    assert make_prior_profiles.main(["--check"]) == 0


def test_llama3_8b_forward_on_h100_prior_is_sane() -> None:
    profile = load_profile("H100-SXM5-80GB-prior")
    model, gpu = get_model("Llama-3-8B"), get_gpu("H100-SXM5-80GB")
    S, m = 4096, 2
    flops = m * S * model.forward_flops_per_token(S)
    reference_s = flops / (gpu.bf16_flops_per_s * 0.40)  # FLOPs at 40% of dense bf16 peak
    fwd = profile.compute_time_s("forward", model, S, m)
    assert 0.5 < fwd / reference_s < 2.0
    bwd = profile.compute_time_s("backward", model, S, m)
    assert 1.8 < bwd / fwd < 2.2
    # optimizer on an 8-way shard: 16 B/param of state streams through HBM at least once
    opt = profile.compute_time_s("optimizer", model, S, m, num_shards=8)
    assert opt > model.total_params / 8 * 16 / gpu.hbm_bytes_per_s


@pytest.mark.parametrize("phase", ["forward", "backward", "optimizer"])
def test_units_sum_to_model_and_vectorise(phase: str) -> None:
    profile = load_profile("A100-SXM4-80GB-prior")
    model = get_model("Gemma-2B")
    m = np.array([1, 2, 5])
    whole = profile.compute_time_s(phase, model, 1024, m, num_shards=4)
    block = profile.compute_time_s(phase, model, 1024, m, unit="block", num_shards=4)
    root = profile.compute_time_s(phase, model, 1024, m, unit="root", num_shards=4)
    np.testing.assert_allclose(whole, model.num_layers * block + root, rtol=1e-12)
    scalar = [profile.compute_time_s(phase, model, 1024, int(x), num_shards=4) for x in m]
    np.testing.assert_allclose(whole, scalar, rtol=1e-12)
    shards = profile.compute_time_s(phase, model, 1024, 2, num_shards=np.array([4, 8]))
    assert shards[0] == pytest.approx(profile.compute_time_s(phase, model, 1024, 2, num_shards=4))


def test_island_comm_and_provenance() -> None:
    profile = load_profile("H100-SXM5-80GB-prior")
    gpu = get_gpu("H100-SXM5-80GB")
    island = IslandSpec(gpu=gpu, num_nodes=2, gpus_per_node=8, intra_link=gpu.intra_node_link,
                        inter_link=gpu.inter_node_link, nics_per_node=gpu.nics_per_node)
    t = profile.island_comm_time_s("all_gather", island, 1e9)
    assert t == pytest.approx(profile.comm_time_s("all_gather", island.ring_links, 16, 1e9,
                                                  nics_per_node=8))
    assert profile.island_comm_provenance("all_gather", island) == "prior"
    single = IslandSpec(gpu=gpu, num_nodes=1, gpus_per_node=1, intra_link="nvlink4",
                        inter_link="ib-ndr400")
    assert profile.island_comm_time_s("reduce_scatter", single, 1e9) == 0.0


def _measured(tmp_path: Path):
    models = [get_model(n) for n in ("tiny-llama", "tiny-gqa", "small-llama", "tiny-phi")]
    coefs = {"forward": {"tok_block_matmul": 1e-12, "layers": 1e-4, "const": 1e-3}}
    frame = synthetic_compute_dataset(models, coefs, seq_lens=(64, 128), noise=0.01)
    data = tmp_path / "compute.csv"
    frame.to_csv(data, index=False)
    regs = fit_phases(frame)
    from perfmodel.profiles.fit import dataset_record

    phases = {p: PhaseCoefficients(coefficients=r.coefficients, provenance="measured",
                                   selection_cv_mape_pct=r.cv_mape_, cv_scheme=r.cv_scheme_)
              for p, r in regs.items()}
    base = make_prior_profile("H100-SXM5-80GB")
    prof = with_compute_fit(base, name="h100-lab", hardware="H100-SXM5-80GB", backend="nccl",
                            phases=phases, dataset=dataset_record(data, "compute", len(frame)),
                            command="test", fit_date="2026-01-01", settings={"selection": "auto"})
    link = LinkCoefficients(latency_s=7e-6, bandwidth_bytes_per_s=3.5e11, provenance="measured",
                            cv_mape_pct=2.0, rows=9)
    return with_comm_fit(prof, name="h100-lab", hardware="H100-SXM5-80GB", backend="nccl",
                         coefficients={("all_gather", "nvlink4"): link},
                         dataset={"kind": "comm", "path": "x.csv", "sha256": "0" * 64, "rows": 9},
                         command="test2", fit_date="2026-01-02")


def test_round_trip_gives_equal_predictions(tmp_path: Path) -> None:
    prof = _measured(tmp_path)
    assert prof.compute_provenance("forward") == "measured"
    assert prof.compute_provenance("backward") == "prior"  # kept from the base
    assert prof.comm_provenance("all_gather", ["nvlink4", "ib-ndr400"]) == "mixed"
    path = tmp_path / "h100-lab.yaml"
    save_profile(prof, path)
    back = load_profile(str(path))
    assert back.to_dict() == prof.to_dict()
    model = get_model("Llama-3.2-1B")
    for phase in ("forward", "backward", "optimizer"):
        assert back.compute_time_s(phase, model, 2048, 3) == prof.compute_time_s(
            phase, model, 2048, 3
        )
    for op in ("all_gather", "all_reduce"):
        assert back.comm_time_s(op, ["nvlink4"], 8, 1e8) == prof.comm_time_s(
            op, ["nvlink4"], 8, 1e8
        )
    detail = back.provenance_detail
    assert [d["kind"] for d in detail["datasets"]] == ["compute", "comm"]
    assert detail["commands"] == ["test", "test2"] and detail["base"] == "H100-SXM5-80GB-prior"
    assert set(detail["cv_mape_pct"]) == {"all_gather/nvlink4"}  # the collectives' k-fold CV
    assert set(detail["selection_cv_mape_pct"]) == {"forward"}  # the score that chose features


def test_default_profile_prefers_measured(tmp_catalogs: Path, tmp_path: Path) -> None:
    # measured > calibrated > prior
    assert default_profile("h100-sxm5-80gb").provenance == "calibrated"
    assert default_profile("H200-SXM-141GB").name == "H200-SXM-141GB-prior"
    save_profile(_measured(tmp_path), tmp_catalogs / "profiles" / "h100-lab.yaml")
    assert default_profile("H100-SXM5-80GB").name == "h100-lab"
    assert default_profile("A100-SXM4-80GB").name == "A100-SXM4-80GB-calibrated"
    (tmp_catalogs / "profiles" / "A100-SXM4-80GB-calibrated.yaml").unlink()
    assert default_profile("A100-SXM4-80GB").name == "A100-SXM4-80GB-prior"
    built = default_profile("H100-PCIe")  # no file: the prior is built from the catalog
    assert built.provenance == "prior" and built.name == "H100-PCIe-prior"
    with pytest.raises(ProfileError, match="no profile"):
        default_profile("TPU-v5")


def test_load_errors(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="did you mean 'H100-SXM5-80GB-prior'"):
        load_profile("H100-SXM5-80GB-prio")
    with pytest.raises(ProfileError, match="not found"):
        load_profile(str(tmp_path / "missing.yaml"))
    doc = make_prior_profile("L40S").to_dict()
    doc["comm"][0]["bandwidth_bytes_per_s"] = -1
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(doc))
    with pytest.raises(ProfileError, match=r"comm\.0\.bandwidth_bytes_per_s") as err:
        load_profile(str(bad))
    assert "To fix:" in str(err.value)
    doc = make_prior_profile("L40S").to_dict()
    doc["compute"]["forward"]["coefficients_s"]["tok_magic"] = 1.0
    bad.write_text(yaml.safe_dump(doc))
    with pytest.raises(ProfileError, match="tok_magic"):
        load_profile(str(bad))
    doc["schema_version"] = 99
    bad.write_text(yaml.safe_dump(doc))
    with pytest.raises(ProfileError, match="schema_version"):
        load_profile(str(bad))


def test_missing_phase_is_a_profile_error(tmp_path: Path) -> None:
    prof = _measured(tmp_path)
    doc = prof.to_dict()
    del doc["compute"]["optimizer"]
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ProfileError, match="no optimizer coefficients"):
        load_profile(str(path)).compute_time_s("optimizer", get_model("tiny-llama"), 64, 1)
