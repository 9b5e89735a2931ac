#!/usr/bin/env bash
# The lab's first run on a GPU (docs/gpu.md): the Triton kernel tests, the smoke study on CUDA in
# bf16, and `normlab study --preset gpu`, each under a time limit, <= 9 minutes in all; then the
# step times the plan's GPU calibration table (normlab.lab.study.run.plan.GPU_CALIBRATION) needs.
#
#   bash benchmarks/gpu_lab.sh [OUT]      # from the repository root; OUT default: gpu-lab-out
#
# A stage that fails or runs out of time is reported and the next one still runs; the exit
# status is the number of stages that failed. Everything goes to OUT (logs, the studies' reports).
set -u
OUT=${1:-${OUT:-gpu-lab-out}}
PY=${PYTHON:-python}
export PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH}
mkdir -p "$OUT"
failed=0

stage() {  # stage NAME SECONDS COMMAND...
    local name=$1 limit=$2
    shift 2
    echo "== $name (limit ${limit} s): $*"
    local t0=$SECONDS
    timeout --signal=TERM --kill-after=15 "$limit" "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    echo "   rc=$rc in $((SECONDS - t0)) s; last lines of $OUT/$name.log:"
    tail -n 5 "$OUT/$name.log" | sed 's/^/   | /'
    [ "$rc" -eq 0 ] || failed=$((failed + 1))
}

"$PY" - <<'PY' | tee "$OUT/device.txt"
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
for i in range(torch.cuda.device_count()):
    print(i, torch.cuda.get_device_name(i))
PY

stage triton-tests 75 "$PY" -m pytest tests/kernels/test_triton_gpu.py -q -x
stage smoke-cuda-bf16 75 "$PY" -m normlab study --preset smoke --device cuda --precision bf16 \
    --out "$OUT/smoke-cuda-bf16" --quiet
"$PY" -m normlab study --preset gpu --list >"$OUT/gpu-plan.txt" 2>&1
stage gpu-preset 390 "$PY" -m normlab study --preset gpu --out "$OUT/gpu"

# What the calibration table needs: per arm, the measured median step time and the run's wall
# time beside the plan's estimate (fill GPU_CALIBRATION from these; docs/gpu.md).
"$PY" - "$OUT" <<'PY' | tee "$OUT/calibration.txt"
import json, sys, pathlib
from normlab.lab.study.run.plan import GPU_CALIBRATION, REFERENCE_GPU, gpu_seconds
from normlab.lab.train.trainer import TrainConfig
out = pathlib.Path(sys.argv[1])
for study in ("smoke-cuda-bf16", "gpu"):
    path = out / study / "results.jsonl"
    if not path.exists():
        print(f"{study}: no results")
        continue
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        res, s = rec["result"], rec["result"]["summary"]
        cfg = TrainConfig.from_dict(res["config"])
        est = gpu_seconds(cfg, GPU_CALIBRATION[REFERENCE_GPU])
        print(f"{study} {rec['name']}#{rec['seed_index']} {s.get('device')} {s.get('precision')} "
              f"steps {s['steps_done']} step_ms {s['step_ms']} wall_s {s['wall_s']:.1f} "
              f"estimated_s {est:.1f}")
PY
echo "stages failed: $failed (logs and reports in $OUT)"
exit "$failed"
