"""Kernel backends. Each ``*_ops`` module registers one backend with ``normlab.functional``."""
