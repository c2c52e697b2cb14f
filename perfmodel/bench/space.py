"""Design spaces of the compute benchmark (catalogs/spaces/*.yaml): schema and strict loading.

A space names the families, integer ranges and sequence lengths that `perfmodel.bench.compute`
samples shapes from, the micro-batch sweep's caps, and the held-out named models. Every key is
checked: an unknown key (a typo), a boolean or NaN where a number belongs, or a kv-heads range
above the heads range is a UserInputError naming the file and field.

The `named` section lists models by catalog name or by a Hugging Face config.json path (relative
to the space file's folder), at one sequence length or a list of them. A space may consist of a
`named` section alone (catalogs/spaces/cpu-holdout.yaml): it has nothing to sample and runs with
`--named` only.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfmodel.bench.common import positive_int, read_space_yaml, reject_unknown_keys
from perfmodel.spec.arch import FAMILY_LAYOUT
from perfmodel.spec.catalog import get_model
from perfmodel.spec.errors import ShardMeterError, UserInputError

DIMS = ("family", "tie_word_embeddings", "hidden_size", "num_hidden_layers", "num_attention_heads",
        "num_key_value_heads", "intermediate_size", "vocab_size", "seq_len")
"""The sampled dimensions, in the order of the Sobol point's coordinates."""


@dataclass(frozen=True, slots=True)
class IntRange:
    """An integer range sampled uniformly or log-uniformly, rounded to a multiple; or a list of
    values sampled uniformly (`choices`)."""

    low: int
    """Smallest value."""
    high: int
    """Largest value."""
    log: bool = False
    """Sample log-uniformly (sizes) rather than uniformly."""
    multiple_of: int = 1
    """Round sampled values to a multiple of this."""
    choices: tuple[int, ...] = ()
    """The values to sample from, ascending (empty: the range low..high)."""

    def pick(self, u: float) -> float:
        """Map u in [0, 1) onto the range (unrounded), or onto one of the choices."""
        if self.choices:
            return float(self.choices[min(int(u * len(self.choices)), len(self.choices) - 1)])
        if self.log:
            return math.exp(math.log(self.low) + u * (math.log(self.high) - math.log(self.low)))
        return self.low + u * (self.high + 1 - self.low)


@dataclass(frozen=True, slots=True)
class NamedSettings:
    """How the held-out named models are shrunk to fit the machine."""

    models: tuple[str, ...]
    """The named models: catalog names, or config.json paths (absolute, resolved against the
    space file's folder when written relative)."""
    num_hidden_layers: int | None
    """Layer count used (None: the catalog's)."""
    seq_lens: tuple[int, ...]
    """Sequence lengths, each measured at every micro-batch (the file's `seq_len`: one value or
    a list)."""
    micro_batches: tuple[int, ...]
    """Micro-batches measured per model and sequence length."""
    iters: int | None = None
    """Profiled iterations (None: the --iters default)."""


@dataclass(frozen=True, slots=True)
class DesignSpace:
    """A benchmark design space (catalogs/spaces/*.yaml)."""

    name: str
    """Space name."""
    families: tuple[str, ...]
    """Family layouts sampled (arch.FAMILY_LAYOUT keys; empty in a named-only space)."""
    tie_choices: tuple[bool, ...]
    """Tied-embedding choices (empty in a named-only space)."""
    ranges: Mapping[str, IntRange]
    """Integer dimensions: hidden_size, num_hidden_layers, num_attention_heads,
    num_key_value_heads, intermediate_size, vocab_size (empty in a named-only space)."""
    seq_lens: tuple[int, ...]
    """Sequence-length choices (empty in a named-only space)."""
    max_micro_batch: int
    """Largest micro-batch of the doubling sweep."""
    time_per_config_s: float
    """Stop a micro-batch sweep once the next point would exceed this (CPU time cap)."""
    memory_cap_bytes: float
    """Stop the sweep when the estimated memory exceeds this (0: no cap; GPUs stop at OOM)."""
    max_step_gflop: float
    """Reject sampled shapes whose micro-batch-1 training step exceeds this (0: no limit)."""
    named: NamedSettings | None
    """Settings of the --named mode."""
    id_prefix: str = "sobol"
    """Dataset ids of the sampled shapes are `<id_prefix>-NNNN` (NNNN: index in the Sobol
    sequence): a second space appending to the same dataset needs its own prefix."""


def _fail(path: Path, msg: str) -> UserInputError:
    return UserInputError(f"{path}: {msg}",
                          hint=f"fix {path} (see catalogs/spaces/cpu.yaml for the format).")


SPACE_KEYS = ("name", "id_prefix", "families", "tie_word_embeddings", *DIMS[2:8], "seq_len",
              "max_micro_batch", "limits", "named")
"""Top-level keys of a compute design-space file."""
_RANGE_KEYS = ("min", "max", "scale", "multiple_of")
_LIMIT_KEYS = ("time_per_config_s", "memory_gib", "max_step_gflop")
_NAMED_KEYS = ("models", "num_hidden_layers", "seq_len", "micro_batches", "iters")
_SAMPLED_KEYS = ("families", "tie_word_embeddings", *DIMS[2:8], "seq_len")
"""The keys of the sampled part of a space: a space without any of them is named-only."""


def _no_unknown_keys(path: Path, where: str, raw: Mapping[str, Any], known: Sequence[str]) -> None:
    reject_unknown_keys(path, where, raw, known, example="catalogs/spaces/cpu.yaml")


def _int_range(path: Path, name: str, raw: Any) -> IntRange:
    if isinstance(raw, list) and raw:
        values = sorted({positive_int(path, name, v) for v in raw})
        return IntRange(values[0], values[-1], choices=tuple(values))
    if not isinstance(raw, dict) or "min" not in raw or "max" not in raw:
        raise _fail(path, f"'{name}' must be a mapping with min and max, or a list of values, "
                          f"got {raw!r}")
    _no_unknown_keys(path, name, raw, _RANGE_KEYS)
    scale = raw.get("scale", "linear")
    if scale not in ("linear", "log"):
        raise _fail(path, f"'{name}.scale' = {scale!r}: use linear or log")
    rng = IntRange(positive_int(path, f"{name}.min", raw["min"]),
                   positive_int(path, f"{name}.max", raw["max"]), scale == "log",
                   positive_int(path, f"{name}.multiple_of", raw.get("multiple_of", 1)))
    if rng.low > rng.high:
        raise _fail(path, f"'{name}' needs min <= max, got {raw!r}")
    return rng


def _limit(path: Path, limits: Mapping[str, Any], key: str) -> float:
    value = limits.get(key, 0) or 0
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or not math.isfinite(value) or value < 0):
        raise _fail(path, f"'limits.{key}' = {value!r}: must be a finite number >= 0 (0: no limit)")
    return float(value)


def load_space(path: str | Path) -> DesignSpace:
    """Load and validate a design-space YAML file."""
    p = Path(path)
    raw = read_space_yaml(p, what="design space", example="catalogs/spaces/cpu.yaml")
    if not isinstance(raw, dict):
        raise _fail(p, "expected a mapping at the top level")
    _no_unknown_keys(p, "", raw, SPACE_KEYS)
    if raw.get("named") is not None and not any(k in raw for k in _SAMPLED_KEYS):
        return _named_only(p, raw)
    ranges = {k: _int_range(p, k, raw.get(k)) for k in DIMS[2:8]}
    kv, heads = ranges["num_key_value_heads"], ranges["num_attention_heads"]
    if kv.high > heads.high:
        raise _fail(p, f"'num_key_value_heads.max' = {kv.high} is above "
                       f"'num_attention_heads.max' = {heads.high} (kv heads divide the heads)")
    families = raw.get("families", ["llama"])
    if not isinstance(families, list) or not families \
            or any(not isinstance(f, str) or f not in FAMILY_LAYOUT for f in families):
        raise _fail(p, f"'families' = {families!r}: must be a non-empty list of "
                       f"{', '.join(FAMILY_LAYOUT)}")
    ties = raw.get("tie_word_embeddings", [False])
    if not isinstance(ties, list) or not ties or any(not isinstance(t, bool) for t in ties):
        raise _fail(p, f"'tie_word_embeddings' = {ties!r}: must be a non-empty list of true/false")
    seq = raw.get("seq_len")
    if not isinstance(seq, list) or not seq or not all(
            isinstance(s, int) and not isinstance(s, bool) and s > 1 for s in seq):
        raise _fail(p, f"'seq_len' must be a list of integers > 1, got {seq!r}")
    limits = _limits(p, raw)
    return DesignSpace(
        name=str(raw.get("name", p.stem)), families=tuple(families), tie_choices=tuple(ties),
        ranges=ranges, seq_lens=tuple(seq),
        max_micro_batch=positive_int(p, "max_micro_batch", raw.get("max_micro_batch", 64)),
        time_per_config_s=_limit(p, limits, "time_per_config_s"),
        memory_cap_bytes=_limit(p, limits, "memory_gib") * 1024**3,
        max_step_gflop=_limit(p, limits, "max_step_gflop"),
        named=_named(p, raw.get("named")), id_prefix=_id_prefix(p, raw.get("id_prefix", "sobol")))


def _limits(path: Path, raw: Mapping[str, Any]) -> Mapping[str, Any]:
    limits = raw.get("limits", {}) or {}
    if not isinstance(limits, dict):
        raise _fail(path, f"'limits' = {limits!r}: must be a mapping")
    _no_unknown_keys(path, "limits", limits, _LIMIT_KEYS)
    return limits


def _named_only(path: Path, raw: Mapping[str, Any]) -> DesignSpace:
    """A space of named models only (no sampled dimensions): `--named` is its one use."""
    limits = _limits(path, raw)
    return DesignSpace(
        name=str(raw.get("name", path.stem)), families=(), tie_choices=(), ranges={},
        seq_lens=(),
        max_micro_batch=positive_int(path, "max_micro_batch", raw.get("max_micro_batch", 64)),
        time_per_config_s=_limit(path, limits, "time_per_config_s"),
        memory_cap_bytes=_limit(path, limits, "memory_gib") * 1024**3,
        max_step_gflop=_limit(path, limits, "max_step_gflop"),
        named=_named(path, raw["named"]),
        id_prefix=_id_prefix(path, raw.get("id_prefix", "sobol")))


def _id_prefix(path: Path, raw: Any) -> str:
    if not isinstance(raw, str) or not re.fullmatch(r"[a-z][a-z0-9_]*", raw):
        raise _fail(path, f"'id_prefix' = {raw!r}: must be a lower-case word such as sobol "
                          "(it names the dataset rows <id_prefix>-0000, ...)")
    return raw


def _named(path: Path, raw: Any) -> NamedSettings | None:
    if raw is None:
        return None
    if not isinstance(raw, dict) or not all(k in raw
                                            for k in ("models", "seq_len", "micro_batches")):
        raise _fail(path, f"'named' needs models, seq_len, micro_batches, got {raw!r}")
    _no_unknown_keys(path, "named", raw, _NAMED_KEYS)
    models, micro_batches = raw["models"], raw["micro_batches"]
    if (not isinstance(models, list) or not models
            or not isinstance(micro_batches, list) or not micro_batches):
        raise _fail(path, "'named.models' and 'named.micro_batches' must be non-empty lists")
    layers, iters = raw.get("num_hidden_layers"), raw.get("iters")
    return NamedSettings(
        models=tuple(_named_model(path, i, m) for i, m in enumerate(models)),
        num_hidden_layers=(None if layers is None
                           else positive_int(path, "named.num_hidden_layers", layers)),
        seq_lens=_named_seq_lens(path, raw["seq_len"]),
        micro_batches=tuple(positive_int(path, "named.micro_batches", m) for m in micro_batches),
        iters=None if iters is None else positive_int(path, "named.iters", iters))


def is_config_path(entry: str) -> bool:
    """Whether a `named.models` entry is a config.json path rather than a catalog name (catalog
    names contain no '/' and do not end in .json)."""
    return entry.endswith(".json") or "/" in entry


def _named_model(path: Path, index: int, raw: Any) -> str:
    """A `named.models` entry, checked now (an unknown model or a bad config.json must fail
    before any measurement): a catalog name as written, a config.json path made absolute against
    the space file's folder."""
    if not isinstance(raw, str) or not raw.strip():
        raise _fail(path, f"'named.models[{index}]' = {raw!r}: must be a catalog model name or "
                          "a config.json path")
    entry = raw.strip()
    if is_config_path(entry):
        resolved = Path(entry) if Path(entry).is_absolute() else path.parent / entry
        if not resolved.is_file():
            raise UserInputError(
                f"{path}: 'named.models[{index}]' = {entry!r}: no such config.json "
                f"({resolved})",
                hint=f"give a path relative to {path.parent} or a catalog model name.")
        entry = str(resolved.resolve())
    try:
        get_model(entry)
    except ShardMeterError as err:
        raise UserInputError(f"{path}: 'named.models[{index}]' = {raw!r}: {err.message}",
                             hint=err.hint) from err
    return entry


def _named_seq_lens(path: Path, raw: Any) -> tuple[int, ...]:
    """`named.seq_len`: one positive integer or a non-empty list of distinct ones."""
    values = raw if isinstance(raw, list) else [raw]
    if not values:
        raise _fail(path, "'named.seq_len' is an empty list: give one or more sequence lengths")
    out = tuple(positive_int(path, "named.seq_len", v) for v in values)
    if len(set(out)) != len(out):
        raise _fail(path, f"'named.seq_len' = {raw!r} repeats a value")
    return out


