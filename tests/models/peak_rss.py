"""Run as a script: train each config of ``argv[1]`` (a JSON list of ``TrainConfig`` dicts) in
this process and print, one JSON line each, its peak RSS over the RSS before it (Linux: the
peak is reset through ``/proc/self/clear_refs`` before each run). tests/models/test_size.py compares
it with ``normlab.models.size.run_bytes``."""

import ctypes
import gc
import json
import sys

import torch

from normlab.lab.train.config import TrainConfig
from normlab.lab.train.data import corpus_from_bytes
from normlab.lab.train.trainer import train


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


def main() -> None:
    libc = ctypes.CDLL("libc.so.6")
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    raw = torch.randint(0, 256, (300_000,), generator=g, dtype=torch.uint8).numpy().tobytes()
    corpus = corpus_from_bytes(raw, "random bytes")
    cfgs = [TrainConfig.from_dict(d) for d in json.loads(sys.argv[1])]
    # torch's one-time allocations (kernels, thread pools) before the first baseline
    tiny = {"dim": 16, "n_heads": 2, "n_layers": 1}
    train(cfgs[0].replace(steps=1, model=tiny, batch_size=2), corpus)
    for cfg in cfgs:
        gc.collect()
        libc.malloc_trim(0)  # what earlier runs freed goes back, out of the baseline
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # VmHWM := VmRSS
        base = _status("VmRSS:")
        train(cfg, corpus)
        print(json.dumps({"peak": _status("VmHWM:") - base}), flush=True)


if __name__ == "__main__":
    main()
