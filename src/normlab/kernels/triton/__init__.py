"""The ``"triton"`` backend: Triton GPU kernels (also run on the CPU by Triton's interpreter).

``kernels`` holds the ``@triton.jit`` kernels, ``launch`` the host launchers, ``interpreter``
a fix to the CPU interpreter that only ``TRITON_INTERPRET=1`` needs, and ``backend`` registers the
backend. Nothing is imported here: the registry imports ``backend`` on first use.

This package is ``normlab.kernels.triton``; its modules' ``import triton`` is an absolute import
and always finds the Triton package itself.
"""
