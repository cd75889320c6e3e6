"""The soft smoothed classifier that data-dependent strategies optimise.

``E_z[softmax f(x + S z)]`` estimated on the optimisation bank's draws, with
the reparameterisation ``x + S z`` so gradients reach ``S``. Its top two
probabilities, clamped away from 0 and 1, give a differentiable gap (the
family's :meth:`~smoothlearn.noise.NoiseFamily.soft_gap`).
"""

from numbers import Integral, Real

import numpy as np
import torch

from ..certify import clopper_pearson_lower, count_classes
from ..regions import Scale
from ..utils._deprecation import deprecated_option
from ..utils._sklearn_compat import Interval, StrOptions

__all__ = [
    "OPTIMISER_CONSTRAINTS",
    "better_of",
    "optimisation_draws",
    "resolve_clip",
    "soft_gap",
    "volume_objective",
]

#: Parameter constraints shared by the strategies that optimise a scale.
OPTIMISER_CONSTRAINTS = {
    "lr": [Interval(Real, 0, None, closed="neither")],
    "n_iter": [Interval(Integral, 0, None, closed="left")],
    "n_draws": [Interval(Integral, 1, None, closed="left")],
    "n_samples": [deprecated_option(), Interval(Integral, 1, None, closed="left")],
    "clip": [Interval(Real, 0, 0.5, closed="neither"), StrOptions({"auto"})],
    "compare_draws": [Interval(Integral, 0, None, closed="left")],
}


def resolve_clip(clip, p_max):
    """The probability clamp: ``clip``, or ``1 - p_max`` for ``'auto'``."""
    if clip == "auto":
        return 1.0 - p_max if p_max is not None else 1e-3
    return clip


def optimisation_draws(bank, iteration, n_draws, offset, device):
    """The draws of one optimisation step: bank rows for ``iteration``."""
    start = offset + iteration * n_draws
    return bank.rows(start, start + n_draws).to(device)


def soft_gap(network, X_t, perturb, z, family, clip):
    """Differentiable gap of the soft smoothed classifier at each input.

    Parameters
    ----------
    network : FlatInputNetwork
    X_t : torch.Tensor of shape (m, d)
    perturb : callable
        ``perturb(z)`` -> ``S_i z`` of shape (m, n_draws, d) (differentiable
        in the scale being optimised).
    z : torch.Tensor of shape (n_draws, d)
    family : NoiseFamily
    clip : float
        Probabilities are clamped to ``[clip, 1 - clip]``.

    Returns
    -------
    torch.Tensor of shape (m,)
    """
    m, d = X_t.shape
    noisy = X_t[:, None, :] + perturb(z)
    probs = network.probabilities(noisy.reshape(-1, d)).reshape(m, len(z), -1)
    top2 = probs.mean(dim=1).topk(2, dim=1).values.clamp(clip, 1.0 - clip)
    return family.soft_gap(top2[:, 0], top2[:, 1])


def volume_objective(gap, mean_log_scale, smallest_scale, kappa):
    """ANCER's relaxed objective (ancer.md section 6, appendix C), per input.

    ``gap * gm(S) + kappa * min(S) * gap``: the proxy radius (geometric mean of
    the scale's eigenvalues, ``exp(mean_log_scale)``, times the gap) plus
    ``kappa`` times the inscribed radius. RANCER and RDDRS maximise it too
    (rddrs.md eq. 5 writes ``sqrt(prod lambda)``, which overflows for image
    sizes; we take the d-th root, as ANCER does).
    """
    return torch.exp(mean_log_scale) * gap + kappa * smallest_scale * gap


class _BankRows:
    """Rows ``[offset, ...)`` of a noise bank, read as a bank of their own."""

    def __init__(self, bank, offset):
        self.bank, self.offset = bank, offset

    def rows(self, start, stop):
        return self.bank.rows(self.offset + start, self.offset + stop)


#: Level of the Clopper-Pearson bound by which candidate smoothings are
#: compared (the papers' certification alpha).
COMPARE_ALPHA = 0.001


def better_of(network, X, candidates, score, *, family, bank, offset, n_draws):
    """Per input, the candidate smoothing whose certificate looks largest.

    Each candidate (a strategy answer of one form for all rows: ``scale`` and
    optionally ``basis``, ``scale_rest``) is run on the same ``n_draws``
    optimisation-bank rows from ``offset`` (common random numbers, independent
    of the certification draws, so the memory covers the choice, DESIGN.md
    section 5) and certified there as CERTIFY would: the gap of the
    ``COMPARE_ALPHA`` Clopper-Pearson bound of its top vote count (0 where
    that bound is below 1/2), scored by ``score(gap, Scale)``. The bound, not
    the vote share, is compared: a larger scale with nearly the same share has
    a much smaller certified radius once the bound's width, which grows with
    the scale, is paid. The first candidate wins ties, so inputs that none
    certifies keep it.

    Returns
    -------
    answer : dict
        The chosen rows of the candidates, in their common form.
    chosen : ndarray of int, shape (m,)
        Index of the candidate each input took.
    """
    rows = _BankRows(bank, offset)
    scores = []
    for answer in candidates:
        as_run = {k: np.asarray(v, dtype=np.float32) for k, v in answer.items()}
        counts = count_classes(
            network,
            X,
            as_run["scale"],
            rows,
            n_draws,
            batch_size=max(1000, n_draws),
            basis=as_run.get("basis"),
            scale_rest=as_run.get("scale_rest"),
        )
        p_lower = clopper_pearson_lower(counts.max(axis=1), n_draws, COMPARE_ALPHA)
        gap = np.maximum(family.gap(np.maximum(p_lower, 0.5)), 0.0)
        scale = Scale(
            np.asarray(answer["scale"]), answer.get("basis"), answer.get("scale_rest")
        )
        scores.append(score(gap, scale))
    chosen = np.argmax(np.stack(scores), axis=0)  # first maximum: ties keep the first
    answer = {
        name: np.stack([np.asarray(c[name]) for c in candidates])[
            chosen, np.arange(len(X))
        ]
        for name in candidates[0]
    }
    return answer, chosen
