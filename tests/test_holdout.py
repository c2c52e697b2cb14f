"""The fresh CPU holdout (issue 22, item 6): frozen before measuring, untouched by every fit.

Claims: catalogs/spaces/cpu-holdout.yaml parses to 3 architectures x 4 (sequence, micro-batch)
points at two layers; its config.json files are the published shapes (parameter counts of their
sources); no fitting dataset has a holdout model's name or shape (`holdout_clashes`, which the
generator also runs, and which a planted clash makes fail); the design-space format's `named`
section takes a list of sequence lengths and config.json paths, and the compute benchmark
measures and resumes such a space; docs/VALIDATION.md's holdout section says "not measured yet"
without the dataset and reports per-model errors from the shipped profile with it.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from perfmodel.bench import compute as cb
from perfmodel.bench.space import load_space
from perfmodel.spec.catalog import get_model
from perfmodel.spec.errors import UserInputError
from perfmodel.spec.paths import catalog_dir
from scripts import validation_heldout as vh

ROOT = Path(__file__).resolve().parent.parent
SPACE = catalog_dir() / "spaces" / "cpu-holdout.yaml"
FITTING = [ROOT / p for p in vh.FITTING]


def test_holdout_space_is_three_models_at_four_points() -> None:
    design = load_space(SPACE)
    assert design.named is not None and not design.ranges  # named models only
    configs = cb.named_configs(design)
    points: dict[str, set[tuple[int, int]]] = {}
    for c in configs:
        assert c.spec.num_layers == 2
        points.setdefault(c.config_id, set()).update((c.seq_len, m) for m in c.micro_batches)
    assert sorted(points) == ["Gemma-2-2B", "Mistral-7B-v0.1", "Qwen2.5-0.5B"]
    assert all(p == {(64, 1), (64, 2), (256, 1), (256, 2)} for p in points.values())
    assert design.named.iters == 5
    with pytest.raises(UserInputError, match="named models only"):
        cb.sample_configs(design, 1, seed=0)


def test_holdout_configs_are_the_published_shapes() -> None:
    """Parameter counts of the sources (catalogs/spaces/holdout/README.md): Qwen2.5-0.5B's
    embedding 136,134,656 + 24 blocks x 14,912,384 + final norm 896 (torchinfo table of the copy
    read); Gemma-2-2B's 2,614,341,888 (Gemma 2 report)."""
    qwen = get_model(str(catalog_dir() / "spaces/holdout/Qwen2.5-0.5B/config.json"))
    gemma = get_model(str(catalog_dir() / "spaces/holdout/Gemma-2-2B/config.json"))
    assert (qwen.name, qwen.family, qwen.tie_word_embeddings) == ("Qwen2.5-0.5B", "qwen2", True)
    assert qwen.total_params == 136_134_656 + 24 * 14_912_384 + 896
    assert (gemma.name, gemma.family, gemma.d) == ("Gemma-2-2B", "gemma2", 256)
    assert gemma.total_params == 2_614_341_888
    assert (ROOT / "tests/data/configs/gemma2_2b.json").read_text() == \
        (catalog_dir() / "spaces/holdout/Gemma-2-2B/config.json").read_text()


def test_holdout_architectures_differ_from_each_other_and_from_the_named_models() -> None:
    specs = vh.holdout_specs(SPACE)
    named = [get_model(m) for m in load_space(catalog_dir() / "spaces/cpu-wide.yaml").named.models]
    for attr in ("hidden_size", "num_heads", "intermediate_size"):
        assert len({getattr(s, attr) for s in specs}) == 3, attr
    ratios = {round(s.intermediate_size / s.hidden_size, 2) for s in specs}
    assert len(ratios) == 3
    assert not {vh._shape(s) for s in specs} & {vh._shape(s) for s in named}


def test_no_fitting_dataset_touches_the_holdout() -> None:
    """The holdout is untouched: no row of cpu-compute.csv, cpu-width-probe.csv (nor the FSDP-side
    fit's cpu-fsdp.csv) has a holdout model's name or shape."""
    assert all(p.is_file() for p in FITTING)
    assert vh.holdout_clashes(vh.holdout_specs(SPACE), FITTING) == []


def test_a_planted_clash_is_found(tmp_path: Path) -> None:
    """The check can fail: a row named like a holdout model, or with its shape under another
    name, is reported."""
    specs = vh.holdout_specs(SPACE)
    mistral = next(s for s in specs if s.name == "Mistral-7B-v0.1")
    planted = tmp_path / "planted.csv"
    with planted.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["model", *vh.SHAPE_KEY, "time_s"])
        writer.writerow(["sobol-9999", mistral.hidden_size, mistral.num_heads,
                         mistral.num_kv_heads, mistral.intermediate_size, mistral.vocab_size, 1])
        writer.writerow(["qwen2.5-0.5b", 64, 4, 2, 128, 256, 1])
    clashes = vh.holdout_clashes(specs, [planted])
    assert any("Qwen2.5-0.5B" in c for c in clashes)
    assert any("sobol-9999" in c and "Mistral-7B-v0.1" in c for c in clashes)


def test_holdout_section_before_measurement() -> None:
    text = vh.holdout_section(data_path=ROOT / "catalogs/profiles/data/absent.csv")
    assert text.startswith("### The fresh CPU holdout: the honest, untouched CPU estimate")
    assert "Not measured yet" in text and "Qwen2.5-0.5B, Gemma-2-2B and Mistral-7B-v0.1" in text


# ---- the named section's new forms ----------------------------------------------------------

TINY_CONFIG = {"model_type": "llama", "hidden_size": 32, "num_hidden_layers": 4,
               "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 64,
               "vocab_size": 128, "tie_word_embeddings": False}


def _tiny_space(tmp_path: Path, models: str = "[cfg/tiny-cfg/config.json, tiny-llama]",
                seq: str = "[16, 32]") -> Path:
    folder = tmp_path / "cfg" / "tiny-cfg"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(TINY_CONFIG))
    space = tmp_path / "tiny-holdout.yaml"
    space.write_text(f"name: tiny-holdout\nnamed:\n  models: {models}\n  num_hidden_layers: 1\n"
                     f"  seq_len: {seq}\n  micro_batches: [1, 2]\n  iters: 1\n")
    return space


def test_named_section_takes_config_paths_and_sequence_lists(tmp_path: Path) -> None:
    configs = cb.named_configs(load_space(_tiny_space(tmp_path)))
    assert [(c.config_id, c.seq_len) for c in configs] == [
        ("tiny-cfg", 16), ("tiny-cfg", 32), ("tiny-llama", 16), ("tiny-llama", 32)]
    assert configs[0].spec.hidden_size == 32 and configs[0].spec.num_layers == 1
    keys = cb.progress_keys(configs)
    assert keys["tiny-cfg", 16] == "tiny-cfg@S16" and keys["tiny-llama", 32] == "tiny-llama@S32"
    one = cb.named_configs(load_space(_tiny_space(tmp_path, seq="16")))
    # one sequence length: the progress file keeps naming the model alone (older files resume)
    assert set(cb.progress_keys(one).values()) == {"tiny-cfg", "tiny-llama"}


@pytest.mark.parametrize(("models", "seq", "message"), [
    ("[cfg/missing/config.json]", "16", "no such config.json"),
    ("[tiny-lama]", "16", "tiny-llama"),  # did you mean
    ("[tiny-llama]", "[16, 16]", "repeats"),
    ("[tiny-llama]", "[]", "empty"),
    ("[tiny-llama]", "[16, 0]", "positive integer"),
])
def test_bad_named_sections_are_user_errors(tmp_path: Path, models: str, seq: str,
                                            message: str) -> None:
    with pytest.raises(UserInputError, match=message) as err:
        load_space(_tiny_space(tmp_path, models=models, seq=seq))
    assert "tiny-holdout.yaml" in str(err.value)


@pytest.mark.torch
def test_bench_named_space_with_sequence_list_runs_and_resumes(run_cli, tmp_path: Path) -> None:
    """Real measurement of a tiny named-only space (a config.json and a catalog model at two
    sequence lengths): every (model, S, m) point once, nothing remeasured on rerun; the
    generator's holdout section then reports each model from the shipped profile."""
    pytest.importorskip("torch")
    space = _tiny_space(tmp_path)
    out = tmp_path / "holdout.csv"
    args = ["bench", "compute", "--space", str(space), "--named", "-o", str(out), "--warmup", "0"]
    first = run_cli(*args)
    assert first.code == 0, first.err
    with out.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    points = {(r["model"], r["seq_len"], r["micro_batch"]) for r in rows}
    assert len(points) == 8 and len(rows) == 24
    # each line: the configuration (@S<seq> when listed at several lengths), why its sweep
    # stopped, how many micro-batches it measured
    assert Path(f"{out}.progress").read_text().split() == [
        "tiny-cfg@S16", "done", "2", "tiny-cfg@S32", "done", "2", "tiny-llama@S16", "done", "2",
        "tiny-llama@S32", "done", "2"]
    second = run_cli(*args)
    assert second.code == 0 and out.read_text().count("\n") == 25
    text = vh.holdout_section(space_path=space, data_path=out)
    assert "Not measured yet" not in text
    for name in ("tiny-cfg", "tiny-llama", "all (2 models)"):
        assert f"| {name} | 4 |" in text
