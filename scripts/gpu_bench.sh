#!/usr/bin/env bash
# The one prepared benchmark run for a CUDA machine (under 10 minutes in all; installs nothing).
#
#   scripts/gpu_bench.sh [OUT_DIR]        # default: $OUT if set, else ./gpu-bench-out
#
# Needs a python (PYTHON, default python3) with a CUDA build of torch plus ShardMeter's
# dependencies (click numpy pandas scipy pyyaml pydantic rich); the repository is used in place
# through PYTHONPATH. Writes into OUT_DIR:
#   gpu-compute.csv   paper-gpu design space (N Sobol shapes, default 8) + the 5 named models at
#                     full depth, bf16, micro-batch sweep until OOM or the time cap
#   gpu-comm.csv      all_gather / reduce_scatter / all_reduce, NCCL, nproc = all visible GPUs
#   gpu-fsdp.csv      FSDP2 end-to-end steps (catalogs/spaces/fsdp-gpu.yaml), NCCL, torchtitan's
#                     recipe; gpu-fsdp.csv.allocator.csv: the CUDA caching allocator's peak
#                     allocated / reserved bytes and the device memory outside it, per step
#   gpu-reserve.csv   the memory model's allocator reserve (costs/memory.py MemoryConfig:
#                     reserve_bytes 512 MiB + reserve_fraction 5 % of the tracked peak, both
#                     unmeasured assumptions) against those steps' memory_reserved -
#                     memory_allocated and outside-allocator bytes (scripts/reserve_check.py;
#                     CPU seconds, right after the FSDP2 step)
#   gpu-memory.csv    FSDPMemTracker peaks of held-out cases (`shardmeter bench memory`)
#   gpu-profile.yaml  the MEASURED profile fitted from the above (compute, comm, overlap_slowdown)
#   *.env.json        environment of each run;  nvidia-smi.txt, gpu_bench.log
# Each step has its own time limit and resumes if rerun; a failing step does not stop the others.
# All steps together stop within TOTAL_S seconds (default 570: under 10 minutes of device time
# with the start-up checks): each step's limit is cut to what is left, and a step with under 5 s
# left is skipped with a message. Without a CUDA GPU the script says so and exits 0 (nothing to
# measure; the reserve check alone, `python -m scripts.reserve_check DATA`, also skips cleanly).
# LINK names the slowest link of the GPU ring for the comm/fsdp rows (catalogs/links.csv;
# default nvlink4 = H100/H200 SXM; e.g. nvlink3 for A100 SXM, pcie4/pcie5 for PCIe cards).
# HARDWARE names the catalog GPU of the fitted profile (default: from the CUDA device name).
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT_DIR=${1:-${OUT:-$ROOT/gpu-bench-out}}
PYTHON=${PYTHON:-python3}
N=${N:-8}
LINK=${LINK:-nvlink4}
TOTAL_S=${TOTAL_S:-570}
DEADLINE=$((SECONDS + TOTAL_S))
mkdir -p "$OUT_DIR"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
cd "$ROOT" || exit 2
exec > >(tee -a "$OUT_DIR/gpu_bench.log") 2>&1

"$PYTHON" - <<'EOF'
import importlib.util, sys
missing = [m for m in ("torch", "click", "numpy", "pandas", "scipy", "yaml", "pydantic", "rich")
           if importlib.util.find_spec(m) is None]
if missing:
    sys.exit(f"gpu_bench.sh: missing python packages {missing}; this script installs nothing.")
import torch
if not torch.cuda.is_available():
    print(f"gpu_bench.sh: torch {torch.__version__} sees no CUDA GPU: every step here (the "
          "allocator reserve check included) measures a GPU, so there is nothing to do on this "
          "machine; skipped.")
    sys.exit(3)
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.device_count()} x "
      f"{torch.cuda.get_device_name(0)}")
EOF
rc=$?
[ "$rc" -eq 3 ] && exit 0
[ "$rc" -eq 0 ] || exit 2
NGPU=$("$PYTHON" -c 'import torch; print(max(1, torch.cuda.device_count()))')
HARDWARE=${HARDWARE:-$("$PYTHON" - <<'EOF'
import torch
name = torch.cuda.get_device_name(0).upper()
for key, gpu in (("H200", "H200-SXM-141GB"), ("H100", "H100-SXM5-80GB"), ("B200", "B200"),
                 ("L40S", "L40S"), ("MI300X", "AMD-MI300X")):
    if key in name:
        print(gpu)
        break
else:
    if "A100" in name:
        print("A100-SXM4-80GB" if "80GB" in name else "A100-SXM4-40GB")
EOF
)}
nvidia-smi > "$OUT_DIR/nvidia-smi.txt" 2>&1 || true

# $1 = a step's own time limit in seconds: the limit cut to what is left of TOTAL_S (0: skip).
budget() {
  local left=$((DEADLINE - SECONDS - 10))  # 10 s: timeout's --kill-after grace
  if [ "$left" -lt 5 ]; then echo 0; elif [ "$1" -lt "$left" ]; then echo "$1"; else echo "$left"; fi
}
# run LIMIT COMMAND...: one step under its limit and the total budget.
run() {
  local limit; limit=$(budget "$1"); shift
  if [ "$limit" -eq 0 ]; then
    echo "!! skipped (the ${TOTAL_S} s budget is spent): $*"
    return 0
  fi
  echo "== $(date -u +%FT%TZ) [${limit} s] $*"
  timeout --kill-after=10 "$limit" "$@"
  local rc=$?
  [ "$rc" -eq 0 ] || echo "!! step exited with $rc (rows written so far are kept; rerun to resume)"
}
# shardmeter CLI without installing the package; $1 = time limit in seconds.
sm() {
  local limit=$1; shift
  run "$limit" "$PYTHON" -c 'import sys; from planner.cli import main; main(sys.argv[1:])' "$@"
}

sm 220 -v bench compute --space catalogs/spaces/paper-gpu.yaml -n "$N" --device cuda --dtype bfloat16 \
  --max-time-s 25 -o "$OUT_DIR/gpu-compute.csv"
sm 140 -v bench compute --space catalogs/spaces/paper-gpu.yaml --named --device cuda --dtype bfloat16 \
  --max-time-s 25 -o "$OUT_DIR/gpu-compute.csv"
sm 60 -v bench comm --backend nccl --nproc "$NGPU" --link "$LINK" --iters 20 --warmup 5 \
  -o "$OUT_DIR/gpu-comm.csv"
sm 90 -v bench fsdp --space catalogs/spaces/fsdp-gpu.yaml --backend nccl --nproc "$NGPU" --link "$LINK" \
  --dtype bfloat16 --iters 5 --warmup 2 -o "$OUT_DIR/gpu-fsdp.csv"
# The memory model's allocator reserve against those steps (CPU seconds; skips without them).
run 20 "$PYTHON" -m scripts.reserve_check "$OUT_DIR/gpu-fsdp.csv" -o "$OUT_DIR/gpu-reserve.csv"
sm 45 -v bench memory --heldout --limit 10 --jobs 4 -o "$OUT_DIR/gpu-memory.csv"
# The measured profile (CPU work, seconds): compute, comm, then the contention factor.
if [ -n "$HARDWARE" ]; then
  P="$OUT_DIR/gpu-profile.yaml"
  sm 60 fit compute "$OUT_DIR/gpu-compute.csv" -o "$P" --hardware "$HARDWARE" --backend nccl
  sm 30 fit comm "$OUT_DIR/gpu-comm.csv" -o "$P"
  sm 60 fit overlap "$OUT_DIR/gpu-fsdp.csv" -o "$P"
else
  echo "!! unknown GPU: set HARDWARE to a catalog GPU name to fit gpu-profile.yaml"
fi
echo "== $(date -u +%FT%TZ) done: $(ls "$OUT_DIR")"
