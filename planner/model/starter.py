"""The starter instance `shardmeter init` writes: a commented, valid instance YAML.

Claim: the file loads with the instance model (`planner.model.instance.load_instance`) and plans
in seconds (two small list-priced clusters; the island table is built by the performance model),
and every field it sets is explained in a comment that points to docs/INSTANCE.md.
Why: a new user starts from a file that works and edits it, rather than from the reference.
Checked by: tests/test_init_instance.py (loads it, plans it, refuses to overwrite without force).
"""

from __future__ import annotations

from pathlib import Path

from perfmodel.spec.errors import UserInputError

STARTER_INSTANCE = """\
# A ShardMeter planner instance (`shardmeter init` wrote it). Every field is described, with its
# unit, default and an example, in docs/INSTANCE.md. Try:
#   shardmeter plan  {name}                 # the cheapest plan (--objective time: the fastest)
#   shardmeter pareto {name}                # every cost/time trade-off
#   shardmeter pareto {name} --vary clusters.lambda-h100.price_scale=0.7,1
#                                           # what if H100s were 30 % cheaper?
name: my-first-plan                 # any name; it labels the outputs
model: Llama-3.2-1B                 # a catalog model (`shardmeter catalog models`) or a config.json
training:
  seq_len: 2048                     # tokens per sequence
  global_batch_seqs: 64             # sequences per optimizer step, over all islands
  train_tokens: 1.0e+9              # tokens to train on: wall time and cost scale with it
  strategy: diloco                  # fsdp (one island) or diloco (islands sync every H steps)
  inner_steps: 100                  # DiLoCo H: inner steps between outer syncs
  pseudo_gradient_dtype: bf16       # dtype of the pseudo-gradients sent between islands
  activation_checkpointing: op-sac  # none, full, op-sac, attn or layer:N (or a list to choose)
clusters:                           # node pools islands are carved from
  - name: lambda-h100
    gpu: H100-SXM5-80GB             # a catalog GPU (`shardmeter catalog gpus`)
    num_nodes: 2                    # nodes you could rent
    gpus_per_node: 8
    allowed_gpus_per_node: [8]      # the provider sells whole 8-GPU nodes
    price: {{provider: Lambda, tier: on-demand}}  # a dated list price (`shardmeter catalog prices`)
    # price_usd_per_gpu_hour: 2.99  # ... or your own price instead of `price:`
    # price_scale: 0.7              # a what-if multiplier on the price (0.7: 30 % cheaper)
    wan_gbit_s: 10                  # [assumption] the site's uplink for DiLoCo syncs
    wan_latency_ms: 40              # [assumption]
  - name: lambda-a100
    gpu: A100-SXM4-80GB
    num_nodes: 2
    gpus_per_node: 8
    allowed_gpus_per_node: [8]
    price: {{provider: Lambda, tier: on-demand}}
    wan_gbit_s: 10                  # [assumption]
    wan_latency_ms: 40              # [assumption]
limits:
  max_islands: 4                    # at most this many islands in a plan
  # max_gpus: 32                    # other caps: max_gpus, budget_usd, deadline_hours
"""
"""The template; `{name}` is the file name the commands in its header use."""


def starter_instance(file_name: str) -> str:
    """The starter instance's text, its example commands naming `file_name`."""
    return STARTER_INSTANCE.format(name=file_name)


def write_starter_instance(path: Path, *, force: bool = False) -> Path:
    """Write the starter instance to `path`; an existing file is kept unless `force`."""
    if path.is_dir():
        raise UserInputError(f"init {path}: is a folder",
                             hint=f"give a file name, e.g. `shardmeter init {path / 'plan.yaml'}`.")
    if path.exists() and not force:
        raise UserInputError(f"init {path}: the file exists; not overwritten",
                             hint=f"pass --force to replace it, or give another path "
                                  f"(`shardmeter init {path.with_name('my-plan.yaml')}`).")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(starter_instance(str(path)), encoding="utf-8")
    return path
