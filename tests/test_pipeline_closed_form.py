"""Pipeline steps of many micro-batches in closed form
(`perfmodel.spec.pipeline.closed_form_accums`): the step extended from four counts a turn of the
pipeline apart, and the memory from four consecutive counts, equal the walk at k itself."""

from __future__ import annotations

import pytest

from perfmodel.costs.memory import (
    DEFAULT_CONFIG,
    _pipeline_walk,
    _rank_peaks,
    memory_coefficients,
    pipeline_memory,
)
from perfmodel.profiles.profile import default_profile
from perfmodel.sim.pipeline import (
    EXTENDED_FIELDS,
    PipelineCosts,
    StageCosts,
    compute_paces,
    pipeline_costs,
    pipeline_decomposition,
    simulate_pipeline,
    simulate_pipeline_step,
)
from perfmodel.spec import pipeline
from perfmodel.spec.catalog import get_gpu, get_model
from perfmodel.spec.errors import UserInputError
from perfmodel.spec.hardware import IslandSpec
from perfmodel.spec.layout import ParallelLayout
from perfmodel.spec.recipe import TrainingRecipe

GPUS = 64
LAYOUTS = [
    (ParallelLayout(pp=4, tp=2), 50),
    (ParallelLayout(pp=2, tp=4, dp_replicate=2, sequence_parallel=False), 41),
    (ParallelLayout(pp=4, virtual_stages=2, pp_schedule="interleaved-1f1b", tp=2), 200),
    (ParallelLayout(pp=2, tp=8, pp_schedule="gpipe"), 200),
]


def _island() -> IslandSpec:
    g = get_gpu("H100-SXM5-80GB")
    return IslandSpec(gpu=g, num_nodes=GPUS // 8, gpus_per_node=8, intra_link=g.intra_node_link,
                      inter_link=g.inter_node_link, nics_per_node=g.nics_per_node)


def _ids(case: tuple[ParallelLayout, int]) -> str:
    return f"{case[0].resolve(GPUS).describe()} k={case[1]}"


@pytest.mark.parametrize("case", LAYOUTS, ids=_ids)
def test_the_extended_step_equals_the_graph_at_k(case: tuple[ParallelLayout, int]) -> None:
    layout, k = case
    points = pipeline.closed_form_accums(layout.pp_schedule, layout.pp, layout.virtual_stages, k)
    assert points is not None and points[-1] < k
    costs = pipeline_costs(get_model("Llama-3-8B"), default_profile("H100-SXM5-80GB"), _island(),
                           seq_len=4096, micro_batch=1, recipe=TrainingRecipe(parallel=layout))
    step = simulate_pipeline_step(costs, micro_batches=k)
    graph = simulate_pipeline(costs, micro_batches=k)
    # the closed form was taken: the schedule kept is the last point's
    assert step.schedule.makespan_s < step.step_time_s and step.accum_steps == k
    for name in EXTENDED_FIELDS:
        assert getattr(step, name) == pytest.approx(getattr(graph, name), rel=1e-9, abs=1e-12), \
            name
    assert (step.worst_rank, step.worst_stage) == (graph.worst_rank, graph.worst_stage)


def _uniform(pp: int, p2p_s: float) -> PipelineCosts:
    stages = tuple(StageCosts(stage=s, first_block=s, num_blocks=1, forward_s=1.0,
                              backward_s=2.0, forward_inline_s=0.0, backward_inline_s=0.0,
                              all_gather_s=0.0, reduce_scatter_s=0.0, replicate_s=0.0)
                   for s in range(pp))
    return PipelineCosts(stages=stages, p2p_s=p2p_s, optimizer_s=(0.0,) * pp,
                         layout=ParallelLayout(pp=pp, dp_shard=1))


def test_a_step_that_repeats_every_turn_of_the_pipeline_is_extended_a_turn_at_a_time() -> None:
    """Uniform stages and transfers of 5 % of a forward, compute-paced: the step grows by 3.1,
    3.1, 3.1 and 3.0 s per micro-batch, period pp = 4 (a max-plus system's cyclicity), so four
    consecutive points lie on a line that misses k = 50; points pp apart do not."""
    costs, k = _uniform(4, 0.05), 50
    assert compute_paces(costs)
    consecutive = (6, 7, 8, 9)
    times = [simulate_pipeline(costs, micro_batches=j).step_time_s for j in consecutive]
    exact = simulate_pipeline(costs, micro_batches=k).step_time_s
    assert pipeline.on_line(times, consecutive)
    assert pipeline.extend_line(times, consecutive, k) != pytest.approx(exact, rel=1e-6)
    step = simulate_pipeline_step(costs, micro_batches=k)
    assert step.simulated_micro_batches < k                    # extended, not walked
    assert step.step_time_s == pytest.approx(exact, rel=1e-9)
    # the layout tables' two-point affine form is read a round apart (pp and 2 pp): exact at
    # multiples of pp, within the round's spread between them, where points one micro-batch
    # apart (pp, pp + 1) would be off by 0.74 % at k = 50 and more beyond
    form = pipeline_decomposition(costs)
    for j in (48, 52, 1000):
        assert float(form.step_time_s(j)[0]) == pytest.approx(
            simulate_pipeline(costs, micro_batches=j).step_time_s, rel=1e-12)
    assert float(form.step_time_s(k)[0]) == pytest.approx(exact, rel=4e-4)
    one_apart = [simulate_pipeline(costs, micro_batches=j).step_time_s for j in (4, 5)]
    assert 100.0 * (pipeline.extend_line(one_apart, (4, 5), k) / exact - 1.0) == pytest.approx(
        0.7366, abs=1e-3)


def test_a_slow_link_pipeline_is_still_exact_at_k() -> None:
    """Transfers three times as long as a stage's forward pace the pipeline: whether or not its
    three points lie on one line, the answer is the graph's at k."""
    costs, k = _uniform(4, 3.0), 40
    assert not compute_paces(costs)
    step, graph = (simulate_pipeline_step(costs, micro_batches=k),
                   simulate_pipeline(costs, micro_batches=k))
    assert step.step_time_s == pytest.approx(graph.step_time_s, rel=1e-9)
    # why it is not extended: its increments alternate 7, 8, 8 s, so points a multiple of 3
    # apart (6, 12, 18) lie on a line that misses k = 40 by a third of a second; consecutive
    # points see the alternation
    times = [simulate_pipeline(costs, micro_batches=j).step_time_s
             for j in (6, 12, 18, 40, 7, 8, 9)]
    assert pipeline.on_line(times[:3], (6, 12, 18))
    assert pipeline.extend_line(times[:3], (6, 12, 18), 40) != pytest.approx(times[3])
    assert not pipeline.on_line([times[0], *times[4:]], (6, 7, 8, 9))


@pytest.mark.parametrize("case", LAYOUTS, ids=_ids)
def test_the_extended_memory_equals_the_walk_at_k(case: tuple[ParallelLayout, int]) -> None:
    layout, k = case
    model, recipe = get_model("Llama-3-8B"), TrainingRecipe(parallel=layout, ac="layer:2")
    extended = pipeline_memory(model, num_gpus=GPUS, seq_len=4096, micro_batch=2, recipe=recipe,
                               accum_steps=k)
    _, _, walked = _rank_peaks(model, GPUS, 4096, 2, recipe, k, False, DEFAULT_CONFIG)
    for rank, peak in zip(extended.ranks, walked, strict=True):
        assert rank.breakdown.phase == peak.phase
        assert rank.in_flight == peak.in_flight
        for component, value in peak.parts.items():
            assert getattr(rank.breakdown, f"{component}_bytes") == pytest.approx(
                value, rel=1e-9, abs=2), component
    if layout.pp_schedule == "gpipe":       # every micro-batch in flight: the count is k
        assert max(extended.ranks[0].in_flight) == k


@pytest.mark.parametrize("case", LAYOUTS, ids=_ids)
def test_the_extended_coefficients_equal_the_walk_at_k(case: tuple[ParallelLayout, int]) -> None:
    layout, k = case
    model, recipe = get_model("Llama-3-8B"), TrainingRecipe(parallel=layout)
    extended = memory_coefficients(model, num_gpus=GPUS, seq_len=4096, recipe=recipe,
                                   accum_steps=k)
    walked = _pipeline_walk(model, GPUS, 4096, recipe, k, DEFAULT_CONFIG, False)
    assert walked is not None
    for m in (1, 2, 8, 32):   # large m: another rank's moments can take over as k grows
        assert extended.peak_bytes(m) == pytest.approx(walked.peak_bytes(m), rel=1e-9)


def test_a_walk_past_the_exact_limit_is_refused_with_the_rule() -> None:
    pipeline.check_exact_accum(pipeline.EXACT_ACCUM_MAX, "1f1b", "pipeline step")
    with pytest.raises(UserInputError) as err:
        pipeline.check_exact_accum(pipeline.EXACT_ACCUM_MAX + 1, "interleaved-1f1b",
                                   "pipeline step")
    assert f"--accum {pipeline.EXACT_ACCUM_MAX}" in err.value.hint


@pytest.mark.parametrize(("schedule", "pp", "v", "k", "expected"), [
    ("1f1b", 4, 1, 30, None),                 # k <= the points' sum: walked
    ("1f1b", 4, 1, 31, (6, 7, 8, 9)),
    ("interleaved-1f1b", 4, 2, 110, None),    # off the line of multiples of pp
    ("interleaved-1f1b", 4, 2, 108, (20, 24, 28, 32)),
    ("interleaved-1f1b", 4, 2, 104, None),
    ("gpipe", 8, 1, 136, (32, 33, 34, 35)),
])
def test_closed_form_points(schedule: str, pp: int, v: int, k: int,
                            expected: tuple[int, ...] | None) -> None:
    assert pipeline.closed_form_accums(schedule, pp, v, k) == expected
    if expected is not None:   # every point is a k the schedule runs
        for point in expected:
            pipeline.check_schedule(schedule, pp, v, point)


@pytest.mark.parametrize(("schedule", "pp", "v", "k", "expected"), [
    ("1f1b", 4, 1, 48, None),                 # k <= the points' sum: walked
    ("1f1b", 4, 1, 55, (7, 11, 15, 19)),      # b = K + (k - K) mod pp, K = 6
    ("1f1b", 4, 1, 50, (6, 10, 14, 18)),
    ("interleaved-1f1b", 4, 2, 132, (20, 28, 36, 44)),
    ("interleaved-1f1b", 4, 2, 152, (24, 32, 40, 48)),
    ("gpipe", 8, 1, 204, (36, 44, 52, 60)),
])
def test_timed_points_are_a_turn_apart_on_k_s_line(schedule: str, pp: int, v: int, k: int,
                                                    expected: tuple[int, ...] | None) -> None:
    points = pipeline.closed_form_accums(schedule, pp, v, k, timed=True)
    assert points == expected
    if points is not None:
        assert (k - points[0]) % (pp * v) == 0


def test_a_huge_k_answers_in_closed_form(run_cli) -> None:  # type: ignore[no-untyped-def]
    code, out, err = run_cli("predict", "Llama-3.1-8B", "--gpu", "H100-SXM5-80GB", "--seq-len",
                             "8192", "--accum", "100000", "--pp", "4", "--virtual-stages", "8",
                             "--allow-oom", "--format", "json")
    assert code == 0, err


def test_a_pipeline_that_holds_too_many_micro_batches_is_told_the_batch_that_fits(
        run_cli) -> None:  # type: ignore[no-untyped-def]
    """torch's pipeline runtime keeps a receive buffer per micro-batch of the step, so 4,096
    micro-batches of Meta's 405B layout need 293 GiB whatever else changes; the fix evaluated
    is fewer micro-batches per step."""
    code, out, err = run_cli("predict", "Llama-3.1-405B", "--gpu", "H100-SXM5-80GB", "--nodes",
                             "2048", "--seq-len", "8192", "--accum", "4096", "--tp", "8",
                             "--pp", "16", "--ac", "full")
    assert code == 1
    fix = err[err.index("To fix:"):]
    assert fix.startswith("To fix: pass --accum ") and "smaller batch" in fix
    fewer = int(fix.split()[4])
    code, out, err = run_cli("predict", "Llama-3.1-405B", "--gpu", "H100-SXM5-80GB", "--nodes",
                             "2048", "--seq-len", "8192", "--accum", str(fewer), "--tp", "8",
                             "--pp", "16", "--ac", "full", "--format", "json")
    assert code == 0, err
