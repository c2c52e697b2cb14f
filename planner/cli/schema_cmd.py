"""`shardmeter schema NAME`: print the JSON Schema of an output (`planner.schemas`)."""

from __future__ import annotations

import click

from planner.schemas import schema_text


@click.command()
@click.argument("name", metavar="NAME")
def schema(name: str) -> None:
    """Print the JSON Schema (draft 2020-12) of NAME's `--format json` output; NAME is one of
    predict, memory, layout, plan, pareto."""
    click.echo(schema_text(name), nl=False)
