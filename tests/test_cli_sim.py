"""`shardmeter predict | simulate | sweep | streaming` end to end (in process)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfmodel.spec.catalog import get_gpu, get_model

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
BASE = ["--gpu", "A100-PCIe-80GB", "--seq-len", "1024", "--micro-batch", "2"]


def _json(result) -> dict:
    assert result.code == 0, (result.out, result.err)
    return json.loads(result.out)


def _user_error(result, *needles: str) -> None:
    assert result.code == 2, (result.out, result.err)
    assert "Traceback" not in result.err and "To fix:" in result.err
    for needle in needles:
        assert needle in result.err, (needle, result.err)


def test_predict_fsdp_json(run_cli) -> None:
    out = _json(run_cli("predict", "Llama-3.2-1B", *BASE, "--accum", "2", "--format", "json"))
    for key in (
        "step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "mfu", "peak_gib", "bound",
        "exposed_comm_s", "compute_idle_s", "provenance", "fits", "max_micro_batch",
    ):
        assert key in out
    assert out["tokens_per_s"] == pytest.approx(2 * 2 * 8 * 1024 / out["step_time_s"])
    assert out["tokens_per_s_per_gpu"] == pytest.approx(out["tokens_per_s"] / 8)
    model, gpu = get_model("Llama-3.2-1B"), get_gpu("A100-PCIe-80GB")
    assert out["mfu"] == pytest.approx(model.model_flops_per_token(1024) * out["tokens_per_s"]
                                       / (8 * gpu.bf16_flops_per_s))
    assert out["bound"] in {"compute", "communication", "mixed"} and out["provenance"] == "prior"
    assert out["fits"] is True and out["max_micro_batch"] >= 2


def test_predict_diloco_and_streaming(run_cli) -> None:
    fsdp = _json(run_cli("predict", "Llama-3.2-1B", *BASE, "--format", "json"))
    dl = _json(
        run_cli(
            "predict", "Llama-3.2-1B", *BASE, "--strategy", "diloco", "--islands", "4",
            "--inner-steps", "50", "--pseudo-gradient-dtype", "bf16", "--format", "json",
        )
    )
    assert dl["inner_step_time_s"] == pytest.approx(fsdp["step_time_s"])
    assert dl["amortised_outer_sync_s"] == pytest.approx(dl["outer_sync_s"] / 50)
    # Nesterov outer step: 24 B/param of HBM traffic over the island's 8 GPUs, once per H steps
    model, gpu = get_model("Llama-3.2-1B"), get_gpu("A100-PCIe-80GB")
    assert dl["outer_optimizer_s"] == pytest.approx(
        model.total_params / 8 * 24 / gpu.hbm_bytes_per_s
    )
    assert dl["step_time_s"] == pytest.approx(dl["inner_step_time_s"] + dl["amortised_outer_sync_s"]
                                              + dl["outer_optimizer_s"] / 50)
    assert (
        dl["recipe"]["outer"]["inner_steps"] == 50
        and dl["recipe"]["outer"]["pseudo_gradient_dtype"] == "bf16"
    )
    assert dl["tokens_per_s"] == pytest.approx(4 * 2 * 8 * 1024 / dl["step_time_s"])
    st = _json(
        run_cli(
            "predict", "Llama-3.2-1B", *BASE, "--strategy", "streaming-diloco",
            "--wan-gbit-s", "0.1", "--format", "json",
        )
    )
    assert st["blocked_s"] > 0 and st["step_time_s"] > st["inner_step_time_s"]


def test_predict_beyond_memory_is_flagged_with_allow_oom_else_refused(run_cli) -> None:
    """Issue 29: a prediction that does not fit exits 1 with a fix; --allow-oom prints it."""
    args = ("predict", "Llama-3-8B", "--gpu", "A100-PCIe-80GB", "--seq-len", "8192",
            "--micro-batch", "64", "--format", "json")
    out = _json(run_cli(*args, "--allow-oom"))
    assert out["fits"] is False and out["peak_gib"] > out["usable_memory_gib"]
    refused = run_cli(*args)
    assert refused.code == 1 and refused.out == "" and "To fix:" in refused.err


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["predict", "Lama-3-8B", *BASE], ["did you mean", "Llama-3-8B"]),
        (["predict", "Llama-3.2-1B", "--gpu", "H100-SXM", "--seq-len", "1024"], ["did you mean"]),
        (["predict", "Llama-3.2-1B", *BASE, "--nodes", "0"], ["--nodes"]),
        (["predict", "Llama-3.2-1B", *BASE, "--gpus-per-node", "16"], ["at most 8"]),
        (["predict", "Llama-3.2-1B", *BASE, "--micro-batch", "-1"], ["--micro-batch"]),
        (["predict", "Llama-3.2-1B", *BASE, "--islands", "2"], ["--strategy diloco"]),
        (
            ["predict", "Llama-3.2-1B", *BASE, "--strategy", "diloco", "--wan-gbit-s", "0"],
            ["--wan-gbit-s"],
        ),
        (["predict", "Llama-3.2-1B", *BASE, "--profile", "nope-prior"], ["profile"]),
        (
            ["streaming", "Llama-3.2-1B", "--gpu", "A100-PCIe-80GB", "--fragments", "40"],
            ["--fragments"],
        ),
        (
            [
                "sweep", "Llama-3.2-1B", "--gpu", "A100-PCIe-80GB", "--seq-len", "512",
                "--micro-batches", "0,1",
            ],
            ["--micro-batches"],
        ),
        (["streaming", "--example", "B", "--islands", "1"], ["--islands"]),
        (["streaming", "--example", "B", "--micro-batch", "0"], ["--micro-batch"]),
        (
            ["streaming", "Llama-3.2-1B", "--gpu", "A100-PCIe-80GB", "--max-delay-steps", "-1"],
            ["--max-delay-steps"],
        ),
        (["streaming", "Llama-3.2-1B"], ["--gpu"]),
    ],
)
def test_bad_input_exits_2_with_a_fix(run_cli, args: list[str], needles: list[str]) -> None:
    _user_error(run_cli(*args), *needles)


def test_simulate_writes_trace_and_png(run_cli, tmp_path: Path) -> None:
    trace, plot = tmp_path / "out.json", tmp_path / "out.png"
    out = _json(
        run_cli(
            "simulate", "SmolLM-360M", *BASE, "--trace", str(trace), "--plot", str(plot),
            "--format", "json",
        )
    )
    assert plot.read_bytes()[:8] == PNG_MAGIC
    events = json.loads(trace.read_text())["traceEvents"]
    # Per unit AG, F, B, RS, plus the backward AG of every block but the last (torchtitan keeps
    # the root and the last block gathered), plus the optimizer.
    units = len(get_model("SmolLM-360M").fsdp_units(1))
    assert sum(e["ph"] == "X" for e in events) == units * 4 + (units - 2) + 1
    assert out["step_time_s"] > 0 and out["trace"] == str(trace)
    dl = _json(run_cli("simulate", "SmolLM-360M", *BASE, "--strategy", "diloco", "--steps", "3",
                       "--trace", str(tmp_path / "d.json"), "--format", "json"))
    assert dl["outer_step_s"] == pytest.approx(3 * dl["inner_step_time_s"] + dl["outer_sync_s"]
                                               + dl["outer_optimizer_s"])


def test_sweep_tables_and_plots(run_cli, tmp_path: Path) -> None:
    plot = tmp_path / "fig4.png"
    out = _json(
        run_cli(
            "sweep", "--models", "SmolLM-360M,Llama-3.2-1B", "--gpu", "A100-PCIe-80GB",
            "--gpus-per-node", "4,8", "--seq-len", "1024", "--micro-batches", "1..32",
            "--plot", str(plot), "--timelines", str(tmp_path / "fig3.png"), "--format", "json",
        )
    )
    assert len(out["points"]) == 2 * 2 * 6 and len(out["summary"]) == 4
    for path in (plot, tmp_path / "fig4_throughput.png", tmp_path / "fig3.png"):
        assert path.read_bytes()[:8] == PNG_MAGIC
    for row in out["summary"]:
        assert row["transition_micro_batch"] is not None
    assert {p["bound"] for p in out["points"]} >= {"communication", "compute"}


def test_streaming_examples(run_cli, tmp_path: Path) -> None:
    plot = tmp_path / "fig6.png"
    out = _json(
        run_cli(
            "streaming", "Llama-3.2-1B", "--example", "all", "--plot", str(plot), "--format", "json"
        )
    )
    cases = {c["case"]: c for c in out["cases"]}
    assert {k: c["blocks"] for k, c in cases.items()} == {
        "A": False,
        "B": True,
        "C": False,
        "D": False,
    }
    assert any("more fragments" in r for r in cases["B"]["remedies"])
    assert any("longer delay" in r for r in cases["B"]["remedies"])
    assert plot.read_bytes()[:8] == PNG_MAGIC
    user = _json(
        run_cli(
            "streaming", "Llama-3.2-1B", "--gpu", "A100-PCIe-80GB", "--wan-gbit-s", "1000",
            "--format", "json",
        )
    )
    assert user["cases"][0]["blocks"] is False and user["cases"][0]["remedies"] == []


def test_recipe_options_reach_predict_simulate_and_sweep(run_cli, tmp_path: Path) -> None:
    """--recipe and the per-field flags change the prediction and are printed with it."""
    titan = _json(run_cli("predict", "Llama-3.2-1B", *BASE, "--accum", "2", "--format", "json"))
    assert (
        titan["recipe"]["name"] == "torchtitan"
        and titan["recipe"]["accum_mode"] == "reduce_scatter"
    )
    assert titan["ac"] == "op-sac"  # the recipe's default checkpointing
    nosync = _json(
        run_cli(
            "predict", "Llama-3.2-1B", *BASE, "--accum", "2", "--accum-mode", "no_sync",
            "--ac", "none", "--format", "json",
        )
    )
    assert nosync["recipe"]["accum_mode"] == "no_sync" and nosync["ac"] == "none"
    assert nosync["step_time_s"] != titan["step_time_s"]
    recipe = tmp_path / "r.yaml"
    recipe.write_text("base: paper\nreduce_dtype: bf16\n")
    sim = _json(
        run_cli("simulate", "Llama-3.2-1B", *BASE, "--recipe", str(recipe), "--format", "json")
    )
    assert sim["recipe"]["name"] == "paper" and sim["recipe"]["reduce_dtype"] == "bf16"
    table = run_cli("simulate", "Llama-3.2-1B", *BASE, "--recipe", "paper")
    assert table.code == 0 and "paper: params bf16" in table.out
    sweep = _json(run_cli("sweep", "Llama-3.2-1B", "--gpu", "A100-PCIe-80GB", "--seq-len", "1024",
                          "--micro-batches", "1,2", "--recipe", "paper", "--format", "json"))
    assert sweep["recipe"]["name"] == "paper"
    _user_error(run_cli("predict", "Llama-3.2-1B", *BASE, "--recipe", "titan"), "torchtitan")
    recipe.write_text("base: paper\nprefetch_depth: -1\n")
    _user_error(
        run_cli("simulate", "Llama-3.2-1B", *BASE, "--recipe", str(recipe)), "prefetch_depth"
    )


def test_streaming_takes_the_outer_recipe(run_cli) -> None:
    base = ["streaming", "Llama-3.2-1B", "--gpu", "A100-PCIe-80GB", "--format", "json"]
    out = _json(
        run_cli(
            *base, "--fragments", "3", "--sync-every", "10", "--delay", "1",
            "--fragment-pattern", "strided", "--no-overlap-backward",
            "--pseudo-gradient-dtype", "fp4",
        )
    )
    case = out["cases"][0]
    # H not a multiple of F
    assert (case["fragments"], case["sync_every"], case["delay_steps"]) == (3, 10, 1)
    assert (
        "strided" in case["outer"]
        and "overlap backward off" in case["outer"]
        and "fp4" in case["outer"]
    )
    assert case["recipe"].startswith("torchtitan")
    fabric = _json(run_cli(*base, "--islands-same-cluster"))["cases"][0]
    assert "cluster fabric" in fabric["outer"]


def test_bandwidth_for_utilisation_query(run_cli) -> None:
    args = [
        "streaming", "Chinchilla-1B", "--bandwidth-for-utilisation", "--step-time-s", "0.1",
        "--fragments", "8", "--delay", "1", "--sync-every", "100", "--wan-latency-ms", "0",
        "--utilisation", "0.5,0.9,0.99",
    ]
    out = _json(run_cli(*args, "--format", "json"))
    gbit = [r["gbit_s"] for r in out["rows"]]
    assert (
        [r["utilisation"] for r in out["rows"]] == [0.5, 0.9, 0.99]
        and gbit == sorted(gbit)
        and gbit[0] > 0
    )
    assert all(r["reached_utilisation"] >= r["utilisation"] for r in out["rows"])
    assert (
        out["outer_recipe"]["num_fragments"] == 8
        and out["outer_recipe"]["overlap_backward"] is True
    )
    fp4 = _json(run_cli(*args, "--pseudo-gradient-dtype", "fp4", "--format", "json"))
    assert all(a["gbit_s"] < b / 3 for a, b in zip(fp4["rows"], gbit, strict=True))
    table = run_cli(*args)
    assert table.code == 0 and "recipe torchtitan" in table.out and "outer: H=100, F=8" in table.out
    _user_error(run_cli(*args, "--utilisation", "1.5"), "--utilisation")
    _user_error(
        run_cli("streaming", "Chinchilla-1B", "--bandwidth-for-utilisation"), "--step-time-s"
    )
