"""BatchNorm over the tokens of channels-last tensors: pooled (``torch.nn``'s statistics) or
causal (each position normalized with statistics of positions up to it only)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from normlab.collectives import all_reduce_sum
from normlab.reference import residual_add, stat_dtype
from normlab.validation import (
    check_dtype,
    check_eps,
    check_flag,
    check_momentum,
    check_size,
    check_tensor,
    check_x,
)


class BatchNorm(nn.Module):
    """BatchNorm over the tokens of ``(B, T, C)`` (or any ``(..., C)``) tensors.

    In ``train()`` each channel is normalized with the mean and (biased) variance of the batch's
    tokens, and the running statistics are updated (unbiased variance, as ``torch.nn``); in
    ``eval()`` the running statistics are used. ``mask`` (shape ``x.shape[:-1]``, ``True`` for real
    tokens) keeps padding out of the statistics. Buffers and parameters are named as in
    ``torch.nn.BatchNorm1d``, so their ``state_dict``s are interchangeable.

    ``causal=True`` is for ``(B, T, ..., C)`` inputs of a causal model: pooled statistics let
    position ``t`` be normalized with the tokens after ``t`` of its own sequence (the future
    leaks into the training loss). The causal form normalizes position ``t`` with the mean and
    variance of the tokens at positions ``<= t`` over the batch (and the dims between T and C,
    e.g. heads); where those are fewer than ``min_tokens`` (the first positions at a small
    batch, whose statistics would be noise) the running statistics join them as prior tokens.
    It keeps running statistics per position, ``running_prefix_mean``/``running_prefix_var``
    of shape ``(max_positions, C)``, the moving averages of each position's prefix statistics:
    eval mode normalizes position t with them, as training did (a model trained with prefix
    statistics and evaluated with pooled ones sees, at every position, a normalization it
    never trained with, and the error compounds over the blocks). ``running_mean``/``var``
    are still updated from the whole batch, as torch's.

    Under an initialized process group the statistics are summed over the ranks (``sync=True``,
    torch's ``SyncBatchNorm``): N ranks compute what one process computes on the whole batch.
    ``sync=False`` keeps each rank's own: every rank normalizes its shard with its shard's
    statistics, as ``torch.nn.BatchNorm1d`` under DDP does (what the article means by statistics
    split over data-parallel ranks), at no communication.
    """

    # The models pass the padding mask to every norm module that says it takes one: its
    # statistics span tokens, so padding must stay out of them (normlab.models.layers).
    takes_mask = True
    # True: normalize with the running statistics in train mode too and leave them as they are
    # (frozen BatchNorm, as when fine-tuning): the same norm without batch noise.
    frozen = False

    def __init__(
        self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, *,
        causal: bool = False, max_positions: int | None = None, min_tokens: int = 64,
        sync: bool = True, device=None, dtype=None,
    ):  # fmt: skip
        super().__init__()
        check_size("num_features", num_features)
        check_eps(eps)
        check_dtype(dtype)
        check_flag("causal", causal)
        check_flag("sync", sync)
        check_momentum(momentum)
        if isinstance(min_tokens, bool) or not isinstance(min_tokens, int) or min_tokens < 2:
            raise ValueError(f"min_tokens must be an int >= 2, got {min_tokens!r}")
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        if causal and (
            isinstance(max_positions, bool)
            or not isinstance(max_positions, int)
            or max_positions <= 0
        ):
            raise ValueError(f"causal=True needs max_positions > 0, got {max_positions!r}")
        if causal:  # its running prefix statistics: max_positions x num_features of them
            check_size("max_positions x num_features", max_positions * num_features)
        self.causal, self.min_tokens, self.sync = bool(causal), min_tokens, bool(sync)
        self.max_positions = max_positions if causal else None
        kw = {"device": device, "dtype": dtype}
        self.weight = nn.Parameter(torch.ones(num_features, **kw))
        self.bias = nn.Parameter(torch.zeros(num_features, **kw))
        self.register_buffer("running_mean", torch.zeros(num_features, **kw))
        self.register_buffer("running_var", torch.ones(num_features, **kw))
        self.register_buffer(
            "num_batches_tracked", torch.tensor(0, dtype=torch.long, device=device)
        )
        if causal:  # what eval mode uses at each position: the prefix statistics of training
            shape = (max_positions, num_features)
            self.register_buffer("running_prefix_mean", torch.zeros(shape, **kw))
            self.register_buffer("running_prefix_var", torch.ones(shape, **kw))

    def reset_running_stats(self) -> None:
        self.running_mean.zero_()
        self.running_var.fill_(1)
        self.num_batches_tracked.zero_()
        if self.causal:
            self.running_prefix_mean.zero_()
            self.running_prefix_var.fill_(1)

    def forward(self, x: Tensor, residual: Tensor | None = None, *, mask: Tensor | None = None):
        check_x(x)
        if x.shape[-1] != self.num_features:
            raise ValueError(
                f"x must end in num_features={self.num_features}, got {tuple(x.shape)}"
            )
        if mask is not None:
            if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
                raise TypeError("mask must be a bool tensor (True marks real tokens)")
            if tuple(mask.shape) != tuple(x.shape[:-1]):
                raise ValueError(
                    f"mask must have shape {tuple(x.shape[:-1])}, got {tuple(mask.shape)}"
                )
        if residual is not None:
            check_tensor("residual", residual, x, tuple(x.shape))
            h = residual_add(x, residual)
            return self._normalize(h, mask), h
        return self._normalize(x, mask)

    def _normalize(self, x: Tensor, mask: Tensor | None) -> Tensor:
        s = stat_dtype(x.dtype)
        xs = x.to(s).reshape(-1, self.num_features)  # (tokens, C)
        if self.causal and (x.dim() < 3 or x.shape[1] > self.max_positions):
            raise ValueError(
                f"causal BatchNorm needs (B, T, ..., C) inputs with T <= max_positions="
                f"{self.max_positions}, got shape {tuple(x.shape)}"
            )
        batch = self.training and not self.frozen
        if self.causal and not batch:  # each position as training normalized it
            t = x.shape[1]
            xt = x.to(s).reshape(x.shape[0], t, -1, self.num_features)  # (B, T, G, C)
            rm, rv = (buf[:t].to(s).unsqueeze(1) for buf in self._prefix_buffers())  # (T, 1, C)
            xc, var = xt - rm, rv
        elif not batch:
            xc, var = xs - self.running_mean.to(s), self.running_var.to(s)
        elif self.causal:
            xc, var = self._causal_stats(x.to(s), mask)
        else:
            xc, var = self._batch_stats(xs, None if mask is None else mask.reshape(-1))
        y = xc * torch.rsqrt(var + self.eps) * self.weight.to(s) + self.bias.to(s)
        return y.to(x.dtype).reshape(x.shape)

    def _causal_stats(self, x: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor]:
        r"""Per position ``t`` of ``x`` (B, T, ..., C): the centered tokens and the variance of
        the ``n_t`` tokens at positions ``<= t`` (over B and the dims between T and C), with the
        position's running prefix statistics ``(r_t, v_t)`` as ``k_t = max(0, min_tokens -
        n_t)`` prior tokens:

        .. math::
            y = x - c,\quad \mu_t = \tfrac{1}{n_t}\sum_{s \le t} y_s,\quad
            \sigma_t^2 = \tfrac{1}{n_t}\sum_{s \le t} y_s^2 - \mu_t^2,\quad N_t = n_t + k_t

            m_t = \frac{n_t \mu_t + k_t (r_t - c)}{N_t},\quad
            s_t^2 = \frac{n_t \sigma_t^2 + k_t v_t + \frac{n_t k_t}{N_t}(\mu_t - r_t + c)^2}{N_t}

        (Chan et al.'s pairwise combination), and ``x - c - m_t`` normalized by ``s_t``. Before
        the first update the running statistics are no prior (``k_t = 0``): the prefix alone is
        bounded (``|x̂| <= sqrt(n_t - 1)``) where init-time running statistics are not.

        ``c`` is the mean of the first position that holds a real token (a tensor index: no host
        sync), so no position's statistics depend on later tokens, not even through rounding,
        and nothing cancels however far the data is from 0: the relative error of ``sigma_t^2``
        is about ``eps_machine * (1 + (mu_t / sigma_t)^2)``, small unless a prefix's mean sits
        thousands of its standard deviations from that first position's. ``c`` is a constant to
        autograd (any shift gives the same statistics). The per-position sums are all-reduced
        before the prefix sums, so N ranks compute what one process does on the whole batch.
        The running prefix statistics are then updated from ``(c + mu_t, sigma_t^2)``, and the
        pooled ones from the last prefix, which is the whole batch.
        """
        b, t, c_ = x.shape[0], x.shape[1], self.num_features
        xs = x.reshape(b, t, -1, c_)  # (B, T, G, C): G = the dims between T and C
        # Read before this batch updates them: they must not see its future tokens either.
        r, v = (buf[:t].to(x.dtype, copy=True) for buf in self._prefix_buffers())  # (T, C)
        tracked = self.num_batches_tracked > 0
        if mask is None:
            count = torch.full((t, 1), float(b * xs.shape[2]), dtype=x.dtype, device=x.device)
        else:
            keep = mask.reshape(b, t, -1, 1)
            count = keep.sum((0, 2)).to(x.dtype)  # (T, 1)
        xv = xs if mask is None else torch.where(keep, xs, 0.0)  # padding may hold inf or NaN
        first = self._reduce_stats(torch.cat([xv.detach().sum((0, 2)), count], -1)).cumsum(0)
        n = first[:, -1:]  # (T, 1) tokens at positions <= t
        t0 = (count > 0).squeeze(1).long().argmax(0, keepdim=True)  # the first real position
        at = first.index_select(0, t0)[0]  # (C + 1,): index_select, so no host sync
        shift = at[:c_] / at[c_:].clamp_min(1)  # (C,)
        y = xs - shift
        yv = y if mask is None else torch.where(keep, y, 0.0)
        sums = self._reduce_stats(torch.cat([yv.sum((0, 2)), yv.pow(2).sum((0, 2))], -1))
        sums = sums.cumsum(0)  # (T, 2C)
        mu = sums[:, :c_] / n.clamp_min(1)
        sigma2 = (sums[:, c_:] / n.clamp_min(1) - mu.pow(2)).clamp_min(0)
        _check_count(n[-1, 0])
        # The whole batch is the last prefix: the running statistics, as the pooled form's; and
        # per position, the prefix statistics eval mode will use.
        self._update_running((shift + mu[-1]).detach(), sigma2[-1].detach(), n[-1, 0].detach())
        self._update_prefix((shift + mu).detach(), sigma2.detach(), n.detach())
        k = torch.where(tracked, (self.min_tokens - n).clamp_min(0), 0.0)  # (T, 1)
        big_n = (n + k).clamp_min(1)
        r = r - shift
        mean = (n * mu + k * r) / big_n  # (T, C)
        var = (n * sigma2 + k * v + n * k / big_n * (mu - r).pow(2)) / big_n
        return y - mean.unsqueeze(1), var.unsqueeze(1)  # (B, T, G, C), (T, 1, C)

    def _batch_stats(self, xs: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor]:
        r"""The centered tokens ``x - mean`` and the biased variance of the (unmasked) tokens,
        by the corrected two-pass algorithm (Chan, Golub & LeVeque 1983):

        .. math::
            m = \tfrac1n\sum_t x_t,\quad d_t = x_t - m,\quad
            \delta = \tfrac1n\sum_t d_t,\quad
            \sigma^2 = \tfrac1n\sum_t d_t^2 - \delta^2,\quad \mu = m + \delta

        The second pass sums around the first pass's mean, so nothing cancels however far the
        mean is from 0 (or from a stale running mean); ``delta`` is the rounding error of ``m``,
        subtracted from ``d`` so that ``x - mu`` keeps the digits an FP32 ``mu`` would round off.
        Each pass is one all-reduce of per-rank sums: N ranks compute (and differentiate) what one
        process computes on the concatenated batch. ``m`` is a constant to autograd: ``d - delta``
        and ``sigma^2`` do not depend on it, so the gradient is exact without the first pass's
        graph (nor its all-reduce in the backward).
        """
        if mask is None:
            count = torch.tensor(float(xs.shape[0]), dtype=xs.dtype, device=xs.device)
            valid = xs
        else:
            count = mask.sum().to(xs.dtype)
            keep = mask.unsqueeze(-1)
            valid = torch.where(keep, xs, 0.0)  # not a product: padding may hold inf or NaN
        sums = self._reduce_stats(torch.cat([valid.detach().sum(0), count.reshape(1)]))
        count = sums[-1]
        _check_count(count)
        m = sums[:-1] / count
        d = xs - m
        dv = d if mask is None else torch.where(keep, d, 0.0)
        sums = self._reduce_stats(torch.cat([dv.sum(0), dv.pow(2).sum(0)]))
        delta = sums[: self.num_features] / count
        var = (sums[self.num_features :] / count - delta.pow(2)).clamp_min(0)
        self._update_running((m + delta).detach(), var.detach(), count.detach())
        return d - delta, var

    def _momentum(self) -> float:
        """The running statistics' update weight for the batch just counted: ``momentum``, or
        the cumulative average's ``1 / num_batches_tracked`` when it is None (as torch's)."""
        return 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum

    def _prefix_buffers(self) -> tuple[Tensor, Tensor]:
        return self.running_prefix_mean, self.running_prefix_var

    @torch.no_grad()
    def _update_prefix(self, mean: Tensor, var: Tensor, n: Tensor) -> None:
        """The running prefix statistics of positions ``< T`` (``(T, C)``; ``n`` ``(T, 1)``),
        with the momentum of the pooled ones (:meth:`_update_running` has counted this batch);
        a prefix of fewer than 2 tokens leaves its position's unchanged."""
        t = mean.shape[0]
        m = self._momentum()
        ok = n >= 2
        unbiased = var * n / (n - 1).clamp_min(1)
        for buf, new in zip(self._prefix_buffers(), (mean, unbiased), strict=True):
            old = buf[:t]
            old.copy_(torch.where(ok, old.lerp(new.to(old.dtype), m), old))

    def _reduce_stats(self, sums: Tensor) -> Tensor:
        """Sum per-rank sums over the ranks when a process group is active and ``sync`` (once
        for ``[sum x, count]``, once for ``[sum d, sum d²]``), so N ranks normalize (and
        differentiate) exactly as one process on the concatenated batch."""
        return all_reduce_sum(sums) if self.sync else sums

    @torch.no_grad()
    def _update_running(self, mean: Tensor, var: Tensor, count: Tensor) -> None:
        self.num_batches_tracked += 1
        m = self._momentum()
        unbiased = var * count / (count - 1)
        self.running_mean.lerp_(mean.to(self.running_mean.dtype), m)
        self.running_var.lerp_(unbiased.to(self.running_var.dtype), m)

    def extra_repr(self) -> str:
        causal = (
            f", causal=True, max_positions={self.max_positions}, min_tokens={self.min_tokens}"
            if self.causal
            else ""
        )
        local = "" if self.sync else ", sync=False"
        return f"{self.num_features}, eps={self.eps}, momentum={self.momentum}{causal}{local}"


def _check_count(count: Tensor) -> None:
    """Training-mode statistics need two real tokens (checked outside ``torch.compile``, where
    reading the count would break the graph)."""
    if not torch.compiler.is_compiling() and count.item() < 2:
        raise ValueError(
            f"BatchNorm needs at least 2 unmasked tokens in training mode, got {int(count)}"
        )
