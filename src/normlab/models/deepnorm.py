"""DeepNorm's constants (Wang et al. 2022, "DeepNet: Scaling Transformers to 1,000 Layers").

A DeepNorm sublayer computes ``x = LN(α·x + G(x))``: α multiplies the skip, not the branch. At
init the weights of the value projection, the attention output projection and the MLP are
Xavier-normal with gain β (query and key keep gain 1), so each update moves the output by O(1/α)
instead of O(1) and the model stays stable at depth.
"""

from __future__ import annotations

import numbers

Constants = tuple[float, float]


def _positive(name: str, n: object) -> int:
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n <= 0:
        raise ValueError(f"{name} must be a positive int, got {n!r}")
    return int(n)


def deepnorm_constants(
    n_layers: int | None, arch: str | tuple[str, int, int] = "decoder"
) -> Constants | tuple[Constants, Constants]:
    """``(alpha, beta)`` for a DeepNorm model, as in Table 1 of the DeepNet paper.

    - ``arch="decoder"`` (decoder-only, ``M = n_layers``): α = (2M)^¼, β = (8M)^-¼.
    - ``arch="encoder"`` (encoder-only, ``N = n_layers``): α = (2N)^¼, β = (8N)^-¼.
    - ``arch=("encdec", N, M)``: returns ``((α_enc, β_enc), (α_dec, β_dec))`` with
      encoder α = 0.81 (N⁴M)^(1/16), β = 0.87 (N⁴M)^(-1/16) and decoder α = (3M)^¼,
      β = (12M)^-¼. The layer counts come from the tuple; ``n_layers`` is ignored (pass None).
    """
    if isinstance(arch, tuple):
        if len(arch) != 3 or arch[0] != "encdec":
            raise ValueError(f"arch tuple must be ('encdec', n_enc, n_dec), got {arch!r}")
        n, m = _positive("n_enc", arch[1]), _positive("n_dec", arch[2])
        enc = (0.81 * (n**4 * m) ** (1 / 16), 0.87 * (n**4 * m) ** (-1 / 16))
        dec = ((3 * m) ** 0.25, (12 * m) ** -0.25)
        return enc, dec
    if arch not in ("decoder", "encoder"):
        raise ValueError(
            f"arch must be 'decoder', 'encoder' or ('encdec', n_enc, n_dec), got {arch!r}"
        )
    n = _positive("n_layers", n_layers)
    # Encoder-only and decoder-only share the formula; only the name of the depth differs.
    return (2 * n) ** 0.25, (8 * n) ** -0.25
