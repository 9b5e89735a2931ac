"""The lab: the ``normlab`` commands (``pip install "normlab[lab]"``). Nothing in the library
imports this package."""
