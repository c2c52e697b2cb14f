"""Issue 29 item 7, the HTML report (`pareto/plan ... --html`), and plan labels that say what to
rent from whom.

The pages come from real solves of the shipped instances (paper-case-study: tables built by the
performance model; small-two-clusters: a fixed island table) and are checked two ways: parsed
with the standard library's html.parser everywhere (one svg, one point per frontier point
carrying its plan, the plan table rows, nothing fetched from outside), and loaded in a real
headless chromium where one is installed (the hover script runs and fills the detail panel)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml

from perfmodel import __version__
from perfmodel.numbers import format_duration, format_usd
from planner import api
from planner.analysis import html_report, report

ROOT = Path(__file__).resolve().parent.parent
TWO = ROOT / "instances" / "small-two-clusters.yaml"
CASE = ROOT / "instances" / "paper-case-study.yaml"
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
"""Headless browsers the rendering test uses, the first installed one (Debian: chromium)."""
BROWSER_TIMEOUT_S = 60
"""A browser that has not dumped the page by then has hung (a cold start takes a few seconds)."""


@dataclass
class Element:
    """One start tag: its name, attributes and the text directly inside it."""

    tag: str
    attrs: dict[str, str]
    text: list[str] = field(default_factory=list)

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())


class Page(HTMLParser):
    """Every element of a page, in document order, with its own text."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.elements: list[Element] = []
        self._open: list[Element] = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {k: v or "" for k, v in attrs})
        self.elements.append(element)
        if tag not in ("meta", "br", "img", "input", "link", "rect", "line", "path"):
            self._open.append(element)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append(Element(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        while self._open:
            if self._open.pop().tag == tag:
                break

    def handle_data(self, data: str) -> None:
        for element in self._open:
            element.text.append(data)

    def find(self, tag: str, cls: str | None = None) -> list[Element]:
        return [e for e in self.elements if e.tag == tag and (cls is None or cls in e.classes)]

    def by_id(self, name: str) -> Element:
        (found,) = [e for e in self.elements if e.attrs.get("id") == name]
        return found


@pytest.fixture(scope="module")
def case_page(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, api.FrontierResult]:
    path = tmp_path_factory.mktemp("html") / "case.html"
    result = api.frontier(api.FrontierRequest(instance_paths=(CASE,), html_path=path))
    assert isinstance(result, api.FrontierResult)
    return path, result


def _text(element: Element) -> str:
    return "".join(element.text)


def _external(page: Page) -> list[str]:
    """Attributes that would fetch something: src/href not a fragment, <link>, http(s) URLs (the
    svg's xmlns names a namespace and fetches nothing)."""
    found = []
    for e in page.elements:
        for name, value in e.attrs.items():
            fetches = name in ("src", "href", "xlink:href", "action", "srcset", "poster") \
                and not value.startswith("#")
            url = name != "xmlns" and ("http:" in value or "https:" in value or "//" in value)
            if fetches or url:
                found.append(f"<{e.tag} {name}={value!r}>")
        if e.tag in ("link", "iframe", "img", "object", "embed"):
            found.append(f"<{e.tag}>")
    return found


def test_pareto_page_structure(case_page) -> None:
    """One svg; one point per frontier point carrying its plan (label, time, cost, GPUs,
    islands, providers) as the records say; one plan-table row per point; nothing external;
    the answer, assumptions (price list with its date) and provenance on the page."""
    path, result = case_page
    text = path.read_text(encoding="utf-8")
    page = Page(text)
    assert len(page.find("svg")) == 1
    points = page.find("circle", "point")
    records = result.records
    assert len(points) == len(records) == result.meta["points"] > 1
    for dot, record in zip(points, records, strict=True):
        data = dot.attrs
        assert data["data-point"] == str(record["point"])
        assert data["data-label"] == record["label"]
        # every real plan carries its p10/p90 band (planner.model.uncertainty.PlanBands)
        assert data["data-time"] == (
            f"{format_duration(record['wall_time_s'])} (p10–p90 "
            f"{format_duration(record['wall_time_s_p10'])} – "
            f"{format_duration(record['wall_time_s_p90'])})")
        assert data["data-cost"].startswith(f"{format_usd(record['cost_usd'])} (p10–p90 ")
        assert data["data-gpus"] == str(record["num_gpus"])
        assert data["data-islands"].split("\n") == [g["description"]
                                                    for g in record["island_groups"]]
        assert "RunPod community" in data["data-providers"]
        assert ("near-duplicate" in dot.classes) == bool(record["near_duplicate"])
        assert record["label"] in _text(dot)  # the <title> tooltip works without script
    # the fastest point is left of and above the cheapest (time right, cost up)
    xs = [float(d.attrs["cx"]) for d in points]
    assert xs == sorted(xs) and float(points[0].attrs["cy"]) < float(points[-1].attrs["cy"])
    rows = [r for r in page.find("tr", "plan-row") if r.attrs.get("data-point") is not None]
    assert [r.attrs["data-point"] for r in rows] == [str(r["point"]) for r in records]
    assert not _external(page), _external(page)
    answer = _text(page.by_id("answer"))
    assert "Fastest:" in answer and "Cheapest:" in answer
    assert format_usd(records[0]["cost_usd"]) in answer
    assert "datasheet priors" in answer  # both GPUs of the case study rest on priors
    assert "such estimates fell outside their 80 % band" in answer  # and how far they missed
    assumptions = _text(page.by_id("assumptions"))
    for fact in ("Llama-3-8B", "256 sequences", "diloco", "RunPod 2026-09-25", "$3.59",
                 "$1.19", "us-state/texas"):
        assert fact in assumptions, fact
    provenance = _text(page.by_id("provenance-table"))
    for profile in report.gpu_profiles(result.solved.instance, ["H200-SXM-141GB",
                                                               "A100-PCIe-80GB"]):
        assert profile["gpu_type"] in provenance and profile["provenance"] in provenance
    assert f"ShardMeter {__version__}" in text and "Generated 20" in text


def test_plan_page_marks_the_chosen_plan(run_cli, tmp_path: Path) -> None:
    """`plan --objective cost --html`: the whole frontier is drawn (not only the first point
    the cheapest query needs), the chosen point is marked once, its island groups are the
    group table, and the CLI says where the page went."""
    path = tmp_path / "sub" / "plan.html"  # the folder is created, as for -o
    result = run_cli("plan", str(TWO), "--objective", "cost", "--html", str(path),
                     "--format", "json")
    assert result.code == 0, result.err
    assert f"wrote {path}" in result.err
    page = Page(path.read_text(encoding="utf-8"))
    solved = api.solve(api.SolveRequest(instance_path=TWO))
    points = page.find("circle", "point")
    assert len(points) == len(solved.frontier.points) > 1
    chosen = [d for d in points if "chosen" in d.classes]
    cheapest = min(solved.frontier.points, key=lambda p: (p.cost_usd, p.wall_time_s))
    assert len(chosen) == 1
    assert chosen[0].attrs["data-cost"] == format_usd(cheapest.cost_usd)
    record = report.plan_record(cheapest, solved.problem)
    groups = _rows_of(page, page.by_id("group-table"))
    assert len(groups) == len(record["island_groups"])
    assert "Chosen plan (cheapest)" in _text(page.by_id("answer"))
    assert not _external(page)


def _rows_of(page: Page, table: Element) -> list[Element]:
    """The body rows of `table` (the elements between it and the next table)."""
    start = page.elements.index(table)
    end = next((i for i, e in enumerate(page.elements) if i > start and e.tag == "table"),
               len(page.elements))
    body = next(i for i in range(start, end) if page.elements[i].tag == "tbody")
    return [e for e in page.elements[body:end] if e.tag == "tr"]


def test_co2_frontier_and_quantile_plan_say_so(run_cli, tmp_path: Path) -> None:
    """A time-vs-CO2 page plots CO2 (axis and each point); a quantile plan (the case study: its
    table carries each row's provenance) states its level and error model in the answer."""
    co2 = tmp_path / "co2.html"
    assert run_cli("pareto", str(TWO), "--objectives", "time,co2", "--html", str(co2),
                   "--format", "json").code == 0
    page = Page(co2.read_text(encoding="utf-8"))
    assert "CO2 (kg CO2e)" in _text(page.find("svg")[0])
    assert all("kg CO2e" in d.attrs["data-second"] for d in page.find("circle", "point"))
    quantile = tmp_path / "q.html"
    result = run_cli("plan", str(CASE), "--quantile", "0.9", "--html", str(quantile),
                     "--format", "json")
    assert result.code == 0, result.err
    answer = _text(Page(quantile.read_text(encoding="utf-8")).by_id("answer"))
    assert "0.9-quantiles" in answer


def test_interval_shown_where_a_record_carries_one(case_page) -> None:
    """A record with `*_p10`/`*_p90` (as interval-carrying results have) shows the p10-p90 range
    next to its figure, in the answer and on its point."""
    _, result = case_page
    records = [{k: v for k, v in r.items() if not k.endswith(("_p10", "_p90"))}
               for r in result.records]  # the band of the first record only, set here
    fast = records[0]
    fast.update(wall_time_s_p10=0.9 * fast["wall_time_s"],
                wall_time_s_p90=1.2 * fast["wall_time_s"],
                cost_usd_p10=0.9 * fast["cost_usd"], cost_usd_p90=1.2 * fast["cost_usd"])
    text = html_report.frontier_page(records, result.meta, instance=result.solved.instance,
                                     problem=result.solved.problem)
    page = Page(text)
    wanted = (f"p10–p90 {format_duration(fast['wall_time_s_p10'])} – "
              f"{format_duration(fast['wall_time_s_p90'])}")
    assert wanted in _text(page.by_id("answer"))
    assert wanted in page.find("circle", "point")[0].attrs["data-time"]
    assert "p10–p90" not in page.find("circle", "point")[1].attrs["data-time"]


def test_html_with_a_scenario_study_is_refused(run_cli, tmp_path: Path) -> None:
    path = tmp_path / "x.html"
    result = run_cli("pareto", str(TWO), "--vary", "clusters.A.wan_gbit_s=1,10", "--html",
                     str(path))
    assert result.code == 2
    assert "HTML report covers one instance" in result.err and "To fix:" in result.err
    assert "Traceback" not in result.err and not path.exists()


def test_instance_text_is_escaped(tmp_path: Path) -> None:
    """Text from the instance (its name) is shown as text, never as markup: a name holding a
    script tag adds no element to the page."""
    name = "<script>alert('x')</script> & \"co\""
    raw = yaml.safe_load(TWO.read_text(encoding="utf-8"))
    raw["name"] = name
    (tmp_path / "tables").mkdir()
    shutil.copy(TWO.parent / raw["islands_table"], tmp_path / raw["islands_table"])
    instance = tmp_path / "hostile.yaml"
    instance.write_text(yaml.safe_dump(raw), encoding="utf-8")
    path = tmp_path / "hostile.html"
    api.frontier(api.FrontierRequest(instance_paths=(instance,), html_path=path))
    page = Page(path.read_text(encoding="utf-8"))
    assert len(page.find("script")) == 1  # the page's own hover script only
    assert name in _text(page.find("h1")[0])
    assert name in _text(page.by_id("assumption-table"))


def test_plan_label_names_variant_and_provider(case_page) -> None:
    """Labels name the GPU variant and who rents it ('RunPod/A': provider, cluster), so two
    clusters of one GPU type are never merged."""
    _, result = case_page
    labels = [r["label"] for r in result.records]
    assert labels[0] == ("1x8x8 A100-PCIe-80GB @ RunPod/B + "
                         "1x8x8 H200-SXM-141GB @ RunPod/A")
    for record, label in zip(result.records, labels, strict=True):
        for group in record["island_groups"]:
            assert f"{group['gpu_type']} @ RunPod/{group['cluster']}" in label
            assert f"{group['count']}x{group['nodes']}x{group['gpus_per_node']}" in label
    # two shapes on one cluster share its name
    assert "5x1x8+1x4x8 A100-PCIe-80GB @ RunPod/B" in labels


def _browser() -> str | None:
    return next((b for b in map(shutil.which, BROWSERS) if b), None)


@pytest.mark.skipif(_browser() is None, reason="no chromium installed (apt-get install chromium)")
def test_page_renders_in_headless_chromium(case_page) -> None:
    """The page loaded in a real browser from a file (no network), linked to its last point
    (report.html#point-8): the script runs (body data-ready) and shows that point's plan in the
    detail panel and highlights its dot and table row, as hovering or focusing it does (the
    browser focuses the linked dot; the script also reads the link itself)."""
    path, result = case_page
    browser = _browser()
    assert browser is not None
    last = result.records[-1]
    url = f"{path.resolve().as_uri()}#point-{last['point']}"
    done = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                           "--no-first-run", "--dump-dom", url],
                          capture_output=True, text=True, timeout=BROWSER_TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    page = Page(done.stdout)
    (body,) = page.find("body")
    assert body.attrs.get("data-ready") == "1", done.stdout[:2000]
    detail = _text(page.by_id("point-detail"))
    assert f"Point {last['point']}: {last['label']}" in detail
    assert format_usd(last["cost_usd"]) in detail and "RunPod community" in detail
    assert len(page.find("circle", "point")) == len(result.records)
    active = [d.attrs["data-point"] for d in page.find("circle", "point") if "active" in d.classes]
    rows = [r.attrs["data-point"] for r in page.find("tr", "active")]
    assert active == rows == [str(last["point"])]
