"""Training for the lab: byte-level data (``data``), the training loop (``trainer``), the norm
timer, and ``torchrun`` support (``distributed``, ``dist_trainer``); ``command`` is ``normlab
train``."""
