"""The ``"numba"`` backend: fused Numba CPU kernels.

``kernels`` (the ``@njit`` kernels) and ``bf16`` (element conversions, row views) are the device
side; ``launch`` (host launchers) and ``buffer_pool`` (recycled output buffers) the host side;
``backend`` registers the backend. Nothing is imported here: the registry imports ``backend`` on
first use, so ``import normlab`` compiles no kernel.
"""
