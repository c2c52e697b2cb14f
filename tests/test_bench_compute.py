"""Compute benchmark: design space, Sobol shapes, profiler phase grouping, real CLI runs, resume."""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path

import pytest

from perfmodel.spec.errors import DatasetError, UserInputError

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from perfmodel.bench import compute as cb  # noqa: E402
from perfmodel.bench.model import build_model  # noqa: E402
from perfmodel.bench.space import load_space  # noqa: E402
from perfmodel.spec.catalog import get_model  # noqa: E402
from perfmodel.spec.paths import catalog_dir  # noqa: E402

TINY_SPACE = """
name: tiny
families: [llama, phi, gemma]
tie_word_embeddings: [false, true]
hidden_size: {min: 16, max: 64, scale: log, multiple_of: 8}
num_hidden_layers: {min: 1, max: 2}
num_attention_heads: {min: 2, max: 4}
num_key_value_heads: {min: 1, max: 2}
intermediate_size: {min: 32, max: 128, scale: log, multiple_of: 16}
vocab_size: {min: 64, max: 256, scale: log, multiple_of: 64}
seq_len: [16, 32]
max_micro_batch: 2
limits: {time_per_config_s: 30, memory_gib: 1}
named:
  models: [tiny-llama, tiny-phi]
  num_hidden_layers: 1
  seq_len: 16
  micro_batches: [1]
  iters: 2
"""


@pytest.fixture
def tiny_space(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY_SPACE)
    return path


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


# ---- design space -------------------------------------------------------------------------

@pytest.mark.parametrize("space", ["cpu.yaml", "cpu-wide.yaml", "paper-gpu.yaml"])
def test_shipped_spaces_sample_valid_shapes(space: str) -> None:
    design = load_space(catalog_dir() / "spaces" / space)
    configs = cb.sample_configs(design, 40, seed=0)
    assert len(configs) == 40 and len({c.config_id for c in configs}) == 40
    for c in configs:
        s = c.spec
        assert (
            s.hidden_size % s.num_heads == 0 and s.num_heads % s.num_kv_heads == 0 and s.d % 2 == 0
        )
        assert (
            design.ranges["num_hidden_layers"].low
            <= s.num_layers
            <= design.ranges["num_hidden_layers"].high
        )
        assert c.seq_len in design.seq_lens and c.micro_batches[0] == 1
    assert design.named is not None and len(cb.named_configs(design)) == 5


def test_listed_values_are_sampled_from_the_list() -> None:
    """cpu-aligned.yaml lists its widths and head counts: every shape takes listed values and is
    valid, and its ids carry the space's prefix (its rows share cpu-compute.csv with sobol-*)."""
    design = load_space(catalog_dir() / "spaces" / "cpu-aligned.yaml")
    configs = cb.sample_configs(design, 40, seed=0)
    widths = Counter(c.spec.hidden_size for c in configs)
    assert set(widths) == {1024, 2048, 3072, 4096}
    for c in configs:
        s = c.spec
        assert c.config_id.startswith("aligned-") and s.hidden_size % 1024 == 0
        assert s.num_heads in (4, 8, 16) and s.num_kv_heads in (1, 2, 4, 8)
        assert s.hidden_size % s.num_heads == 0 and s.num_heads % s.num_kv_heads == 0
        assert 128 <= s.intermediate_size <= 16384


def test_width_probe_takes_each_width_once() -> None:
    """The probe's claim: its first 8 Sobol points take each of its 8 widths once, the rest
    fixed."""
    design = load_space(catalog_dir() / "spaces" / "cpu-width-probe.yaml")
    configs = cb.sample_configs(design, 8, seed=0)
    assert sorted(c.spec.hidden_size for c in configs) == list(
        design.ranges["hidden_size"].choices)
    assert len({(c.spec.intermediate_size, c.spec.vocab_size, c.spec.num_layers,
                 c.spec.num_heads, c.seq_len) for c in configs}) == 1


def test_sobol_sample_is_seeded_and_prefix_stable(tiny_space: Path) -> None:
    design = load_space(tiny_space)
    a, b = cb.sample_configs(design, 6, seed=1), cb.sample_configs(design, 12, seed=1)
    assert [c.spec for c in a] == [c.spec for c in b[:6]]
    assert [c.spec for c in cb.sample_configs(design, 6, seed=2)] != [c.spec for c in a]
    assert len(Counter(c.spec.family for c in b)) == 3


def test_bad_space_files_are_user_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(TINY_SPACE.replace("hidden_size: {min: 16", "hidden_size: {low: 16"))
    with pytest.raises(UserInputError, match="hidden_size"):
        load_space(bad)
    bad.write_text(TINY_SPACE.replace("[llama, phi, gemma]", "[llama, gpt9]"))
    with pytest.raises(UserInputError, match="gpt9"):
        load_space(bad)
    with pytest.raises(UserInputError, match="not found"):
        load_space(tmp_path / "missing.yaml")
    bad.write_text(TINY_SPACE.replace("name: tiny", "name: tiny\nid_prefix: Sobol 2"))
    with pytest.raises(UserInputError, match="id_prefix"):
        load_space(bad)
    bad.write_text(TINY_SPACE.replace("{min: 16, max: 64, scale: log, multiple_of: 8}",
                                      "[16, 2.5]"))
    with pytest.raises(UserInputError, match="hidden_size.*2.5"):
        load_space(bad)


# ---- phase grouping -----------------------------------------------------------------------

def test_group_phases_on_a_recorded_cpu_trace(tmp_path: Path) -> None:
    spec = get_model("tiny-gqa")
    model = build_model(spec)
    opt = torch.optim.AdamW(model.parameters())
    tokens = torch.randint(0, spec.vocab_size, (2, 16))
    events = cb.profile_steps(
        lambda: cb._train_step(model, tokens, opt, lambda: None), iters=3, device="cpu"
    )
    (tmp_path / "trace.json").write_text(json.dumps(events))
    per_iter = cb.group_phases(events, "cpu")
    assert len(per_iter) == 3
    for phase in cb.PHASES:
        ranges = [e for e in events if e.get("cat") == "user_annotation" and e["name"] == phase]
        assert sum(it[phase] for it in per_iter) == pytest.approx(
            sum(e["dur"] for e in ranges) * 1e-6
        )
        # every op of the phase lies inside its range, so the range bounds the ops' own time
        first = min(ranges, key=lambda e: e["ts"])
        inside = [e for e in events if e.get("cat") == "cpu_op" and e.get("tid") == first["tid"]
                  and first["ts"] <= e["ts"] and e["ts"] + e["dur"] <= first["ts"] + first["dur"]]
        assert inside and per_iter[0][phase] > 0


def _cuda_trace() -> list[dict]:
    """Two iterations; kernels are launched inside the host ranges and run later on the device."""
    events: list[dict] = []
    corr = 0
    for it, base in enumerate((0.0, 1000.0)):
        for k, phase in enumerate(cb.PHASES):
            start = base + 300.0 * k
            events.append({"cat": "user_annotation", "name": phase, "ts": start, "dur": 250.0})
            events.append(
                {"cat": "gpu_user_annotation", "name": phase, "ts": start + 5, "dur": 999.0}
            )
            for j in range(3):
                corr += 1
                events.append(
                    {
                        "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": start + 10 + j,
                        "dur": 1.0, "args": {"correlation": corr},
                    }
                )
                events.append({"cat": "kernel", "name": f"k{corr}", "ts": start + 400 + 20 * j,
                               "dur": float(10 * (k + 1) + it), "args": {"correlation": corr}})
    events.append(
        {"cat": "kernel", "name": "orphan", "ts": 5.0, "dur": 77.0, "args": {"correlation": 999}}
    )
    return events


def test_group_phases_sums_device_kernels_by_launching_range() -> None:
    per_iter = cb.group_phases(_cuda_trace(), "cuda")
    assert per_iter == [pytest.approx({"forward": 30e-6, "backward": 60e-6, "optimizer": 90e-6}),
                        pytest.approx({"forward": 33e-6, "backward": 63e-6, "optimizer": 93e-6})]
    assert cb.group_phases(_cuda_trace(), "cpu")[0] == pytest.approx(
        dict.fromkeys(cb.PHASES, 250e-6)
    )


def test_group_phases_rejects_unbalanced_ranges() -> None:
    events = [e for e in _cuda_trace() if not (e["name"] == "optimizer" and e["ts"] > 900)]
    with pytest.raises(DatasetError, match="unequal"):
        cb.group_phases(events, "cpu")


# ---- real runs through the CLI ------------------------------------------------------------

def test_bench_compute_cli_runs_and_resumes(run_cli, tiny_space: Path, tmp_path: Path) -> None:
    out = tmp_path / "compute.csv"
    args = ["bench", "compute", "--space", str(tiny_space), "-n", "3", "-o", str(out),
            "--iters", "2", "--warmup", "1", "--seed", "5"]
    first = run_cli(*args, "--limit", "2")
    assert first.code == 0, first.err
    rows = _rows(out)
    assert list(rows[0]) == list(cb.COLUMNS)
    assert {r["model"] for r in rows} == {"sobol-0000", "sobol-0001"}
    second = run_cli(*args)
    assert second.code == 0, second.err
    rows = _rows(out)
    keys = [(r["model"], r["seq_len"], r["micro_batch"], r["phase"]) for r in rows]
    assert len(keys) == len(set(keys))
    assert len({r["model"] for r in rows}) == 3
    for model in {r["model"] for r in rows}:
        mine = [r for r in rows if r["model"] == model]
        assert (
            {r["micro_batch"] for r in mine} <= {"1", "2"}
            and "1" in {r["micro_batch"] for r in mine}
        )
        assert Counter(r["phase"] for r in mine) == Counter({p: len(mine) // 3 for p in cb.PHASES})
    assert all(float(r["time_s"]) > 0 and r["threads"] == "1" and r["iters"] == "2" for r in rows)
    env = json.loads(Path(f"{out}.env.json").read_text())
    assert len(env["sessions"]) == 2 and env["sessions"][0]["torch"] == torch.__version__
    recorded = {"malloc_library", "malloc_conf", "glibc_tunables", "transparent_hugepage",
                "loadavg_1m_at_start", "cpu_model"}
    assert recorded <= set(env["sessions"][0])
    assert len(Path(f"{out}.progress").read_text().split("\n")) == 4
    third = run_cli(*args)  # everything finished: nothing is measured again
    assert third.code == 0 and len(_rows(out)) == len(rows)


def test_bench_compute_named_mode(run_cli, tiny_space: Path, tmp_path: Path) -> None:
    out = tmp_path / "named.csv"
    result = run_cli(
        "bench", "compute", "--space", str(tiny_space), "--named", "-o", str(out), "--warmup", "1"
    )
    assert result.code == 0, result.err
    rows = _rows(out)
    assert {r["model"] for r in rows} == {"tiny-llama", "tiny-phi"}
    assert {r["num_hidden_layers"] for r in rows} == {"1"} and {r["iters"] for r in rows} == {"2"}
    assert {r["family"] for r in rows} == {"llama", "phi"}


def test_bench_compute_refuses_a_changed_space(run_cli, tiny_space: Path, tmp_path: Path) -> None:
    out = tmp_path / "c.csv"
    assert run_cli("bench", "compute", "--space", str(tiny_space), "-n", "1", "-o", str(out),
                   "--iters", "1", "--warmup", "0").code == 0
    result = run_cli("bench", "compute", "--space", str(tiny_space), "-n", "1", "-o", str(out),
                     "--iters", "1", "--seed", "9")
    assert result.code == 2 and "To fix:" in result.err and "another shape" in result.err


def test_malloc_library_is_read_from_the_process_maps(tmp_path: Path) -> None:
    from perfmodel.bench import environment as common

    maps = tmp_path / "maps"
    maps.write_text("7f00-7f10 r-xp 0 08:01 1 /usr/lib/x86_64-linux-gnu/libc.so.6\n")
    assert common.malloc_library(maps) == "glibc"
    maps.write_text(maps.read_text() + "7f20-7f30 r-xp 0 08:01 2 /usr/lib/libjemalloc.so.2\n")
    assert common.malloc_library(maps) == "jemalloc"
    assert common.malloc_library(tmp_path / "absent") == "unknown"


RELEASE_PROBE = """
import torch
from perfmodel.bench.environment import malloc_library, release_freed_memory
def rss_mib():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 >> 20
blocks = [torch.ones(2**26) for _ in range(4)]  # 1 GiB
del blocks
held = rss_mib()
release_freed_memory()
print(malloc_library(), held, rss_mib())
"""


def test_release_freed_memory_purges_the_benchmarks_jemalloc() -> None:
    """The benchmarks' jemalloc keeps freed pages; release_freed_memory hands them back."""
    import subprocess
    import sys

    from perfmodel.bench import environment as common

    library = Path("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2")
    if not library.is_file():
        pytest.skip("libjemalloc2 is not installed (apt-get install libjemalloc2)")
    env = {"PATH": "/usr/bin:/bin", "LD_PRELOAD": str(library),
           "MALLOC_CONF": common.JEMALLOC_CONF}
    out = subprocess.run([sys.executable, "-c", RELEASE_PROBE], env=env, check=True,
                         capture_output=True, text=True, cwd=Path(__file__).parent.parent).stdout
    name, held_mib, after_mib = out.split()
    assert name == "jemalloc" and int(held_mib) - int(after_mib) > 900


@pytest.mark.parametrize(("library", "device", "warns"), [
    ("glibc", "cpu", True), ("unknown", "cpu", True), ("jemalloc", "cpu", False),
    ("tcmalloc", "cpu", False), ("glibc", "cuda", False)])
def test_small_page_warning(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
                            library: str, device: str, warns: bool) -> None:
    from perfmodel.bench import environment as common

    monkeypatch.setattr(common.sys, "platform", "linux")
    monkeypatch.setattr(common, "malloc_library", lambda: library)
    common.warn_small_pages(device)
    assert ("LD_PRELOAD=libjemalloc.so.2" in caplog.text and "To fix:" in caplog.text) == warns


def test_bench_compute_bad_input_exits_2(run_cli, tmp_path: Path) -> None:
    result = run_cli(
        "bench", "compute", "--space", str(tmp_path / "nope.yaml"), "-o", str(tmp_path / "x.csv")
    )
    assert result.code == 2 and "To fix:" in result.err
    result = run_cli(
        "bench", "compute", "-o", str(tmp_path / "x.csv"), "--device", "cuda", "-n", "1"
    )
    if not torch.cuda.is_available():
        assert result.code == 2 and "To fix:" in result.err
