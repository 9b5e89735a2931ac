"""The README's examples run as written, its shell lines parse, and its Quick start matches CI.

- every ```` ```python ```` block is executed as written;
- every ```` ```py ```` block (the Hugging Face example) is executed on tiny models saved in a
  temporary directory, their paths put in place of the Hub names (skipped without
  ``transformers``);
- every ``normlab ...`` and ``torchrun ... -m normlab ...`` line of a ```` ```bash ```` block is
  run with ``--help`` appended (``--list`` for ``study`` and ``advise``: the plan, nothing
  trained), and must exit 0; pip, venv, pytest and ruff lines are not run.
"""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_python_examples_run():
    blocks = re.findall(r"```python\n(.*?)```", README, re.S)
    assert blocks
    for i, code in enumerate(blocks):
        exec(compile(code, f"README.md[python block {i}]", "exec"), {})


def _tiny_hf_models(tmp_path: Path) -> dict[str, str]:
    """A tiny Llama and a tiny GPT-2, saved with ``save_pretrained``: name in README -> path."""
    import torch
    import transformers

    ids = {"bos_token_id": 2, "eos_token_id": 3, "pad_token_id": 0}
    torch.manual_seed(0)
    llama = transformers.LlamaForCausalLM(
        transformers.LlamaConfig(
            vocab_size=64,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=64,
            **ids,
        )
    )
    gpt2 = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(
            vocab_size=64, n_embd=32, n_layer=2, n_head=4, n_positions=64, **ids
        )
    )
    paths = {}
    for readme_name, name, model in (("...", "llama", llama), ("gpt2", "gpt2", gpt2)):
        model.save_pretrained(tmp_path / name)
        paths[readme_name] = str(tmp_path / name)
    return paths


def test_hf_examples_run_on_tiny_saved_models(tmp_path, capsys):
    pytest.importorskip("transformers")
    blocks = re.findall(r"```py\n(.*?)```", README, re.S)
    assert blocks
    paths = _tiny_hf_models(tmp_path)
    for i, code in enumerate(blocks):
        for readme_name, path in paths.items():
            code = code.replace(f'from_pretrained("{readme_name}")', f"from_pretrained({path!r})")
        assert 'from_pretrained("' not in code, (
            f"py block {i}: a Hub name the test has no model for"
        )
        exec(compile(code, f"README.md[py block {i}]", "exec"), {})
    assert "LlamaRMSNorm" in capsys.readouterr().out  # print(report), as the README shows


def _shell_lines(kind: str) -> list[list[str]]:
    """The README's ``normlab`` or ``torchrun`` command lines, split into words (comments off)."""
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", README, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words[:1] == ["time"]:
                words = words[1:]
            if words[:1] == [kind]:
                lines.append(words)
    return lines


def _split_redirect(words: list[str]) -> tuple[list[str], str | None]:
    if ">" in words:
        i = words.index(">")
        return words[:i], words[i + 1]
    return words, None


def _check_argv(argv: list[str]) -> list[str]:
    """``argv`` (after ``normlab``) as the test runs it: study/advise get ``--list`` (a line
    that prints a spec runs as written: it is what a later line reads), the others ``--help``."""
    command = next(w for w in argv if not w.startswith("-"))
    if command in ("study", "advise"):
        return argv if "--list" in argv or "--print-spec" in argv else [*argv, "--list"]
    return [*argv, "--help"]


def test_readme_has_shell_lines():
    assert _shell_lines("normlab") and _shell_lines("torchrun")


def test_normlab_lines_run_with_help_or_list(tmp_path, monkeypatch, capsys):
    from normlab.lab.cli import main

    monkeypatch.chdir(tmp_path)  # the lines' outputs (--print-spec > FILE) land here, in order
    for words in _shell_lines("normlab"):
        argv, out_file = _split_redirect(words[1:])
        argv = _check_argv(argv)
        try:
            code = main(argv)
        except SystemExit as e:  # --help
            code = e.code
        out = capsys.readouterr()
        assert code == 0, f"normlab {shlex.join(argv)}: exit {code}\n{out.err[-2000:]}"
        if out_file:
            Path(out_file).write_text(out.out)


@pytest.mark.slow
@pytest.mark.parametrize("words", _shell_lines("torchrun"), ids=shlex.join)
def test_torchrun_lines_run_with_help(words, tmp_path):
    argv, _ = _split_redirect(words[1:])
    i = argv.index("normlab")
    argv = [*argv[: i + 1], *_check_argv(argv[i + 1 :])]
    path = [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", *argv],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"torchrun {shlex.join(argv)}\n{proc.stderr[-2000:]}"
    assert "usage: normlab train" in proc.stdout


def test_ci_runs_the_readme_test_command():
    quick = re.search(r"## Quick start(.*?)\n## ", README, re.S).group(1)
    test_cmd = [ln for ln in quick.splitlines() if "pytest" in ln]
    assert len(test_cmd) == 1
    assert test_cmd[0].strip() in (ROOT / ".ci" / "run").read_text()


def test_quick_start_states_the_wall_time_list_estimates():
    """The Quick start's minutes are what ``normlab study --list`` prints for an idle 2-core
    machine, so a change to a preset or to the estimate cannot leave them stale."""
    from normlab.lab.study.run.machine import Machine
    from normlab.lab.study.run.plan import format_plan
    from normlab.lab.study.run.runner import configure
    from normlab.lab.study.spec import load_builtin

    quick = re.search(r"## Quick start(.*?)\n## ", README, re.S).group(1)
    said = re.search(
        r"quick study, takes ~([\d.]+) min on an idle 2-core CPU as `normlab study --list`.*?"
        r"`--preset smoke`[^~]*~([\d.]+) min",
        " ".join(quick.split()),
    )
    assert said, "the Quick start no longer states the main job's wall time as --list does"
    for preset, minutes in zip(("quick", "smoke"), said.groups(), strict=True):
        plan = format_plan(configure(load_builtin(preset), "cpu"), machine=Machine(2, 2**40))
        listed = re.search(r"\(~([\d.]+) min\) wall idle", plan).group(1)
        if preset == "quick":
            listed = f"{float(listed):.0f}"
        assert minutes == listed, f"README: {preset} ~{minutes} min; --list: ~{listed} min"
