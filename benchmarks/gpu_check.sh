#!/usr/bin/env bash
# One prepared check of the GPU path, under 8 minutes on one H100/H200 (BUDGET seconds, default 450):
#   a  the kernel tests compiled on CUDA (tests/kernels; the interpreter is off where CUDA is);
#   b  the kernel benchmark: Triton against torch eager, torch.compile, Liger-Kernel when installed,
#      and copy bandwidth (normsearch bench kernels);
#   c  one trial side by side: torch kernels, Triton kernels, Triton kernels compiled (tokens/s, and
#      the trial against a bare loop on the same settings: normsearch bench trial);
#   d  a short study with --jobs auto on the GPU.
# Numbers go to results/kernels/ (or $OUT): summary.txt, kernels.md/json, one log per step.
#
#   bash benchmarks/gpu_check.sh            (from the project's root, its venv active)
set -u
set -o pipefail
T0=$(date +%s)
BUDGET=${BUDGET:-450}
OUTD=${OUT:-results/kernels}
PY=${PYTHON:-python}
mkdir -p "$OUTD"
SUMMARY=$OUTD/summary.txt
: >"$SUMMARY"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 TRITON_INTERPRET=0
note() { echo "$*" | tee -a "$SUMMARY"; }
step() {  # step NAME CAP CMD...: CMD under min(CAP, what is left), output to $OUTD/NAME.log
  local name=$1 cap=$2 left lim rc s
  shift 2
  left=$(( BUDGET - ($(date +%s) - T0) - 10 ))
  lim=$(( cap < left ? cap : left ))
  if (( lim < 15 )); then note "[$name] SKIPPED: budget spent"; return; fi
  s=$(date +%s)
  timeout -k 5 "$lim" "$@" >"$OUTD/$name.log" 2>&1
  rc=$?
  note "[$name] rc=$rc in $(( $(date +%s) - s ))s (limit ${lim}s): $*"
}
note "gpu_check $(date -u +%FT%TZ) on $($PY -c 'import torch; print(torch.cuda.get_device_name(0), "torch", torch.__version__)' 2>&1)"
$PY -c "import triton; print('triton', triton.__version__)" 2>&1 | tee -a "$SUMMARY"

step a_kernel_tests 150 $PY -m pytest -q -x tests/kernels tests/test_compile.py
tail -n 3 "$OUTD/a_kernel_tests.log" | tee -a "$SUMMARY"

step b_kernel_bench 120 $PY -m normsearch bench kernels --tokens 16384 --hidden 1024 4096 8192 --rep 40 --out "$OUTD"
grep -E "^\|" "$OUTD/kernels.md" 2>/dev/null | head -n 30 | tee -a "$SUMMARY"

R=recipes/quickstart.yaml
WIDE=(--model.d_model 512 --model.n_layers 8 --model.n_heads 8 --model.context_length 512 --train.batch_size 16
      --train.steps 150 --train.eval_every 150 --train.warmup 10)
for k in torch triton; do
  step "c_train_$k" 60 $PY -m normsearch train $R -p pre_ln "${WIDE[@]}" --train.kernels $k --train.compile false
  grep -E "tokens/s" "$OUTD/c_train_$k.log" | tee -a "$SUMMARY"
done
step c_train_triton_compiled 90 $PY -m normsearch train $R -p pre_ln "${WIDE[@]}" --train.kernels triton --train.compile true
grep -E "tokens/s" "$OUTD/c_train_triton_compiled.log" | tee -a "$SUMMARY"
step c_bench_trial 60 $PY -m normsearch bench trial --layers 8 --d-model 512 --heads 8 --context 512 --batch 16 \
  --steps 100 --repeats 1 --kernels triton --compile false
grep -E "ratio|tokens/s" "$OUTD/c_bench_trial.log" | tee -a "$SUMMARY"

step d_study_jobs 60 $PY benchmarks/study_throughput.py --steps 60 --trials 0
tail -n 3 "$OUTD/d_study_jobs.log" | tee -a "$SUMMARY"
note "total $(( $(date +%s) - T0 ))s"
