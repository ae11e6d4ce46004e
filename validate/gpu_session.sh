#!/bin/sh
# One lent-GPU session, in this order, each under its own time limit (about 560 s in all):
#   1. benchmarks/cuda_context_probe.py: what the device holds beyond the allocator, per stage
#      (NVML v1/v2 used and reserved, nvidia-smi, mem_get_info), in a fresh process;
#   2. benchmarks/gpu_host_probe.py: host seconds per forward/backward module and per
#      optimizer parameter tensor of eager steps on this host;
#   3. validate.gpu_check: the 64 configurations predicted, then measured, then the quick
#      CUDA calibration.
# Each writes under $OUT as it goes; a step cut short leaves the others' files.
# Usage (the device tool's run, repository root): OUT=... sh validate/gpu_session.sh
set -u
: "${OUT:?set OUT to the folder whose files come back}"
HOST_BUDGET_S=${HOST_BUDGET_S:-120}
CHECK_BUDGET_S=${CHECK_BUDGET_S:-330}
PY=${PY:-python3}
mkdir -p "$OUT/probes"
timeout 60 "$PY" benchmarks/cuda_context_probe.py -o "$OUT/probes/cuda_context.json" >"$OUT/probes/cuda_context.log" 2>&1
echo "context probe: rc $?"
timeout $((HOST_BUDGET_S + 30)) "$PY" benchmarks/gpu_host_probe.py -o "$OUT/probes/host.jsonl" --budget-s "$HOST_BUDGET_S" \
  >"$OUT/probes/host.log" 2>&1
echo "host probe: rc $?"
"$PY" benchmarks/gpu_host_probe.py --fit "$OUT/probes/host.jsonl" >"$OUT/probes/host_fit.txt" 2>&1
PYTHONUNBUFFERED=1 timeout $((CHECK_BUDGET_S + 60)) "$PY" -m validate.gpu_check -o "$OUT/check" \
  --work-dir /tmp/gpu-work --budget-s "$CHECK_BUDGET_S"
echo "gpu_check: rc $?"
