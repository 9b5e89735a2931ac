import os

import torch

# Triton picks its interpreter when a kernel is decorated, so this must precede every import of
# normlab's Triton backend: without a GPU the Triton kernels are tested on the CPU.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
