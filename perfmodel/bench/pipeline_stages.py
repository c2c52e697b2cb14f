"""Pipeline stages of the benchmark transformer and the torch schedules that run them (torch).

`stage_modules(model, pp, virtual_stages, rank)` cuts a `perfmodel.bench.model.Transformer` into
the stages pipeline rank `rank` holds, as torchtitan's `pipeline_module_split` does: stage s of
S = pp·V holds the blocks `perfmodel.spec.pipeline.stage_blocks` gives it (the cut the simulator
prices), stage 0 also the embedding, stage S - 1 also the final norm and the LM head; stage s
runs on rank s mod pp ("loop" placement). The loss is not part of a stage: the schedule's
`loss_fn` runs it on the last stage per micro-batch, scaled by 1/k with `scale_grads=False`, as
torchtitan does (`rescale_accumulated_loss`), so the gradients are those of the mean loss over
the k micro-batches.

`pipeline_schedule` builds ScheduleGPipe, Schedule1F1B or ScheduleInterleaved1F1B over
`PipelineStage`s given static micro-batch shapes (`input_args` / `output_args`; the boundary
examples require grad, so gradients are sent back). `train_step` runs one optimizer step: the
schedule's forward and backward over k micro-batches, then AdamW on the rank's parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.pipelining import PipelineStage, schedules

from perfmodel.bench.model import Transformer, rope_tables
from perfmodel.bench.recipe_wrap import apply_activation_checkpointing
from perfmodel.spec.errors import UserInputError
from perfmodel.spec.pipeline import stage_blocks, stage_of_rank
from perfmodel.spec.recipe import TrainingRecipe

SCHEDULE_CLASSES = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B",
                    "interleaved-1f1b": "ScheduleInterleaved1F1B"}
"""torch.distributed.pipelining schedule class of each ParallelLayout.pp_schedule."""


class StageModule(nn.Module):
    """One pipeline stage: consecutive blocks of a Transformer, the embedding on the first stage,
    the final norm and LM head on the last (torchtitan's split); returns hidden states, or the
    logits on the last stage."""

    def __init__(self, model: Transformer, first_block: int, num_blocks: int, *, first: bool,
                 last: bool) -> None:
        super().__init__()
        self.head_dim = model.spec.d
        self.embed = model.embed if first else None
        # the blocks keep their model-wide index as their name (torchtitan keeps FQNs stable)
        self.layers = nn.ModuleDict({str(i): model.layers[i]
                                     for i in range(first_block, first_block + num_blocks)})
        self.final_norm = model.final_norm if last else None
        self.lm_head = model.lm_head if last else None
        self._rope: tuple[int, torch.Tensor, torch.Tensor] | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x) if self.embed is not None else x
        if self._rope is None or self._rope[0] != h.shape[1]:
            cos, sin = rope_tables(h.shape[1], self.head_dim, device=h.device, dtype=h.dtype)
            self._rope = (h.shape[1], cos, sin)
        _, cos, sin = self._rope
        for layer in self.layers.values():
            h = layer(h, cos, sin)
        if self.lm_head is not None and self.final_norm is not None:
            logits: torch.Tensor = self.lm_head(self.final_norm(h))
            return logits
        return h


def check_pipeline_model(model: Transformer, pp: int, virtual_stages: int) -> None:
    """UserInputError where the model cannot be split into pp·V stages."""
    stage_blocks(model.spec.num_layers, pp, virtual_stages)  # raises for too many stages
    if pp * virtual_stages > 1 and model.spec.tie_word_embeddings:
        raise UserInputError(
            f"{model.spec.name}: a tied LM head cannot be split from the embedding across "
            "pipeline stages",
            hint="benchmark pipelines with tie_word_embeddings: false (torchtitan does not tie "
                 "under pipeline parallelism).")


def stage_modules(model: Transformer, pp: int, virtual_stages: int,
                  rank: int) -> dict[int, StageModule]:
    """Global stage index -> module, for the stages of pipeline rank `rank` (module doc)."""
    check_pipeline_model(model, pp, virtual_stages)
    cuts = stage_blocks(model.spec.num_layers, pp, virtual_stages)
    starts = [sum(cuts[:s]) for s in range(len(cuts))]
    return {s: StageModule(model, starts[s], cuts[s], first=s == 0, last=s == len(cuts) - 1)
            for s in stage_of_rank(rank, pp, virtual_stages)}


def shifted_labels(tokens: torch.Tensor) -> torch.Tensor:
    """Next-token labels of a batch, as `Transformer.forward` computes them."""
    return torch.roll(tokens, shifts=-1, dims=1)


def scaled_loss(micro_batches: int) -> Any:
    """The schedule's loss_fn: mean next-token cross-entropy of one micro-batch, divided by k."""

    def loss_fn(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1))
        return loss / micro_batches

    return loss_fn


@dataclass(frozen=True, kw_only=True, slots=True)
class PipelineRun:
    """What one rank runs: its stage modules, their torch stages and the schedule."""

    modules: dict[int, StageModule]
    """Global stage index -> module."""
    stages: list[Any]
    """torch.distributed.pipelining PipelineStage of each local stage, in stage order."""
    schedule: Any
    """The torch schedule object."""
    first: bool
    """This rank holds stage 0 (it feeds the tokens)."""
    last: bool
    """This rank holds the last stage (it feeds the labels)."""


def pipeline_schedule(model: Transformer, *, schedule: str, pp: int, virtual_stages: int,
                      rank: int, micro_batches: int, micro_batch: int, seq_len: int,
                      device: torch.device, group: Any = None) -> PipelineRun:
    """The torch stages and schedule of pipeline rank `rank` over `model` (module doc)."""
    if schedule not in SCHEDULE_CLASSES:
        raise UserInputError(f"unknown pipeline schedule {schedule!r}",
                             hint=f"use one of {', '.join(SCHEDULE_CLASSES)}.")
    modules = stage_modules(model, pp, virtual_stages, rank)
    num_stages = pp * virtual_stages
    dtype = next(model.parameters()).dtype
    hidden = model.spec.hidden_size
    stages = []
    for s, module in modules.items():
        boundary = torch.empty(micro_batch, seq_len, hidden, device=device, dtype=dtype)
        inp = (torch.empty(micro_batch, seq_len, dtype=torch.long, device=device) if s == 0
               else boundary.clone().requires_grad_(True))
        out = (torch.empty(micro_batch, seq_len, model.spec.vocab_size, device=device,
                           dtype=dtype) if s == num_stages - 1
               else boundary.clone().requires_grad_(True))
        stages.append(PipelineStage(module, s, num_stages, device, input_args=(inp,),
                                    output_args=(out,), group=group))
    cls = getattr(schedules, SCHEDULE_CLASSES[schedule])
    multi = schedule == "interleaved-1f1b"
    built = cls(stages if multi else stages[0], n_microbatches=micro_batches,
                loss_fn=scaled_loss(micro_batches), scale_grads=False)
    return PipelineRun(modules=modules, stages=stages, schedule=built,
                       first=0 in modules, last=num_stages - 1 in modules)


def checkpoint_blocks(model: Transformer, recipe: TrainingRecipe) -> Transformer:
    """The recipe's activation checkpointing on the whole model's blocks (global block indices,
    as `layer:N` counts them), before the split."""
    return apply_activation_checkpointing(model, recipe.ac)


def make_stage_optimizer(modules: Sequence[nn.Module], *, lr: float = 1e-4) -> Any:
    """AdamW (fused, as torchtitan) over the parameters of this rank's stages."""
    params = [p for m in modules for p in m.parameters()]
    return torch.optim.AdamW(params, lr=lr, fused=True)


def train_step(run: PipelineRun, optimizer: Any, tokens: torch.Tensor) -> None:
    """One optimizer step: the schedule over the whole batch (split into k micro-batches on dim
    0), then the optimizer on this rank's stages."""
    args = (tokens,) if run.first else ()
    target = shifted_labels(tokens) if run.last else None
    run.schedule.step(*args, target=target, return_outputs=False)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
