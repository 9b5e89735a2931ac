"""Training data with no download: a corpus of bytes, a fixed split, and batch streams.

The default corpus is the running Python's own standard library (the top-level ``*.py`` files,
sorted), a few MB of real text on every machine. Tokens are bytes (vocabulary 256), so no
tokenizer is needed and any file can be trained on.
"""

from __future__ import annotations

import glob
import hashlib
import math
import os
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch
from torch import Tensor

from normlab.lab.kit.errors import UsageError
from normlab.lab.kit.reading import ReadError

VOCAB_SIZE = 256
# The split takes every k-th chunk for validation rather than the tail, so both halves see
# every file family (the stdlib sorted by name would put only ``z*.py`` in a tail split).
_CHUNK, _MIN_CHUNK, VAL_EVERY = 4096, 64, 10
# The validation set's draw: every run is evaluated on the same bytes.
_EVAL_SEED = 1234


def stdlib_files() -> list[Path]:
    """The top-level ``*.py`` files of this interpreter's standard library, sorted by name."""
    return sorted(Path(p) for p in glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py")))


@dataclass(frozen=True)
class Corpus:
    """Byte tokens split once into train and validation; ``sha256`` identifies the content."""

    train: Tensor  # (N_train,) uint8
    val: Tensor  # (N_val,) uint8
    sha256: str
    source: str
    n_bytes: int
    vocab_size: ClassVar[int] = VOCAB_SIZE

    def unigram_entropy(self) -> float:
        """Entropy (nats) of the training bytes' frequencies: the loss of a model that learned
        only which bytes are common, the bar a language model must get below."""
        counts = torch.bincount(self.train.long(), minlength=VOCAB_SIZE).double()
        p = counts[counts > 0] / counts.sum()
        return float(-(p * p.log()).sum())

    def unigram_val_xent(self) -> float:
        """Cross-entropy (nats) of the validation bytes under the training bytes' frequencies,
        add-one smoothed (a byte unseen in training gets count 1, so no loss is infinite): the
        validation loss of a model that learned only byte frequencies, the plateau the study's
        "fails"/"trains" rules measure against. It is the validation bytes' own entropy plus
        their divergence from the training frequencies, so it may lie on either side of
        ``unigram_entropy``."""
        p = torch.bincount(self.train.long(), minlength=VOCAB_SIZE).double() + 1.0
        q = torch.bincount(self.val.long(), minlength=VOCAB_SIZE).double()
        return float(-(q / q.sum() * (p / p.sum()).log()).sum())

    def describe(self) -> dict:
        return {
            "source": self.source,
            "sha256": self.sha256,
            "n_bytes": self.n_bytes,
            "n_train": int(self.train.numel()),
            "n_val": int(self.val.numel()),
            "unigram_entropy": self.unigram_entropy(),
            "unigram_val_xent": self.unigram_val_xent(),
        }


def read_bytes(path: str | os.PathLike | None = None) -> tuple[bytes, str]:
    """The bytes of ``path`` (or of the stdlib corpus when ``None``) and where they came from."""
    if path is None:
        files = stdlib_files()
        if not files:
            raise FileNotFoundError("no *.py files found in the standard library directory")
        raw = b"".join(f.read_bytes() for f in files)
        # no machine path: results and study.json are published (the sha256 names the bytes)
        return raw, f"stdlib:<the running Python's standard library> ({len(files)} files)"
    from normlab.lab.kit.reading import read_bytes as bounded_bytes

    if not os.path.lexists(path):
        raise FileNotFoundError(f"data file not found: {path}")
    # Bounded: a FIFO, a device or a file beyond the reader's limit is refused, not read whole.
    return bounded_bytes(path, str(path)), str(path)


def load_corpus(path: str | os.PathLike | None = None) -> Corpus:
    """Read ``path`` (or the stdlib corpus when ``None``) as bytes and split it
    (:func:`corpus_from_bytes`)."""
    return corpus_from_bytes(*read_bytes(path))


def load_data(path: str | None, flag: str = "--data") -> Corpus:
    """:func:`load_corpus` for a command's ``flag``: a missing, unreadable or too small file is a
    :class:`UsageError`."""
    try:
        return load_corpus(path)
    except ReadError as e:  # no such file, not a regular file, too big: it names the file
        raise UsageError(f"{flag} {e}") from e
    except FileNotFoundError as e:
        raise UsageError(f"{flag} {path}: no such file" if path else str(e)) from e
    except OSError as e:
        raise UsageError(f"{flag} {path}: cannot read it ({e.strerror or e})") from e
    except ValueError as e:  # empty, or too small to split into training and validation
        raise UsageError(f"{flag} {path or '(the standard library)'}: {e}") from e


def corpus_from_bytes(raw: bytes, source: str) -> Corpus:
    """Split ``raw``: every ``VAL_EVERY``-th chunk of (up to) 4096 bytes goes to validation, the
    rest to training."""
    # Small files get smaller chunks so that they still have several validation chunks.
    chunk = max(_MIN_CHUNK, min(_CHUNK, len(raw) // (4 * VAL_EVERY)))
    if len(raw) < 2 * chunk * VAL_EVERY:
        raise ValueError(f"corpus too small ({len(raw)} bytes); need >= {2 * chunk * VAL_EVERY}")
    data = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
    is_val = torch.zeros(math.ceil(len(raw) / chunk), dtype=torch.bool)
    is_val[VAL_EVERY - 1 :: VAL_EVERY] = True
    byte_is_val = is_val.repeat_interleave(chunk)[: len(raw)]
    return Corpus(
        train=data[~byte_is_val].clone(),
        val=data[byte_is_val].clone(),
        sha256=hashlib.sha256(raw).hexdigest(),
        source=source,
        n_bytes=len(raw),
    )


class RandomBatches:
    """An endless stream of ``(x, y)`` next-byte batches at random offsets of ``data``.

    Each step draws the offsets of the *global* batch (``batch_size * world_size`` rows) from
    one seeded generator and keeps this rank's slice, so the data a run sees does not depend on
    how many ranks share it.
    """

    def __init__(
        self,
        data: Tensor,
        batch_size: int,
        seq_len: int,
        *,
        seed: int,
        rank: int = 0,
        world_size: int = 1,
    ):
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, world_size), got {rank}, {world_size}")
        if data.numel() <= seq_len + 1:
            raise ValueError(f"data ({data.numel()} tokens) is shorter than seq_len + 1")
        self.data, self.batch_size, self.seq_len = data, batch_size, seq_len
        self.rank, self.world_size = rank, world_size
        self.gen = torch.Generator().manual_seed(seed)

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        return self

    def __next__(self) -> tuple[Tensor, Tensor]:
        n = self.batch_size * self.world_size
        starts = torch.randint(0, self.data.numel() - self.seq_len - 1, (n,), generator=self.gen)
        starts = starts[self.rank * self.batch_size : (self.rank + 1) * self.batch_size]
        idx = starts[:, None] + torch.arange(self.seq_len + 1)  # (B, T+1)
        chunk = self.data[idx].long()
        return chunk[:, :-1], chunk[:, 1:]  # (B, T) inputs, (B, T) next-byte targets


def fixed_batches(data: Tensor, n: int, batch_size: int, seq_len: int):
    """``n`` batches drawn once with a fixed seed: every run is evaluated on the same bytes."""
    it = RandomBatches(data, batch_size, seq_len, seed=_EVAL_SEED)
    return [next(it) for _ in range(n)]


def validation_set(data: Tensor, n: int, batch_size: int, seq_len: int):
    """``n`` sequences drawn once with a fixed seed, split into batches of ``batch_size``: the
    same bytes for every batch size that divides ``n``."""
    x, y = next(RandomBatches(data, n, seq_len, seed=_EVAL_SEED))  # (n, T)
    return list(zip(x.split(batch_size), y.split(batch_size), strict=True))
