#!/usr/bin/env bash
# Recollect every CPU timing dataset behind catalogs/profiles/cpu-x86-2core.yaml on ONE machine,
# in the order the fits need them (about 1 h 20 min on the 2-core VM), over the wider design space
# catalogs/spaces/cpu-wide.yaml (Sobol shapes spanning the named models' embedding sizes, named
# models with two layers). The shipped datasets predate this script: their commands are in their
# *.env.json sidecars. Each step appends to its CSV and resumes where a killed run stopped; move
# the seven datasets (and their .env.json/.progress/.plan.json sidecars) away first, and run it on a
# quiet machine: anything else on the two cores, including a second benchmark, is noise in every
# row (a 2026-12-01 trial that ran the named models beside the Sobol sweep was not usable).
# Afterwards: `.venv/bin/python -m scripts.make_validation --fit` refits the profile and rewrites
# docs/VALIDATION.md; `shardmeter fit comm catalogs/profiles/data/cpu-p2p.csv -o
# catalogs/profiles/cpu-x86-2core.yaml` then adds send_recv (it keeps cpu-comm.csv's coefficients
# and provenance).
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
# Point-to-point (pipeline stage boundaries): rank 0 sends to rank 1, 16 KiB to 64 MiB (the
# pipeline cases below send 128-512 KiB per boundary). Its own file, not cpu-comm.csv: the shipped
# profile cites cpu-comm.csv by sha256, and `fit comm` keeps both datasets cited (see below).
step "$SM" -v bench comm -o "$DATA/cpu-p2p.csv" --ops send_recv --min-mib 0.015625 \
    --max-mib 64 --points 12 --iters 200 --warmup 10
# torchtitan's recipe in fp32 without activation checkpointing (CPU bf16 matmuls are not what
# the fp32 compute profile measures; AC would add recompute the CPU profile does not time).
step "$SM" -v bench fsdp -o "$DATA/cpu-fsdp.csv" --iters 10 --warmup 3 --recipe torchtitan \
    --param-dtype fp32 --reduce-dtype fp32 --ac none
step "$SM" -v bench memory --real --like "$DATA/cpu-fsdp.csv" -o "$DATA/cpu-fsdp-memory.csv"
# Pipeline-parallel steps, pp 2 (GPipe, 1F1B, interleaved 1F1B): held out, nothing is fitted on
# them; `shardmeter bench pipeline-compare "$DATA/cpu-pipeline.csv" --profile
# catalogs/profiles/cpu-x86-2core.yaml` predicts each row. Same recipe as the FSDP2 steps.
step "$SM" -v bench pipeline -o "$DATA/cpu-pipeline.csv" --iters 10 --warmup 3 \
    --recipe torchtitan --param-dtype fp32 --reduce-dtype fp32 --ac none
echo "== $(date -u +%FT%TZ) done"
