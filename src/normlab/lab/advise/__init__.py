"""``normlab advise``: a Hugging Face model's normalization recipe, tested on a scaled-down twin
against the alternatives (``engine``; ``redecide_advise`` rebuilds an advise from its directory);
the config reader (``hf_config``), the twin and its study spec (``twin``), and the advice that
leads the report (``advice``). Example configs ship in ``configs/``."""
