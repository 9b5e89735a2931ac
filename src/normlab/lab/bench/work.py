"""The work of the articles' LayerNorm and RMSNorm, counted from their code, not measured: the
forward is traced (``make_fx``) and its ops are read off the graph.

- a **pass** is a reduction over a row of ``d`` (a mean, a sum, a variance): each reads the row;
- **operations per element** add up the elementwise ops whose output is a whole row, and a
  reduction's ops per element it reads (a sum or mean: 1 add; a variance: subtract the mean,
  square, add).

The count is exact for the code it traces, so it decides the articles' statement about work
("LayerNorm needs two passes and about 4d more operations per token") without a timing; what that
work costs in time is ``ratio``'s finding, per implementation.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# ops a reduction does per element it reads
REDUCTIONS = {"mean": 1, "sum": 1, "var": 3}


@dataclass(frozen=True)
class Work:
    passes: int  # reductions over the row
    per_element: int  # operations per element of the row
    ops: tuple[str, ...]  # what was counted, in graph order


def count(op: str, d: int = 64) -> Work:
    """The articles' ``op`` (``"rms_norm"`` or ``"layer_norm"``, every step in the input dtype:
    ``normlab.lab.numerics.naive``) traced on rows of ``d``."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from normlab.lab.numerics.measuring import NAIVE

    if op not in NAIVE:
        raise ValueError(f"op must be one of {tuple(NAIVE)}, got {op!r}")
    rows = 3  # ≠ d, so a row-shaped output cannot be mistaken for another shape
    x, w, b = torch.randn(rows, d), torch.ones(d), torch.zeros(d)
    fn = NAIVE[op]
    graph = make_fx(lambda x, w, b: fn(x, w, b if op == "layer_norm" else None, 1e-5))(x, w, b)
    passes = per_element = 0
    ops = []
    for node in graph.graph.nodes:
        if node.op != "call_function":
            continue
        name = node.target._opname  # e.g. "mean", "var", "sub"
        shape = tuple(node.meta["val"].shape)
        reads_row = any(
            tuple(getattr(a, "meta", {}).get("val", torch.empty(0)).shape) == (rows, d)
            for a in node.args
        )
        reduction = name in REDUCTIONS and reads_row and shape[-1:] in ((1,), ())
        if reduction or shape == (rows, d):  # a reduction of a row, or a row-shaped output
            passes += reduction
            per_element += REDUCTIONS[name] if reduction else 1
            ops.append(name)
    return Work(passes, per_element, tuple(ops))
