#!/usr/bin/env bash
# Recollect every CPU timing dataset behind catalogs/profiles/cpu-x86-2core.yaml on ONE machine,
# in the order the fits need them (about 1 h 20 min on the 2-core VM), over the wider design space
# catalogs/spaces/cpu-wide.yaml (Sobol shapes spanning the named models' embedding sizes, named
# models with two layers), then the held-out parallel-layout steps (cpu-fsdp-layouts.csv, a few
# minutes more). The shipped datasets predate this script: their commands are in their
# *.env.json sidecars. Each step appends to its CSV and resumes where a killed run stopped; move
# the six datasets (and their .env.json/.progress/.plan.json sidecars) away first, and run it on a
# quiet machine: anything else on the two cores, including a second benchmark, is noise in every
# row (a 2026-12-01 trial that ran the named models beside the Sobol sweep was not usable).
# Afterwards: `.venv/bin/python -m scripts.make_validation --fit` refits the profile and rewrites
# docs/VALIDATION.md.
set -euo pipefail
cd "$(dirname "$0")/.."
SM=${SHARDMETER:-.venv/bin/shardmeter}
DATA=catalogs/profiles/data
SPACE=catalogs/spaces/cpu-wide.yaml
# A caching malloc, as a GPU has: glibc's malloc unmaps every large freed tensor, so each step's
# fresh gradient and optimizer buffers fault their pages in again, at a cost that swings with the
# VM's huge-page supply (the datasets measured before 2026-12-01 carry it: backward IQRs above the
# median on large tied shapes). jemalloc, set never to purge by itself, reuses warm pages; the
# compute bench purges between configurations (perfmodel.bench.environment.release_freed_memory).
JEMALLOC=${JEMALLOC:-$(ldconfig -p | awk '/libjemalloc\.so\.2 /{print $NF; exit}')}
if [[ -z "$JEMALLOC" || ! -e "$JEMALLOC" ]]; then
    echo "error: libjemalloc.so.2 not found. To fix: apt-get install libjemalloc2, or set" \
         "JEMALLOC=/path/to/libjemalloc.so.2" >&2
    exit 2
fi
export LD_PRELOAD="$JEMALLOC" MALLOC_CONF=dirty_decay_ms:-1,muzzy_decay_ms:-1
export GLIBC_TUNABLES=glibc.malloc.hugetlb=1  # for what still goes through glibc (ld.so, gloo)
step() { echo "== $(date -u +%FT%TZ) $*"; "$@"; }
step "$SM" -v bench compute --space "$SPACE" -n 150 -o "$DATA/cpu-compute.csv"
# The named models alone: a 2-layer Yi-6B needs more than 12 GB.
step "$SM" -v bench compute --space "$SPACE" --named -o "$DATA/cpu-compute.csv"
# Widths that are multiples of 1024, as the named models' are (rows aligned-NNNN): their backward
# runs slower than at the widths beside them on this CPU (catalogs/spaces/cpu-aligned.yaml).
step "$SM" -v bench compute --space catalogs/spaces/cpu-aligned.yaml -n 64 -o "$DATA/cpu-compute.csv"
# The evidence for that: one shape at eight widths (docs/VALIDATION.md part (a), width probe).
step "$SM" -v bench compute --space catalogs/spaces/cpu-width-probe.yaml -n 8 \
    -o "$DATA/cpu-width-probe.csv"
# 200 repetitions: small gloo collectives on two shared cores are noisy (see the IQR column of
# cpu-comm.csv), so the median needs many samples.
step "$SM" -v bench comm -o "$DATA/cpu-comm.csv" --iters 200 --warmup 10
# torchtitan's recipe in fp32 without activation checkpointing (CPU bf16 matmuls are not what
# the fp32 compute profile measures; AC would add recompute the CPU profile does not time).
step "$SM" -v bench fsdp -o "$DATA/cpu-fsdp.csv" --iters 10 --warmup 3 --recipe torchtitan \
    --param-dtype fp32 --reduce-dtype fp32 --ac none
step "$SM" -v bench memory --real --like "$DATA/cpu-fsdp.csv" -o "$DATA/cpu-fsdp-memory.csv"
# Parallel layouts (issue 23), held out: nothing fits on these rows, they are only predicted with
# the profile the steps above produce (`shardmeter bench fsdp-compare $DATA/cpu-fsdp-layouts.csv
# --profile cpu-x86-2core`). Same recipe as cpu-fsdp.csv; torchtitan's TP plan. TP = 2 on the two
# cores with and without sequence parallelism, then TP = 2 x FSDP = 2 on 4 ranks: two ranks per
# core, so those rows time ranks that share a core (the profile times one rank per core).
LAYOUTS=(bench fsdp --space catalogs/spaces/fsdp-cpu-layouts.yaml -o "$DATA/cpu-fsdp-layouts.csv"
         --iters 10 --warmup 3 --recipe torchtitan --param-dtype fp32 --reduce-dtype fp32
         --ac none --tp 2)
step "$SM" -v "${LAYOUTS[@]}" --nproc 2 --sequence-parallel
step "$SM" -v "${LAYOUTS[@]}" --nproc 2 --no-sequence-parallel
step "$SM" -v "${LAYOUTS[@]}" --nproc 4 --sequence-parallel
echo "== $(date -u +%FT%TZ) done"
