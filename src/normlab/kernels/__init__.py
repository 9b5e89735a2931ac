"""Kernel backends: ``torch_ops``, the ``numba`` and ``triton`` subpackages (each registers one
backend with :mod:`normlab.kernels.registry` from its ``ops`` module), and ``ops``, the
``torch.library`` registration they share."""
