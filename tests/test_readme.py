"""The README's Python examples run as written, and its Quick start matches CI."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_python_examples_run():
    blocks = re.findall(r"```python\n(.*?)```", README, re.S)
    assert blocks
    for i, code in enumerate(blocks):
        exec(compile(code, f"README.md[python block {i}]", "exec"), {})


def test_ci_runs_the_readme_test_command():
    quick = re.search(r"## Quick start(.*?)\n## ", README, re.S).group(1)
    test_cmd = [ln for ln in quick.splitlines() if "pytest" in ln]
    assert len(test_cmd) == 1
    assert test_cmd[0].strip() in (ROOT / ".ci" / "run").read_text()
