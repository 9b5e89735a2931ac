"""Training: byte-level data (``data``) and the single-process training loop (``trainer``)."""
