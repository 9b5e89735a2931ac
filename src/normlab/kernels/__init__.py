"""Kernel backends, arranged by op.

``rms_norm`` and ``layer_norm`` hold one fused op each (schemas, fake kernels, gradients, the
eager ``Function`` and the ``bind`` that registers a backend's custom ops); ``dispatch`` what
they share (the launcher contract, rows, call paths); ``registry`` what ``backend=`` names.
Each backend registers itself from its ``backend`` module: ``torch_backend`` (PyTorch's own
ops) and the ``numba`` and ``triton`` subpackages (kernels and host launchers)."""
