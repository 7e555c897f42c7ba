#!/usr/bin/env bash
# One call on the GPU machine: install kernelrl there, run the GPU tests and the benchmarks a session asks for.
# Usage (on the device): bash benchmarks/device.sh STEP [STEP ...]   steps: sanity gputests eval suite optimize train
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" KERNELRL_CACHE=/tmp/kernelrl-cache
if [ -d .whl ]; then python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl && export PYTHONPATH="$PYTHONPATH:/tmp/site"; fi
for step in "$@"; do
  echo "=== $step $(date +%T)"
  case $step in
    sanity) nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv
            python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())";;
    gputests) python3 -m pytest -q -m gpu -p no:cacheprovider tests 2>&1 | tee "$OUT/gpu_tests.log" | tail -40;;
    eval) python3 benchmarks/eval_overhead.py "$OUT/eval" --device cuda 2>&1 | tail -30;;
    suite) python3 benchmarks/suite_device.py "$OUT/suite" 2>&1 | tail -40;;
    optimize) python3 benchmarks/optimize_device.py "$OUT/optimize" 2>&1 | tail -30;;
    train) python3 benchmarks/train_device.py "$OUT/train" 2>&1 | tail -30;;
    *) echo "unknown step $step";;
  esac
done
