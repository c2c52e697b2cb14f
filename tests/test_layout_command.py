"""`perfmodel.api.layout` (`shardmeter layout`): each ranked entry is what `predict` says for its
layout, checkpointing mode, micro-batch and k; entries are ordered by throughput; the best
layout explained is rank 1 with gap 0; a named layout that cannot run says why."""

from __future__ import annotations

from dataclasses import replace

import pytest

from perfmodel import api
from perfmodel.api.layout import LayoutRequest, explain, rank_layouts
from perfmodel.spec.errors import UserInputError
from perfmodel.spec.layout import ParallelLayout
from perfmodel.spec.recipe import DEFAULT_RECIPE

MODEL, GPU, SEQ, BATCH = "Llama-3.2-1B", "H100-SXM5-80GB", 2048, 64


@pytest.fixture(scope="module")
def request_() -> LayoutRequest:
    return LayoutRequest(workload=api.WorkloadSpec(model_name=MODEL, gpu_name=GPU, seq_len=SEQ),
                         global_batch_seqs=BATCH, parallel={"max_tp": 2, "max_pp": 2},
                         checkpointing=["op-sac", "full"], top=6)


@pytest.fixture(scope="module")
def ranking(request_: LayoutRequest):  # type: ignore[no-untyped-def]
    return rank_layouts(request_)


def test_entries_are_the_predicted_steps_in_throughput_order(ranking) -> None:  # type: ignore[no-untyped-def]
    entries = ranking.entries
    assert len(entries) == 6 and ranking.total >= len(entries)
    assert [e["rank"] for e in entries] == list(range(1, 7))
    rates = [e["tokens_per_s_per_gpu"] for e in entries]
    assert rates == sorted(rates, reverse=True)
    for e in entries:
        layout = ParallelLayout(**e["layout"])
        assert e["micro_batch"] * e["accum"] * layout.dp == BATCH
        recipe = replace(DEFAULT_RECIPE.with_overrides(ac=e["ac"]), parallel=layout)
        got = api.predict(api.WorkloadSpec(model_name=MODEL, gpu_name=GPU, seq_len=SEQ,
                                           micro_batch=e["micro_batch"], accum=e["accum"],
                                           recipe=recipe))
        assert got.record["step_time_s"] == pytest.approx(e["step_time_s"], rel=1e-9)
        assert got.record["peak_gib"] == pytest.approx(e["peak_gib"], rel=1e-9)


def test_the_best_layout_explained_is_rank_one_with_no_gap(request_, ranking) -> None:  # type: ignore[no-untyped-def]
    best = ranking.entries[0]
    layout = best["layout"]
    named = (f"tp={layout['tp']},pp={layout['pp']},dp_shard={layout['dp_shard']},"
             f"dp_replicate={layout['dp_replicate']},ac={best['ac']}")
    if layout["pp"] > 1:
        named += f",v={layout['virtual_stages']},schedule={layout['pp_schedule']}"
    result = explain(request_, named)
    assert result.rank == 1 and result.gap_pct == pytest.approx(0.0, abs=1e-9)
    assert not any("outside the layouts searched" in line for line in result.lines)


def test_a_named_layout_outside_the_search_says_so(request_) -> None:  # type: ignore[no-untyped-def]
    """tp 4 lies beyond the request's max_tp 2: it is ranked among the searched layouts, and the
    explanation says that layouts like it were not searched."""
    result = explain(request_, "tp=4,pp=1,dp_shard=2,ac=full")
    assert result.rank is not None
    assert any("outside the layouts searched" in line for line in result.lines)


def test_a_named_layout_that_cannot_run_says_why(request_) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UserInputError) as err:
        explain(request_, "tp=3,pp=1,dp_shard=1")
    assert "To fix:" in str(err.value)


def test_no_layout_fits_exits_1_naming_the_closest(run_cli) -> None:  # type: ignore[no-untyped-def]
    """Llama-3.1-70B on one A100-40GB: nothing runs; the table is printed, then exit 1 with the
    closest candidate's limit (the least memory over) and the fixes; JSON is printed too."""
    args = ("layout", "Llama-3.1-70B", "--gpu", "A100-SXM4-40GB", "--nodes", "1",
            "--gpus-per-node", "1", "--seq-len", "2048", "--global-batch", "8")
    result = run_cli(*args)
    assert result.code == 1
    assert "no layout of 1 x 1 A100-SXM4-40GB" in result.out
    assert "the closest" in result.err and "GiB over" in result.err and "To fix:" in result.err
    as_json = run_cli(*args, "--format", "json")
    assert as_json.code == 1 and '"ranked": 0' in as_json.out


def test_the_commands_view_of_a_shorter_top_is_the_rankings_head(request_, ranking) -> None:  # type: ignore[no-untyped-def]
    """What `scripts.make_findings` relies on to rank once and print twice: `shardmeter layout
    ... --top 3` prints exactly `emit_ranking` of the first 3 entries of a `--top 6` ranking
    (and `--format json --top 6` is `emit_ranking` of all of it)."""
    import contextlib
    import io

    from click.testing import CliRunner

    from planner.cli import cli
    from planner.cli.layout_cmd import emit_ranking

    args = ["layout", MODEL, "--gpu", GPU, "--seq-len", str(SEQ), "--global-batch", str(BATCH),
            "--max-tp", "2", "--max-pp", "2", "--ac-mode", "op-sac", "--ac-mode", "full"]
    env = {"COLUMNS": "200"}
    views = [(["--top", "3"], "table", replace(request_, top=3),
              replace(ranking, entries=ranking.entries[:3])),
             (["--top", "6", "--format", "json"], "json", request_, ranking)]
    for extra, fmt, req, ranked in views:
        result = CliRunner().invoke(cli, [*args, *extra], env=env)
        assert result.exit_code == 0, result.output
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer), pytest.MonkeyPatch.context() as patch:
            patch.setenv("COLUMNS", "200")
            emit_ranking(req, ranked, fmt=fmt, wide=False)
        assert buffer.getvalue() == result.output, fmt
        assert len(result.output.splitlines()) > 5


@pytest.mark.parametrize("flag", ["--max-tp", "--max-pp", "--max-ep", "--max-virtual-stages"])
def test_a_bad_limit_flag_is_named_as_typed(run_cli, flag: str) -> None:  # type: ignore[no-untyped-def]
    """A limit of 0 is refused before any table is built, naming the flag (not the layout
    space's field it becomes), exit 2."""
    result = run_cli("layout", MODEL, "--gpu", GPU, "--seq-len", str(SEQ), "--global-batch",
                     str(BATCH), flag, "0")
    assert result.code == 2
    assert f"{flag} 0: must be > 0" in result.err and "To fix:" in result.err


def _lay(**given: object) -> dict[str, object]:
    base: dict[str, object] = {"tp": 1, "pp": 1, "cp": 1, "dp_shard": 1, "dp_replicate": 1,
                               "virtual_stages": 1, "pp_schedule": "1f1b",
                               "sequence_parallel": False, "ep": 1}
    return {**base, **given}


@pytest.mark.parametrize(("layout", "text"), [
    (_lay(dp_shard=64), "dp64"),
    (_lay(tp=8, pp=16, virtual_stages=4, pp_schedule="interleaved-1f1b", dp_shard=128,
          sequence_parallel=True), "tp8 pp16v4 dp128 +sp"),           # interleaved: implied
    (_lay(pp=4, dp_shard=2), "pp4 dp2"),                               # 1F1B: implied
    (_lay(pp=4, pp_schedule="gpipe", dp_shard=2), "pp4 gpipe dp2"),    # any other: written
    (_lay(tp=8, pp=16, virtual_stages=4, pp_schedule="interleaved-1f1b", dp_replicate=128,
          sequence_parallel=True), "tp8 pp16v4 rep128 +sp"),          # pure replication
    (_lay(dp_replicate=2, dp_shard=4, ep=4), "rep2 dp4 ep4"),
    (_lay(tp=2), "tp2 dp1"),
])
def test_short_layout_leaves_out_only_what_is_implied(layout: dict[str, object],
                                                      text: str) -> None:
    from planner.cli.layout_cmd import short_layout

    assert short_layout(layout) == text


def test_the_405b_ranking_fits_80_columns_with_its_legend(run_cli, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The issue-25 query's compact ranking is a table within 80 columns (not the record
    fallback), and the legend names the tokens it shows."""
    monkeypatch.setenv("COLUMNS", "80")
    result = run_cli("layout", "Llama-3.1-405B", "--gpu", GPU, "--nodes", "2048",
                     "--gpus-per-node", "8", "--seq-len", "8192", "--global-batch", "2048")
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert any(line.split()[:2] == ["1", "tp8"] for line in lines if line.strip())  # a table row
    text = " ".join(result.out.split())
    assert "ppNvV V virtual stages per rank" in text and "+sp sequence parallel" in text
