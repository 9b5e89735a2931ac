"""The text ``normlab inspect`` runs through the model: prose from the corpus the lab ships.

The lab's corpus is this interpreter's standard library (:mod:`normlab.lab.train.data`); its
prose is the docstrings. The sample is cut into chunks of a fixed number of tokens, each from
its own file, the files visited in a fixed shuffled order so that the chunks spread over the
library (one chunk is one repetition of the findings: chunks from one file would not be
independent). Every chunk holds exactly ``chunk`` tokens, the model's special tokens included,
so chunks batch without padding. A model directory without a tokenizer reads the text's UTF-8
bytes as token ids (modulo its vocabulary).
"""

from __future__ import annotations

import ast
import itertools
import random
import warnings
from dataclasses import dataclass

import torch
from torch import Tensor

from normlab.lab.kit.errors import UsageError
from normlab.lab.train.data import stdlib_files

MIN_DOCSTRING = 200  # characters: shorter docstrings are one-line summaries, not prose
ORDER_SEED = 0  # the files' order at seed block 0; a block's is ORDER_SEED + block


@dataclass(frozen=True)
class Sample:
    ids: Tensor  # (chunks, chunk) int64
    files: tuple[str, ...]  # the file each chunk comes from
    tokenizer: str  # in words: the model's, or bytes

    @property
    def tokens(self) -> int:
        return self.ids.numel()


def prose(path) -> str:
    """The docstrings of at least ``MIN_DOCSTRING`` characters in the file at ``path``, in the
    order they stand, as paragraphs."""
    try:
        with warnings.catch_warnings():  # invalid escape sequences in old modules
            warnings.simplefilter("ignore")
            tree = ast.parse(path.read_bytes())
    except (SyntaxError, ValueError, OSError):
        return ""
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    docs = [ast.get_docstring(n) for n in ast.walk(tree) if isinstance(n, kinds)]
    return "\n\n".join(d for d in docs if d and len(d) >= MIN_DOCSTRING)


class Encoder:
    """Text to token ids: the model's tokenizer (with its special tokens around each chunk), or
    the UTF-8 bytes."""

    def __init__(self, tokenizer, vocab: int, why_bytes: str = "no tokenizer in the directory"):
        self.tok, self.vocab = tokenizer, vocab
        self.prefix: list[int] = []
        self.suffix: list[int] = []
        if tokenizer is None:
            self.words = f"the text's UTF-8 bytes as token ids, modulo {vocab} ({why_bytes})"
            return
        full = list(tokenizer("normlab")["input_ids"])
        bare = list(tokenizer("normlab", add_special_tokens=False)["input_ids"])
        at = next((i for i in range(len(full)) if full[i : i + len(bare)] == bare), None)
        if at is not None:
            self.prefix, self.suffix = full[:at], full[at + len(bare) :]
        self.words = f"the model's tokenizer ({type(tokenizer).__name__})"

    def ids(self, text: str) -> list[int]:
        if self.tok is None:
            return [b % self.vocab for b in text.encode("utf-8")]
        return list(self.tok(text, add_special_tokens=False)["input_ids"])

    def chunk(self, body: list[int]) -> list[int]:
        return self.prefix + body + self.suffix


def sample(encoder: Encoder, chunks: int, chunk: int, block: int = 0) -> Sample:
    """``chunks`` chunks of ``chunk`` tokens: round r takes the r-th chunk of each file's prose,
    so every file gives one before any gives two; the files in the order seed block ``block``
    shuffles them (block 0: every run before blocks existed), so another block reads other text."""
    body = chunk - len(encoder.prefix) - len(encoder.suffix)
    if body < 1:
        raise UsageError(f"--chunk {chunk}: no room beside the model's special tokens")
    files = stdlib_files()
    random.Random(ORDER_SEED + block).shuffle(files)
    ids: dict[int, list[int]] = {}  # file -> its prose's ids, read when first needed
    rows: list[list[int]] = []
    names: list[str] = []
    for r in itertools.count():
        before = len(rows)
        for i, f in enumerate(files):
            if len(rows) == chunks:
                return Sample(torch.tensor(rows, dtype=torch.long), tuple(names), encoder.words)
            if i not in ids:
                ids[i] = encoder.ids(prose(f))
            if len(ids[i]) >= (r + 1) * body:
                rows.append(encoder.chunk(ids[i][r * body : (r + 1) * body]))
                names.append(f.name)
        if len(rows) == before:  # no file has prose for another round
            break
    raise UsageError(
        f"--tokens {chunks * chunk:,}: the text sample holds only {len(rows)} chunks of "
        f"{chunk} tokens; ask for fewer tokens or shorter chunks"
    )
