"""docs/dropin.md's tables hold: the defaults it lists are the signatures' defaults, and every
"same numbers" row gives torch.nn's numbers in every float dtype."""

import ast
import inspect
import re
from pathlib import Path

import pytest
import torch
from kernel_checks import assert_grad_close

import normlab
from normlab import reference as R
from normlab.testing import assert_kernel_close

DOC = (Path(__file__).resolve().parents[1] / "docs" / "dropin.md").read_text()
FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
N = 64
TORCH_TWIN = {
    "RMSNorm": torch.nn.RMSNorm,
    "LayerNorm": torch.nn.LayerNorm,
    "BatchNorm": torch.nn.BatchNorm1d,
}


def table(heading: str) -> list[list[str]]:
    """The body rows of the first table under ``## heading``, as lists of cell texts."""
    section = DOC.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = [ln for ln in section.splitlines() if ln.startswith("|")][2:]
    return [[c.strip() for c in ln.strip("|").split("|")] for ln in rows]


def code(cell: str) -> list[str]:
    return re.findall(r"`([^`]*)`", cell)


DEFAULT_ROWS = [r for r in table("Where a default differs") if "means" not in r[1]]
SAME_ROWS = table("Which arguments give `torch.nn`'s numbers")


def test_the_tables_were_found():
    assert len(DEFAULT_ROWS) >= 4 and len(SAME_ROWS) >= 4


@pytest.mark.parametrize("row", DEFAULT_ROWS, ids=lambda r: f"{r[0]}:{r[1]}")
def test_listed_defaults_are_the_signatures(row):
    name = code(row[0])[0]
    ours = inspect.signature(getattr(normlab, name)).parameters
    theirs = inspect.signature(TORCH_TWIN[name]).parameters
    args = code(row[1])
    ours_vals = [ast.literal_eval(v) for v in code(row[2])]
    theirs_vals = [ast.literal_eval(v) for v in code(row[3])]
    for arg, o, t in zip(args, ours_vals, theirs_vals, strict=True):
        assert ours[arg].default == o, f"normlab.{name}({arg}=...)"
        if arg in theirs:
            assert theirs[arg].default == t, f"torch.nn twin of {name}({arg}=...)"
        else:  # torch has one cast order: the "same numbers" table shows it is this one
            assert arg == "casting" and any(f'casting="{t}"' in r[1] for r in SAME_ROWS)


def test_eps_none_is_the_compute_dtypes_machine_epsilon():
    f32, f64 = torch.finfo(torch.float32).eps, torch.finfo(torch.float64).eps
    want = {torch.float32: f32, torch.float64: f64, torch.bfloat16: f32, torch.float16: f32}
    assert {d: R.default_eps(d) for d in FLOATS} == want


def _build(src: str):
    return eval(src, {"torch": torch, "normlab": normlab, "N": N})


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("row", SAME_ROWS, ids=lambda r: code(r[1])[0])
def test_same_numbers_row_matches_torch(row, dtype):
    (theirs_src,), (ours_src,) = code(row[0]), code(row[1])
    theirs = _build(theirs_src).to(dtype)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in theirs.parameters():
            p.copy_(1 + 0.2 * torch.randn(p.shape, generator=g))
    ours = _build(ours_src).to(dtype)
    ours.load_state_dict(theirs.state_dict())
    truth_m = _build(theirs_src).double()
    truth_m.load_state_dict(theirs.state_dict())
    base = torch.randn(8, 16, N, generator=g)
    dy = torch.randn(base.shape, generator=g).to(dtype)
    for scale, shift in [(1e-3, 0.0), (3.0, 1.0)]:  # RMS 1e-3: where eps decides
        x = (base * scale + shift).to(dtype)
        outs = []
        for m, dt in [(ours, dtype), (theirs, dtype), (truth_m, torch.float64)]:
            leaf = x.to(dt).requires_grad_()
            y = m(leaf)
            outs.append((y.detach(), torch.autograd.grad(y, leaf, dy.to(dt))[0]))
        (y, dx), (y_t, dx_t), (y64, dx64) = outs
        name = f"{ours_src} at scale {scale}"
        assert_kernel_close(y, y_t, y64, name)
        assert_grad_close(dx * scale, dx_t * scale, dx64 * scale, f"{name}: dx")
