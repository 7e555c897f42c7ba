#!/usr/bin/env bash
# One device call: install the carried wheels, then run the named steps; everything lands in $OUT/results.tgz.
# Usage on the GPU machine:  STEP_S=150 bash benchmarks/device.sh STEP [STEP ...]
#   steps: sanity confine gputests eval throughput calibrate repeat precision profile suite optimize train serve scaling
#          gemm decoder redteam real grpo serve_grpo
#   real, grpo: a real-like corpus (benchmarks/real_corpus.py, seed SEED, default 0: one candidate per task; grpo a
#   group of 8, judged with --samples all) through `kernelrl bench` with a cold cache into res/throughput_<step>
#   (corpus.json beside the results, rate.md by kind from benchmarks/bench_runs.py), going on from the results.jsonl
#   and runs.jsonl in REAL_FROM (GRPO_FROM), if named; no task starts in the step's last DRAIN_S seconds (default 150);
#   LEVEL="1 2" for some levels; GROUP=N judges up to N candidates of a task together (there and in serve_grpo:
#   bench and serve --group); EVERY=K gives candidates to every K-th task only (the rest not judged, their
#   references not timed: a sample over the levels that fits a call); LANE, where copies run side by side (one per GPU), names each one's folder; SRC
#   names another kernelrl source tree to run (an A/B beside the working tree's, e.g. `git archive` of a commit);
#   CPU_LANES passes --cpu-lanes, BENCH_ARGS more flags; BUILD_NICE=N runs every build's compilers (ninja and what it
#   starts) at nice N.
#   scaling: benchmarks/eval_scaling.py on 1 then 2 GPUs through Ray (carry .whl with ray); SCALE_CORPUS=real judges
#   the real-like corpus instead of identity candidates.
#   serve_grpo: benchmarks/serve_grpo.py, groups of 8 of that corpus through `kernelrl serve` (GROUPS_IN_FLIGHT at
#   once, default 4), into res/serve_grpo;
#   no group starts in the step's last DRAIN_S seconds (default 240), none is waited for in its last 60.
#   redteam: `kernelrl redteam` of ${KB:-.kb/suite} under each policy of RT_POLICIES (default "strict kernelbench") into
#   res/redteam_<policy>, resumed from what is there (or from REDTEAM_FROM/redteam_<policy>, if named, its journal
#   plain or xz-packed as benchmarks/results/redteam_<gpu>/ keeps it); the policies run one after another, each
#   given an even share of the step's time left when it starts (one that finishes early leaves its time to the
#   next), no task starting in a share's last DRAIN_S seconds (default 120; a run stopped at its share has its report
#   written from its journal, `--report-only`); DEVICES names the GPUs
#   that share the jobs (default cuda: one); RT_ARGS passes more flags
#   repeat: benchmarks/verdict_repeat.py (RUNS runs, default 3, of CORPORA, default honest,exploits,suite, under
#   REP_POLICY, default both) into res/${REP_DIR:-verdict_repeat}, going on from REP_FROM/verdicts.jsonl; precision: benchmarks/precision_calibration.py on the GPU into
#   res/precision_calibration
#   profile: benchmarks/eval_trial_profile.py on PROFILE_TASKS (default: three gigabyte level-1 tasks of .kb/suite)
#   calibrate: KernelBench identity candidates through `kernelrl bench` (.kb/suite and .kb/identity, made by
#   benchmarks/kernelbench_identity.py write), resuming from the committed results.jsonl (or results.jsonl.gz) of
#   benchmarks/results/${CAL:-kernelbench_identity}_<gpu>/; LEVEL="1 2" for some levels; no task starts in the
#   step's last DRAIN_S seconds (default 150), which finish the tasks in flight and write the report; CAL_DIR names
#   its folder under res/ (default calibration), so that two runs of one call (an A/B) keep apart; DEVICES names the
#   GPUs it spreads over (default cuda: one); CAL_FROM names another results.jsonl to go on from.
#   SETS=mixed runs the throughput step on load_inline CUDA and Triton candidates with cold builds (default python);
#   SUITE_ONLY=level1/a,level2/b limits the suite step; STEP_S bounds each step (seconds); TESTS names the test
#   files (or node ids) of the gputests step, TEST_K its -k expression; GEMM_ARGS passes flags to gemm_device.py (e.g. "--shapes models
#   --dtype bf16": the linear layers of open LLMs, benchmarked as x @ W.T). On a machine with several GPUs, run copies side by side, one per
#   GPU: CUDA_VISIBLE_DEVICES=1 LANE=b bash benchmarks/device.sh gputests &  (LANE keeps their logs apart).
# Carry .whl (openai and its needs, trl, datasets, nvidia-cutlass) and, for gemm, .kernelrl-cache.
set -uo pipefail
OUT=${OUT:-/tmp/out}; RES="$OUT/res"; mkdir -p "$RES"
STEP_S=${STEP_S:-240}
LANE=${LANE:-}  # several copies may run at once (one per GPU, CUDA_VISIBLE_DEVICES): LANE names each one's logs
if [ -d .whl ]; then
  ( flock 9; [ -e /tmp/site/.installed ] || { python3 -m pip install -q --no-index --no-deps --no-compile \
      --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1 && touch /tmp/site/.installed; } \
      || echo "wheel install failed" ) 9>/tmp/.whl.lock
fi
export PYTHONPATH="${SRC:-$PWD/src}:/tmp/site" KERNELRL_CACHE=/tmp/kernelrl-cache${LANE:+-$LANE} PYTHONUNBUFFERED=1
if [ -n "${BUILD_NICE:-}" ]; then  # every build's compilers at that nice value: a `ninja` first in PATH runs the real one
  real=$(command -v ninja) && mkdir -p /tmp/nicebin && printf '#!/bin/sh\nexec nice -n %s %s "$@"\n' "$BUILD_NICE" "$real" \
    > /tmp/nicebin/ninja && chmod +x /tmp/nicebin/ninja && export PATH="/tmp/nicebin:$PATH"
fi
if [ -d .kernelrl-cache/gemm ]; then  # the cuBLASLt binding links the machine's libcublasLt: built here if missing
  export KERNELRL_GEMM_BUILD="$PWD/.kernelrl-cache/gemm"
  python3 -c "import os, kernelrl.gemm.build as b; b.build_cublaslt(b.Path(os.environ['KERNELRL_GEMM_BUILD']))" \
    2>&1 | tail -1
fi
save() { ( flock 9; tar czf "$OUT/.results.tgz" --exclude='*.safetensors' --exclude='*.bin' --exclude='*.pt' --exclude='*.pth' -C "$RES" . 2>/dev/null && mv "$OUT/.results.tgz" "$OUT/results.tgz" ) \
           9>"$OUT/.lock"; }
trap save EXIT
for step in "$@"; do
  echo "=== ${LANE:+[$LANE] }$step $(date +%T)"
  case $step in
    sanity) nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv
            python3 -c "import torch, triton, openai, trl; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())";;
    confine) timeout "$STEP_S" python3 benchmarks/confine_probe.py | tee "$RES/confine_probe.txt";;
    gputests) KERNELRL_INSTAFAIL=1 timeout "$STEP_S" python3 -m pytest -v -m gpu -p no:cacheprovider --durations=25 ${TESTS:-tests} ${TEST_K:+-k "$TEST_K"} 2>&1 | tee "$RES/gpu_tests${LANE:+_$LANE}.log" | tail -25;;
    eval) timeout "$STEP_S" python3 benchmarks/eval_overhead.py "$RES/eval" --repeats 5 2>&1 | tail -20;;
    throughput) timeout "$STEP_S" python3 benchmarks/eval_throughput.py "${KB:-.kb/suite}" "$RES/eval_throughput" \
                  --sets "${SETS:-python}" --modes serial,pipelined --limit 40 --budget-s $(( (STEP_S - 120) / 2 )) 2>&1 | tail -4;;
    calibrate) cal="$RES/${CAL_DIR:-calibration}"; mkdir -p "$cal"  # resumes from the committed run on this GPU model
               gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -oiE 'h100|h200' | tr A-Z a-z)
               kept="benchmarks/results/${CAL:-kernelbench_identity}_$gpu"  # results.jsonl, or gzipped when kept
               [ -e "$cal/results.jsonl" ] || cp "${CAL_FROM:-$kept/results.jsonl}" "$cal/results.jsonl" 2>/dev/null \
                 || { [ -e "$kept/results.jsonl.gz" ] && gunzip -c "$kept/results.jsonl.gz" > "$cal/results.jsonl"; }
               timeout "$STEP_S" python3 -m kernelrl.cli bench "${KB:-.kb/suite}" --candidates "${KB_ID:-.kb/identity}" \
                 --device "${DEVICES:-cuda}" --out "$cal" --resume --time-limit $((STEP_S - ${DRAIN_S:-150})) \
                 $(for l in ${LEVEL:-}; do echo --level "$l"; done) 2>&1 | tail -5;;
    repeat) rep="$RES/${REP_DIR:-verdict_repeat}"; mkdir -p "$rep"  # goes on from REP_FROM's verdicts.jsonl, if named
            [ -n "${REP_FROM:-}" ] && [ ! -e "$rep/verdicts.jsonl" ] && cp "$REP_FROM/verdicts.jsonl" "$rep/"
            timeout "$STEP_S" python3 benchmarks/verdict_repeat.py "$rep" --device cuda --runs "${RUNS:-3}" \
              --corpora "${CORPORA:-honest,exploits,suite}" ${REP_POLICY:+--policy "$REP_POLICY"} \
              --time-limit $((STEP_S - ${DRAIN_S:-150})) 2>&1 | tail -4;;
    precision) timeout "$STEP_S" python3 benchmarks/precision_calibration.py --device cuda \
                 --out "$RES/precision_calibration" 2>&1 | tail -4;;
    profile) timeout "$STEP_S" python3 benchmarks/eval_trial_profile.py "${KB:-.kb/suite}" "$RES/eval_trial_profile" \
               ${PROFILE_TASKS:+--tasks "$PROFILE_TASKS"} 2>&1 | grep -v '^    {' | tail -12;;
    decoder) timeout "$STEP_S" python3 benchmarks/gemm_decoder.py "$RES/gemm_decoder" 2>&1 | tail -12;;
    suite) timeout "$STEP_S" python3 benchmarks/suite_device.py "$RES/suite" --time-budget-s $((STEP_S - 60)) \
             ${SUITE_ONLY:+--only "$SUITE_ONLY"} 2>&1 | tail -25;;
    optimize) timeout "$STEP_S" python3 benchmarks/optimize_device.py "$RES/optimize" --time-budget-s $((STEP_S - 60)) \
                2>&1 | tail -20;;
    redteam) pols=${RT_POLICIES:-strict kernelbench}; left=$(echo $pols | wc -w); end=$((SECONDS + STEP_S))
             for p in $pols; do  # --resume goes on from res/redteam_$p, or from REDTEAM_FROM/redteam_$p
               share=$(( (end - SECONDS) / left )); left=$((left - 1))  # what is left split evenly: a policy
               # that finishes early leaves its time to the next
               rt="$RES/redteam_$p"; mkdir -p "$rt"
               [ -n "${REDTEAM_FROM:-}" ] && [ ! -e "$rt/redteam.jsonl" ] && cp -r "$REDTEAM_FROM/redteam_$p/." "$rt/"
               [ -e "$rt/redteam.jsonl.xz" ] && [ ! -e "$rt/redteam.jsonl" ] && python3 -c "import lzma, shutil, sys
with lzma.open(sys.argv[1]) as f, open(sys.argv[2], 'wb') as g: shutil.copyfileobj(f, g)" "$rt/redteam.jsonl.xz" "$rt/redteam.jsonl"
               timeout "$share" python3 -m kernelrl.cli redteam "${KB:-.kb/suite}" --device "${DEVICES:-cuda}" --policy "$p" \
                 --out "$rt" --resume --time-limit $((share - ${DRAIN_S:-120})) ${RT_ARGS:-} 2>&1 | tail -4
               [ "$rt/report.md" -nt "$rt/redteam.jsonl" ] || python3 -m kernelrl.cli redteam "${KB:-.kb/suite}" \
                 --device "${DEVICES:-cuda}" --policy "$p" --out "$rt" --report-only 2>&1 | tail -3  # stopped at its share
             done;;
    train) timeout "$STEP_S" python3 benchmarks/train_device.py "$RES/train" 2>&1 | tail -20;;
    serve) timeout "$STEP_S" python3 benchmarks/serve_spread.py "$RES/serve_spread" --repeats 5 2>&1 | tail -30;;
    scaling) corpus=""  # SCALE_CORPUS=real: the real-like corpus (seed SEED) instead of identity candidates
             if [ "${SCALE_CORPUS:-}" = real ]; then corpus=$(mktemp -d)
               python3 benchmarks/real_corpus.py "${KB:-.kb/suite}" "$corpus" --seed "${SEED:-0}"; fi
             timeout "$STEP_S" python3 benchmarks/eval_scaling.py "${KB:-.kb/suite}" "$RES/eval_scaling" --gpus 1,2 \
               --budget-s $(( (STEP_S - 120) / 2 )) ${corpus:+--corpus "$corpus"} 2>&1 | tail -10;;
    real|grpo) run="$RES/throughput_$step${LANE:+_$LANE}"; corpus=$(mktemp -d); mkdir -p "$run"; per=1; samples=lowest
               [ "$step" = grpo ] && { per=8; samples=all; }
               from="${step^^}_FROM"; from="${!from:-}"  # REAL_FROM or GRPO_FROM: an earlier slice's folder
               [ -n "$from" ] && [ ! -e "$run/results.jsonl" ] && cp "$from/results.jsonl" "$from/runs.jsonl" "$run/"
               python3 benchmarks/real_corpus.py "${KB:-.kb/suite}" "$corpus" --seed "${SEED:-0}" \
                 --per-task "$per" --every "${EVERY:-1}" && cp "$corpus/corpus.json" "$run/"
               KERNELRL_CACHE=$(mktemp -d) timeout $((STEP_S - 30)) python3 -m kernelrl.cli bench "${KB:-.kb/suite}" \
                 --candidates "$corpus" --device cuda --out "$run" --resume --time-limit $((STEP_S - ${DRAIN_S:-150})) \
                 --samples "$samples" ${CPU_LANES:+--cpu-lanes "$CPU_LANES"} ${GROUP:+--group "$GROUP"} ${BENCH_ARGS:-} \
                 $([ "${EVERY:-1}" -gt 1 ] && echo --no-time-references) \
                 $(for l in ${LEVEL:-}; do echo --level "$l"; done) 2>&1 | tail -6
               python3 benchmarks/bench_runs.py "$run" --corpus "$run/corpus.json" --out "$run/rate.md" && cat "$run/rate.md";;
    serve_grpo) corpus=$(mktemp -d)
                python3 benchmarks/real_corpus.py "${KB:-.kb/suite}" "$corpus" --per-task 8 --seed "${SEED:-0}" \
                  --every "${EVERY:-1}"
                timeout $((STEP_S - 20)) python3 benchmarks/serve_grpo.py "${KB:-.kb/suite}" "$corpus" "$RES/serve_grpo" \
                  --device cuda --time-limit $((STEP_S - ${DRAIN_S:-240})) --stop-after $((STEP_S - 60)) \
                  ${GROUP:+--group "$GROUP"} ${GROUPS_IN_FLIGHT:+--groups "$GROUPS_IN_FLIGHT"} 2>&1 | tail -8;;
    gemm) timeout "$STEP_S" python3 benchmarks/gemm_device.py --deadline $((STEP_S - 30)) --skip-smoke ${GEMM_ARGS:-} 2>&1 | tail -20
          cp "$OUT"/gemm_* "$RES"/ 2>/dev/null;;
    *) echo "unknown step $step";;
  esac
  save
done
