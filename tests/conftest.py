import os

import pytest
import torch

# Triton picks its interpreter when a kernel is decorated, so this must precede every import of
# normlab's Triton backend: without a GPU the Triton kernels are tested on the CPU.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(scope="module")
def one_thread():
    """torch on one intra-op thread for a module of tiny-tensor tests."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
