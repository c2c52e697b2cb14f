"""Shared fixtures: a writable copy of the catalogs, and running the CLI in-process."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

from perfmodel.spec import catalog, reliability_catalog
from perfmodel.spec.paths import catalog_dir


def clear_catalog_caches() -> None:
    """Forget every cached catalog (the loaders are functools.cache'd)."""
    for module in (catalog, reliability_catalog):
        for value in vars(module).values():
            if callable(getattr(value, "cache_clear", None)):
                value.cache_clear()


@pytest.fixture
def tmp_catalogs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A copy of the shipped catalogs that SHARDMETER_CATALOGS points to; caches cleared around."""
    folder = tmp_path / "catalogs"
    shutil.copytree(catalog_dir(), folder)
    monkeypatch.setenv("SHARDMETER_CATALOGS", str(folder))
    clear_catalog_caches()
    yield folder
    monkeypatch.delenv("SHARDMETER_CATALOGS")
    clear_catalog_caches()


class CliResult(NamedTuple):
    """Exit code and captured output of one in-process `shardmeter` run."""

    code: int
    out: str
    err: str


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., CliResult]:
    """Run `planner.cli.main(args)`; a normal return is exit code 0."""
    from planner.cli import main

    def run(*args: str) -> CliResult:
        capsys.readouterr()
        try:
            main(list(args))
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        captured = capsys.readouterr()
        return CliResult(code=code, out=captured.out, err=captured.err)

    return run


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Start the longest tests first: the generators' checks, then the `slow` ones (real
    torch.distributed runs), then the rest, each group in collection order. Under pytest-xdist
    (the README's command runs `-n auto`) the long ones then run side by side from the start
    instead of one of them finishing alone after every short test is done."""
    def rank(item: pytest.Item) -> int:
        if item.get_closest_marker("generated"):
            return 0
        return 1 if item.get_closest_marker("slow") else 2

    items.sort(key=rank)   # stable: collection order within a group
