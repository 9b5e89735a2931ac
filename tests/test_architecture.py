"""The package's layering, read from the source with ``ast`` (imports inside functions count):
no import circle, kernels never reach up to the functional layer, the library never imports the
lab or the lab's packages, and it runs with those packages missing."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
LAB_ONLY = ("matplotlib", "tqdm", "scipy", "ray")


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


def test_the_graph_sees_imports_inside_functions():
    # normlab.lab.cli imports its subcommands by name; study's command imports its report
    # inside a function: the graph must hold the latter.
    assert "normlab.lab.study.report" in GRAPH["normlab.lab.study.command"]


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
