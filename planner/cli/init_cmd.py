"""`shardmeter init [PATH]`: write a commented starter instance (`planner.model.starter`)."""

from __future__ import annotations

from pathlib import Path

import click

from planner.model.starter import write_starter_instance


@click.command()
@click.argument("path", type=click.Path(dir_okay=True, path_type=Path), default="instance.yaml",
                required=False)
@click.option("--force", is_flag=True, help="Replace the file if it exists.")
def init(path: Path, force: bool) -> None:
    """Write a commented starter instance YAML to PATH (default instance.yaml); edit it, then
    `shardmeter plan PATH`. Every field: docs/INSTANCE.md."""
    written = write_starter_instance(path, force=force)
    click.echo(f"wrote {written}; next: shardmeter plan {written}")
