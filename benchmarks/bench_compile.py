"""First-call cost of the Numba kernels: cold (empty Numba cache) and warm, in fresh processes.

    python benchmarks/bench_compile.py [--dtypes float32 bfloat16]

Each measurement is a new Python process that imports normlab and runs RMSNorm and LayerNorm
forward+backward once on a small tensor (one-thread path) and once on a large one (two
threads); the cold run uses an empty temporary ``NUMBA_CACHE_DIR``, the warm run the cache the
cold run filled. Reported: wall seconds and CPU seconds of the whole process, import included.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

_CHILD = """
import json, sys, time
t0, c0 = time.perf_counter(), time.process_time()
import torch, normlab
t_import = time.perf_counter() - t0
dtype = getattr(torch, sys.argv[1])
for m, n in ((8, 64), (1024, 1024)):
    x = torch.randn(m, n, dtype=dtype, requires_grad=True)
    w = torch.ones(n, dtype=dtype, requires_grad=True)
    b = torch.zeros(n, dtype=dtype, requires_grad=True)
    normlab.rms_norm(x, w).sum().backward()
    normlab.layer_norm(x, w, b).sum().backward()
print(json.dumps({"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0,
                  "import_s": t_import}))
"""


def measure(dtype: str, cache_dir: str) -> dict:
    env = {**os.environ, "NUMBA_CACHE_DIR": cache_dir}
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, dtype], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    args = p.parse_args()
    print("| dtype | cache | wall s | CPU s | of which import s |")
    print("|---|---|---|---|---|")
    for dtype in args.dtypes:
        with tempfile.TemporaryDirectory() as cache:
            for state in ("cold", "warm"):
                r = measure(dtype, cache)
                print(f"| {dtype} | {state} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | "
                      f"{r['import_s']:.1f} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
