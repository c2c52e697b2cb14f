#!/usr/bin/env bash
# Recollect every CPU timing dataset behind catalogs/profiles/cpu-x86-2core.yaml on ONE machine,
# in the order the fits need them (2 h 14 min on the 2-core AMD EPYC VM, 2026-12-02), over the wider design space
# catalogs/spaces/cpu-wide.yaml (Sobol shapes spanning the named models' embedding sizes, named
# models with two layers), then the held-out parallel-layout steps (cpu-fsdp-layouts.csv, a few
# minutes more). The shipped datasets predate this script: their commands are in their
# *.env.json sidecars. Each step appends to its CSV and resumes where a killed run stopped; move
# the fitting datasets (and their .env.json/.progress/.plan.json sidecars) away first, and run it
# on a quiet machine: anything else on the two cores, including a second benchmark, is noise in
# every row (a 2026-12-01 trial that ran the named models beside the Sobol sweep was not usable).
# Afterwards: `.venv/bin/python -m scripts.make_validation --fit` refits the profile and rewrites
# docs/VALIDATION.md; `shardmeter fit comm catalogs/profiles/data/cpu-p2p.csv -o
# catalogs/profiles/cpu-x86-2core.yaml` then adds send_recv (it keeps cpu-comm.csv's coefficients
# and provenance).
# The last two steps write VALIDATION-ONLY datasets that no fit reads: the fresh holdout
# (cpu-holdout.csv) and the checkpointing policies on FSDP2 (cpu-fsdp-ac.csv). The holdout is
# measured ONCE: never move it away to remeasure it after seeing its errors (a killed run resumes).
#   STEPS="holdout fsdp-ac" scripts/collect_cpu_data.sh   # only these steps (default: all)
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
STEPS=${STEPS:-compute named aligned width comm p2p inline dispatch fsdp memory holdout fsdp-ac pipeline layouts layouts-fresh layouts-fresh2 repeats}
# step NAME COMMAND...: run COMMAND when NAME is among $STEPS
step() {
    local name=$1; shift
    [[ " $STEPS " == *" $name "* ]] || { echo "== skipped step $name (not in STEPS)"; return 0; }
    echo "== $(date -u +%FT%TZ) $*"; "$@"
}
step compute "$SM" -v bench compute --space "$SPACE" -n 150 -o "$DATA/cpu-compute.csv"
# The named models alone: a 2-layer Yi-6B needs more than 12 GB.
step named "$SM" -v bench compute --space "$SPACE" --named -o "$DATA/cpu-compute.csv"
# Widths that are multiples of 1024, as the named models' are (rows aligned-NNNN): their backward
# runs slower than at the widths beside them on this CPU (catalogs/spaces/cpu-aligned.yaml).
step aligned "$SM" -v bench compute --space catalogs/spaces/cpu-aligned.yaml -n 64 \
    -o "$DATA/cpu-compute.csv"
# The evidence for that: one shape at eight widths (docs/VALIDATION.md part (a), width probe).
step width "$SM" -v bench compute --space catalogs/spaces/cpu-width-probe.yaml -n 8 \
    -o "$DATA/cpu-width-probe.csv"
# 200 repetitions: small gloo collectives on two shared cores are noisy (see the IQR column of
# cpu-comm.csv), so the median needs many samples.
step comm "$SM" -v bench comm -o "$DATA/cpu-comm.csv" --iters 200 --warmup 10
# Point-to-point (pipeline stage boundaries): rank 0 sends to rank 1, 16 KiB to 64 MiB (the
# pipeline cases below send 128-512 KiB per boundary). Its own file, not cpu-comm.csv: the shipped
# profile cites cpu-comm.csv by sha256, and `fit comm` keeps both datasets cited (see above).
step p2p "$SM" -v bench comm -o "$DATA/cpu-p2p.csv" --ops send_recv --min-mib 0.015625 \
    --max-mib 64 --points 12 --iters 200 --warmup 10
# Collectives issued inline, as tensor parallelism issues them (issue 23): each after a matmul of
# side 128-1024 (0.1-50 ms of compute: the segments between a TP step's collectives), no barrier,
# the mean of the rounds; 4 KiB to 32 MiB spans the TP activations,
# loss rows and gathered logits of the layout cases below. `shardmeter fit comm
# "$DATA/cpu-comm-inline.csv" --inline -o catalogs/profiles/cpu-x86-2core.yaml` fits the
# profile's inline table (tensor- and context-parallel collectives; FSDP's keep cpu-comm.csv's).
step inline "$SM" -v bench comm --inline -o "$DATA/cpu-comm-inline.csv" --min-mib 0.00390625 \
    --max-mib 32 --points 10 --iters 20 --warmup 3
# DTensor's host dispatch under the TP plan (issue 23): a tiny Llama planned on a one-rank mesh
# beside the plain one, 1-6 blocks; `shardmeter fit dispatch "$DATA/cpu-tp-dispatch.csv" -o
# catalogs/profiles/cpu-x86-2core.yaml` fits the profile's tp_dispatch_s.
step dispatch "$SM" -v bench dispatch -o "$DATA/cpu-tp-dispatch.csv"
# torchtitan's recipe in fp32 without activation checkpointing (CPU bf16 matmuls are not what
# the fp32 compute profile measures; the FSDP-side fit is done on steps without recompute).
step fsdp "$SM" -v bench fsdp -o "$DATA/cpu-fsdp.csv" --iters 10 --warmup 3 --recipe torchtitan \
    --param-dtype fp32 --reduce-dtype fp32 --ac none
step memory "$SM" -v bench memory --real --like "$DATA/cpu-fsdp.csv" \
    -o "$DATA/cpu-fsdp-memory.csv"
# VALIDATION ONLY from here on (no fit reads these files).
# The fresh holdout (catalogs/spaces/cpu-holdout.yaml, frozen before measuring): three
# architectures no decision has used, two layers, sequence 64 and 256 x micro-batch 1 and 2, five
# profiled steps; named models only. docs/VALIDATION.md reports it apart as the honest CPU
# estimate, predicted by the shipped profile without a refit.
step holdout "$SM" -v bench compute --space catalogs/spaces/cpu-holdout.yaml --named \
    -o "$DATA/cpu-holdout.csv"
# The checkpointing policies on FSDP2 steps of two held-out shapes (catalogs/spaces/
# fsdp-cpu-ac.yaml), the recipe above with each CheckpointPolicy in turn (`none` as the reference
# each policy's recompute is measured against); one CSV, the recipe column tells them apart.
for AC in none op-sac attn layer:2; do
    step fsdp-ac "$SM" -v bench fsdp --space catalogs/spaces/fsdp-cpu-ac.yaml \
        -o "$DATA/cpu-fsdp-ac.csv" --iters 10 --warmup 3 --recipe torchtitan \
        --param-dtype fp32 --reduce-dtype fp32 --ac "$AC"
done
# Pipeline-parallel steps, pp 2 (GPipe, 1F1B, interleaved 1F1B; catalogs/spaces/pipeline-cpu.yaml):
# held out; `shardmeter bench pipeline-compare "$DATA/cpu-pipeline.csv" --profile
# catalogs/profiles/cpu-x86-2core.yaml` predicts each row. The recipe of the FSDP2 steps.
step pipeline "$SM" -v bench pipeline -o "$DATA/cpu-pipeline.csv" --iters 10 --warmup 3 \
    --recipe torchtitan --param-dtype fp32 --reduce-dtype fp32 --ac none
# Parallel layouts (issue 23), held out: nothing fits on these rows, they are only predicted with
# the profile the steps above produce (`shardmeter bench fsdp-compare $DATA/cpu-fsdp-layouts.csv
# --profile cpu-x86-2core`). Same recipe as cpu-fsdp.csv; torchtitan's TP plan. TP = 2 on the two
# cores with and without sequence parallelism, then TP = 2 x FSDP = 2 on 4 ranks: two ranks per
# core, so those rows time ranks that share a core (the profile times one rank per core).
LAYOUTS=(bench fsdp --space catalogs/spaces/fsdp-cpu-layouts.yaml -o "$DATA/cpu-fsdp-layouts.csv"
         --iters 10 --warmup 3 --recipe torchtitan --param-dtype fp32 --reduce-dtype fp32
         --ac none --tp 2)
step layouts "$SM" -v "${LAYOUTS[@]}" --nproc 2 --sequence-parallel
step layouts "$SM" -v "${LAYOUTS[@]}" --nproc 2 --no-sequence-parallel
step layouts "$SM" -v "${LAYOUTS[@]}" --nproc 4 --sequence-parallel
# A fresh TP = 2 holdout (issue 23; catalogs/spaces/fsdp-cpu-layouts-fresh.yaml says why): three
# shapes no benchmark has measured, with and without sequence parallelism, predicted by the
# profile with its inline-collective and dispatch terms. Measured once (2026-12-03); it judged
# those terms once, then the inline sweep was extended, so it is reported, not judged.
FRESH=(bench fsdp --space catalogs/spaces/fsdp-cpu-layouts-fresh.yaml
       -o "$DATA/cpu-fsdp-layouts-fresh.csv" --iters 10 --warmup 3 --recipe torchtitan
       --param-dtype fp32 --reduce-dtype fp32 --ac none --tp 2 --nproc 2)
step layouts-fresh "$SM" -v "${FRESH[@]}" --sequence-parallel
step layouts-fresh "$SM" -v "${FRESH[@]}" --no-sequence-parallel
# A second fresh TP = 2 holdout (catalogs/spaces/fsdp-cpu-layouts-fresh2.yaml says why), frozen
# before the inline sweep was extended to longer compute; it judges that refit. Measured once.
FRESH2=(bench fsdp --space catalogs/spaces/fsdp-cpu-layouts-fresh2.yaml
        -o "$DATA/cpu-fsdp-layouts-fresh2.csv" --iters 10 --warmup 3 --recipe torchtitan
        --param-dtype fp32 --reduce-dtype fp32 --ac none --tp 2 --nproc 2)
step layouts-fresh2 "$SM" -v "${FRESH2[@]}" --sequence-parallel
step layouts-fresh2 "$SM" -v "${FRESH2[@]}" --no-sequence-parallel
# Launch-to-launch noise (issue 27 item 6; VALIDATION ONLY, docs/VALIDATION.md part (d)): the same
# gloo collectives in three separate torchrun launches (a `repeat` column), so their spread across
# launches can be set beside the within-run IQR. First measured 2026-12-02 on the AMD EPYC VM.
step repeats "$SM" -v bench comm -o "$DATA/cpu-comm-repeats.csv" --repeats 3 --points 6 \
    --min-mib 1 --max-mib 64 --iters 50 --warmup 5
echo "== $(date -u +%FT%TZ) done"
