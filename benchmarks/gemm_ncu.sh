#!/usr/bin/env bash
# Nsight Compute over GEMM kernels on the H200, one shape per line of a plan file: "MxNxK kernel [kernel ...]"
# (kernel names as benchmarks/gemm_profile.py takes them). Clocks are left alone (METHOD.md); every launch of
# every kernel the program runs is profiled (the fp64 reference and the input generators too), one report
# file per shape line in the output folder. NCU_METRICS (comma-separated metric names) adds metrics to the
# sections; NCU_KERNEL (a regular expression) profiles only the kernels whose names match.
#   bash benchmarks/gemm_ncu.sh PLAN OUTDIR [ncu section ...]
set -uo pipefail
plan=$1; out=$2; shift 2
sections=("$@")
[ ${#sections[@]} -eq 0 ] && sections=(SpeedOfLight MemoryWorkloadAnalysis WarpStateStats LaunchStats Occupancy
                                       SchedulerStats)
args=(--clock-control none --cache-control all)
for s in "${sections[@]}"; do args+=(--section "$s"); done
[ -n "${NCU_METRICS:-}" ] && args+=(--metrics "$NCU_METRICS")
[ -n "${NCU_KERNEL:-}" ] && args+=(--kernel-name "regex:$NCU_KERNEL")
mkdir -p "$out"
grep -v '^\s*\(#\|$\)' "$plan" | while read -r shape kernels; do
  echo "=== $shape: $kernels"
  # shellcheck disable=SC2086
  timeout 240 ncu "${args[@]}" python3 benchmarks/gemm_profile.py --shape "$shape" --kernels $kernels --launches 1 \
    > "$out/ncu_$shape.txt" 2>&1
  echo "exit $?"
  grep -E '^\s+(void |[a-z_]+[<(])|Duration|DRAM Throughput|Cluster Size|Registers Per|Dynamic Shared' \
    "$out/ncu_$shape.txt" | head -80
done
