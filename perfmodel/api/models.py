"""Model records: the catalog listing and the parameter report of one model (`shardmeter catalog
models`, `shardmeter catalog models --config PATH`).

Every number comes from `perfmodel.spec.arch.ModelSpec` (the one home of the parameter and FLOP
arithmetic); this module only orders it into records. A report works for every model the
loader reads, mixture-of-experts ones included, whose training step is not modelled yet (the
record says so in `step_modelled`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from perfmodel.spec import catalog
from perfmodel.spec.arch import ModelSpec
from perfmodel.spec.errors import UserInputError

REPORT_SEQ_LEN = 4096
"""Sequence length the report's FLOPs per token are given at (attention grows with it)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ParameterReport:
    """Parameters of one model: totals, active, components, FLOPs per token."""

    spec: ModelSpec
    """The model as parsed."""
    record: dict[str, Any]
    """Every reported quantity, in output order (flat: one value per key)."""


def catalog_models() -> list[dict[str, Any]]:
    """One record per catalog model: its shape, total / active parameters and family."""
    records = []
    for spec in catalog.load_models().values():
        record = spec.summary()
        record["params_b"] = spec.total_params / 1e9
        record["published_params_b"] = (spec.published_params / 1e9
                                        if spec.published_params else None)
        records.append(record)
    return records


def parameter_report(name_or_path: str, *, seq_len: int = REPORT_SEQ_LEN) -> ParameterReport:
    """The parameter report of a catalog model or a Hugging Face config.json path."""
    if seq_len < 1:
        raise UserInputError(f"--seq-len {seq_len}: must be > 0", hint="pass --seq-len 1 or more.")
    spec = catalog.get_model(name_or_path)
    record: dict[str, Any] = {"model": spec.name, **spec.parameter_counts()}
    record["text_model_of"] = (f"{spec.text_model_of} (the text model; the vision tower is not "
                               "counted)" if spec.text_model_of else "")
    record["mtp_params"] = spec.mtp_params
    record.update({
        "num_layers": spec.num_layers, "hidden_size": spec.hidden_size,
        "num_heads": spec.num_heads, "num_kv_heads": spec.num_kv_heads,
        "head_dim": spec.mla.qk_head_dim if spec.mla is not None else spec.d,
        "v_head_dim": spec.mla.v_head_dim if spec.mla is not None else spec.d,
        "attention": "mla" if spec.mla is not None else "qkvo",
        "attention_pattern": spec.attention_pattern, "vocab_size": spec.vocab_size,
        "tie_word_embeddings": spec.tie_word_embeddings,
        "dense_layers": spec.num_dense_layers, "dense_intermediate_size":
            spec.intermediate_size if spec.num_dense_layers else None,
        "moe_layers": spec.num_moe_layers,
    })
    moe = spec.moe
    record.update({
        "num_experts": moe.num_experts if moe else None,
        "experts_per_token": moe.experts_per_token if moe else None,
        "expert_intermediate_size": moe.expert_intermediate_size if moe else None,
        "shared_experts": moe.num_shared_experts if moe else None,
        "shared_intermediate_size": moe.shared_intermediate_size if moe else None,
        "router_params_per_layer": spec.router_params if moe else None,
    })
    record.update({f"{part}_params": n for part, n in spec.parameter_breakdown().items()})
    record["seq_len"] = seq_len
    record["forward_flops_per_token"] = spec.forward_flops_per_token(seq_len)
    record["model_flops_per_token"] = spec.model_flops_per_token(seq_len)
    try:
        spec.check_step_modelled("a training step")
        record["step_modelled"], record["step_note"] = True, ""
    except UserInputError as err:
        record["step_modelled"], record["step_note"] = False, err.message
    return ParameterReport(spec=spec, record=record)
