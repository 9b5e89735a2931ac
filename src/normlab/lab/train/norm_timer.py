"""Wall time spent inside a model's norm modules during a forward pass.

Forward pre/post hooks on each norm module add up ``perf_counter`` intervals; they are
registered when the timer is entered and removed when it exits, so untimed steps pay nothing.
Only the forward is timed: backward hooks would wrap every norm's inputs in an extra autograd
node and change the time being measured.
"""

from __future__ import annotations

import time

from torch import nn

from normlab.modules import ANY_NORM


class NormTimer:
    """``with timer: model(x)`` then ``timer.seconds`` is the time spent in norm forwards."""

    def __init__(self, model: nn.Module):
        self.seconds = 0.0
        self._t0 = 0.0
        self._modules = self.norm_modules(model)
        self._handles = []

    @staticmethod
    def norm_modules(model: nn.Module) -> list[nn.Module]:
        if hasattr(model, "norm_modules"):
            return list(model.norm_modules())
        return [mod for mod in model.modules() if isinstance(mod, ANY_NORM)]

    def _pre(self, mod, args) -> None:
        self._t0 = time.perf_counter()

    def _post(self, mod, args, out) -> None:
        self.seconds += time.perf_counter() - self._t0

    def __enter__(self) -> NormTimer:
        # The hooks exist only while the timer is entered: a forward it does not time pays
        # nothing for them.
        self.seconds = 0.0
        for mod in self._modules:
            self._handles.append(mod.register_forward_pre_hook(self._pre))
            self._handles.append(mod.register_forward_hook(self._post))
        return self

    def __exit__(self, *exc) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()
