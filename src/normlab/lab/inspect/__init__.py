"""``normlab inspect``: a real pretrained checkpoint's norms measured without training.

- ``options``: what it measures (``InspectOptions``);
- ``locate``: the model directory, its config read and its size checked, before loading;
- ``load``: built on the meta device, its norms recognized, loaded offline;
- ``text``: the text sample (docstrings of the lab's corpus), in chunks;
- ``record``: the forwards, the norm inputs kept by hooks;
- ``hazards``: per layer what the inputs say about precision;
- ``replay``: the inputs through naive FP16/BF16, FP32 statistics and normlab's kernels;
- ``compare``: the norms swapped for their variant, and train mode, against eval;
- ``findings``: the articles' statements decided at real scale (the verdict engine);
- ``words``, ``plots``, ``report``: the report;
- ``run``: the engine, ``run_inspect(options)``.
"""
