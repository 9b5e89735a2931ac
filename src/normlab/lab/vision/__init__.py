"""``normlab vision``: 003's statements about BatchNorm in image CNNs, decided on a small CNN on
scikit-learn's bundled 8×8 digits (``net``: the data, the net and one run; ``cnn_findings``: the
registered findings, their control and rate check; ``grid``: the grid of runs and the files;
``plot``: the loss per norm and batch). docs/vision.md holds the design and the published run."""
