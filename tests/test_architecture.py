"""The package's layering, read from the source with ``ast`` (imports inside functions count):
an ordered list of layers that no import climbs, no import circle, the library never importing
the lab or the lab's packages (and running with them missing), argparse only in the commands,
and the size rules: no function over 100 lines outside the kernels, few ``fmt: skip``."""

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
LAB_ONLY = ("matplotlib", "tqdm", "scipy", "ray", "tensorboard")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted((SRC / "normlab").rglob("*.py"))}
# ``python -m normlab`` is the command line's entry point: it belongs to the lab.
LIBRARY = sorted(m for m in MODULES if not m.startswith(("normlab.lab", "normlab.__main__")))


def _imports(name: str) -> set[str]:
    """Every module ``name`` imports anywhere in its body (``from pkg import sub`` counts as the
    submodule when ``sub`` is one)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.add(sub if sub in MODULES else base)
    return out


GRAPH = {m: {i for i in _imports(m) if i in MODULES and i != m} for m in MODULES}


# The layers, bottom first: a module may import its own layer or the ones below it, never one
# above. Each entry names a module or a package; a package covers its modules unless the list
# names some of them (``normlab`` and ``normlab.lab`` are then their ``__init__`` alone), so a new
# module outside the packages named here is in no layer and fails the test until it is listed.
# docs/development.md shows the same list.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("reference", ("normlab.reference", "normlab.testing", "normlab.collectives")),
    ("kernels", ("normlab.kernels",)),
    ("functional", ("normlab.validation", "normlab.functional")),
    ("modules", ("normlab.modules", "normlab.batchnorm")),
    ("models", ("normlab.models",)),
    ("integrations", ("normlab.hf", "normlab")),
    ("lab: kit", ("normlab.lab.kit", "normlab.lab")),
    ("lab: train", ("normlab.lab.train",)),
    # the verdict engine: every decider (study, numerics, bench, advise, coverage) sits above it
    ("lab: verdict", ("normlab.lab.verdict",)),
    (
        "lab: engines",
        (
            "normlab.lab.study",
            "normlab.lab.numerics",
            "normlab.lab.bench",
            "normlab.lab.demo",
            "normlab.lab.vision",
        ),
    ),  # fmt: skip
    # a real model's config read, then: advise trains its twin, inspect measures its norms
    ("lab: advise", ("normlab.lab.advise", "normlab.lab.inspect")),
    ("lab: commands", ("normlab.lab.commands",)),
    ("lab: cli", ("normlab.lab.cli", "normlab.__main__")),
]
ENTRIES = [e for _, entries in LAYERS for e in entries]


def _covers(entry: str, module: str) -> bool:
    """Whether ``entry`` of LAYERS names ``module``: itself, or a module of a package none of
    whose modules the list names."""
    if module == entry:
        return True
    inside = any(e.startswith(entry + ".") for e in ENTRIES)
    return not inside and module.startswith(entry + ".")


def layer_of(module: str) -> int:
    """The index of the one layer that names ``module``."""
    at = [i for i, (_, entries) in enumerate(LAYERS) for e in entries if _covers(e, module)]
    assert at, f"{module} is in no layer: add it (or its package) to LAYERS"
    assert len(at) == 1, f"{module} is named by more than one entry of LAYERS"
    return at[0]


def test_the_layer_list_names_existing_modules_and_no_unknown_one():
    assert len(ENTRIES) == len(set(ENTRIES))
    assert [e for e in ENTRIES if e not in MODULES] == []
    for unknown in ("normlab.new", "normlab.lab.new", "normlab.lab.kit_new"):
        with pytest.raises(AssertionError, match="in no layer"):
            layer_of(unknown)


def test_no_two_lab_modules_share_a_name():
    seen: dict[str, list[str]] = {}
    for path in (SRC / "normlab" / "lab").rglob("*.py"):
        if path.name != "__init__.py":
            seen.setdefault(path.stem, []).append(_module_name(path))
    assert not {k: v for k, v in seen.items() if len(v) > 1}


def test_every_module_is_in_a_layer_and_no_import_climbs_one():
    climbs = [
        f"{m} ({LAYERS[layer_of(m)][0]}) imports {i} ({LAYERS[layer_of(i)][0]})"
        for m in MODULES
        for i in sorted(GRAPH[m])
        if layer_of(i) > layer_of(m)
    ]
    assert not climbs, "\n".join(climbs)


# The study's packages by job, each importing only the ones before it (and the lab below).
STUDY = ("decide", "report", "spec", "run", "published")


def test_the_study_packages_import_only_the_ones_before_them():
    def rank(m):
        part = m.split(".")[3] if m.startswith("normlab.lab.study.") else None
        return STUDY.index(part) if part in STUDY else -1

    inside = [m for m in MODULES if m.startswith("normlab.lab.study.")]
    assert {m.split(".")[3] for m in inside} == set(STUDY)
    climbs = [f"{m} imports {i}" for m in inside for i in sorted(GRAPH[m]) if rank(i) > rank(m)]
    assert not climbs, "\n".join(climbs)


def test_the_layer_list_is_the_one_docs_show():
    doc = (SRC.parent / "docs" / "development.md").read_text()
    rows = [ln.split("|") for ln in doc.splitlines() if ln.startswith("| L")]
    listed = [(row[1].strip(), tuple(re.findall(r"`([\w.]+)`", row[2]))) for row in rows]
    assert listed == [(f"L{i} {name}", entries) for i, (name, entries) in enumerate(LAYERS)]


def test_the_graph_sees_imports_inside_functions():
    # The runner imports its report inside a function: the graph must hold it.
    assert "normlab.lab.study.report" in GRAPH["normlab.lab.study.run.runner"]


def test_engines_never_import_the_commands_or_the_cli():
    top = ("normlab.lab.commands", "normlab.lab.cli")
    for m in MODULES:
        if not m.startswith(top) and m != "normlab.__main__":
            bad = sorted(i for i in GRAPH[m] if i.startswith(top))
            assert not bad, f"{m} imports {bad}"


def test_the_cli_is_the_top_imported_only_by_python_dash_m():
    importers = sorted(m for m in MODULES if "normlab.lab.cli" in GRAPH[m])
    assert importers == ["normlab.__main__"]


def test_argparse_lives_in_the_commands_and_the_cli_only():
    users = sorted(m for m in MODULES if "argparse" in _imports(m))
    outside = [u for u in users if not u.startswith(("normlab.lab.commands", "normlab.lab.cli"))]
    assert users and not outside, outside


def _is_kernel(fn: ast.AST) -> bool:
    """A ``@numba.njit``/``@triton.jit`` kernel (any decorator spelling of those)."""
    for d in getattr(fn, "decorator_list", []):
        name = ast.unparse(d.func if isinstance(d, ast.Call) else d)
        if name.rsplit(".", 1)[-1] in ("njit", "jit", "autotune", "heuristics"):
            return True
    return False


def test_no_function_outside_the_kernels_is_longer_than_100_lines():
    long = []
    for m, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not _is_kernel(node):
                n = node.end_lineno - node.lineno + 1
                if n > 100:
                    long.append(f"{m}.{node.name}: {n} lines")
    assert not long, long


def test_fmt_skip_is_kept_for_tables():
    n = sum(p.read_text().count("# fmt: skip") for p in MODULES.values())
    assert n <= 40, f"{n} '# fmt: skip' in src/: let ruff format what is not a table"


def test_no_import_circle():
    state: dict[str, int] = {}  # 1: on the stack, 2: done

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for n in sorted(GRAPH[m]):
            if state.get(n) == 1:
                cycle = path[path.index(n) :] + [n] if n in path else [m, n]
                pytest.fail("import circle: " + " -> ".join(cycle))
            if n not in state:
                visit(n, path + [n])
        state[m] = 2

    for m in MODULES:
        if m not in state:
            visit(m, [m])


def test_kernels_never_import_the_layers_above_them():
    above = ("normlab.functional", "normlab.modules", "normlab.models", "normlab.lab")
    for m in MODULES:
        if m.startswith("normlab.kernels"):
            bad = sorted(i for i in _imports(m) if i.startswith(above))
            assert not bad, f"{m} imports {bad}"


def test_the_library_never_imports_the_lab_or_its_packages():
    for m in LIBRARY:
        bad = sorted(
            i for i in _imports(m) if i.startswith("normlab.lab") or i.split(".")[0] in LAB_ONLY
        )
        assert not bad, f"library module {m} imports {bad}"


def test_the_library_works_without_the_lab_packages():
    """Every library module imports, and the ops, modules and models run, with matplotlib,
    tqdm, scipy and ray unimportable."""
    code = f"""
import importlib, sys
for name in {LAB_ONLY!r}:
    sys.modules[name] = None  # import raises ImportError
import torch
import normlab
from normlab.models import Transformer, TransformerConfig
for m in {LIBRARY!r}:
    if not m.startswith("normlab.kernels.triton"):  # needs triton, an extra of its own
        importlib.import_module(m)
x = torch.randn(3, 8)
normlab.rms_norm(x, torch.ones(8)); normlab.layer_norm(x)
normlab.RMSNorm(8)(x).sum().backward()
cfg = TransformerConfig(vocab_size=16, dim=8, n_layers=1, n_heads=2)
Transformer(cfg)(torch.zeros(1, 4, dtype=torch.long))
loaded = [n for n in {LAB_ONLY!r} if sys.modules.get(n) is not None]
assert not loaded, loaded
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_a_lab_command_without_the_extra_says_how_to_install_it():
    code = (
        "import sys; sys.modules['scipy'] = None\n"
        "from normlab.lab.cli import main\n"
        "sys.exit(main(['study', '--preset', 'smoke']))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 2, out.stderr[-2000:]
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and 'pip install "normlab[lab]"' in lines[0] and "scipy" in lines[0]
