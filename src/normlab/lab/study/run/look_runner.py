"""The training phase of a study with a sequential design: batch after batch of seeds, each
look's open claims deciding what trains next (``normlab.lab.study.decide.looks``).

Look 1 trains every arm's first batch; then every claim is decided on what has run, a claim
that settles stops, and the arms of the open ones get their next batch; until no claim is open
or every open one is at its cap. The runs are the fixed design's (seed index i of an arm is the
same run, under the same key), so ``--resume`` and a study extended to a larger cap reuse them.
"""

from __future__ import annotations

import sys
from dataclasses import replace

from normlab.lab.study.decide.looks import decide_looks, needed
from normlab.lab.study.spec import Study


def train_looks(study: Study, corpus, options, train_runs) -> tuple:
    """Train ``study`` look by look with ``train_runs`` (the runner's, for a list of runs);
    returns what it returns for the whole study: the results, the runs that raised, how many
    results came from an earlier invocation, and the last look's worker plan."""
    from normlab.lab.study.run.store import ResultStore, run_key

    store = options.out / "results.jsonl"
    before = set(ResultStore(store).load()) if options.resume and store.is_file() else set()
    h = corpus.unigram_val_xent()
    results: dict = {}
    failed: list[str] = []
    tried: set[str] = set()
    need = dict.fromkeys((a.name for a in study.arms), 0)
    plan, look = None, 0
    while True:
        outcomes = decide_looks(study, results, h)
        need = {a: max(n, need[a]) for a, n in needed(study, outcomes).items()}
        runs = study.runs(options.seed, need)
        todo = [r for r in runs if r.index not in results.get(r.arm, {}) and r.label not in tried]
        if not todo:
            break
        look += 1
        if not options.quiet:
            still = sum(o.open for o in outcomes)
            print(f"look {look}: {still} claim(s) open, {len(todo)} run(s) to do", file=sys.stderr)
        results, fails, _, plan = train_runs(study, corpus, options, runs=runs)
        failed += [f for f in fails if f not in failed]
        tried |= {r.label for r in todo}
        options = replace(options, resume=True)  # the next look continues this one's file
    keys = {(r.arm, r.index): run_key(r.config, corpus.sha256) for r in runs}
    reused = sum(keys[k] in before for k in keys if k[1] in results.get(k[0], {}))
    return results, failed, reused, plan
