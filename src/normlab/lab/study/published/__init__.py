"""The pages over published studies: which statements the lab decides (``--coverage``), the
results page and its forest plot, a published ``claims.json`` decided again, ``--compare``."""
