"""The contract every hostile input is held to (issue 30), shared by tests/test_hostile_*.py.

A run of the real CLI (in-process, click's CliRunner) must end with no Python traceback (a
child process's included: benchmarks filter torchrun's), no "internal error", exit 0, 1 or 2, a
"To fix:" line with every exit 2, "binding limit:" with every exit 1, an error message of sensible
size, and within RUN_LIMIT_S seconds. Each test then checks what the answer must be: the exit
code it expects, the file, field and value the message names, or for exit 0 that the answer does
not contradict the input.

Every case carries a kind (KINDS), so the suite can be counted by kind:
`pytest --collect-only -q tests/test_hostile_*.py` lists the ids, which start with the kind.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import click.testing
from click.testing import CliRunner

from planner.cli import cli

ROOT = Path(__file__).resolve().parent.parent
INSTANCES = ROOT / "instances"
CONFIGS = Path(__file__).parent / "data" / "configs"
RUN_LIMIT_S = 60.0
"""No hostile run may take longer (the issue's bound)."""
MAX_STDERR_CHARS = 10_000
"""An error message longer than this is a defect (a 110 MB one was seen)."""
KINDS = ("types", "work", "environment", "consistency", "messages")
"""Strict types at every boundary; bounded work; named errors for the environment; consistency
checks; clear and attributed messages (the issue's five parts)."""


@dataclass(frozen=True, slots=True)
class Run:
    """One CLI run under the contract."""

    code: int
    out: str
    err: str
    seconds: float


def run(*args: str | Path) -> Run:
    """Run `shardmeter ARGS` in-process and check the contract (module doc)."""
    argv = [str(a) for a in args]
    start = time.monotonic()
    result: click.testing.Result = CliRunner().invoke(cli, argv, catch_exceptions=True)
    seconds = time.monotonic() - start
    err, out = result.stderr, result.stdout
    context = f"shardmeter {' '.join(argv)}\nexit {result.exit_code}\nstderr: {err[:3000]}\n" \
              f"stdout: {out[-1500:]}"
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"exception escaped the CLI: {result.exception!r}\n{context}")
    assert "Traceback" not in err + out, context
    assert "internal error" not in err, context
    assert result.exit_code in (0, 1, 2), context
    if result.exit_code == 2:
        assert "To fix:" in err, context
    if result.exit_code == 1:
        assert "binding limit: " in err and "To fix:" in err, context
    assert len(err) <= MAX_STDERR_CHARS, f"{len(err)} characters on stderr\n{context}"
    assert seconds < RUN_LIMIT_S, f"{seconds:.1f} s\n{context}"
    return Run(code=result.exit_code, out=out, err=err, seconds=seconds)


def refused(result: Run, *needles: str) -> str:
    """Assert exit 2 naming every needle; return stderr."""
    assert result.code == 2, (result.code, result.err, result.out[-500:])
    for needle in needles:
        assert needle in result.err, (needle, result.err)
    return result.err


def accepted(result: Run) -> str:
    """Assert exit 0; return stdout."""
    assert result.code == 0, (result.code, result.err)
    return result.out


def case_ids(cases: Sequence[tuple[str, ...]]) -> list[str]:
    """`kind-name` ids of (kind, name, ...) cases, so a collection can be counted by kind."""
    for case in cases:
        assert case[0] in KINDS, case
    return [f"{c[0]}-{c[1]}" for c in cases]


def tiny_space(name: str, *, max_micro_batch: int) -> str:
    """A design-space YAML of one-block llama shapes small enough for a benchmark run inside a
    test (the compute benches of the hostile, kill and resume tests)."""
    return f"""
name: {name}
families: [llama]
tie_word_embeddings: [false]
hidden_size: {{min: 16, max: 32, multiple_of: 8}}
num_hidden_layers: {{min: 1, max: 1}}
num_attention_heads: {{min: 2, max: 2}}
num_key_value_heads: {{min: 1, max: 2}}
intermediate_size: {{min: 32, max: 64, multiple_of: 16}}
vocab_size: {{min: 64, max: 128, multiple_of: 64}}
seq_len: [16]
max_micro_batch: {max_micro_batch}
"""
