"""Presets: named lists of runs plus the claims they test.

A run is a name and a ``TrainConfig``; a claim (``normlab.lab.study.claims``) names the runs it
needs.
Sizes were measured on the 2-core EPYC VM: at d=64, T=64, B=16 a 24-block GPT-2-style Post-LN
model stalls without warmup while Pre-LN and DeepNorm train, in well under a minute a run.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from normlab.lab.study.claims import AllOf, Claim, Contrast, Timing, fails, trains
from normlab.lab.train.data import VOCAB_SIZE
from normlab.lab.train.trainer import TrainConfig
from normlab.models import TransformerConfig

A000 = "Article 000 (LayerNorm vs RMSNorm)"
A001 = "Article 001 (RMSNorm)"
A003 = "Article 003 (BatchNorm/LayerNorm/RMSNorm)"
# The matrix the at-init gradient claims read: each block's last MLP matrix, as Xiong et al.
PROBE_MATRIX = "mlp.w_out"
# The quick preset's sizes (see quick()): chosen so three seeds of every trained arm fit the
# study's time budget on two cores.
QUICK_DEEP, QUICK_DEPTH_STEPS, QUICK_STEPS = 24, 150, 200


SEED_STRIDE = 10_000  # run seed = SEED_STRIDE * S + i: studies with different --seed share none


@dataclass(frozen=True)
class Run:
    """An arm of the study: one recipe, trained once per seed its claims ask for."""

    name: str
    config: TrainConfig


@dataclass(frozen=True)
class Task:
    """One training run: an arm under one seed."""

    arm: str
    index: int  # the seed's index within the arm (what pairs runs across arms)
    config: TrainConfig

    @property
    def label(self) -> str:
        return f"{self.arm}#{self.index}"


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    runs: tuple[Run, ...]
    claims: tuple[Claim, ...]

    def __post_init__(self) -> None:
        names = [r.name for r in self.runs]
        if len(set(names)) != len(names):
            raise ValueError(f"preset {self.name}: duplicate run names")
        for c in self.claims:
            missing = set(c.arms) - set(names)
            if missing:
                raise ValueError(f"claim {c.name!r} needs runs not in the preset: {missing}")

    def seeds(self, arm: str) -> int:
        """How many seeds ``arm`` is trained under: what its most demanding claim asks for."""
        return max((c.seeds for c in self.claims if arm in c.arms and not c.timed), default=1)

    def tasks(self, seed_block: int = 0) -> list[Task]:
        """Every run of the study: each arm under seeds ``SEED_STRIDE * seed_block + i``."""
        base = SEED_STRIDE * seed_block
        return [
            Task(r.name, i, r.config.replace(seed=base + i))
            for r in self.runs
            for i in range(self.seeds(r.name))
        ]


def _cfg(dim: int, layers: int, heads: int, *, arch: str, norm: str, placement: str,
         seq_len: int, model_kw: dict | None = None, **train_kw) -> TrainConfig:  # fmt: skip
    model = TransformerConfig(
        VOCAB_SIZE, dim, layers, heads, norm=norm, placement=placement, arch=arch,
        max_seq_len=seq_len, init="xavier", **(model_kw or {}),
    )  # fmt: skip
    return TrainConfig(model=model, seq_len=seq_len, **train_kw)


def _depth_runs(depths, placements, *, dim, heads, seq_len, batch, steps, prefix="", **kw):
    """GPT-2-style LayerNorm models, no warmup: the setting of the depth claims."""
    return [
        Run(
            f"{prefix}{p}-L{n}",
            _cfg(
                dim,
                n,
                heads,
                arch="gpt2",
                norm="layernorm",
                placement=p,
                seq_len=seq_len,
                batch_size=batch,
                steps=steps,
                **kw,
            ),
        )  # fmt: skip
        for n in depths
        for p in placements
    ]


def _ablation_runs(base: TrainConfig, *, small_batch: int) -> list[Run]:
    """One baseline (Pre-RMSNorm, LLaMA-style) and one change at a time."""
    rb, lb = base.replace(model={"norm": "batchnorm"}), base.replace(model={"norm": "layernorm"})
    return [
        Run("base", base),
        Run("layernorm", lb),
        Run("no-final-norm", base.replace(model={"final_norm": False})),
        Run("decay-norms", base.replace(decay_norms=True)),
        Run("batchnorm", rb.replace(eval_train_mode=True)),
        Run(f"batchnorm-B{small_batch}", rb.replace(eval_train_mode=True, batch_size=small_batch)),
        Run(f"layernorm-B{small_batch}", lb.replace(batch_size=small_batch)),
    ]


def _loss_contrast(plus: str, minus: str, expect: str, delta: float, seeds: int) -> Contrast:
    return Contrast(
        ((1, plus, "final_val_loss"), (-1, minus, "final_val_loss")), expect, delta, seeds
    )


def _claims(*, depths: tuple[int, ...], deep: int, shallow: int, batch: int, small_batch: int,
            seeds: int, init_seeds: int, matrix: str = PROBE_MATRIX) -> list[Claim]:  # fmt: skip
    """The articles' claims, written against the arm names the builders above produce.

    δ, the smallest effect that matters, is fixed here, before any run: 0.02 nats/byte (about
    1 % of these models' loss) for quality, 0.03 for "as good as", 5 % for timings, and
    ln 1.2 (a 20 % change) for at-init gradient ratios.
    """
    lo, hi = min(depths), max(depths)
    grow = math.log(1.2)

    def ratio(*terms):
        return Contrast(terms, ">0", grow, init_seeds, matrix=matrix)

    def evener(placement: str) -> AllOf:
        return AllOf(tuple(
            (f"L{n}", ratio((1, f"init-post-L{n}", "log_grad_spread"),
                            (-1, f"init-{placement}-L{n}", "log_grad_spread")))
            for n in depths
        ))  # fmt: skip

    nb = f"batchnorm-B{small_batch}"
    return [
        Claim("post-ln-grad-grows",
              "At init, Post-LN's gradient norms grow toward the output, more so in deeper "
              "models (Xiong et al. 2020), which is why it needs warmup.",
              A003, AllOf((
                  (f"grows at L{hi}", ratio((1, f"init-post-L{hi}", "log_grad_ratio"))),
                  (f"more at L{hi} than L{lo}", ratio((1, f"init-post-L{hi}", "log_grad_ratio"),
                                                      (-1, f"init-post-L{lo}", "log_grad_ratio"))),
              )), ("grad_blocks", "seeds")),
        Claim("pre-ln-grad-even",
              "Pre-LN's identity path lets the gradient flow back undiminished: at init its "
              "per-block gradient norms are more even than Post-LN's.",
              A000, evener("pre"), ("grad_blocks", "seeds")),
        Claim("deepnorm-grad-even",
              "DeepNorm (α-scaled skip, β-scaled init) evens out Post-LN's at-init gradients.",
              A000, evener("deepnorm"), ("grad_blocks", "seeds")),
        Claim("post-ln-fails-deep",
              f"Without warmup, Post-LN fails to train at {deep} layers where Pre-LN and "
              "DeepNorm train (and it trains when shallow).",
              A003, AllOf((
                  (f"post-L{deep} fails", fails(f"post-L{deep}", seeds=seeds)),
                  (f"pre-L{deep} trains", trains(f"pre-L{deep}", seeds=seeds)),
                  (f"deepnorm-L{deep} trains", trains(f"deepnorm-L{deep}", seeds=seeds)),
                  (f"post-L{shallow} trains", trains(f"post-L{shallow}", seeds=seeds)),
              )), ("loss", "seeds", "grad_blocks", "residual_rms", "residual_cos")),
        Claim("post-ln-better-shallow",
              f"Post-LN is slightly better than Pre-LN in shallow models ({shallow} layers).",
              A000, _loss_contrast(f"pre-L{shallow}", f"post-L{shallow}", ">0", 0.02, seeds)),
        Claim("deepnorm-beats-pre",
              f"DeepNorm is better than Pre-LN at the same depth ({deep} layers).",
              A000, _loss_contrast(f"pre-L{deep}", f"deepnorm-L{deep}", ">0", 0.02, seeds)),
        Claim("rmsnorm-matches-quality",
              "RMSNorm trains as well as LayerNorm (the re-centering is not needed).",
              A001, _loss_contrast("base", "layernorm", "≈0", 0.03, seeds)),
        Claim("rmsnorm-faster",
              "RMSNorm is cheaper than LayerNorm: less time in the norms per training step "
              "(both with normlab's kernels; PyTorch's own ops are timed beside them).",
              A000, Timing("base", "layernorm", 0.05), ("speed",)),
        Claim("batchnorm-train-eval-gap",
              f"BatchNorm behaves differently in train and eval mode: at batch {small_batch} its "
              "validation loss with running statistics (eval) differs from that with batch "
              "statistics (train mode).",
              A003, Contrast(((1, nb, "final_val_loss"), (-1, nb, "final_val_loss_train_mode")),
                             "≠0", 0.02, seeds)),
        Claim("batchnorm-batch-sensitive",
              f"BatchNorm is sensitive to batch size: going from {batch} to {small_batch} "
              "sequences per batch hurts it more than it hurts LayerNorm.",
              A000, Contrast(((1, nb, "final_val_loss"), (-1, "batchnorm", "final_val_loss"),
                              (-1, f"layernorm-B{small_batch}", "final_val_loss"),
                              (1, "layernorm", "final_val_loss")), ">0", 0.02, seeds)),
        Claim("final-norm-needed",
              "The final norm of a Pre-LN model cannot be left out: without it the output "
              "scale is uncontrolled and the model is worse.",
              A000, _loss_contrast("no-final-norm", "base", ">0", 0.02, seeds),
              ("loss", "seeds", "residual_rms")),
        Claim("no-decay-on-norms",
              "Weight decay on the norms' gains hurts (they should be excluded from decay).",
              A003, _loss_contrast("decay-norms", "base", ">0", 0.02, seeds)),
    ]  # fmt: skip


def _build(name, description, *, depths, deep, shallow, dim, heads, seq_len, batch, steps,
           base: TrainConfig, small_batch: int, seeds: int, init_seeds: int, extra_runs=(),
           extra_claims=(), **train_kw) -> Preset:  # fmt: skip
    places = ("post", "pre", "deepnorm")
    kw = dict(dim=dim, heads=heads, seq_len=seq_len, batch=batch, **train_kw)
    init = _depth_runs(depths, places, steps=0, prefix="init-", **kw)
    trained = _depth_runs((shallow,), ("post", "pre"), steps=steps, **kw)
    trained += _depth_runs((deep,), places, steps=steps, probe_steps=(0, steps), **kw)
    runs = init + trained + _ablation_runs(base, small_batch=small_batch) + list(extra_runs)
    claims = _claims(depths=depths, deep=deep, shallow=shallow, batch=base.batch_size,
                     small_batch=small_batch, seeds=seeds, init_seeds=init_seeds)  # fmt: skip
    return Preset(name, description, tuple(runs), tuple(claims) + tuple(extra_claims))


def quick() -> Preset:
    base = _cfg(64, 4, 4, arch="llama", norm="rmsnorm", placement="pre", seq_len=64,
                batch_size=16, steps=QUICK_STEPS)  # fmt: skip
    return _build(
        "quick", "every claim at the smallest size where it shows, over seeds (≤ 7 min on 2 cores)",
        depths=(6, 12, 24, 48), deep=QUICK_DEEP, shallow=6, dim=64, heads=4, seq_len=64,
        batch=16, steps=QUICK_DEPTH_STEPS, base=base, small_batch=4, seeds=3, init_seeds=16,
    )  # fmt: skip


def paper() -> Preset:
    """Larger: depth to 48, warmup x learning rate for Post-LN, sandwich, Mix-LN, DyT, QK-norm."""
    steps, deep, seeds = 400, 48, 3
    base = _cfg(128, 6, 4, arch="llama", norm="rmsnorm", placement="pre", seq_len=128,
                batch_size=16, steps=600)  # fmt: skip
    kw = dict(dim=64, heads=4, seq_len=64, batch=16, steps=steps)
    extra = _depth_runs((deep,), ("sandwich", "mix"), **kw)
    for warm in (0, 100):
        for lr in (3e-4, 1e-3, 2e-3):
            extra += _depth_runs((24,), ("post",), prefix=f"w{warm}-lr{lr:g}-", **kw,
                                 warmup_steps=warm, lr=lr)  # fmt: skip
    extra += [
        Run("dyt", base.replace(model={"norm": "dyt"})),
        Run("qk-norm", base.replace(model={"qk_norm": True})),
    ]
    claims = [
        Claim("warmup-rescues-post-ln",
              "Warmup lets a deep Post-LN model train (lr 1e-3, 24 layers, 100 warmup steps).",
              A003, _loss_contrast("w0-lr0.001-post-L24", "w100-lr0.001-post-L24", ">0", 0.1,
                                   seeds)),
        Claim("sandwich-mix-train-deep",
              f"Sandwich-LN and Mix-LN train at {deep} layers where Post-LN fails.",
              "Ding et al. 2021; Li et al. 2024",
              AllOf(((f"post-L{deep} fails", fails(f"post-L{deep}", seeds=seeds)),
                     (f"sandwich-L{deep} trains", trains(f"sandwich-L{deep}", seeds=seeds)),
                     (f"mix-L{deep} trains", trains(f"mix-L{deep}", seeds=seeds)))),
              ("loss", "seeds", "grad_blocks")),
        Claim("dyt-matches-rmsnorm", "DyT (no statistics) trains as well as RMSNorm.",
              "Zhu et al. 2025", _loss_contrast("dyt", "base", "≈0", 0.03, seeds)),
    ]  # fmt: skip
    return _build(
        "paper", "larger grids: depth to 48, warmup x lr, sandwich, Mix-LN, DyT, QK-norm",
        depths=(6, 12, 24, 48, 96), deep=deep, shallow=6, base=base, small_batch=4,
        seeds=seeds, init_seeds=16, extra_runs=extra, extra_claims=claims, **kw,
    )  # fmt: skip


def deep() -> Preset:
    """DeepNorm at 512 layers against Post-LN (d=32, T=32, B=8)."""
    n, steps, seeds = 512, 150, 2
    runs = _depth_runs((n,), ("post", "deepnorm"), dim=32, heads=2, seq_len=32, batch=8,
                       steps=steps, probe_steps=(0, steps))  # fmt: skip
    claim = Claim(
        "deepnorm-trains-500",
        f"DeepNorm trains a {n}-layer Transformer where Post-LN does not.",
        A000, AllOf(((f"post-L{n} fails", fails(f"post-L{n}", seeds=seeds)),
                     (f"deepnorm-L{n} trains", trains(f"deepnorm-L{n}", seeds=seeds,
                                                      margin=0.15)))),
        ("loss", "seeds", "grad_blocks", "residual_rms"),
    )  # fmt: skip
    return Preset("deep", f"{n}-layer DeepNorm vs Post-LN", tuple(runs), (claim,))


def smoke() -> Preset:
    """Seconds: every code path on toy sizes (for tests); its verdicts mean nothing."""
    base = _cfg(16, 2, 2, arch="llama", norm="rmsnorm", placement="pre", seq_len=16,
                batch_size=4, steps=12, eval_batches=2)  # fmt: skip
    return _build(
        "smoke", "toy sizes, seconds: exercises the machinery, proves nothing",
        depths=(2, 4), deep=4, shallow=2, dim=16, heads=2, seq_len=16, batch=4, steps=12,
        base=base, small_batch=2, eval_batches=2, seeds=2, init_seeds=3,
    )  # fmt: skip


PRESETS: dict[str, Callable[[], Preset]] = {
    "quick": quick, "paper": paper, "deep": deep, "smoke": smoke,
}  # fmt: skip
