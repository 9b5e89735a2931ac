"""What ``normlab inspect`` measures: its options, one dataclass, and their checks."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from normlab.lab.kit.errors import UsageError

TOKENS, CHUNK = 1024, 32  # the text sample: 32 chunks of 32 tokens (one chunk = one unit)
MIN_CHUNKS = 3  # an interval needs 2; a chunk's similarity ranks need 2 others
MAX_TOKENS = 1 << 20


@dataclass(frozen=True)
class InspectOptions:
    """``model``: a Hugging Face model directory or an installed package that ships one."""

    model: str
    out: str | Path = "normlab-out/inspect"
    tokens: int = TOKENS  # the sample's tokens, special tokens included
    chunk: int = CHUNK  # tokens per chunk, the findings' unit
    memory_gib: float | None = None  # the limit the sizing checks; None: half this machine's
    seed: int = 0  # the seed block: the text sample, train mode's dropout, the replay's gradient
    threads: int = 0  # torch's threads; 0: torch's default
    progress: bool = True

    @property
    def chunks(self) -> int:
        return self.tokens // self.chunk

    def check(self) -> None:
        """The sizes' bounds, before anything is read (a UsageError each)."""
        if not 2 <= self.chunk <= self.tokens:
            raise UsageError(f"--chunk {self.chunk}: expected 2 ... --tokens ({self.tokens})")
        if self.tokens > MAX_TOKENS:
            raise UsageError(f"--tokens {self.tokens:,}: at most {MAX_TOKENS:,}")
        if self.chunks < MIN_CHUNKS:
            raise UsageError(
                f"--tokens {self.tokens} / --chunk {self.chunk}: {self.chunks} chunks; the "
                f"findings need at least {MIN_CHUNKS} (one chunk is one repetition)"
            )
        if self.memory_gib is not None and not self.memory_gib > 0:
            raise UsageError(f"--memory-gib {self.memory_gib}: expected a number > 0")
