"""`normlab study`, in four packages by job, each over the ones before it: ``decide`` (claims,
their rules and the measures they read, over the verdict engine), ``report`` (one study's report:
its sentences, plots, pages and ``claims.json``), ``spec`` (a spec file or preset into a
``Study``), ``run`` (the runner, executors, results store, timing phase, plan and redecide) and
``published`` (the pages over published studies: coverage, the results page, ``--compare``)."""
