"""Real measurements with torch (the `[bench]` extra): the only package that imports torch.

- `model`: a plain-torch decoder-only transformer built from a `ModelSpec` (exact parameter count).
- `compute`: design spaces, Sobol sampling, profiler phase grouping, the micro-batch sweep.
- `comm` / `comm_worker`: collective sweeps under torchrun (gloo or nccl).
- `fsdp` / `fsdp_worker`: FSDP2 (`fully_shard`) end-to-end steps under torchrun.
- `pipeline_stages`: the transformer split into pipeline stages, torch's GPipe / 1F1B /
  interleaved 1F1B schedules; `pipeline_order`: what they run per rank, recorded (gloo, fake
  process group); `pipeline` / `pipeline_worker`: pipeline-parallel steps under torchrun and
  their prediction.
- `fsdp` / `fsdp_worker`: FSDP2 (`fully_shard`) end-to-end steps under torchrun, parallel
  layouts (TP, FSDP x TP, HSDP) included.
- `parallel`: a layout's device mesh and torchtitan's Llama tensor-parallel plan.
- `layout_record` / `layout_order`: every collective of real parallel-layout steps, recorded,
  and the simulator's plan of the same steps.
- `common`: append-only CSV with resume, environment record, statistics.

Importing this package does not import torch; the submodules that need it do.
"""
