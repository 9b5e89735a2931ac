"""The engine of ``normlab bench``: kernel bandwidth against ``Tensor.copy_``, torch eager and
``torch.compile``; :class:`BenchOptions` in, :func:`run_bench` times and writes the files.
``time_ms`` is the timer the scripts in ``benchmarks/`` share.

For each op x dtype x shape x mode (forward, forward+backward) it times normlab's kernel backend
(``numba`` on the CPU, ``triton`` on CUDA), torch eager and (optionally) ``torch.compile`` of the
eager code, and reports GB/s, the ``copy_`` GB/s of the same run, the percentage of the
bandwidth limit and the speed-up over eager and compile. Results go to ``DIR/bench_<device>.md``
(the table), ``.csv``, ``.json`` and ``.png`` (a bar chart).

Bandwidth limit: a norm must at least read its inputs and write its outputs once, so its floor
time is ``tensors * bytes / copy_bandwidth`` with ``tensors`` = 2 for a forward (x, y), 4 for the
fused residual add (x, r, y, h), 5 for forward+backward (x, y; x, dy, dx) and 8 for fused
forward+backward (x, r, y, h; h, dy, dh, dx). Weight-sized tensors are ignored.
"""

from __future__ import annotations

import csv
import io
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch

from normlab.lab.kit import doc as d
from normlab.lab.kit.errors import UsageError
from normlab.lab.kit.io import out_dir, write_file, write_json
from normlab.lab.kit.limits import check_rows
from normlab.lab.kit.reading import checked, positive_int, printable
from normlab.lab.kit.threads import set_threads
from normlab.lab.train.device import check_device

SHAPES = ((8192, 4096), (32768, 1024), (4096, 8192), (1024, 64), (1024, 256))
QUICK_SHAPES = ((8192, 4096), (1024, 64), (1024, 256))
OPS = ("rms_norm", "layer_norm", "fused_add_rms_norm")
DTYPES = ("float32", "bfloat16")
TENSORS = {("fwd", False): 2, ("fwd", True): 4, ("fwd+bwd", False): 5, ("fwd+bwd", True): 8}


@dataclass
class Result:
    """One benchmark line (times in ms, bandwidths in GB/s)."""

    op: str
    dtype: str
    shape: str
    mode: str
    backend: str
    ms: float
    gbps: float
    copy_gbps: float
    pct_of_limit: float
    eager_ms: float
    x_eager: float
    compile_ms: float | None
    x_compile: float | None


def time_ms(
    fns: dict[str, Callable[[], object]], repeat: int, device: str = "cpu"
) -> dict[str, float]:
    """Best wall time in ms of each of ``fns`` over ``repeat`` rounds (4x as many when a round
    is shorter than 20 ms); a round runs one batch of calls (>= ~3 ms) of every function in turn,
    synced on ``device``.

    Interleaved so that drift of a shared machine's load hits all contenders alike, and the
    minimum, not the median: other processes only ever add time, and the fastest batch is the
    best estimate of what the code costs on a quiet machine.
    """
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    number, round_s = {}, 0.0
    for name, fn in fns.items():
        seconds_per_call(fn, 1, sync)  # warm up
        once = seconds_per_call(fn, 1, sync)
        number[name] = max(1, min(2000, int(3e-3 / max(once, 1e-7))))
        round_s += number[name] * once
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(repeat if round_s > 20e-3 else 4 * repeat):
        for name, fn in fns.items():
            best[name] = min(best[name], seconds_per_call(fn, number[name], sync))
    return {name: 1e3 * t for name, t in best.items()}


def seconds_per_call(
    fn: Callable[[], object], number: int, sync: Callable[[], None] = lambda: None
) -> float:
    """Wall seconds per call of ``fn`` over ``number`` calls in a row, synced at the end."""
    t0 = time.perf_counter()
    for _ in range(number):
        fn()
    sync()
    return (time.perf_counter() - t0) / number


def norm_call(op: str, n: int, backend: str | None) -> Callable:
    """``(x, w, b, r) -> op`` on rows of ``n`` with normlab (``backend``) or torch's own ops
    (``None``)."""
    import torch.nn.functional as F

    import normlab

    if backend is None:
        if op == "rms_norm":
            return lambda x, w, b, r: F.rms_norm(x, (n,), w, 1e-6)
        if op == "layer_norm":
            return lambda x, w, b, r: F.layer_norm(x, (n,), w, b, 1e-5)
        return lambda x, w, b, r: ((h := x + r), F.rms_norm(h, (n,), w, 1e-6))
    if op == "rms_norm":
        return lambda x, w, b, r: normlab.rms_norm(x, w, 1e-6, casting="gemma", backend=backend)
    if op == "layer_norm":
        return lambda x, w, b, r: normlab.layer_norm(x, w, b, 1e-5, backend=backend)
    return lambda x, w, b, r: normlab.rms_norm(
        x, w, 1e-6, residual=r, casting="gemma", backend=backend
    )


def _runner(fn, mode: str, x, w, b, r):
    """A no-argument callable doing one forward (no grad) or one forward+backward."""
    if mode == "fwd":
        return torch.no_grad()(lambda: fn(x, w, b, r))
    leaves = [t.detach().requires_grad_(True) for t in (x, w, b, r)]
    grads = [torch.randn_like(o) for o in _outputs(fn, leaves)]
    return lambda: torch.autograd.grad(_outputs(fn, leaves), leaves, grads, allow_unused=True)


def _outputs(fn, args) -> tuple:
    """``fn(*args)`` as a tuple (the fused ops return two tensors, the others one)."""
    out = fn(*args)
    return out if isinstance(out, tuple) else (out,)


def _time_case(op: str, mode: str, tensors, backend: str, repeat: int, compile: bool) -> Result:
    """One :class:`Result`: ``op`` in ``mode`` on ``tensors`` (x, w, b, r), normlab's
    ``backend`` against ``copy_``, torch eager and (``compile``) ``torch.compile``."""
    x, w, b, r = tensors
    m, n = x.shape
    dst = torch.empty_like(x)
    fns = {
        "copy": lambda: dst.copy_(x),
        "ours": _runner(norm_call(op, n, backend), mode, x, w, b, r),
        "eager": _runner(norm_call(op, n, None), mode, x, w, b, r),
    }
    if compile:
        torch._dynamo.reset()
        fn = torch.compile(norm_call(op, n, None), dynamic=False)
        fns["compile"] = _runner(fn, mode, x, w, b, r)
    ms = time_ms(fns, repeat, x.device.type)
    t_ours, t_eager, t_comp = ms["ours"], ms["eager"], ms.get("compile")
    nbytes = x.numel() * x.element_size()
    copy_gbps = 2 * nbytes / ms["copy"] / 1e6
    gbps = TENSORS[(mode, op.startswith("fused"))] * nbytes / t_ours / 1e6
    return Result(
        op=op,
        dtype=str(x.dtype).removeprefix("torch."),
        shape=f"{m}x{n}",
        mode=mode,
        backend=backend,
        ms=t_ours,
        gbps=gbps,
        copy_gbps=copy_gbps,
        pct_of_limit=100 * gbps / copy_gbps,
        eager_ms=t_eager,
        x_eager=t_eager / t_ours,
        compile_ms=t_comp,
        x_compile=None if t_comp is None else t_comp / t_ours,
    )


def run_matrix(
    device: str,
    backend: str,
    ops=OPS,
    dtypes=DTYPES,
    shapes=SHAPES,
    repeat: int = 5,
    compile: bool = True,
    log: Callable[[str], None] = print,
) -> list[Result]:
    """Time every case; returns one :class:`Result` per (op, dtype, shape, mode), each logged
    as a table row as soon as it is measured."""
    results = []
    for dtype_name in dtypes:
        dtype = getattr(torch, dtype_name)
        for m, n in shapes:
            g = torch.Generator(device=device).manual_seed(0)
            x = torch.randn(m, n, device=device, dtype=dtype, generator=g)
            r = torch.randn(m, n, device=device, dtype=dtype, generator=g)
            w = 1 + 0.1 * torch.randn(n, device=device, dtype=dtype, generator=g)
            b = 0.1 * torch.randn(n, device=device, dtype=dtype, generator=g)
            for op in ops:
                for mode in ("fwd", "fwd+bwd"):
                    res = _time_case(op, mode, (x, w, b, r), backend, repeat, compile)
                    log(format_table([res], header=not results))
                    results.append(res)
    return results


_COLUMNS = (
    ("op", "op", "{}"),
    ("dtype", "dtype", "{}"),
    ("shape", "shape", "{}"),
    ("mode", "mode", "{}"),
    ("ms", "ms", "{:.3f}"),
    ("gbps", "GB/s", "{:.1f}"),
    ("copy_gbps", "copy_ GB/s", "{:.1f}"),
    ("pct_of_limit", "% of limit", "{:.0f}"),
    ("x_eager", "x eager", "{:.2f}"),
    ("x_compile", "x compile", "{:.2f}"),
)


def table(results: list[Result]) -> d.Table:
    """The page's table of ``results``."""
    rows = [[_cell(getattr(r, key), fmt) for key, _, fmt in _COLUMNS] for r in results]
    return d.dense_table([title for _, title, _ in _COLUMNS], rows)


def format_table(results: list[Result], header: bool = True) -> str:
    """Markdown table rows of ``results`` (with the header line unless ``header=False``)."""
    text = d.markdown(table(results))
    return text if header else "\n".join(text.splitlines()[2:])


def _cell(value, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def parse_shape(text: str) -> tuple[int, int]:
    """``"MxN"`` as ``(M, N)``; ``ValueError`` unless both are ints >= 1 and a case of that
    shape fits the machine's memory (``limits.check_rows``), counted before any tensor exists."""
    m, _, n = text.lower().partition("x")
    if not (m.isdigit() and n.isdigit() and len(m + n) < 24 and int(m) > 0 and int(n) > 0):
        raise ValueError(f"expected MxN with M, N >= 1, e.g. 1024x64; got {printable(text, 40)!r}")
    try:
        check_rows(int(m), int(n), "rows")
    except UsageError as e:
        raise ValueError(f"{m}x{n}: {e}") from None
    return int(m), int(n)


@dataclass(frozen=True)
class BenchOptions:
    """What ``normlab bench`` times: ``quick`` is :data:`QUICK_SHAPES` and at most 3 repeats;
    ``shapes`` (``(M, N)`` pairs) replaces the default set; ``threads`` 0 keeps torch's."""

    device: str = "cpu"  # cpu runs the numba backend, cuda the triton one
    out: str | Path = "bench_out"
    quick: bool = False
    compile: bool = True
    repeat: int = 5
    ops: tuple[str, ...] = OPS
    dtypes: tuple[str, ...] = DTYPES
    shapes: tuple[tuple[int, int], ...] | None = None
    threads: int = 0


def _check(options: BenchOptions) -> None:
    """A :class:`UsageError` for an option value the bench cannot run."""
    o = options
    checked("repeat", positive_int, o.repeat)
    for what, got, known in [
        ("device", (o.device,), ("cpu", "cuda")),
        ("ops", o.ops, OPS),
        ("dtypes", o.dtypes, ("float32", "bfloat16", "float16")),
    ]:
        if bad := [v for v in got if v not in known]:
            raise UsageError(f"{what}: unknown {bad}; known {list(known)}")


def run_bench(options: BenchOptions) -> Path:
    """Time the matrix, printing each row as it is measured, and write ``bench_<device>.md``
    (the table and the chart), ``.csv``, ``.json`` and ``.png`` (bars of % of limit and
    speed-ups, :func:`normlab.lab.bench.chart.bench_chart`) under ``options.out`` (created
    first); returns the table's path. A :class:`UsageError` for ``cuda`` without a CUDA device,
    before any work."""
    import platform

    from normlab.lab.bench.chart import bench_chart

    o = options
    _check(o)
    set_threads(o.threads)  # checked before the output directory is created
    check_device(o.device)
    out = out_dir(o.out)  # before the timings, not after them
    backend = "triton" if o.device == "cuda" else "numba"
    shapes = tuple(o.shapes) if o.shapes else (QUICK_SHAPES if o.quick else SHAPES)
    repeat = min(o.repeat, 3) if o.quick else o.repeat
    results = run_matrix(o.device, backend, o.ops, o.dtypes, shapes, repeat, o.compile)
    where = torch.cuda.get_device_name() if o.device == "cuda" else platform.processor()
    name = f"bench_{o.device}"
    rows = [asdict(r) for r in results]
    preamble = (
        f"normlab bench --device {o.device}: backend {backend}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, {where or platform.machine()}"
    )
    page = d.Document(name, [d.Paragraph(preamble), table(results)])
    if (png := bench_chart(rows)) is not None:
        write_file(out / f"{name}.png", png)
        page.add(d.Figure(name, png, f"{name}.png"))
    write_file(out / f"{name}.md", d.to_markdown(page))
    buf = io.StringIO(newline="")
    writer = csv.DictWriter(buf, fieldnames=[fl.name for fl in fields(Result)])
    writer.writeheader()
    writer.writerows(rows)
    write_file(out / f"{name}.csv", buf.getvalue())
    write_json(out / f"{name}.json", rows, indent=1)
    return out / f"{name}.md"
