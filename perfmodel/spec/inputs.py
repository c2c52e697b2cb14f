"""Strict reading of what users hand in, and the documented limits on every count that drives work.

Files. `read_text` reads a user file as UTF-8 (a missing path, a folder, an unreadable or
non-UTF-8 file, or one above `MAX_INPUT_BYTES` is a `UserInputError` naming the path);
`load_yaml` parses YAML refusing duplicate keys (both lines named: PyYAML would silently keep the
last) and documents whose aliases expand beyond `MAX_YAML_NODES` (a "billion laughs" bomb of a
few hundred bytes); `load_json` parses JSON refusing NaN/Infinity and integers of more than
`MAX_INT_DIGITS` digits.

Booleans. One rule everywhere (config.json, YAML, CSV flags): a boolean is written as a boolean
(`true`/`false` in JSON and YAML); a string such as "false" is refused, never read by Python's
truthiness (`strict_bool`).

Limits. `LIMITS` lists every count or magnitude that drives work or overflows arithmetic, each
with its maximum and the reason; `check_limit` refuses a value above it with both. The README's
"Limits" section is this table (tests/test_hostile_inputs.py checks that they agree).

Messages. `cap_message` shortens any message to `MAX_MESSAGE_CHARS` (a value echoed in an error
may be huge: an alias bomb's repr was 110 MB).
"""

from __future__ import annotations

import json
import math
import reprlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from perfmodel.spec.errors import UserInputError

MAX_INPUT_BYTES = 64 * 1024**2
"""Largest file read as text (YAML, JSON, recipe, instance, island table CSV): 64 MiB, thousands of
times the largest shipped input; a larger one is refused instead of filling memory."""
MAX_YAML_NODES = 200_000
"""Largest YAML document, counted with every alias expanded (the shipped files have < 2,000)."""
MAX_INT_DIGITS = 18
"""Longest integer literal accepted in JSON (fits int64; every limit below is far smaller)."""
MAX_MESSAGE_CHARS = 4000
"""Longest error message printed; the rest is cut with a note saying how much."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Limit:
    """An upper bound on one input, with why it exists."""

    maximum: float
    """Largest accepted value."""
    what: str
    """What is counted, for messages ("layers", "inner steps to simulate", ...)."""
    reason: str
    """Why the bound exists (shown with every refusal)."""
    minimum: float = 0.0
    """Smallest accepted value (0: only the usual sign checks apply)."""


LIMITS: dict[str, Limit] = {
    "layers": Limit(maximum=1024, what="transformer layers",
                    reason="the step graph has tasks per layer and micro-step; 8x the deepest "
                           "published dense model (Llama-3.1-405B: 126)"),
    "width": Limit(maximum=2**20, what="hidden/intermediate/head width",
                   reason="16x the widest published dense model; keeps parameter counts exact"),
    "heads": Limit(maximum=2**16, what="attention heads", reason="far above any published model"),
    "vocab": Limit(maximum=2**24, what="vocabulary entries",
                   reason="64x the largest published vocabulary (Gemma: 256,000)"),
    "seq_len": Limit(maximum=2**24, what="tokens per sequence",
                     reason="16x the longest published context (1M tokens)"),
    "micro_batch": Limit(maximum=2**20, what="sequences per micro-step",
                         reason="memory and FLOP counts stay exact in float64"),
    "accum": Limit(maximum=1_000_000, what="gradient-accumulation micro-steps",
                   reason="steps beyond 16 are closed-form, but the counts must stay exact"),
    "nodes": Limit(maximum=1024, what="nodes per island or cluster",
                   reason="every node count 1..N is an island option of the table; 1,024 nodes "
                          "keep a table under ~10^5 rows (raise allowed_gpus_per_node or split "
                          "the cluster for more)"),
    "step_nodes": Limit(maximum=16384, what="nodes of one predicted step",
                        reason="one prediction costs the same at any node count (only group "
                               "sizes enter); 8x the largest published training job "
                               "(Llama 3: 2,048 nodes of 8 H100)"),
    "clusters": Limit(maximum=64, what="clusters per instance",
                      reason="each cluster adds a table section and a knapsack dimension"),
    "islands": Limit(maximum=1024, what="islands",
                     reason="the DiLoCo schedules simulate every island"),
    "global_batch_seqs": Limit(maximum=2**20, what="sequences per global batch",
                               reason="the planner's menu has one entry per sequences-per-GPU "
                                      "count up to the batch"),
    "train_tokens": Limit(maximum=1e16, what="training tokens",
                          reason="600x the largest published pre-training run (15T tokens)"),
    "parameters": Limit(maximum=1e15, what="model parameters",
                        reason="a thousand times the largest published dense model"),
    "inner_steps": Limit(maximum=1_000_000, what="inner steps per outer step (H)",
                         reason="a DiLoCo sync period longer than any training run"),
    "sim_steps": Limit(maximum=100_000, what="inner steps to simulate",
                       reason="each simulated step is a set of tasks held in memory; 100,000 "
                              "steps simulate in seconds"),
    "bisection_steps": Limit(maximum=3_000_000, what="simulated steps of a bandwidth search "
                             "((3H+τ+1) x targets x 60 probes)",
                             reason="about 30 s of simulation (100,000 steps/s)"),
    "tuner_steps": Limit(maximum=3_000_000, what="simulated steps of the tuner at worst "
                         "((τmax+1) x layers x (2H+τmax+1))",
                         reason="about 30 s of simulation (100,000 steps/s)"),
    "delay_steps": Limit(maximum=100_000, what="delay steps (τ)",
                         reason="the schedule simulates at least τ steps"),
    "scenarios": Limit(maximum=256, what="scenarios of a --vary study",
                       reason="each scenario is a full solve; split a larger grid into runs"),
    "table_rows": Limit(maximum=200_000, what="island table rows",
                        reason="the planner holds every row; 1,000x the case study's 220"),
    "bench_configs": Limit(maximum=100_000, what="benchmark configurations (-n)",
                           reason="a benchmark sweep of more is months of measurement"),
    "menu_work": Limit(maximum=20_000_000, what="menu evaluations (options x sequences per GPU x "
                       "micro-batches)",
                       reason="building the planner's menu is a loop of this many steps "
                              "(about 10 s)"),
    "usd_per_gpu_hour": Limit(maximum=10_000.0, what="USD per GPU-hour",
                              reason="1,000x the dearest offer in the price lists"),
    "wan_gbit_s": Limit(minimum=1e-6, maximum=1e6, what="Gbit/s of a link",
                        reason="1 kbit/s to 1 Pbit/s; outside, sync times overflow or vanish"),
    "latency_ms": Limit(maximum=60_000.0, what="ms of link latency",
                        reason="a minute; beyond any network"),
    "step_time_s": Limit(minimum=1e-6, maximum=1e6, what="seconds per step",
                         reason="one microsecond to eleven days; outside, times and costs "
                                "overflow or vanish"),
    "seconds": Limit(maximum=1e7, what="seconds", reason="about four months"),
    "memory_gib": Limit(maximum=1e6, what="GiB", reason="a million GiB per device"),
    "mib": Limit(maximum=1e6, what="MiB", reason="a terabyte per collective payload"),
    "usd": Limit(maximum=1e15, what="USD", reason="beyond any budget"),
    "hours": Limit(maximum=1e7, what="hours", reason="a thousand years"),
    "kwh": Limit(maximum=1e15, what="kWh", reason="beyond any run's energy"),
    "kg_co2": Limit(maximum=1e15, what="kg CO2e", reason="beyond any run's emissions"),
    "flag_int": Limit(maximum=2**53, what="(an integer flag)",
                      reason="integers above 2^53 are not exact in float arithmetic"),
    "flag_float": Limit(maximum=1e15, what="(a number flag)",
                        reason="larger magnitudes overflow the models' products"),
}
"""Every documented limit (README "Limits"); keys are what `check_limit` is called with."""


def check_limit(key: str, value: float, *, field: str, where: str = "",
                error: type[UserInputError] = UserInputError) -> None:
    """Refuse `value` outside LIMITS[key] (or non-finite), naming `where`, `field`, the limit
    and its reason."""
    limit = LIMITS[key]
    prefix = f"{where}: " if where else ""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise error(f"{prefix}{field} = {short_repr(value)}: not a number",
                    hint=f"give {field} a number.")
    if isinstance(value, float) and not math.isfinite(value):
        raise error(f"{prefix}{field} = {value!r}: not a finite number",
                    hint=f"give {field} a finite number.")
    if value > limit.maximum or (limit.minimum and value < limit.minimum):
        bound = (f"between {_num(limit.minimum)} and {_num(limit.maximum)}" if limit.minimum
                 else f"at most {_num(limit.maximum)}")
        raise error(f"{prefix}{field} = {short_repr(value)}: {limit.what} must be {bound} "
                    f"({limit.reason})",
                    hint=f"give {field} a value {bound} (the limits are listed in the README, "
                         "section Limits).")


def _num(value: float) -> str:
    if float(value).is_integer() and abs(value) < 1e16:
        return f"{int(value):,}"
    return f"{value:g}"


_REPR = reprlib.Repr()
_REPR.maxstring = 80
_REPR.maxother = 80
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 6
_REPR.maxlevel = 3


def short_repr(value: Any) -> str:
    """repr() of a value, shortened (long strings, deep or long containers, huge integers)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**30:
        # str() of an integer beyond 4,300 digits raises: count its digits from its bits
        digits = int(abs(value).bit_length() * math.log10(2)) + 1
        digits -= 10 ** (digits - 1) > abs(value) if digits <= 4000 else 0
        return f"{'-' if value < 0 else ''}<a {digits}-digit integer>"
    return _REPR.repr(value)


def cap_message(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """`text`, cut to `limit` characters with a note of how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]} … ({len(text) - limit:,} more characters left out)"


def strict_bool(value: Any, *, field: str, where: str,
                error: type[UserInputError] = UserInputError) -> bool:
    """A boolean written as one (JSON/YAML true or false); anything else is refused (module doc:
    "false" in quotes is a string, and Python would read it as true)."""
    if isinstance(value, bool):
        return value
    raise error(f"{where}: field {field!r} = {short_repr(value)}: not a boolean",
                hint=f"write {field} as true or false, without quotes.")


# ---- files ------------------------------------------------------------------------------------

def read_text(path: str | Path, *, what: str,
              error: type[UserInputError] = UserInputError, hint: str | None = None) -> str:
    """The UTF-8 text of a user file; every way of failing is `error` naming the path."""
    p = Path(path)
    fix = hint or f"pass the path of an existing, readable {what} (UTF-8 text)."
    try:
        if p.is_dir():
            raise error(f"{what} {p} is a directory, not a file", hint=fix)
        if not p.exists():
            raise error(f"{what} {p} not found (no such file)", hint=fix)
        with p.open("rb") as fh:  # at most one byte past the limit (a device or pipe never ends)
            data = fh.read(MAX_INPUT_BYTES + 1)
        if len(data) > MAX_INPUT_BYTES:
            raise error(f"{what} {p} is larger than the {MAX_INPUT_BYTES:,}-byte limit on input "
                        "files", hint=f"give a smaller {what}.")
    except OSError as err:
        raise error(f"cannot read {what} {p}: {err.strerror or err}", hint=fix) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise error(f"{what} {p}, line {line}: is not UTF-8 text (byte 0x{data[err.start]:02x} "
                    f"at offset {err.start})",
                    hint=f"save {p} as UTF-8 (e.g. `iconv -t UTF-8`), or pass another file.") \
            from None


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader refusing duplicate keys (both lines named)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: PyYAML reports it below
                continue
            line = key_node.start_mark.line + 1
            if first is not None:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {short_repr(key)} (lines {first} and {line}; "
                    "YAML would keep only the last)", key_node.start_mark)
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def _expanded_size(node: yaml.Node, memo: dict[int, int], limit: int) -> int:
    """Nodes of the document with every alias expanded (memoised: shared nodes count per use)."""
    key = id(node)
    if key in memo:
        return memo[key]
    size = 1
    if isinstance(node, yaml.SequenceNode):
        for item in node.value:
            size += _expanded_size(item, memo, limit)
            if size > limit:
                break
    elif isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            size += _expanded_size(k, memo, limit) + _expanded_size(v, memo, limit)
            if size > limit:
                break
    memo[key] = size
    return size


def parse_yaml(text: str, *, source: str, error: type[UserInputError] = UserInputError,
               hint: str | None = None) -> Any:
    """Parse YAML text strictly (module doc); errors name `source` and the line."""
    fix = hint or f"fix the YAML syntax of {source}."
    loader = _StrictLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        size = _expanded_size(node, {}, MAX_YAML_NODES)
        if size > MAX_YAML_NODES:
            raise error(f"{source}: the YAML document expands to more than {MAX_YAML_NODES:,} "
                        "nodes (aliases such as *a repeat what &a names)",
                        hint="write the document without deeply nested aliases.")
        return loader.construct_document(node)
    except yaml.YAMLError as err:
        raise error(f"{source}: not valid YAML: {cap_message(str(err), 600)}", hint=fix) from None
    except RecursionError:
        raise error(f"{source}: the YAML document nests too deeply",
                    hint="flatten the document.") from None
    except ValueError as err:  # e.g. an integer of more than 4,300 digits
        raise error(f"{source}: {cap_message(str(err), 300)}",
                    hint=f"write numbers of sensible size in {source}.") from None
    finally:
        loader.dispose()


def load_yaml(path: str | Path, *, what: str, error: type[UserInputError] = UserInputError,
              hint: str | None = None) -> Any:
    """Read and strictly parse a YAML file (`read_text` then `parse_yaml`)."""
    return parse_yaml(read_text(path, what=what, error=error), source=str(path), error=error,
                      hint=hint)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def load_json(path: str | Path, *, what: str,
              error: type[UserInputError] = UserInputError) -> Any:
    """Read and parse a JSON file: no NaN/Infinity, no integer longer than MAX_INT_DIGITS."""
    text = read_text(path, what=what, error=error)

    def parse_int(digits: str) -> int:
        if len(digits.lstrip("-")) > MAX_INT_DIGITS:
            raise ValueError(f"a {len(digits.lstrip('-'))}-digit integer is too long "
                             f"(at most {MAX_INT_DIGITS} digits)")
        return int(digits)

    try:
        return json.loads(text, parse_int=parse_int, parse_constant=_no_constant)
    except json.JSONDecodeError as err:
        raise error(f"{path}: not valid JSON ({err.msg} at line {err.lineno})",
                    hint=f"pass a valid {what}.") from None
    except ValueError as err:
        raise error(f"{path}: {err}", hint=f"write finite numbers of sensible size in {path}.") \
            from None
    except RecursionError:
        raise error(f"{path}: the JSON document nests too deeply", hint=f"pass a valid {what}.") \
            from None
