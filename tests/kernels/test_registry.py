"""The backend registry: names, lazy imports, what auto picks, and the routing of inputs no
kernel computes to the reference."""

import pytest
import torch

from normlab import reference
from normlab.kernels import registry


def test_every_name_is_known_with_auto_first():
    names = registry.names()
    assert names[0] == "auto" and {"reference", "torch", "numba", "triton"} <= set(names)
    assert "reference" in registry.available() and "numba" in registry.available()


def test_an_unknown_backend_is_a_clear_error():
    with pytest.raises(RuntimeError, match="backend='nope' is not available"):
        registry.get("nope")


def test_auto_picks_the_kernels_on_cpu_and_the_reference_where_none_is_preferred():
    assert registry.auto(torch.device("cpu")).name == "numba"
    assert registry.auto(torch.device("meta")).name == "reference"


def test_register_makes_a_backend_selectable_and_resets_auto():
    calls = []

    def rms(x, weight, eps, **kw):
        calls.append("rms")
        return x

    fake = registry.Backend("fake-test", rms, lambda *a, **k: a[0], lambda d: True)
    try:
        registry.register(fake)
        assert registry.get("fake-test") is fake and "fake-test" in registry.names()
        assert registry._AUTO == {}  # the next "auto" lookup is made afresh
    finally:
        registry._REGISTRY.pop("fake-test", None)
        registry.KNOWN.pop("fake-test", None)


def test_kernel_backends_route_float64_and_naive_half_to_the_reference():
    seen = []

    def kernel_rms(x, weight, eps, **kw):
        seen.append(x.dtype)
        return torch.zeros_like(x)

    def kernel_ln(x, weight, bias, eps, **kw):
        seen.append(x.dtype)
        return torch.zeros_like(x)

    be = registry.kernel_backend("k", kernel_rms, kernel_ln, lambda d: True)
    kw = dict(residual=None, offset=0.0, eps_inside=True)
    x64 = torch.randn(3, 8, dtype=torch.float64)
    w64 = torch.ones(8, dtype=torch.float64)
    want = reference.rms_norm(x64, w64, 1e-6, casting="llama")
    assert torch.equal(be.rms_norm(x64, w64, 1e-6, casting="llama", **kw), want)
    xh = torch.randn(3, 8, dtype=torch.bfloat16)
    wh = torch.ones(8, dtype=torch.bfloat16)
    naive = be.rms_norm(xh, wh, 1e-6, casting="none", **kw)
    assert torch.equal(naive, reference.rms_norm(xh, wh, 1e-6, casting="none"))
    assert not seen  # neither reached the kernel
    assert torch.equal(be.rms_norm(xh, wh, 1e-6, casting="llama", **kw), torch.zeros_like(xh))
    assert torch.equal(be.layer_norm(xh, wh, None, 1e-5, residual=None), torch.zeros_like(xh))
    assert seen == [torch.bfloat16, torch.bfloat16]
    want_ln = reference.layer_norm(x64, w64, None, 1e-5)
    assert torch.equal(be.layer_norm(x64, w64, None, 1e-5, residual=None), want_ln)
