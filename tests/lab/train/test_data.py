import hashlib
import math

import pytest
import torch

from normlab.lab.train.data import RandomBatches, fixed_batches, load_corpus, stdlib_files


def test_stdlib_corpus_is_sorted_split_and_hashed():
    files = stdlib_files()
    assert files == sorted(files) and len(files) > 50
    c = load_corpus()
    raw = b"".join(f.read_bytes() for f in files)
    assert c.n_bytes == len(raw) == c.train.numel() + c.val.numel()
    assert c.sha256 == hashlib.sha256(raw).hexdigest()
    assert 0.08 < c.val.numel() / c.n_bytes < 0.12
    # Python source: far below a uniform guess, far above zero.
    assert 2.0 < c.unigram_entropy() < 4.5


def test_file_split_takes_every_tenth_chunk(tmp_path):
    # 40 chunks of 64 bytes, chunk i filled with byte i: the split is readable off the bytes.
    raw = b"".join(bytes([i]) * 64 for i in range(40))
    p = tmp_path / "data.bin"
    p.write_bytes(raw)
    c = load_corpus(p)
    assert c.sha256 == hashlib.sha256(raw).hexdigest() and c.source == str(p)
    assert sorted(set(c.val.tolist())) == [9, 19, 29, 39]
    assert 9 not in set(c.train.tolist()) and 8 in set(c.train.tolist())
    assert c.unigram_entropy() == pytest.approx(math.log(36))


def test_bad_data_is_rejected(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_corpus(tmp_path / "nope.txt")
    small = tmp_path / "small.txt"
    small.write_bytes(b"x" * 100)
    with pytest.raises(ValueError, match="too small"):
        load_corpus(small)


def test_batches_are_next_byte_pairs_and_seeded():
    data = torch.arange(1000) % 256
    x, y = next(RandomBatches(data.to(torch.uint8), 4, 16, seed=0))
    assert x.shape == y.shape == (4, 16) and x.dtype == torch.long
    assert torch.equal(x[:, 1:], y[:, :-1])
    assert torch.equal((x + 1) % 256, y)  # the data counts up, so y is x + 1
    a = [next(RandomBatches(data, 4, 16, seed=3))[0] for _ in range(2)]
    assert torch.equal(a[0], a[1])
    b = next(RandomBatches(data, 4, 16, seed=4))[0]
    assert not torch.equal(a[0], b)


def test_sharded_batches_tile_the_global_batch():
    data = torch.randint(0, 256, (5000,), dtype=torch.uint8)
    full = RandomBatches(data, 6, 8, seed=1)
    ranks = [RandomBatches(data, 2, 8, seed=1, rank=r, world_size=3) for r in range(3)]
    for _ in range(3):
        x, _ = next(full)
        assert torch.equal(x, torch.cat([next(r)[0] for r in ranks]))
    with pytest.raises(ValueError, match="rank"):
        RandomBatches(data, 2, 8, seed=1, rank=3, world_size=3)


def test_fixed_batches_are_the_same_every_time():
    data = torch.randint(0, 256, (5000,), dtype=torch.uint8)
    a, b = fixed_batches(data, 3, 2, 8), fixed_batches(data, 3, 2, 8)
    assert all(torch.equal(x[0], y[0]) for x, y in zip(a, b, strict=True))
