"""The engine of ``normlab numerics``: how accurate is each norm implementation in
FP16/BF16/FP32? :class:`NumericsOptions` in, :func:`run_numerics` runs the sweep and writes the
report, a :class:`NumericsResult` out.

Every implementation is run on the same inputs and compared against a float64 truth
(``normlab.reference`` evaluated in float64 on the *rounded* low-precision input, so input
rounding is not counted as an error):

- ``naive``: the same-dtype code the articles show (RMSNorm: the reference with
  ``casting="none"``; LayerNorm: ``x.mean``/``x.var``/``(x - mean)/sqrt(var + eps)`` in
  ``x.dtype``);
- ``reference/<casting>``: normlab's FP32-statistics reference;
- every other available normlab backend (``numba``, ``triton``), for each cast order;
- ``torch``: PyTorch's own ``F.rms_norm``/``F.layer_norm``.

Forward output, ``dx`` and ``dweight`` are measured (definitions in
:func:`normlab.lab.numerics.metrics.error_metrics`). The grid varies one axis at a time around a
base point, plus the full scale x dtype grid.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch
from torch import Tensor

from normlab.kernels import registry
from normlab.lab.kit.errors import UsageError
from normlab.lab.kit.io import out_dir
from normlab.lab.kit.limits import check_rows
from normlab.lab.kit.reading import checked, positive_int
from normlab.lab.kit.threads import using_threads
from normlab.lab.numerics.measuring import Inputs
from normlab.lab.numerics.metrics import error_metrics
from normlab.lab.numerics.naive import forward, naive_layer_norm, naive_rms_norm, truth_of

SHAPES = ("ordinary", "outlier", "constant", "near_zero")
OUTLIER_RATIO = 1e3  # the outlier is this many times larger than the rest of its row
NEAR_ZERO = 1e-4  # near-zero rows peak at this fraction of the nominal input scale


@dataclass(frozen=True)
class Grid:
    """The sweep. ``scale`` is the largest ``|x|`` of each row (so 6e4 still fits in FP16)."""

    dtypes: tuple[str, ...] = ("float16", "bfloat16", "float32")
    scales: tuple[float, ...] = (1e-4, 1e-3, 1e-2, 0.1, 1.0, 10.0, 100.0,
                                 200.0, 300.0, 1e3, 3e3, 1e4, 3e4, 6e4)  # fmt: skip
    hiddens: tuple[int, ...] = (64, 256, 1024, 4096, 16384)
    shapes: tuple[str, ...] = SHAPES
    shape_scales: tuple[float, ...] = (1.0, 1e3)
    epss: tuple[float, ...] = (1e-12, 1e-10, 1e-8, 1e-6, 1e-5, 1e-4, 1e-3)
    eps_shapes: tuple[str, ...] = ("ordinary", "near_zero")
    base_scale: float = 1.0
    base_hidden: int = 1024
    base_eps: float = 1e-6
    rows: int = 64
    # cast orders run on the kernel backends; "none" is measured, never guaranteed
    kernel_castings: tuple[str, ...] = ("llama", "gemma", "none")


# Small enough for the tests, and still crossing FP16's overflow of x^2 (|x| > 256) and the eps
# range where near-zero rows blow up.
REDUCED = Grid(
    scales=(1e-4, 1.0, 1e3, 6e4),
    hiddens=(64, 512),
    shape_scales=(1e3,),
    epss=(1e-12, 1e-3),
    eps_shapes=("near_zero",),
    base_hidden=256,
    rows=8,
    kernel_castings=("llama", "gemma"),
)


@dataclass(frozen=True)
class Case:
    """One input configuration; ``axes`` names the sweeps it belongs to."""

    dtype: str
    scale: float
    hidden: int
    shape: str
    eps: float
    rows: int
    axes: tuple[str, ...] = ()

    @property
    def key(self) -> tuple:
        return (self.dtype, self.scale, self.hidden, self.shape, self.eps, self.rows)


def build_cases(grid: Grid) -> list[Case]:
    """One axis at a time around the base point, plus scale x dtype; duplicates merged."""
    g = grid
    raw: list[tuple[str, dict]] = []
    for dt in g.dtypes:
        raw += [("scale", dict(dtype=dt, scale=s)) for s in g.scales]
        raw += [("hidden", dict(dtype=dt, hidden=n)) for n in g.hiddens]
        raw += [
            ("shape", dict(dtype=dt, shape=sh, scale=s)) for sh in g.shapes for s in g.shape_scales
        ]
        raw += [("eps", dict(dtype=dt, shape=sh, eps=e)) for sh in g.eps_shapes for e in g.epss]
    base = Case("", g.base_scale, g.base_hidden, "ordinary", g.base_eps, g.rows)
    cases: dict[tuple, Case] = {}
    for axis, kw in raw:
        c = replace(base, **kw)
        c = cases.setdefault(c.key, c)
        if axis not in c.axes:
            cases[c.key] = replace(c, axes=(*c.axes, axis))
    return list(cases.values())


def make_inputs(case: Case, device: str = "cpu") -> Inputs:
    """``(x, weight, bias, dy)`` in ``case.dtype``; deterministic per case."""
    gen = torch.Generator().manual_seed(zlib.crc32(repr(case.key).encode()))
    r, n = case.rows, case.hidden
    z = torch.randn(r, n, generator=gen, dtype=torch.float64)
    peak = z.abs().amax(-1, keepdim=True)
    if case.shape == "ordinary":
        x = z / peak
    elif case.shape == "outlier":
        x = z / peak / OUTLIER_RATIO
        col = torch.randint(0, n, (r,), generator=gen)
        x[torch.arange(r), col] = torch.where(z[:, 0] >= 0, 1.0, -1.0).double()
    elif case.shape == "constant":
        x = torch.where(z[:, :1] >= 0, 1.0, -1.0).double().expand(r, n).clone()
    elif case.shape == "near_zero":
        x = NEAR_ZERO * z / peak
    else:
        raise ValueError(f"shape must be one of {SHAPES}, got {case.shape!r}")
    dt = getattr(torch, case.dtype)
    w = 1.0 + 0.1 * torch.randn(n, generator=gen, dtype=torch.float64)
    b = 0.1 * torch.randn(n, generator=gen, dtype=torch.float64)
    dy = torch.randn(r, n, generator=gen, dtype=torch.float64)
    return tuple(t.to(device=device, dtype=dt) for t in (x * case.scale, w, b, dy))


# --------------------------------------------------------------------------------------------
# implementations


@dataclass(frozen=True)
class Impl:
    op: str  # "rms_norm" | "layer_norm"
    name: str  # label in the tables: "naive", "reference/llama", "numba/gemma", "torch", ...
    backend: str  # normlab backend name, or "naive"
    casting: str  # RMSNorm cast order; "" for LayerNorm
    fn: Callable[[Tensor, Tensor, Tensor, float], Tensor] = field(compare=False, repr=False)


def usable_backends(device: str = "cpu") -> tuple[list[str], dict[str, str]]:
    """normlab backends usable on ``device`` (triton on CPU only under TRITON_INTERPRET=1),
    and why each other one is skipped."""
    from normlab import functional

    ok, skipped = [], {}
    for name in registry.names()[1:]:
        try:
            be = functional.get_backend(name)
        except RuntimeError as e:
            skipped[name] = str(e)
            continue
        if be.supports(torch.device(device)):
            ok.append(name)
        else:
            skipped[name] = f"does not run on {device} here (TRITON_INTERPRET=1 runs it on CPU)"
    return ok, skipped


def build_impls(backends: list[str], kernel_castings: tuple[str, ...]) -> list[Impl]:
    from normlab import functional as F

    def rms(be: str, c: str) -> Callable:
        return lambda x, w, b, eps: F.rms_norm(x, w, eps, casting=c, backend=be)

    def ln(be: str) -> Callable:
        return lambda x, w, b, eps: F.layer_norm(x, w, b, eps, backend=be)

    impls = [
        Impl("rms_norm", "naive", "naive", "none", naive_rms_norm),
        Impl("layer_norm", "naive", "naive", "", naive_layer_norm),
    ]
    for be in backends:
        if be == "torch":  # F.rms_norm has one cast order, gemma's
            impls.append(Impl("rms_norm", "torch", be, "gemma", rms(be, "gemma")))
        else:
            # reference/none *is* the naive RMSNorm; kernels' "none" is measured, not guaranteed
            castings = ("llama", "gemma") if be == "reference" else kernel_castings
            impls += [Impl("rms_norm", f"{be}/{c}", be, c, rms(be, c)) for c in castings]
        impls.append(Impl("layer_norm", be, be, "", ln(be)))
    return impls


# --------------------------------------------------------------------------------------------
# measurement


def measure(impl: Impl, case: Case, inputs, truth: dict[str, Tensor]) -> dict:
    """One record: the case, the implementation and its metrics (or the error it raised)."""
    rec = {
        **asdict(case),
        "op": impl.op,
        "impl": impl.name,
        "backend": impl.backend,
        "casting": impl.casting,
        "error": None,
        "grad_error": None,
    }
    x, w, b, dy = inputs
    try:
        y, params = forward(impl.fn, impl.op, x, w, b, case.eps)
    except Exception as e:  # a backend that rejects a dtype is a result, not a crash
        rec["error"] = f"{type(e).__name__}: {e}"
        return rec
    rec["y"] = error_metrics(y, truth["y"])
    try:
        dx, dw = torch.autograd.grad(y, params, dy)
    except Exception as e:
        rec["grad_error"] = f"{type(e).__name__}: {e}"
        return rec
    rec["dx"] = error_metrics(dx, truth["dx"])
    rec["dw"] = error_metrics(dw, truth["dw"])
    return rec


@dataclass
class NumericsResult:
    records: list[dict]
    backends: list[str]  # normlab backends that ran
    skipped: dict[str, str]  # backend -> why it did not run
    grid: dict
    device: str
    seconds: float
    findings: list[str] = field(default_factory=list)  # the sentences (numerics.json's key)
    files: dict[str, str] = field(default_factory=dict)
    # the articles' statements decided (``findings.decide_all``): one dict per finding
    verdicts: list[dict] = field(default_factory=list)


def sweep(
    grid: Grid, *, device: str = "cpu", backends: Sequence[str] | None = None, quiet: bool = False
) -> NumericsResult:
    """Run every implementation on every case of ``grid``; no files written."""
    from tqdm.auto import tqdm

    avail, skipped = usable_backends(device)
    if backends is not None:
        if unknown := sorted(set(backends) - set(avail) - set(skipped)):
            raise UsageError(f"backends: unknown {unknown}; known {avail + sorted(skipped)}")
        skipped.update({b: "not selected" for b in avail if b not in backends})
        avail = [b for b in avail if b in backends]
    impls = build_impls(avail, grid.kernel_castings)
    cases = build_cases(grid)
    t0 = time.perf_counter()
    records = []
    # Thousands of small ops: with intra-op threads each one pays a thread barrier, which on a
    # busy machine costs far more than the op itself.
    with using_threads(1):
        for case in tqdm(cases, desc="numerics", unit="case", disable=quiet, leave=False):
            inputs = make_inputs(case, device)
            for op in ("rms_norm", "layer_norm"):
                truth = truth_of(op, *inputs, case.eps)
                records += [measure(i, case, inputs, truth) for i in impls if i.op == op]
    return NumericsResult(records, avail, skipped, asdict(grid), device, time.perf_counter() - t0)


@dataclass(frozen=True)
class NumericsOptions:
    """What ``normlab numerics`` runs: the grid (:data:`REDUCED` when ``reduced``, else the
    full :class:`Grid`; ``rows`` overrides its rows per case), where, on
    which backends (``None``: every usable one) and where the files go."""

    out: str | Path = "./normlab-out/numerics"
    reduced: bool = False
    rows: int | None = None
    device: str = "cpu"
    backends: tuple[str, ...] | None = None
    quiet: bool = False  # no progress bar
    seeds: int | None = None  # input draws per finding; None: SEEDS (3 when reduced); 0: none
    seed_block: int = 0  # the findings' draws: SEED_STRIDE · seed_block + i

    def resolved_grid(self) -> Grid:
        grid = REDUCED if self.reduced else Grid()
        if self.rows is None:
            return grid
        rows = checked("rows", positive_int, self.rows)
        check_rows(rows, max(grid.hiddens + (grid.base_hidden,)))
        return replace(grid, rows=rows)


def run_numerics(options: NumericsOptions) -> NumericsResult:
    """Sweep, then write ``numerics.{json,md,html}`` and a ``numerics-<plot>.png`` per plot the
    page shows under ``options.out`` (created first, so a bad directory fails before the
    sweep); returns the result (``result.files`` maps each format and plot to its path, for the
    study report to link)."""
    from normlab.lab.kit.io import write_file, write_json, write_page
    from normlab.lab.numerics import report
    from normlab.lab.numerics.findings import SEEDS, decide_all
    from normlab.lab.numerics.sentences import sentences

    grid = options.resolved_grid()
    out = out_dir(options.out)
    result = sweep(grid, device=options.device, backends=options.backends, quiet=options.quiet)
    result.findings = sentences(result)
    seeds = options.seeds if options.seeds is not None else 3 if options.reduced else SEEDS
    if seeds < 0 or options.seed_block < 0:
        raise UsageError(
            f"seeds, seed block: expected ints >= 0, got {seeds}, {options.seed_block}"
        )
    if seeds:
        progress = not options.quiet
        result.verdicts = decide_all(seeds, progress=progress, seed_block=options.seed_block)
    paths = {"json": out / "numerics.json"}
    write_json(paths["json"], asdict(result), indent=1)
    pngs = report.plots(result)
    paths["md"], paths["html"] = write_page(
        report.document(result, pngs), out / "numerics", toc_after=report.toc_after(result)
    )
    for name, png in pngs.items():
        paths[name] = out / f"numerics-{name}.png"
        write_file(paths[name], png)
    if result.verdicts:  # the findings alone, for the coverage table and the docs
        paths["findings"] = out / "numerics-findings.json"
        write_json(paths["findings"], result.verdicts, indent=1)
    result.files = {k: str(p) for k, p in paths.items()}
    return result


def summary(result: NumericsResult, *, table: bool = True) -> str:
    """What ``normlab numerics`` prints: the terminal table and the findings (unless ``table`` is
    false), then one line of cases, backends, time and files."""
    from normlab.lab.kit.render import text_table
    from normlab.lab.numerics.report import SUMMARY_HEADER, summary_rows

    lines = []
    if table:
        lines += [text_table(SUMMARY_HEADER, summary_rows(result)), "\nWhat this shows:"]
        lines += [f"- {f}" for f in result.findings]
        if result.verdicts:
            lines.append("\nThe articles' statements, decided:")
            lines += [f"- {v['name']}: {v['verdict']}" for v in result.verdicts]
    n = len({(r["dtype"], r["scale"], r["hidden"], r["shape"], r["eps"]) for r in result.records})
    lines.append(
        f"{n} cases, backends {', '.join(result.backends)}, {result.seconds:.0f} s -> "
        f"{result.files['md']}, {result.files['html']}, {result.files['json']}"
    )
    return "\n".join(lines)
