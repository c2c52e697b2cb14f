"""FP8 matmuls, FP8 all-gather and torch.compile: what a recipe's `compute_dtype`,
`fp8_all_gather` and `compile` change in a step's compute, communication and memory.

Claims:
  * Compute. Under an fp8 `compute_dtype` only linear-layer matmuls change: torchao's float8
    training swaps `nn.Linear` for `Float8Linear`, so attention (SDPA, not a Linear) stays bf16.
    Which linears: torchtitan's float8 converter filters nothing by default (`filter_fqns`
    defaults to an empty list), so the LM head goes float8 too under fp8-tensorwise and
    fp8-rowwise; its MXFP8 converter defaults to `filter_fqns=["output"]` ("By default we always
    skip the output layer"), so under mxfp8 the LM head stays bf16 (`fp8_features`). Their
    time is the bf16 time × (bf16 rate / fp8 rate) / efficiency ratio, the rates from the GPU's
    datasheet (catalogs/gpus.csv) and the efficiency ratio = a published float8-vs-bf16
    Linear speedup (casts and scaling included) ÷ the rate ratio of the GPU it was measured on
    (catalogs/precision.csv). The profile's coefficients of those matmul features (forward and
    backward) are multiplied by that factor; nothing else.
  * compile: the elementwise and per-kernel features (`COMPILE_FEATURES`) are divided by a
    published torch.compile training speedup (catalogs/precision.csv, a prior per GPU family).
  * Communication and memory: with `fp8_all_gather` FSDP2 gathers the block linears' weights
    as float8 (1 byte + the scales) instead of `param_dtype`, and the root's LM head where it is
    float8 (untied); norms and the embedding stay in param_dtype. The gathered-parameter
    buffers of the blocks shrink the same way (the root's buffer is kept at param_dtype).
    torchao saves the high-precision input and weight for backward
    (`matmul_with_hp_or_float8_args`: `ctx.save_for_backward(input_hp, weight_hp_t)`), so saved
    activations do not change; the float8 copies it casts around each matmul (`fp8_cast_bytes`)
    are transient. Not modelled: pipeline ranks (`perfmodel.costs.memory.pipeline_memory`) keep
    their gathered buffers at param_dtype under fp8_all_gather (an overestimate), and torchao's
    float8 tensor-parallel all-gathers stay at param_dtype in the comm model.
Why: a prior built only from datasheets and a linear-level microbenchmark, never from the
end-to-end runs it is validated against (`python -m scripts.validate_fp8`). FP8 has no CPU
ground truth (torchao float8 needs a recent CUDA GPU), so every FP8 or compile figure is
labelled a prior until a GPU measures it.
Checked by: tests/test_precision.py (A100 refused with a fix; bf16 bit for bit unchanged; FP8
faster than bf16 on H100 but by less than the rate ratio; fp8_all_gather halves the linears'
all-gather payload; the catalog's figures resolve to the stated factors).
"""

from __future__ import annotations

import csv
import functools
import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from perfmodel.costs.model import CostModel
from perfmodel.profiles.profile import HardwareProfile, PhaseCoefficients
from perfmodel.spec.catalog import get_gpu, load_gpus
from perfmodel.spec.errors import CatalogError, ConfigError
from perfmodel.spec.formulas import dtype_bytes
from perfmodel.spec.paths import catalog_dir

if TYPE_CHECKING:
    from perfmodel.spec.arch import ModelSpec
    from perfmodel.spec.hardware import GpuSpec
    from perfmodel.spec.recipe import TrainingRecipe

logger = logging.getLogger(__name__)

FP8_MATMUL_FEATURES = ("tok_block_matmul", "gemm_fixed")
"""Profile features that are the block linears' matmuls (forward and backward)."""
LM_HEAD_BF16 = ("mxfp8",)
"""Compute dtypes whose torchtitan converter skips the LM head ("output") by default."""


def fp8_features(dtype: str) -> tuple[str, ...]:
    """The profile features whose matmuls run in float8 under `dtype` (module doc)."""
    if dtype == "bf16":
        return ()
    return FP8_MATMUL_FEATURES + (() if dtype in LM_HEAD_BF16 else ("tok_lm_head",))
COMPILE_FEATURES = ("tok_hidden", "tok_ffn", "tok_vocab", "layers", "const")
"""Elementwise and per-kernel-overhead features torch.compile's fusion acts on."""
FP8_BYTES = 1.0
"""Bytes of one float8 (e4m3 / e5m2) element."""
SCALE_BYTES_PER_ELEMENT = {"fp8-tensorwise": 0.0, "fp8-rowwise": 0.0, "mxfp8": 1.0 / 32.0}
"""Scale bytes per float8 element on the wire: tensorwise one fp32 per tensor and rowwise one
per row (both negligible: 0 here), mxfp8 one e8m0 byte per 32-element block."""
PRECISION_CATALOG = "precision.csv"
"""File (in the catalogs folder) with the sourced speedups."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PrecisionRow:
    """One sourced figure of catalogs/precision.csv."""

    effect: str
    """fp8_linear or compile."""
    compute_dtype: str
    """The compute dtype it is for (`*`: any)."""
    gpus: str
    """Which GPUs it applies to: `fp8` (every GPU with a datasheet FP8 rate), `gpu` (every
    catalog GPU with an FP8 or bf16 datasheet rate, not CPU devices) or `;`-separated names."""
    speedup: float
    """Published speedup (> 1 faster), bf16 or eager time / fp8 or compiled time."""
    measured_on: str
    """The GPU the speedup was measured on (a catalog name for fp8 rows)."""
    source_url: str
    """Where the figure is published."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ComputeEffect:
    """Multipliers a recipe applies to a profile's compute coefficients."""

    label: str
    """What changed, for profile names and outputs (e.g. `fp8-tensorwise+compile`)."""
    matmul_features: tuple[str, ...]
    """The features `matmul_scale` applies to (`fp8_features`)."""
    matmul_scale: float
    """Multiplier on `FP8_MATMUL_FEATURES` (1 under bf16)."""
    compile_scale: float
    """Multiplier on `COMPILE_FEATURES` (1 without compile)."""

    @property
    def identity(self) -> bool:
        """Whether nothing changes (bf16 eager): the profile is used as it is."""
        return self.matmul_scale == 1.0 and self.compile_scale == 1.0


@functools.cache
def load_precision_catalog() -> tuple[PrecisionRow, ...]:
    """The rows of catalogs/precision.csv (CatalogError naming the file and line)."""
    path = catalog_dir() / PRECISION_CATALOG
    if not path.is_file():
        raise CatalogError(f"catalog file {path} not found",
                           hint="reinstall shardmeter or set SHARDMETER_CATALOGS.")
    rows = []
    with path.open(encoding="utf-8", newline="") as handle:
        for line, raw in enumerate(csv.DictReader(handle), start=2):
            try:
                speedup = float(raw["speedup"])
            except (KeyError, TypeError, ValueError):
                speedup = float("nan")
            if not speedup > 0 or raw.get("effect") not in ("fp8_linear", "compile") \
                    or not raw.get("source_url"):
                raise CatalogError(f"{path}, line {line}: needs effect fp8_linear|compile, a "
                                   "positive speedup and a source_url",
                                   hint="fix the row (see the header for the columns).")
            rows.append(PrecisionRow(effect=raw["effect"], compute_dtype=raw["compute_dtype"],
                                     gpus=raw["gpus"], speedup=speedup,
                                     measured_on=raw["measured_on"],
                                     source_url=raw["source_url"]))
    return tuple(rows)


def _applies(row: PrecisionRow, gpu: GpuSpec) -> bool:
    if row.gpus == "fp8":
        return gpu.fp8_flops_per_s is not None
    if row.gpus == "gpu":
        return not gpu.name.upper().startswith("CPU")
    return gpu.name.lower() in {g.strip().lower() for g in row.gpus.split(";")}


def _row(effect: str, dtype: str) -> PrecisionRow:
    for row in load_precision_catalog():
        if row.effect == effect and row.compute_dtype in (dtype, "*"):
            return row
    raise CatalogError(f"{catalog_dir() / PRECISION_CATALOG} has no {effect} row for {dtype}",
                       hint=f"add a sourced {effect} row for {dtype}.")


def fp8_gpus(dtype: str) -> list[str]:
    """Catalog GPUs an fp8 compute dtype can run on."""
    row = _row("fp8_linear", dtype)
    return [g.name for g in load_gpus().values() if _applies(row, g)]


def check_compute_dtype(recipe: TrainingRecipe, gpu: GpuSpec) -> None:
    """ConfigError naming the GPU and a fix when `recipe` asks for FP8 on a GPU without it, or
    for torch.compile on a device with no sourced compile effect."""
    if recipe.compute_dtype != "bf16":
        row = _row("fp8_linear", recipe.compute_dtype)
        if not _applies(row, gpu):
            why = ("its datasheet lists no FP8 tensor-core rate (A100 and older GPUs have no "
                   "FP8)" if gpu.fp8_flops_per_s is None else
                   f"{recipe.compute_dtype} needs {row.gpus.replace(';', ', ')}")
            able = ", ".join(fp8_gpus(recipe.compute_dtype))
            raise ConfigError(f"compute_dtype {recipe.compute_dtype} on {gpu.name}: {why}",
                              hint=f"use --compute-dtype bf16 on {gpu.name}, or a GPU that "
                                   f"supports {recipe.compute_dtype}: {able}.")
    if recipe.compile and not _applies(_row("compile", "*"), gpu):
        raise ConfigError(f"compile on {gpu.name}: no sourced torch.compile effect for this "
                          "device (catalogs/precision.csv covers GPUs; the CPU measurement is "
                          "scripts.measure_compile_cpu's CSV)",
                          hint="drop --compile for this device.")


def supports(recipe: TrainingRecipe, gpu: GpuSpec) -> bool:
    """Whether `gpu` can run `recipe`'s compute dtype and compile setting."""
    try:
        check_compute_dtype(recipe, gpu)
    except ConfigError:
        return False
    return True


def compute_effect(recipe: TrainingRecipe, gpu: GpuSpec) -> ComputeEffect:
    """The coefficient multipliers of `recipe` on `gpu` (module doc); ConfigError when the GPU
    cannot run it (`check_compute_dtype`)."""
    check_compute_dtype(recipe, gpu)
    matmul, labels = 1.0, []
    if recipe.compute_dtype != "bf16":
        row = _row("fp8_linear", recipe.compute_dtype)
        bench = get_gpu(row.measured_on)
        if bench.fp8_flops_per_s is None or gpu.fp8_flops_per_s is None:
            raise CatalogError(f"{PRECISION_CATALOG}: {row.measured_on} or {gpu.name} has no "
                               "FP8 rate", hint="fix catalogs/gpus.csv or the precision row.")
        efficiency = row.speedup * bench.bf16_flops_per_s / bench.fp8_flops_per_s
        matmul = gpu.bf16_flops_per_s / gpu.fp8_flops_per_s / efficiency
        labels.append(recipe.compute_dtype)
    compiled = 1.0
    if recipe.compile:
        compiled = 1.0 / _row("compile", "*").speedup
        labels.append("compile")
    return ComputeEffect(label="+".join(labels) or "bf16", matmul_scale=matmul,
                         compile_scale=compiled,
                         matmul_features=fp8_features(recipe.compute_dtype))


_SCALED: dict[tuple[int, ComputeEffect], tuple[HardwareProfile, HardwareProfile]] = {}
_SCALED_MAX = 64


def scaled_profile(profile: HardwareProfile, effect: ComputeEffect) -> HardwareProfile:
    """`profile` with `effect` applied to its forward/backward coefficients; the changed phases
    and the profile are labelled prior (nothing measured them)."""
    key = (id(profile), effect)
    hit = _SCALED.get(key)
    if hit is not None and hit[0] is profile:
        return hit[1]
    scales = {**{f: effect.matmul_scale for f in effect.matmul_features},
              **{f: effect.compile_scale for f in COMPILE_FEATURES}}
    compute: dict[str, PhaseCoefficients] = {}
    for phase, coefs in profile.compute.items():
        if phase not in ("forward", "backward"):
            compute[phase] = coefs
            continue
        new = {name: value * scales.get(name, 1.0) for name, value in coefs.coefficients.items()}
        compute[phase] = replace(coefs, coefficients=new, provenance="prior")
    detail: Mapping[str, object] = {
        **profile.provenance_detail,
        "recipe_effect": {"label": effect.label, "matmul_scale": effect.matmul_scale,
                          "compile_scale": effect.compile_scale,
                          "source": f"catalogs/{PRECISION_CATALOG} (prior: no GPU measured it)"}}
    scaled = replace(profile, name=f"{profile.name}+{effect.label}", provenance="prior",
                     compute=compute, provenance_detail=dict(detail))
    if len(_SCALED) >= _SCALED_MAX:
        _SCALED.clear()
    _SCALED[key] = (profile, scaled)
    return scaled


def recipe_cost_model(profile: CostModel, recipe: TrainingRecipe, gpu: GpuSpec) -> CostModel:
    """The cost model `recipe` runs at on `gpu`: `profile` itself under bf16 eager (so default
    predictions are unchanged to the last bit), else a scaled copy (`scaled_profile`)."""
    effect = compute_effect(recipe, gpu)
    if effect.identity:
        return profile
    if not isinstance(profile, HardwareProfile):
        raise ConfigError(f"compute_dtype {recipe.compute_dtype} / compile {recipe.compile}: "
                          f"the cost model {type(profile).__name__} has no coefficients to scale",
                          hint="use a HardwareProfile, or the bf16 eager recipe.")
    return scaled_profile(profile, effect)


# ---- bytes -----------------------------------------------------------------------------------

def block_linear_params(spec: ModelSpec) -> float:
    """Weight elements of one block's linears (the tensors torchao converts to float8)."""
    return float(sum(i * o for i, o in (*spec.attn_linears, *spec.mlp_linears)))


def root_linear_params(spec: ModelSpec, recipe: TrainingRecipe) -> float:
    """Weight elements of the root's LM head when it runs in float8 (untied, and not a dtype
    whose converter skips it); 0 otherwise."""
    if recipe.compute_dtype == "bf16" or recipe.compute_dtype in LM_HEAD_BF16 \
            or spec.tie_word_embeddings:
        return 0.0
    return float(spec.vocab_size * spec.hidden_size)


def gathered_bytes(params: float, fp8_params: float, recipe: TrainingRecipe) -> float:
    """Bytes of all-gathered parameters: `params` elements of which `fp8_params` are float8
    linear weights when `recipe.fp8_all_gather` (1 byte + scales), the rest in param_dtype.
    Without fp8_all_gather: params × param_dtype bytes, as before."""
    b = dtype_bytes(recipe.param_dtype)
    if not recipe.fp8_all_gather:
        return params * b
    fp8 = FP8_BYTES + SCALE_BYTES_PER_ELEMENT[recipe.compute_dtype]
    return (params - fp8_params) * b + fp8_params * fp8


def fp8_cast_bytes(spec: ModelSpec, recipe: TrainingRecipe) -> tuple[float, float]:
    """(fixed, per-token) bytes of the float8 copies torchao casts around the widest linear's
    backward matmuls: the weight's float8 copy (none when it was all-gathered in float8) and,
    per token, float8 copies of the input and of the output gradient (1 byte each). (0, 0)
    under bf16."""
    if recipe.compute_dtype == "bf16":
        return 0.0, 0.0
    linears = (*spec.attn_linears, *spec.mlp_linears)
    weight = 0.0 if recipe.fp8_all_gather else max(i * o for i, o in linears) * FP8_BYTES
    return weight, max(i + o for i, o in linears) * FP8_BYTES
