"""The advice that leads an ``advise`` report: which recipe did best on stability, quality and
speed at the twin's scale, with intervals; how far the twin is from the real model; and which
conclusions are known to depend on scale.

Every number comes from ``ranking.rank`` (the study's results and verdicts read as data); this
module writes it out, as ``normlab.lab.kit.doc`` blocks: its own page (advice.md) and the lead
of the study's report (report.md, report.html).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable

from normlab.lab.advise.bottom import BOTTOM_LINE, bottom_line, missing_runs
from normlab.lab.advise.ranking import ArmMean, Quality, Ranking, Speed, Stability, rank
from normlab.lab.advise.twin import AS_GOOD, BEATS, FASTER, STABLER, Twin, claim_name, twin_params
from normlab.lab.kit import doc as d
from normlab.lab.study.run import StudyResult
from normlab.lab.verdict import Estimate, Word, signed

Claim = tuple[str, str]  # an arm's claim status (its field in ranking's Arm*), what it says


def fmt_params(n: float) -> str:
    for unit, div in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= 0.9995 * div:  # 999.9 M reads 1 B, not 1e+03 M
            return f"{n / div:.3g} {unit}"
    return str(int(n))


# What a dimension's claims decided, for its summary row: the claim that an alternative wins,
# the words where it holds for none, and the claim that the recipe wins.
Claims = tuple[Claim, str, Claim]
_QUALITY_CLAIMS: Claims = (
    ("beats", f"beat the recipe by ≥ {BEATS}"),
    f"no alternative beats the recipe by ≥ {BEATS}",
    ("as_good", f"the recipe is at least as good as (within {AS_GOOD})"),
)
_STABILITY_CLAIMS: Claims = (
    ("alt_stabler", f"less LR-sensitive than the recipe by ≥ {STABLER}"),
    f"no alternative is less LR-sensitive than the recipe by ≥ {STABLER}",
    ("recipe_stabler", "the recipe is less LR-sensitive than"),
)


def _verdict(dim: Quality | Stability, label: dict[str, str], claims: Claims) -> str:
    """A dimension's verdict: "what: labels" for the alternatives whose winning claim holds (or
    the words for none), then the same for the recipe's, if it holds for any."""
    win, no_wins, loss = claims

    def holds(attr: str, what: str) -> str:
        got = [label[x.arm] for x in dim.arms if getattr(x, attr) == Word.HOLDS]
        return f"{what}: {', '.join(got)}" if got else ""

    return "; ".join(x for x in (holds(*win) or no_wins, holds(*loss)) if x)


def _est(e: Estimate | None, pct: bool = False) -> str:
    if e is None or e.effect is None:
        return "–"

    def percent(x: float) -> str:
        return f"{x:+.1%}" if math.isfinite(x) else signed(x)

    return e.text(number=percent if pct else None)


def blocks(twin: Twin, result: StudyResult) -> list[d.Block]:
    """The advice on the twin's finished study as blocks: the ranking (``ranking.rank``) written
    out."""
    r = rank(twin, result)
    label = {"recipe": f"the recipe ({twin.recipe_label()})", **{a.arm: a.label for a in twin.alts}}
    title, *lead = _lead(twin, r, label)
    return [
        title,
        # the first word, on the report's first screen: keep, switch, or cannot tell
        *bottom_line(twin, r, label, len(result.failed)),
        *lead,
        *missing_runs(result),
        *_quality_blocks(twin, r.quality, label),
        *_stability_blocks(twin, r.stability, label),
        *_speed_blocks(r.speed),
        *_scale_blocks(twin),
        *_caveats(twin),
        d.Heading(2, "Not tested by advise"),
        d.Items(UNTESTED),
    ]


def _lead(twin: Twin, r: Ranking, label: dict[str, str]) -> list[d.Block]:
    """The title, what was trained, the summary table (one row per dimension), and how to
    read it."""
    hf, s = twin.hf, twin.scale
    summary = [_stability_row(twin, r.stability, label)] if r.stability else []
    summary.append(_quality_row(twin, r.quality, label))
    if r.speed:
        summary.append(_speed_row(r.speed))
    header = [
        "",
        "lowest mean here",
        "vs the model's recipe [95 % interval], n",
        "what the claims decided",
    ]
    return [
        d.Heading(1, f"Advice for {twin.name}"),
        d.Paragraph(
            f"normlab advise trained a scaled-down twin of {hf.family.name} — its recipe, "
            f"{twin.recipe_label()} — and {len(twin.alts)} alternatives, each one change away, "
            f"over {s.seeds} paired seed{'s' * (s.seeds != 1)} ({s.name}: {s.about}). At the "
            "twin's scale:",
        ),
        d.dense_table(header, summary),
        d.Paragraph(
            "Intervals are 95 % Student-t over paired seeds (speed: over interleaved "
            "timing rounds); the claims and their rules are in report.md and claims.json. "
            "Read every line with the scale caveats below: this is a twin "
            f"{ratio(hf.params(), twin_params(twin)[0])} smaller than the model.",
        ),
    ]


def _best(dim: Quality | Stability, label: dict[str, str], none: str, mean: str) -> list[str]:
    """The summary's "lowest mean here" cell and its "vs the recipe" cell."""
    if (b := dim.best) is None:
        return [none, "–"]
    return [f"{label[b.arm]} ({mean.format(b.mean)})", _est(b.vs_recipe)]  # the recipe's: None


def _quality_row(twin: Twin, q: Quality, label: dict[str, str]) -> list[str]:
    what = f"Quality (final validation loss at lr {twin.scale.lr:g}, nats/byte)"
    none = "no finished runs"
    if q.unlearned and q.best is None:  # ranked on nothing: said where the best would stand
        none = f"none learned past the bytes' frequencies (H = {q.plateau_h:.3f} nats/byte)"
    best = _best(q, label, none, "mean loss {:.4f} nats/byte")
    if q.unlearned and q.best is not None:
        gone = ", ".join(label[a] for a in q.unlearned)
        best[0] += f"; did not learn past the bytes' frequencies: {gone}"
    return [what, *best, _verdict(q, label, _QUALITY_CLAIMS)]


def _stability_row(twin: Twin, st: Stability, label: dict[str, str]) -> list[str]:
    what = f"Stability (LR sensitivity over lr {', '.join(f'{x:g}' for x in twin.scale.sweep)})"
    best = _best(st, label, "no finished sweeps", "LR sensitivity {:.4f}")
    return [what, *best, _verdict(st, label, _STABILITY_CLAIMS)]


def _speed_row(sp: Speed) -> list[str]:
    delta = (
        f"RMSNorm's saving in the norms' time: {_est(sp.norm_saving, pct=True)}; in a whole "
        f"step: {_est(sp.step_saving, pct=True)}"
    )
    verdict = (
        f"{claim_name('faster')}: {sp.norm_status}; {claim_name('faster_step')}: "
        f"{sp.step_status} (δ = {FASTER:.0%})"
    )
    what = "Speed (the norms' time, serial timing phase)"
    return [what, sp.faster or "no difference resolved", delta, verdict]


def _vs_recipe(mean: str) -> dict[str, Callable[[ArmMean], str]]:
    """The columns of an arm's mean (headed ``mean``) and its difference from the recipe's (the
    recipe's own: "–")."""
    return {
        mean: lambda x: "–" if x.mean is None else f"{x.mean:.4f} (n={x.n})",
        "Δ vs recipe [95 %], n": lambda x: _est(x.vs_recipe),
    }


def _quality_blocks(twin: Twin, q: Quality, label: dict[str, str]) -> list[d.Block]:
    change = {
        a.arm: ", ".join(f"{k} = {json.dumps(v)}" for k, v in a.model.items()) for a in twin.alts
    }
    # The recipe's row: no change, no estimate, no claims ("–" each).
    columns = {
        "arm": lambda x: label[x.arm],
        "change from the recipe": lambda x: change.get(x.arm, "–"),
        **_vs_recipe("final val loss (mean)"),
        f"recipe at least as good (within {AS_GOOD})": lambda x: x.as_good,
        f"beats the recipe (≥ {BEATS})": lambda x: x.beats,
    }
    return [
        d.Heading(2, f"Quality at lr {twin.scale.lr:g}"),
        d.column_table(columns, q.arms, dense=True),
    ]


def _stability_blocks(twin: Twin, st: Stability | None, label: dict[str, str]) -> list[d.Block]:
    if st is None:
        return [
            d.Heading(2, "Stability"),
            d.Paragraph(
                f"Not measured at {twin.scale.name}: --preset quick sweeps the learning rate of "
                "the recipe and of each alternative placement and QK-norm setting.",
            ),
        ]
    columns = {
        "sweep": lambda x: label[x.arm],
        **_vs_recipe("LR sensitivity (mean)"),
        "best lr (mean loss)": lambda x: (
            "–" if x.best_lr is None else f"{x.best_lr[0]:g} ({x.best_lr[1]:.4f})"
        ),
        "recipe less sensitive": lambda x: x.recipe_stabler,
        "alternative less sensitive": lambda x: x.alt_stabler,
    }
    return [
        d.Heading(2, "Stability"),
        d.Paragraph(
            "LR sensitivity (Wortsman et al. 2023): the mean over the sweep's learning "
            "rates of the final loss above the sweep's best, a diverged run counted as a "
            "uniform guess (ln 256); lower is more stable.",
        ),
        d.column_table(columns, st.arms, dense=True),
    ]


def _speed_blocks(sp: Speed | None) -> list[d.Block]:
    if sp is None:
        return [d.Heading(2, "Speed")]

    def ms(v: float | None) -> str:
        return "–" if v is None else f"{v:.3f}"

    columns = {
        "norm": lambda x: x.norm,
        "arm": lambda x: x.arm,
        "norms ms/step (normlab)": lambda x: ms(x.norm_ms),
        "norms ms/step (torch)": lambda x: ms(x.torch_norm_ms),
        "step ms": lambda x: ms(x.step_ms),
        "norms' share of a step": lambda x: (
            f"{x.norm_ms / x.step_ms:.1%}" if x.norm_ms and x.step_ms else "–"
        ),
    }
    return [d.Heading(2, "Speed"), d.column_table(columns, sp.arms, dense=True)]


def ratio(real: float, twin: float) -> str:
    """real / twin as "2.7×"; "–" where the config does not give the real size."""
    if not (twin and real):
        return "–"
    x = real / twin
    return f"{x:,.0f}×" if x >= 100 else f"{x:.3g}×"


def _scale_blocks(twin: Twin) -> list[d.Block]:
    hf, s, sz = twin.hf, twin.scale, twin.hf.sizes
    all_p, block_p = twin_params(twin)
    cfg = twin.config()
    m = cfg.model

    def row(what: str, real, small, show=lambda x: x) -> list:
        return [what, show(real), show(small), ratio(real, small)]

    rows = [
        row("parameters (all)", hf.params(), all_p, fmt_params),
        row("parameters in the blocks", hf.params(False), block_p, fmt_params),
        row("depth (blocks)", sz["layers"], m.n_layers),
        row("width (hidden size)", sz["hidden"], m.dim),
        [
            "query heads × head_dim",
            f"{sz['heads']} × {sz['head_dim']}",
            f"{m.n_heads} × {m.head_dim}",
            ratio(sz["heads"], m.n_heads),
        ],
        row("K/V heads", sz["kv_heads"], m.n_heads),
        row("MLP hidden size", sz["ffn"], m.hidden_dim),
        row("depth / width", sz["layers"] / sz["hidden"], m.n_layers / m.dim, "{:.3g}".format),
        row("context (positions)", sz["positions"], cfg.seq_len, lambda x: x or "?"),
        row("vocabulary", sz["vocab"], m.vocab_size),
    ]
    fields = [[k, v, src] for k, (v, src) in twin.fields.items()]
    train = [[k, v, why] for k, (v, why) in twin.train.items()]
    return [
        d.Heading(2, "The twin and the model"),
        d.Paragraph(
            f"The twin ({s.name}: {s.about}) keeps what {hf.name} says about normalization and "
            f"shrinks the rest; it trains for {cfg.steps} steps of {cfg.batch_size} × "
            f"{cfg.seq_len} bytes ({cfg.steps * cfg.batch_size * cfg.seq_len:,} bytes).",
        ),
        d.dense_table(["", f"{hf.family.name} ({hf.name})", "twin", "model / twin"], rows),
        d.Heading(3, "Every twin field and where it came from"),
        d.dense_table(["TransformerConfig field", "twin", "from"], fields),
        d.dense_table(["training field", "twin", "why"], train),
        d.Heading(3, "What the twin does not reproduce"),
        d.Items(tuple(hf.gaps or ["nothing this reader knows of"])),
    ]


def _caveats(twin: Twin) -> list[d.Block]:
    s, sz = twin.scale, twin.hf.sizes
    m = twin.config().model
    caveats = (
        f"Depth: the twin has {m.n_layers} blocks, the model {sz['layers']}. Post-LN's failures "
        "grow with depth (Xiong et al. 2020; Wang et al. 2022, DeepNet): a Post-LN that trains "
        f"at {m.n_layers} blocks may not at {sz['layers']}, and DeepNorm's advantage over it "
        "grows with depth too.",
        "QK-norm: its benefit shows at high learning rates and large attention logits "
        "(Dehghani et al. 2023; Wortsman et al. 2023), and the logits grow with width and "
        f"training length; at d={m.dim} and {s.steps} steps, no difference is weak evidence "
        f"about QK-norm at width {sz['hidden']}.",
        "Learning rates: the best learning rate falls as width grows, so the sweep's values "
        f"belong to a d={m.dim} model. Wortsman et al. 2023 reproduce large models' "
        "instabilities in small ones by raising the learning rate, which is why the sweep goes "
        "high; whether a ranking found here holds at the model's width is not tested.",
        f"Speed: at d={m.dim} a norm's time is per-call overhead (dispatch, kernel launch), not "
        "the memory traffic that decides RMSNorm vs LayerNorm at width "
        f"{sz['hidden']}; normlab bench measures the kernels at real shapes.",
        f"Quality: {s.steps} steps on bytes; differences of a few hundredths of a nat per byte "
        "this early in training can shrink or reverse over a full run.",
        "Precision: the twin trains in FP32; the model's bf16 cast orders (rms_casting) and "
        f"eps = {twin.fields['eps'][0]:g} matter in low precision, which normlab numerics "
        "compares.",
    )
    return [d.Heading(2, "What depends on scale"), d.Items(caveats)]


# The choices advise leaves to other commands (each the answer of docs/answers.md's choice):
# the twin keeps the model's final norm, its weight decay and FP32.
UNTESTED = (
    "A final norm: the twin keeps the model's; leaving it out is tested by the final-norm "
    "claims of normlab study --preset quick",
    "Weight decay on the norms' parameters: tested by the no-decay-on-norms claim of normlab "
    "study --preset quick",
    "Norm statistics in FP16/BF16: normlab numerics measures each norm's error against float64, "
    "normlab inspect a real checkpoint's",
)


# --------------------------------------------------------------------------------------------
# rendering


def page(bl: list[d.Block]) -> d.Document:
    """The advice as its own page (``advice.md``)."""
    return d.Document("normlab advise", list(bl))


def lead(bl: list[d.Block]) -> d.Section:
    """The advice as the study report's lead: its headings one level down."""
    return d.Section("advice", tuple(d.demoted(bl)))


def headline(bl: list[d.Block]) -> str:
    """For the terminal: the bottom line, then the summary table (the first table) as
    Markdown."""
    at = next((i for i, b in enumerate(bl) if b == d.Heading(2, BOTTOM_LINE)), None)
    bottom = f"{BOTTOM_LINE}: {bl[at + 1].text}" if at is not None else ""
    table = next((b for b in bl if isinstance(b, d.Table)), None)
    return "\n\n".join(x for x in (bottom, table and d.markdown(table)) if x)
