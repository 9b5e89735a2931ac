"""The advice that leads an ``advise`` report: which recipe did best on stability, quality and
speed at the twin's scale, with intervals; how far the twin is from the real model; and which
conclusions are known to depend on scale.

Every number comes from the study's results and verdicts (``decide_all``): the advice reads the
claims of ``twin.spec_text`` back by name, and pairs seeds exactly as the claims do. The text is
a list of blocks rendered twice, to Markdown (advice.md, report.md) and to HTML (report.html).
"""

from __future__ import annotations

import json
import math
import statistics
from html import escape
from typing import Any

from normlab.lab.advise.twin import AS_GOOD, BEATS, FASTER, STABLER, Twin, claim_names
from normlab.lab.render import html_table, md_table
from normlab.lab.study.claims import HOLDS, MEASURES, Contrast, Estimate

_LOSS = MEASURES["final_val_loss"][1]

# ("h", level offset, text) | ("p", text) | ("table", header, rows) | ("ul", items)
Block = tuple


def twin_params(twin: Twin) -> tuple[int, int]:
    """The twin's parameter count: all, and in its blocks."""
    from normlab.models import Transformer

    model = Transformer(twin.config().model)
    return model.num_params(), sum(p.numel() for p in model.blocks.parameters())


def fmt_params(n: float) -> str:
    for unit, div in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= 0.9995 * div:  # 999.9 M reads 1 B, not 1e+03 M
            return f"{n / div:.3g} {unit}"
    return str(int(n))


def _mean_loss(results, arm: str) -> tuple[float | None, int]:
    xs = [x for r in results.get(arm, {}).values() if (x := _LOSS(r, None)) is not None]
    return (statistics.fmean(xs) if xs else None), len(xs)


def _paired(results, a: str, b: str) -> Estimate:
    """loss(a) − loss(b) over the seeds both have, as the claims pair them."""
    c = Contrast(((1, a, "final_val_loss"), (-1, b, "final_val_loss")), "≠0", 0.0, 1)
    return Estimate.of(c.values(results, {}))


def _verdict(wins: tuple[str, list[str]], no_wins: str, losses: tuple[str, list[str]]) -> str:
    """A dimension's verdict: "what: labels" for the alternatives that beat the recipe (or
    ``no_wins``), then the same for those the recipe holds its own against, if any."""
    (win, won), (loss, lost) = wins, losses
    parts = [f"{win}: {', '.join(won)}" if won else no_wins]
    if lost:
        parts.append(f"{loss}: {', '.join(lost)}")
    return "; ".join(parts)


def _est(e: Estimate | None, pct: bool = False) -> str:
    if e is None or e.effect is None:
        return "–"
    if not pct:
        return e.text()

    def f(x: float) -> str:
        return f"{x:+.1%}" if math.isfinite(x) else ("−∞" if x < 0 else "+∞")

    return f"{f(e.effect)} [{f(e.lo)}, {f(e.hi)}], n={e.n}"


def blocks(twin: Twin, preset, results, verdicts, meta: dict) -> list[Block]:
    hf, s = twin.hf, twin.scale
    by_name = {c.name: (c, v) for c, v in verdicts}
    names = claim_names(twin)

    def status(key: str) -> str:
        got = by_name.get(names.get(key, ""))
        return got[1].status if got else "–"

    label = {"recipe": f"the recipe ({twin.recipe_label()})", **{a.arm: a.label for a in twin.alts}}
    out: list[Block] = [
        ("h", 0, f"Advice for {twin.name}"),
        (
            "p",
            f"normlab advise trained a scaled-down twin of {hf.family.name} — its recipe, "
            f"{twin.recipe_label()} — and {len(twin.alts)} alternatives, each one change away, "
            f"over {s.seeds} paired seeds ({s.name}: {s.about}). At the twin's scale:",
        ),
    ]

    # ---- quality at the recipe's learning rate
    arms = ["recipe", *[a.arm for a in twin.alts]]
    losses = {a: _mean_loss(results, a) for a in arms}
    # On a tie the recipe ranks first: an alternative is "best" only by doing better.
    ranked = sorted((m, a != "recipe", a) for a, (m, _) in losses.items() if m is not None)
    q_rows, holds_as_good, holds_beats = [], [], []
    for a in twin.alts:
        m, n = losses[a.arm]
        q_rows.append(
            [
                a.label,
                ", ".join(f"{k} = {json.dumps(v)}" for k, v in a.model.items()),
                "–" if m is None else f"{m:.4f} (n={n})",
                _est(_paired(results, a.arm, "recipe")),
                status(f"as_good:{a.arm}"),
                status(f"beats:{a.arm}"),
            ]
        )
        if status(f"as_good:{a.arm}") == HOLDS:
            holds_as_good.append(a.label)
        if status(f"beats:{a.arm}") == HOLDS:
            holds_beats.append(a.label)
    m0, n0 = losses["recipe"]
    q_rows.insert(
        0, [label["recipe"], "–", "–" if m0 is None else f"{m0:.4f} (n={n0})", "–", "–", "–"]
    )
    if ranked:
        best = ranked[0][2]
        q_best = f"{label[best]} (mean loss {ranked[0][0]:.4f} nats/byte)"
        q_delta = "–" if best == "recipe" else _est(_paired(results, best, "recipe"))
    else:
        q_best, q_delta = "no finished runs", "–"
    q_verdict = _verdict(
        (f"beat the recipe by ≥ {BEATS}", holds_beats),
        f"no alternative beats the recipe by ≥ {BEATS}",
        (f"the recipe is at least as good as (within {AS_GOOD})", holds_as_good),
    )

    # ---- stability: LR sensitivity of each sweep
    swept = [a for a in twin.alts if a.swept]
    s_rows, s_summary = [], None
    if swept:
        sens: dict[str, tuple[float | None, int]] = {}
        stabler, recipe_stabler = [], []
        for a in swept:
            claim, verdict = by_name[names[f"stabler:{a.arm}"]]
            rule = claim.rule
            for arm, sweep in (("recipe", rule.stable), (a.arm, rule.unstable)):
                xs = [s_i for s_i, _ in rule.per_seed(results, sweep).values()]
                sens[arm] = (statistics.fmean(xs) if xs else None), len(xs)
            if verdict.status == HOLDS:
                recipe_stabler.append(a.label)
            if status(f"stabler_alt:{a.arm}") == HOLDS:
                stabler.append(a.label)
        for arm in ["recipe", *[a.arm for a in swept]]:
            claim = by_name[names[f"stabler:{swept[0].arm if arm == 'recipe' else arm}"]][0]
            sweep = claim.rule.stable if arm == "recipe" else claim.rule.unstable
            lr_best = _best_lr(results, sweep)
            m, n = sens[arm]
            delta = "–"
            if arm != "recipe":
                delta = _est(by_name[names[f"stabler:{arm}"]][1].estimate)
            s_rows.append(
                [
                    label[arm],
                    "–" if m is None else f"{m:.4f} (n={n})",
                    delta,
                    lr_best,
                    "–" if arm == "recipe" else status(f"stabler:{arm}"),
                    "–" if arm == "recipe" else status(f"stabler_alt:{arm}"),
                ]
            )
        ranked_s = sorted((m, a != "recipe", a) for a, (m, _) in sens.items() if m is not None)
        if ranked_s:
            best = ranked_s[0][2]
            s_best = f"{label[best]} (LR sensitivity {ranked_s[0][0]:.4f})"
            s_delta = (
                "–" if best == "recipe" else _est(by_name[names[f"stabler:{best}"]][1].estimate)
            )
        else:
            s_best, s_delta = "no finished sweeps", "–"
        s_verdict = _verdict(
            (f"less LR-sensitive than the recipe by ≥ {STABLER}", stabler),
            f"no alternative is less LR-sensitive than the recipe by ≥ {STABLER}",
            ("the recipe is less LR-sensitive than", recipe_stabler),
        )
        s_summary = [
            f"Stability (LR sensitivity over lr {', '.join(f'{x:g}' for x in s.sweep)})",
            s_best,
            s_delta,
            s_verdict,
        ]

    # ---- speed: the serial timing phase
    timings = meta.get("timings") or {}
    norm_claim = by_name.get(names["faster"])
    step_claim = by_name.get(names["faster_step"])
    sp_rows = []
    if norm_claim:
        fast, slow = norm_claim[0].rule.fast, norm_claim[0].rule.slow
        for arm, what in ((fast, "RMSNorm"), (slow, "LayerNorm")):
            t = timings.get(arm) or {}
            med = {
                k: statistics.median(t[k]) if t.get(k) else None
                for k in ("norm_ms", "torch_norm_ms", "step_ms")
            }
            share = (
                f"{med['norm_ms'] / med['step_ms']:.1%}"
                if med["norm_ms"] and med["step_ms"]
                else "–"
            )
            sp_rows.append(
                [
                    what,
                    arm,
                    *("–" if x is None else f"{x:.3f}" for x in med.values()),
                    share,
                ]
            )
        e = norm_claim[1].estimate
        if e is not None and e.effect is not None and e.lo > 0:
            sp_best = "RMSNorm"
        elif e is not None and e.effect is not None and e.hi < 0:
            sp_best = "LayerNorm"
        else:
            sp_best = "no difference resolved"
        sp_delta = (
            f"RMSNorm's saving in the norms' time: {_est(e, pct=True)}; in a whole step: "
            f"{_est(step_claim[1].estimate if step_claim else None, pct=True)}"
        )
        sp_verdict = (
            f"{names['faster']}: {norm_claim[1].status}; {names['faster_step']}: "
            f"{step_claim[1].status if step_claim else '–'} (δ = {FASTER:.0%})"
        )
    summary = [s_summary] if s_summary else []
    summary.append(
        [f"Quality (final validation loss at lr {s.lr:g}, nats/byte)", q_best, q_delta, q_verdict]
    )
    if norm_claim:
        summary.append(
            ["Speed (the norms' time, serial timing phase)", sp_best, sp_delta, sp_verdict]
        )
    out.append(
        (
            "table",
            [
                "",
                "lowest mean here",
                "vs the model's recipe [95 % interval], n",
                "what the claims decided",
            ],
            summary,
        )
    )
    out.append(
        (
            "p",
            "Intervals are 95 % Student-t over paired seeds (speed: over interleaved "
            "timing rounds); the claims and their rules are in report.md and claims.json. "
            "Read every line with the scale caveats below: this is a twin "
            f"{ratio(hf.params(), twin_params(twin)[0])} smaller than the model.",
        )
    )

    out += [
        ("h", 1, f"Quality at lr {s.lr:g}"),
        (
            "table",
            [
                "arm",
                "change from the recipe",
                "final val loss (mean)",
                "Δ vs recipe [95 %], n",
                f"recipe at least as good (within {AS_GOOD})",
                f"beats the recipe (≥ {BEATS})",
            ],
            q_rows,
        ),
    ]
    out.append(("h", 1, "Stability"))
    if s_rows:
        out += [
            (
                "p",
                "LR sensitivity (Wortsman et al. 2023): the mean over the sweep's learning "
                "rates of the final loss above the sweep's best, a diverged run counted as a "
                "uniform guess (ln 256); lower is more stable.",
            ),
            (
                "table",
                [
                    "sweep",
                    "LR sensitivity (mean)",
                    "Δ vs recipe [95 %], n",
                    "best lr (mean loss)",
                    "recipe less sensitive",
                    "alternative less sensitive",
                ],
                s_rows,
            ),
        ]
    else:
        out.append(
            (
                "p",
                f"Not measured at {s.name}: --preset quick sweeps the learning rate of "
                "the recipe and of each alternative placement and QK-norm setting.",
            )
        )
    out.append(("h", 1, "Speed"))
    if sp_rows:
        out.append(
            (
                "table",
                [
                    "norm",
                    "arm",
                    "norms ms/step (normlab)",
                    "norms ms/step (torch)",
                    "step ms",
                    "norms' share of a step",
                ],
                sp_rows,
            )
        )
    out += _scale_blocks(twin) + _caveats(twin)
    return out


def _best_lr(results, sweep) -> str:
    best = None
    for arm in sweep:
        runs = list(results.get(arm, {}).values())
        m, _ = _mean_loss(results, arm)
        if runs and m is not None and (best is None or m < best[0]):
            best = (m, runs[0]["config"]["lr"])
    return "–" if best is None else f"{best[1]:g} ({best[0]:.4f})"


def ratio(real: float, twin: float) -> str:
    """real / twin as "2.7×"; "–" where the config does not give the real size."""
    if not (twin and real):
        return "–"
    x = real / twin
    return f"{x:,.0f}×" if x >= 100 else f"{x:.3g}×"


def _scale_blocks(twin: Twin) -> list[Block]:
    hf, s, sz = twin.hf, twin.scale, twin.hf.sizes
    all_p, block_p = twin_params(twin)
    cfg = twin.config()
    m = cfg.model
    rows = [
        ["parameters (all)", fmt_params(hf.params()), fmt_params(all_p), ratio(hf.params(), all_p)],
        [
            "parameters in the blocks",
            fmt_params(hf.params(False)),
            fmt_params(block_p),
            ratio(hf.params(False), block_p),
        ],
        ["depth (blocks)", sz["layers"], m.n_layers, ratio(sz["layers"], m.n_layers)],
        ["width (hidden size)", sz["hidden"], m.dim, ratio(sz["hidden"], m.dim)],
        [
            "query heads × head_dim",
            f"{sz['heads']} × {sz['head_dim']}",
            f"{m.n_heads} × {m.head_dim}",
            ratio(sz["heads"], m.n_heads),
        ],
        ["K/V heads", sz["kv_heads"], m.n_heads, ratio(sz["kv_heads"], m.n_heads)],
        ["MLP hidden size", sz["ffn"], m.hidden_dim, ratio(sz["ffn"], m.hidden_dim)],
        [
            "depth / width",
            f"{sz['layers'] / sz['hidden']:.3g}",
            f"{m.n_layers / m.dim:.3g}",
            ratio(sz["layers"] / sz["hidden"], m.n_layers / m.dim),
        ],
        [
            "context (positions)",
            sz["positions"] or "?",
            cfg.seq_len,
            ratio(sz["positions"], cfg.seq_len),
        ],
        ["vocabulary", sz["vocab"], m.vocab_size, ratio(sz["vocab"], m.vocab_size)],
    ]
    fields = [[k, v, src] for k, (v, src) in twin.fields.items()]
    train = [[k, v, why] for k, (v, why) in twin.train.items()]
    return [
        ("h", 1, "The twin and the model"),
        (
            "p",
            f"The twin ({s.name}: {s.about}) keeps what {hf.name} says about normalization and "
            f"shrinks the rest; it trains for {cfg.steps} steps of {cfg.batch_size} × "
            f"{cfg.seq_len} bytes ({cfg.steps * cfg.batch_size * cfg.seq_len:,} bytes).",
        ),
        ("table", ["", f"{hf.family.name} ({hf.name})", "twin", "model / twin"], rows),
        ("h", 2, "Every twin field and where it came from"),
        ("table", ["TransformerConfig field", "twin", "from"], fields),
        ("table", ["training field", "twin", "why"], train),
        ("h", 2, "What the twin does not reproduce"),
        ("ul", hf.gaps or ["nothing this reader knows of"]),
    ]


def _caveats(twin: Twin) -> list[Block]:
    s, sz = twin.scale, twin.hf.sizes
    m = twin.config().model
    depth = (
        f"Depth: the twin has {m.n_layers} blocks, the model {sz['layers']}. Post-LN's failures "
        "grow with depth (Xiong et al. 2020; Wang et al. 2022, DeepNet): a Post-LN that trains "
        f"at {m.n_layers} blocks may not at {sz['layers']}, and DeepNorm's advantage over it "
        "grows with depth too."
    )
    qk = (
        "QK-norm: its benefit shows at high learning rates and large attention logits "
        "(Dehghani et al. 2023; Wortsman et al. 2023), and the logits grow with width and "
        f"training length; at d={m.dim} and {s.steps} steps, no difference is weak evidence "
        f"about QK-norm at width {sz['hidden']}."
    )
    lr = (
        "Learning rates: the best learning rate falls as width grows, so the sweep's values "
        f"belong to a d={m.dim} model. Wortsman et al. 2023 reproduce large models' "
        "instabilities in small ones by raising the learning rate, which is why the sweep goes "
        "high; whether a ranking found here holds at the model's width is not tested."
    )
    speed = (
        f"Speed: at d={m.dim} a norm's time is per-call overhead (dispatch, kernel launch), not "
        "the memory traffic that decides RMSNorm vs LayerNorm at width "
        f"{sz['hidden']}; normlab bench measures the kernels at real shapes."
    )
    quality = (
        f"Quality: {s.steps} steps on bytes; differences of a few hundredths of a nat per byte "
        "this early in training can shrink or reverse over a full run."
    )
    precision = (
        "Precision: the twin trains in FP32; the model's bf16 cast orders (rms_casting) and "
        f"eps = {twin.fields['eps'][0]:g} matter in low precision, which normlab numerics "
        "compares."
    )
    return [("h", 1, "What depends on scale"), ("ul", [depth, qk, lr, speed, quality, precision])]


# --------------------------------------------------------------------------------------------
# rendering


def to_markdown(bl: list[Block], top: int = 1) -> str:
    out = []
    for b in bl:
        if b[0] == "h":
            out += ["#" * (top + b[1]) + " " + b[2], ""]
        elif b[0] == "p":
            out += [b[1], ""]
        elif b[0] == "table":
            out += [md_table(b[1], b[2]), ""]
        elif b[0] == "ul":
            out += [*(f"- {x}" for x in b[1]), ""]
    return "\n".join(out).rstrip() + "\n"


def to_html(bl: list[Block], top: int = 1) -> str:
    out = []
    for b in bl:
        if b[0] == "h":
            n = min(6, top + b[1])
            out.append(f"<h{n}>{escape(b[2])}</h{n}>")
        elif b[0] == "p":
            out.append(f"<p>{escape(b[1])}</p>")
        elif b[0] == "table":
            out.append(html_table(b[1], b[2]))
        elif b[0] == "ul":
            out.append("<ul>" + "".join(f"<li>{escape(str(x))}</li>" for x in b[1]) + "</ul>")
    return "<section>" + "\n".join(out) + "</section>"


def headline(bl: list[Block]) -> str:
    """The summary table (the first table) as Markdown, for the terminal."""
    table = next((b for b in bl if b[0] == "table"), None)
    return md_table(table[1], table[2]) if table else ""


def twin_json(twin: Twin) -> dict[str, Any]:
    import dataclasses

    all_p, block_p = twin_params(twin)
    return {
        "hf_config": twin.hf.name,
        "model_type": twin.hf.model_type,
        "family": twin.hf.family.name,
        "scale": dataclasses.asdict(twin.scale),
        "model_sizes": twin.hf.sizes,
        "params": {
            "model": twin.hf.params(),
            "model_blocks": twin.hf.params(False),
            "twin": all_p,
            "twin_blocks": block_p,
        },
        "fields": {k: {"value": v, "from": src} for k, (v, src) in twin.fields.items()},
        "train": {k: {"value": v, "why": why} for k, (v, why) in twin.train.items()},
        "alternatives": [dataclasses.asdict(a) for a in twin.alts],
        "not_reproduced": twin.hf.gaps,
    }
