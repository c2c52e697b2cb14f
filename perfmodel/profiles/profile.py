"""Hardware profiles: fitted or prior compute and communication coefficients with provenance.

A profile is a versioned YAML file in catalogs/profiles/ (format: catalogs/profiles/README.md).
Provenance is 'measured' (fitted from a dataset in the repo: path, sha256, CV MAPE, fit date,
command), 'calibrated' (a few physical coefficients fitted to published throughput runs in
catalogs/published/, perfmodel.profiles.calibrate) or 'prior' (datasheet figures and stated
efficiency
assumptions). `default_profile` prefers measured, then calibrated, then prior. Links missing from
a profile fall back to the catalog prior, and `comm_provenance` says so.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import inspect
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from perfmodel import __version__
from perfmodel.costs.comm import (
    BACKENDS,
    OPS,
    RING_OPS,
    CommModel,
    LinkCoefficients,
    island_nics,
    prior_link_coefficients,
)
from perfmodel.costs.features import (
    PHASES,
    UNITS,
    RankShard,
    phase_features,
    unit_feature_affine,
    unit_feature_matrix,
)
from perfmodel.spec.arch import ModelSpec
from perfmodel.spec.catalog import get_gpu, get_link
from perfmodel.spec.errors import CatalogError, ProfileError, did_you_mean
from perfmodel.spec.hardware import IslandSpec
from perfmodel.spec.inputs import load_yaml
from perfmodel.spec.layout import CommGroup
from perfmodel.spec.paths import profiles_dir

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 1
PROVENANCES = ("measured", "calibrated", "prior")
"""Profile provenances, most trusted first (the order of `default_profile`)."""
_PROVENANCE_RE = "^(" + "|".join(PROVENANCES) + ")$"
UNITS_DOC = {
    "compute": "coefficients_s: seconds per unit of each feature "
               "(perfmodel/costs/features.py FEATURE_DOCS)",
    "comm": "T = k·(P-1)·(latency_s + D/(P·bandwidth_bytes_per_s)), k=1 all_gather/reduce_scatter, "
            "2 all_reduce; D = unsharded payload bytes; per_nic: bandwidth is per NIC",
}


@dataclass(frozen=True, kw_only=True)
class PhaseCoefficients:
    """Compute coefficients of one phase."""

    coefficients: Mapping[str, float]
    """Feature name -> seconds per unit of the feature."""
    provenance: str
    """'measured', 'calibrated' or 'prior'."""
    selection_cv_mape_pct: float | None = None
    """Measured: the cross-validated MAPE (percent) that CHOSE the features — the best score over
    the candidate subsets, so optimistic: a selection score, not an out-of-sample error (YAML
    files before issue 22 call it `cv_mape_pct`)."""
    nested_cv_mape_pct: float | None = None
    """Out-of-sample MAPE (percent) of the whole fitting procedure: each held-out group predicted
    by a fit made from scratch without it (measured: feature selection redone inside every
    fold, `perfmodel.costs.compute.leave_one_model_out`; calibrated: the cold-started
    leave-one-model-size-out tokens/s/GPU CV). None when not computed."""
    cv_scheme: str = ""
    """How the folds were made (leave-one-model-out, k-fold, leave-one-model-size-out)."""


@dataclass(frozen=True, kw_only=True)
class HardwareProfile:
    """Compute and communication coefficients of one hardware type and collective backend."""

    name: str
    """Profile name (file stem)."""
    hardware: str
    """Catalog GPU name (or a local device name)."""
    backend: str
    """Collective backend: nccl, gloo or rccl."""
    provenance: str
    """'measured' when any part was fitted from data in the repo, 'calibrated' when fitted to
    published runs, else 'prior'."""
    provenance_detail: dict[str, Any]
    """Datasets with sha256 and CV MAPE, fit date and command; or datasheet figures and
    assumptions."""
    compute: Mapping[str, PhaseCoefficients]
    """Phase -> compute coefficients."""
    comm: CommModel
    """Communication coefficients per (op, link)."""
    overlap_slowdown: float = 1.0
    """Compute runs this many times slower while a collective of the same island is in flight
    (NCCL kernels take SMs; gloo threads take CPU cores); 1.0 = no contention. Read by the FSDP
    step builders; >= 1."""
    recompute_factor: float = 1.0
    """Time of an activation-checkpointing recompute as a multiple of the forward time of the
    FLOPs it recomputes (1.0 = as fast as the forward pass); > 0."""
    fsdp_copy_s_per_byte: float = 0.0
    """Seconds per byte of FSDP2's copies around each collective (all_gather: the shard's copy-in
    and the unsharded copy-out; reduce_scatter: the gradients' chunk-cat and the sharded
    result), added to the collective's time; bytes = payload x (1 + 1/ranks). 0 = not modelled
    (on a GPU they run at HBM bandwidth, well under 1 % of a step); on the CPU they are the
    training thread's memory traffic into fresh buffers. >= 0."""
    tp_dispatch_s: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    """DTensor's host dispatch under the tensor-parallel plan, seconds per pass:
    {"sequence_parallel" | "no_sequence_parallel": {"block_forward", "block_backward",
    "root_forward", "root_backward": s}} (`perfmodel.bench.dispatch`), added to a tp > 1 rank's
    compute. Empty = not modelled: on a GPU the host runs ahead of the kernels it queues."""
    schema_version: int = SCHEMA_VERSION
    """YAML schema version."""
    _cache: dict[Any, tuple[Any, Any]] = field(default_factory=dict, init=False, compare=False,
                                               repr=False)
    """Affine compute-time cache per (phase, model, seq_len, unit, num_shards)."""

    def __post_init__(self) -> None:
        if self.provenance not in PROVENANCES:
            raise ValueError(f"provenance must be one of {PROVENANCES}, got {self.provenance!r}")
        if not (math.isfinite(self.overlap_slowdown) and self.overlap_slowdown >= 1.0):
            raise ValueError("overlap_slowdown must be finite and >= 1, got "
                             f"{self.overlap_slowdown}")
        if not (math.isfinite(self.recompute_factor) and self.recompute_factor > 0.0):
            raise ValueError(f"recompute_factor must be finite and > 0, "
                             f"got {self.recompute_factor}")
        problem = _dispatch_problem(self.tp_dispatch_s)
        if problem:
            raise ValueError(problem)
        if not (math.isfinite(self.fsdp_copy_s_per_byte) and self.fsdp_copy_s_per_byte >= 0.0):
            raise ValueError(f"fsdp_copy_s_per_byte must be finite and >= 0, "
                             f"got {self.fsdp_copy_s_per_byte}")

    # -- compute --------------------------------------------------------------------------
    def _phase(self, phase: str) -> PhaseCoefficients:
        if phase not in PHASES:
            raise ValueError(f"unknown phase {phase!r}; expected one of {PHASES}")
        if phase not in self.compute:
            raise ProfileError(f"profile {self.name!r} has no {phase} coefficients",
                               hint=f"fit it with `shardmeter fit compute` on data with {phase} "
                                    "rows, or pass --base with a prior profile.")
        return self.compute[phase]

    def _coef_vector(self, phase: str) -> np.ndarray:
        coefs = self._phase(phase).coefficients
        return np.array([coefs.get(name, 0.0) for name in phase_features(phase)])

    def compute_affine_s(self, phase: str, model: ModelSpec, seq_len: int, unit: str = "model",
                         num_shards: int = 1,
                         shard: RankShard | None = None) -> tuple[float, float]:
        """(seconds per micro-batch sequence, fixed seconds): time(m) = m·first + second, of one
        rank's share when `shard` splits the work."""
        key = (phase, model, seq_len, unit, num_shards, shard)
        hit = self._cache.get(key)
        if hit is None:
            per_mb, const = unit_feature_affine(model, seq_len, unit, phase, num_shards, shard)
            w = self._coef_vector(phase)
            hit = self._cache[key] = (float(per_mb @ w), float(const @ w))
        return hit

    def compute_time_s(self, phase: str, model: ModelSpec, seq_len: int, micro_batch: Any,
                       unit: str = "model", num_shards: Any = 1,
                       shard: RankShard | None = None) -> Any:
        """Time of one forward/backward pass or optimizer step of the model, ONE block or the root
        (of one rank's share when `shard` splits the work: `perfmodel.costs.features.RankShard`).

        micro_batch (and num_shards) may be numpy arrays; the result then is an array.
        """
        if unit not in UNITS:
            raise ValueError(f"unknown unit {unit!r}; expected one of {UNITS}")
        if isinstance(num_shards, np.ndarray):
            if shard is not None and not shard.trivial:
                raise ValueError("an array of shard counts is not combined with a rank shard")
            X = unit_feature_matrix(model, seq_len, micro_batch, unit, phase, num_shards)
            return X @ self._coef_vector(phase)
        slope, fixed = self.compute_affine_s(phase, model, seq_len, unit, int(num_shards), shard)
        return slope * micro_batch + fixed

    def compute_provenance(self, phase: str) -> str:
        return self._phase(phase).provenance

    # -- communication --------------------------------------------------------------------
    def comm_time_s(self, op: str, links: Sequence[str], world_size: Any, payload_bytes: Any,
                    nics_per_node: int = 1) -> Any:
        """Ring collective over `links` (slowest decides); payload = unsharded bytes; P=1 -> 0 s."""
        return self.comm.time_s(op, links, world_size, payload_bytes, nics_per_node)

    def comm_provenance(self, op: str, links: Sequence[str]) -> str:
        """'measured', 'prior' or 'mixed': the coefficients a prediction over `links` uses."""
        return self.comm.provenance(op, links)

    def island_comm_time_s(self, op: str, island: IslandSpec, payload_bytes: Any) -> Any:
        """Ring collective over all GPUs of an island (intra/inter links and NICs resolved)."""
        return self.comm.time_s(op, island.ring_links, island.num_gpus, payload_bytes,
                                island_nics(island))

    def group_comm_time_s(self, op: str, group: CommGroup, payload_bytes: Any, *,
                          inline: bool = False, compute_s: Any = 0.0) -> Any:
        """A collective over one parallel group as placed on the nodes; `inline`: issued on the
        compute stream after `compute_s` of compute (`CommModel.group_time_s`)."""
        return self.comm.group_time_s(op, group, payload_bytes, inline=inline,
                                      compute_s=compute_s)

    def all_to_all_time_s(self, group: CommGroup, send_bytes: Any) -> Any:
        """One all-to-all over an expert-parallel group (`CommModel.all_to_all_time_s`)."""
        return self.comm.all_to_all_time_s(group, send_bytes)

    def all_to_all_provenance(self, group: CommGroup) -> str:
        """Where its coefficients come from (`CommModel.all_to_all_provenance`)."""
        return self.comm.all_to_all_provenance(group)

    def island_comm_provenance(self, op: str, island: IslandSpec) -> str:
        return self.comm.provenance(op, island.ring_links)

    def effective_parameters(self) -> dict[str, str]:
        """The profile's scalar parameters that were fitted end to end (so absorb model error),
        each with how: `fit overlap` on FSDP2 steps, the calibration on published runs, or
        copied from a calibrated reference (a scaled prior)."""
        detail = self.provenance_detail
        out: dict[str, str] = {}
        if isinstance(detail.get("overlap_fit"), dict):
            for name in ("overlap_slowdown", "fsdp_copy_s_per_byte"):
                out[name] = "fitted end to end on FSDP2 steps (shardmeter fit overlap)"
        if isinstance(detail.get("params"), dict):
            scaled = detail.get("scaled_from")
            how = (f"copied from {scaled.get('profile')}, where it was fitted end to end"
                   if isinstance(scaled, dict) else "fitted end to end on published runs")
            for name in ("overlap_slowdown", "recompute_factor"):
                out[name] = how
        return out

    def provenance_summary(self) -> dict[str, Any]:
        """Which parts are measured and which prior (for prediction outputs)."""
        return {"profile": self.name, "hardware": self.hardware, "provenance": self.provenance,
                "compute": {p: c.provenance for p, c in self.compute.items()},
                "overlap_slowdown": self.overlap_slowdown,
                "recompute_factor": self.recompute_factor,
                "fsdp_copy_s_per_byte": self.fsdp_copy_s_per_byte,
                "effective_parameters": self.effective_parameters(),
                "at_bound": list(self.provenance_detail.get("at_bound", [])),
                "comm": {f"{op}/{link}": c.provenance
                         for (op, link), c in self.comm.coefficients.items()},
                **({"comm_inline": {f"{op}/{link}": c.provenance
                                    for (op, link), c in self.comm.inline_coefficients.items()}}
                   if self.comm.inline_coefficients else {}),
                "comm_fallback": "catalog prior (catalogs/links.csv) for links not listed"}

    # -- serialisation --------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version, "name": self.name, "hardware": self.hardware,
            "backend": self.backend, "provenance": self.provenance, "units": dict(UNITS_DOC),
            "overlap_slowdown": float(self.overlap_slowdown),
            "recompute_factor": float(self.recompute_factor),
            **({"fsdp_copy_s_per_byte": float(self.fsdp_copy_s_per_byte)}
               if self.fsdp_copy_s_per_byte else {}),
            **({"tp_dispatch_s": {k: {p: float(v) for p, v in places.items()}
                                  for k, places in self.tp_dispatch_s.items()}}
               if self.tp_dispatch_s else {}),
            "compute": {phase: {"provenance": c.provenance,
                                "selection_cv_mape_pct": c.selection_cv_mape_pct,
                                "nested_cv_mape_pct": c.nested_cv_mape_pct,
                                "cv_scheme": c.cv_scheme,
                                "coefficients_s": {k: float(v) for k, v in c.coefficients.items()}}
                        for phase, c in self.compute.items()},
            "comm": [_comm_entry(op, link, c) for (op, link), c in self.comm.coefficients.items()]
            + [_comm_entry(op, link, c, issue="inline")
               for (op, link), c in self.comm.inline_coefficients.items()],
            "provenance_detail": self.provenance_detail,
        }


TP_DISPATCH_LAYOUTS = ("sequence_parallel", "no_sequence_parallel")
TP_DISPATCH_PLACES = ("block_forward", "block_backward", "root_forward", "root_backward")


def _dispatch_problem(table: Mapping[str, Mapping[str, float]]) -> str | None:
    """What is wrong with a tp_dispatch_s table, in words (None: nothing)."""
    for layout, places in table.items():
        if layout not in TP_DISPATCH_LAYOUTS or set(places) != set(TP_DISPATCH_PLACES) \
                or not all(math.isfinite(v) and v >= 0 for v in places.values()):
            return (f"field 'tp_dispatch_s.{layout}' = {dict(places)!r}: need one of "
                    f"{', '.join(TP_DISPATCH_LAYOUTS)} with seconds >= 0 for each of "
                    f"{', '.join(TP_DISPATCH_PLACES)}")
    return None


def _dispatch(doc: dict[str, dict[str, float]], source: str) -> dict[str, dict[str, float]]:
    """The YAML's tp_dispatch_s, checked (ProfileError naming the field)."""
    problem = _dispatch_problem(doc)
    if problem:
        raise ProfileError(f"{source}: {problem}",
                           hint="refit it with `shardmeter fit dispatch`, or drop the field.")
    return doc


def _comm_entry(op: str, link: str, c: LinkCoefficients, issue: str = "isolated"
                ) -> dict[str, Any]:
    """One `comm:` entry of the YAML file (`issue` written only for inline coefficients)."""
    return {"op": op, "link": link, **({"issue": issue} if issue != "isolated" else {}),
            "latency_s": c.latency_s, "bandwidth_bytes_per_s": c.bandwidth_bytes_per_s,
            "per_nic": c.per_nic, "provenance": c.provenance, "cv_mape_pct": c.cv_mape_pct,
            "rows": c.rows,
            **({"wait_per_compute": c.wait_per_compute} if c.wait_per_compute else {})}


# ---- YAML schema ---------------------------------------------------------------------------

class _Strict(BaseModel):
    # strict: YAML's true/false never pass as numbers; no NaN/inf coefficient is accepted.
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class _PhaseDoc(_Strict):
    provenance: str = Field(pattern=_PROVENANCE_RE)
    selection_cv_mape_pct: float | None = None
    nested_cv_mape_pct: float | None = None
    cv_mape_pct: float | None = None
    """Files before issue 22: the feature-selection score of a measured phase, the cross-validated
    MAPE of a calibrated one (read into the fields that say so)."""
    cv_scheme: str = ""
    coefficients_s: dict[str, float]

    def cv_figures(self) -> tuple[float | None, float | None]:
        """(selection_cv_mape_pct, nested_cv_mape_pct), a legacy `cv_mape_pct` read as what it
        was: the selection score of a measured phase, the CV of a calibrated one."""
        selection, nested = self.selection_cv_mape_pct, self.nested_cv_mape_pct
        if self.cv_mape_pct is not None and selection is None and nested is None:
            if self.provenance == "calibrated":
                nested = self.cv_mape_pct
            else:
                selection = self.cv_mape_pct
        return selection, nested


class _CommDoc(_Strict):
    op: str = Field(pattern="^(" + "|".join(OPS) + ")$")
    link: str = Field(min_length=1)
    issue: str = Field(default="isolated", pattern="^(isolated|inline)$")
    """How the collective is issued: isolated (after a barrier, FSDP's overlapped collectives)
    or inline (on the compute stream; `perfmodel.costs.comm` module doc)."""
    latency_s: float = Field(ge=0)
    bandwidth_bytes_per_s: float = Field(gt=0)
    per_nic: bool = False
    provenance: str = Field(pattern="^(measured|prior)$")
    cv_mape_pct: float | None = None
    rows: int = Field(default=0, ge=0)
    wait_per_compute: float = Field(default=0.0, ge=0)
    """Inline entries: seconds added per second of compute before the collective."""


class _ProfileDoc(_Strict):
    schema_version: int
    name: str = Field(min_length=1)
    hardware: str = Field(min_length=1)
    backend: str = Field(pattern="^(" + "|".join(BACKENDS) + ")$")
    provenance: str = Field(pattern=_PROVENANCE_RE)
    units: dict[str, str] = Field(default_factory=dict)
    overlap_slowdown: float = Field(default=1.0, ge=1.0, allow_inf_nan=False)
    recompute_factor: float = Field(default=1.0, gt=0.0, allow_inf_nan=False)
    fsdp_copy_s_per_byte: float = Field(default=0.0, ge=0.0, allow_inf_nan=False)
    tp_dispatch_s: dict[str, dict[str, float]] = Field(default_factory=dict)
    compute: dict[str, _PhaseDoc] = Field(default_factory=dict)
    comm: list[_CommDoc] = Field(default_factory=list)
    provenance_detail: dict[str, Any] = Field(default_factory=dict)


def profile_from_dict(data: Any, *, source: str = "<profile>") -> HardwareProfile:
    """Validate a parsed YAML document; problems raise ProfileError naming source and field."""
    if not isinstance(data, dict):
        raise ProfileError(f"{source}: expected a YAML mapping, got {type(data).__name__}",
                           hint="see catalogs/profiles/README.md for the format.")
    if data.get("schema_version") != SCHEMA_VERSION:
        raise ProfileError(f"{source}: schema_version {data.get('schema_version')!r} is not "
                           f"supported (this version reads {SCHEMA_VERSION})",
                           hint="regenerate the profile with this shardmeter version.")
    try:
        doc = _ProfileDoc.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ProfileError(f"{source}: field {where!r} = {first.get('input')!r}: {first['msg']}",
                           hint="see catalogs/profiles/README.md for the format.") from err
    compute = {}
    for phase, ph in doc.compute.items():
        known = phase_features(phase) if phase in PHASES else None
        if known is None or not set(ph.coefficients_s) <= set(known):
            bad = phase if known is None else sorted(set(ph.coefficients_s) - set(known))
            raise ProfileError(f"{source}: compute.{phase}: unknown phase or feature(s) {bad}",
                               hint=f"phases: {', '.join(PHASES)}; "
                                    "features: perfmodel/costs/features.py.")
        if not any(v > 0 for v in ph.coefficients_s.values()):
            raise ProfileError(f"{source}: compute.{phase}: no positive coefficient "
                               f"({dict(ph.coefficients_s)}), so every {phase} would take 0 s",
                               hint="refit the profile (`shardmeter fit compute`) or drop the "
                                    "phase to use the prior's.")
        if any(v < 0 for v in ph.coefficients_s.values()):
            raise ProfileError(f"{source}: compute.{phase}: coefficients must be >= 0",
                               hint="refit the profile (the fit keeps coefficients non-negative).")
        selection, nested = ph.cv_figures()
        compute[phase] = PhaseCoefficients(coefficients=dict(ph.coefficients_s),
                                           provenance=ph.provenance,
                                           selection_cv_mape_pct=selection,
                                           nested_cv_mape_pct=nested, cv_scheme=ph.cv_scheme)
    tables: dict[str, dict[tuple[str, str], LinkCoefficients]] = {"isolated": {}, "inline": {}}
    for c in doc.comm:
        tables[c.issue][(c.op, c.link)] = LinkCoefficients(
            latency_s=c.latency_s, bandwidth_bytes_per_s=c.bandwidth_bytes_per_s,
            per_nic=c.per_nic, provenance=c.provenance, cv_mape_pct=c.cv_mape_pct, rows=c.rows,
            wait_per_compute=c.wait_per_compute)
    return HardwareProfile(name=doc.name, hardware=doc.hardware, backend=doc.backend,
                           provenance=doc.provenance, provenance_detail=doc.provenance_detail,
                           compute=compute,
                           comm=CommModel(backend=doc.backend, coefficients=tables["isolated"],
                                          inline_coefficients=tables["inline"]),
                           overlap_slowdown=doc.overlap_slowdown,
                           recompute_factor=doc.recompute_factor,
                           fsdp_copy_s_per_byte=doc.fsdp_copy_s_per_byte,
                           tp_dispatch_s=_dispatch(doc.tp_dispatch_s, source))


@functools.lru_cache(maxsize=256)
def _load_file(path: str, mtime_ns: int) -> HardwareProfile:
    data = load_yaml(path, what="hardware profile", error=ProfileError,
                     hint="fix the file or regenerate it.")
    return profile_from_dict(data, source=path)


@functools.lru_cache(maxsize=256)
def _declared(path: str, mtime_ns: int) -> tuple[str, str] | None:
    """(`hardware` in lower case, `provenance`) as a profile file declares them, read cheaply, or
    None when they cannot be read so.

    Claim: `default_profile` may skip, without parsing it strictly, a file whose top-level
    `hardware` scalar names another GPU or whose `provenance` is less trusted than another
    candidate's, and still returns the profile it returned when it parsed them all. Why: the
    pick filters on `HardwareProfile.hardware` and then takes the most trusted provenance present
    (`PROVENANCES`), which are these two scalars; a skipped file could not have been picked. The
    read uses libyaml's composer (no aliases expanded, so no alias bomb) and looks at two nodes;
    a file it cannot read (no C loader, bad YAML, a flow or duplicate key, a non-string value)
    gives None and is parsed strictly as before, so its error is still reported. Saves the
    strict pure-Python parse of every shipped file (most of a `predict`'s start-up before issue
    29).
    Checked by: tests/test_startup.py (same pick as parsing every file; a broken file still
    fails; a file naming another GPU is not parsed).
    """
    loader = getattr(yaml, "CSafeLoader", None)
    if loader is None:
        return None
    try:
        node = yaml.compose(Path(path).read_bytes(), Loader=loader)
    except (OSError, yaml.YAMLError, RecursionError, ValueError):
        return None
    if not isinstance(node, yaml.MappingNode):
        return None
    found: dict[str, list[yaml.Node]] = {"hardware": [], "provenance": []}
    for key, value in node.value:
        if isinstance(key, yaml.ScalarNode) and key.value in found:
            found[key.value].append(value)
    scalars = []
    for values in found.values():
        if len(values) != 1 or not isinstance(values[0], yaml.ScalarNode) \
                or values[0].tag != "tag:yaml.org,2002:str":
            return None
        scalars.append(str(values[0].value))
    return scalars[0].lower(), scalars[1]


def _profile_files() -> dict[str, Path]:
    folder = profiles_dir()
    return {p.stem.lower(): p for p in sorted(folder.glob("*.yaml"))} if folder.is_dir() else {}


def load_profile(name_or_path: str) -> HardwareProfile:
    """A profile by file stem in catalogs/profiles/ (case-insensitive) or by path."""
    path = Path(name_or_path)
    if not path.is_file():
        found = _profile_files().get(name_or_path.lower())
        if found is None:
            if path.suffix in (".yaml", ".yml") or "/" in name_or_path:
                raise ProfileError(f"profile file {name_or_path} not found",
                                   hint="give an existing YAML path or a name from "
                                        "catalogs/profiles/.")
            stems = [p.stem for p in _profile_files().values()]
            raise ProfileError(f"unknown profile {name_or_path!r}; "
                               f"{did_you_mean(name_or_path, stems)}",
                               hint=f"use a file stem from {profiles_dir()} or a YAML path.")
        path = found
    return _load_file(str(path.resolve()), path.stat().st_mtime_ns)


def save_profile(profile: HardwareProfile, path: str | Path) -> None:
    """Write a profile as YAML (round-trips through load_profile to equal predictions)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(yaml.safe_dump(profile.to_dict(), sort_keys=False, width=100,
                                              allow_unicode=True))


def default_profile(gpu_name: str) -> HardwareProfile:
    """The profile for a GPU: measured (newest fit) > calibrated (on published runs) > the shipped
    prior > a prior built from the catalog on the fly."""
    try:

        canonical = get_gpu(gpu_name).name
    except CatalogError:
        canonical = gpu_name
    declared = {f: _declared(str(f.resolve()), f.stat().st_mtime_ns)
                for f in _profile_files().values()}
    candidates = [f for f, d in declared.items() if d is None or d[0] == canonical.lower()]
    # of the files read cheaply only those of the most trusted provenance can be picked; a file
    # not read so, or of an unknown provenance, is parsed (its error is then reported)
    rank = {p: i for i, p in enumerate(PROVENANCES)}
    best = min((rank[d[1]] for f in candidates if (d := declared[f]) is not None and d[1] in rank),
               default=None)
    candidates = [f for f in candidates
                  if (d := declared[f]) is None or rank.get(d[1], best) == best]
    matches = [p for p in (load_profile(str(f)) for f in candidates)
               if p.hardware.lower() == canonical.lower()]
    for provenance in PROVENANCES:
        found = [p for p in matches if p.provenance == provenance]
        if found:
            return max(found, key=lambda p: (str(p.provenance_detail.get("fit_date", "")), p.name))
    logger.info("no profile file for %s: building the catalog prior", canonical)
    try:
        return make_prior_profile(canonical)
    except CatalogError as err:
        raise ProfileError(
            f"no profile for hardware {gpu_name!r} and it is not in the GPU catalog",
            hint="fit one with `shardmeter fit`, or use a catalog GPU name.") from err


# ---- priors --------------------------------------------------------------------------------

def _field_docs(cls: type) -> dict[str, str]:
    """Attribute docstrings of a dataclass (the string literal after each field)."""
    try:
        body = ast.parse(inspect.getsource(cls)).body[0].body  # type: ignore[attr-defined]
    except (OSError, TypeError):
        return {}
    docs = {}
    for node, nxt in zip(body, body[1:], strict=False):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and \
                isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant):
            docs[node.target.id] = " ".join(str(nxt.value.value).split())
    return docs


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def make_prior_profile(gpu_name: str, assumptions: Any = None) -> HardwareProfile:
    """Datasheet-based profile of a catalog GPU (see compute.PriorAssumptions)."""
    # lazy: perfmodel.costs.compute imports pandas, scipy and sklearn for its fitting half, which
    # loading a shipped profile never needs (startup time, issue 29)
    from perfmodel.costs.compute import PriorAssumptions, prior_compute_coefficients

    gpu = get_gpu(gpu_name)
    assume = assumptions or PriorAssumptions()
    coefs = prior_compute_coefficients(gpu, assume)
    link_names = list(dict.fromkeys((gpu.intra_node_link, gpu.inter_node_link)))
    comm = {(op, get_link(n).name): prior_link_coefficients(n) for op in RING_OPS
            for n in link_names}
    notes = _field_docs(PriorAssumptions)
    detail = {
        "kind": "prior",
        "generated_by": "perfmodel.profiles.profile.make_prior_profile (shipped files: python -m "
                        "scripts.make_prior_profiles)",
        "shardmeter_version": __version__,
        "datasheet": {
            "gpu": {"name": gpu.name, "bf16_dense_flops_per_s": gpu.bf16_flops_per_s,
                    "hbm_bytes_per_s": gpu.hbm_bytes_per_s, "source": gpu.source},
            "links": {get_link(n).name: {"latency_s": get_link(n).latency_s,
                                         "busbw_bytes_per_s": get_link(n).busbw_bytes_per_s,
                                         "per_nic": get_link(n).per_nic,
                                         "source": get_link(n).source}
                      for n in link_names},
        },
        "assumptions": {k: {"value": v, "note": notes.get(k, "")}
                        for k, v in assume.as_dict().items()},
        "method": "forward/backward: FLOPs/(peak bf16 x matmul_efficiency) for tok_block_matmul "
                  "and tok_lm_head (backward = 2 x forward FLOPs) and for tok_attn as causal "
                  "flash attention (half of 4·S·a·d forward, 2.5 x that backward: "
                  "perfmodel.costs.compute.attention_seconds_per_feature, as the calibrated "
                  "profiles); HBM bytes/(hbm bandwidth x hbm_efficiency) for tok_hidden, tok_ffn, "
                  "tok_vocab and the optimizer; kernel_gap_s x kernels for layers and const. "
                  "comm: catalog latency and busbw.",
    }
    backend = "rccl" if gpu.name.upper().startswith("AMD") else "nccl"
    if gpu.intra_node_link.startswith("gloo"):  # a CPU "device" (catalogs/gpus_local.csv)
        backend = "gloo"
    return HardwareProfile(
        name=f"{gpu.name}-prior", hardware=gpu.name, backend=backend, provenance="prior",
        provenance_detail=detail,
        compute={p: PhaseCoefficients(coefficients=c, provenance="prior")
                 for p, c in coefs.items()},
        comm=CommModel(backend=backend, coefficients=comm))
