#!/usr/bin/env bash
# The Triton kernels' GPU check in one call of <= 9 minutes (docs/benchmarks.md, "GPU session"):
# the kernel tests on the device, the launch-table sweep, peak memory, and the GB/s table
# measured with the sweep's winners.
#
#   bash benchmarks/gpu_kernels.sh [OUT]     # from the repository root; OUT default: gpu-kernels-out
#
# Liger-Kernel is optional: wheels in $WHEELS (default .wheels/, e.g. from
# `pip download liger-kernel --no-deps -d .wheels`) are installed first without dependencies;
# without them its columns read "n/a". Each stage has a time limit and a failing stage does not
# stop the next. OUT ends with two files: summary.md (versions, stage results, the tables) and
# gpu-kernels.tar.gz (every log, CSV and table, and tuning.json, the swept launch table).
set -u
OUT=${1:-${OUT:-gpu-kernels-out}}
PY=${PYTHON:-python3}
WHEELS=${WHEELS:-.wheels}
export PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
RUN="$OUT/run"
mkdir -p "$RUN"
failed=0

stage() {  # stage NAME SECONDS COMMAND...
    local name=$1 limit=$2
    shift 2
    echo "== $name (limit ${limit} s): $*"
    local t0=$SECONDS
    timeout --signal=TERM --kill-after=10 "$limit" "$@" >"$RUN/$name.log" 2>&1
    local rc=$?
    echo "$name: rc=$rc in $((SECONDS - t0)) s" | tee -a "$RUN/stages.txt"
    tail -n 3 "$RUN/$name.log" | sed 's/^/   | /'
    [ "$rc" -eq 0 ] || failed=$((failed + 1))
}

if ls "$WHEELS"/*.whl >/dev/null 2>&1; then
    "$PY" -m pip install --no-deps --no-index --quiet "$WHEELS"/*.whl >"$RUN/wheels.log" 2>&1 \
        || echo "wheels from $WHEELS did not install (see wheels.log)"
fi
{
    date -u +"date: %Y-%m-%d %H:%M UTC"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
    "$PY" - <<'PY'
import importlib.metadata as md
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
for pkg in ("triton", "liger-kernel", "quack-kernels"):
    try:
        print(pkg, md.version(pkg))
    except md.PackageNotFoundError:
        print(pkg, "not installed")
PY
} >"$RUN/device.txt" 2>&1
cat "$RUN/device.txt"

# -m "not slow": the slow test compiles for sm_90 where no GPU is; here every test compiles.
stage tests 120 "$PY" -m pytest tests/kernels/test_triton_gpu.py tests/lab/bench/test_gpu_bench.py -q -m "not slow"
stage bench 410 "$PY" benchmarks/gpu_bench.py --out "$RUN" --sweep --memory \
    --sweep-budget-s 130 --budget-s 230

{
    echo "# Triton kernels on the GPU"
    echo '```'
    cat "$RUN/device.txt" "$RUN/stages.txt"
    tail -n 2 "$RUN/tests.log"
    echo
    echo '```'
    for f in sweep.md memory.md table.md; do
        [ -f "$RUN/$f" ] && { echo; echo "## $f"; cat "$RUN/$f"; }
    done
} >"$OUT/summary.md"
tar czf "$OUT/gpu-kernels.tar.gz" -C "$OUT" run && rm -rf "$RUN"
echo "stages failed: $failed (summary.md and gpu-kernels.tar.gz in $OUT)"
exit "$failed"
