"""``normlab inspect``: a real pretrained checkpoint's norms measured without training.

- ``inspect_options``: what it measures (``InspectOptions``);
- ``locate``: the model directory, its config read and its size checked, before loading;
- ``load``: built on the meta device, its norms recognized, loaded offline;
- ``text``: the text sample (docstrings of the lab's corpus), in chunks;
- ``record``: the forwards, the norm inputs kept by hooks;
- ``hazards``: per layer what the inputs say about precision;
- ``formats_replay``: the inputs through naive FP16/BF16, FP32 statistics and normlab's kernels;
- ``swap``: the norms swapped for their variant, and train mode, against eval;
- ``scale_findings``: the articles' statements decided at real scale (the verdict engine);
- ``summary_words``, ``inspect_plots``, ``inspect_report``: the report;
- ``run``: the engine, ``run_inspect(options)``.
"""
