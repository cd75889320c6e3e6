"""The soft smoothed classifier that data-dependent strategies optimise.

``E_z[softmax f(x + S z)]`` estimated on the optimisation bank's draws, with
the reparameterisation ``x + S z`` so gradients reach ``S``. Its top two
probabilities, clamped away from 0 and 1, give a differentiable gap (the
family's :meth:`~smoothlearn.noise.NoiseFamily.soft_gap`).
"""

from numbers import Integral, Real

import numpy as np
import torch

from ..counting import count_classes
from ..scale import Scale
from ..utils._deprecation import deprecated_option
from ..utils._sklearn_compat import Interval, StrOptions

__all__ = [
    "COMPARE_DRAWS",
    "COMPARE_FIRST_LOOK",
    "Convergence",
    "OPTIMISER_CONSTRAINTS",
    "STOP_PATIENCE",
    "STOP_TOL",
    "STOP_WINDOW",
    "STOP_Z",
    "better_of",
    "comparison_looks",
    "optimisation_draws",
    "resolve_clip",
    "soft_gap",
    "tied_min",
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
    "tol": [None, Interval(Real, 0, None, closed="left")],
}

#: Steps whose objectives the stopping rule averages (one step's objective is a
#: Monte Carlo estimate on ``n_draws`` draws).
STOP_WINDOW = 10

#: Windows in a row without improvement after which an input stops.
STOP_PATIENCE = 2

#: Standard errors of the difference of two window means by which a window must
#: beat the best earlier one. With 2 standard errors, ANCER on Fashion-MNIST
#: (built-in CNN, 16 images) stopped after 82 of 100 steps on average while its
#: objective still rose (its scales' geometric mean 1.953 sigma_0 against 2.004
#: for 3 windows at 1 standard error, which certified as the fixed 100 steps
#: do on 40 images, where 2 standard errors lost AC R~ 0.10 [0.06, 0.15]);
#: with 1 it takes 93 steps and reaches 1.994, and on the MNIST slice
#: (n = 100,000) ANCER costs 2.08x Cohen's time either way (3 windows: 2.47x).
STOP_Z = 1.0

#: The optimisers' default ``tol``: a window must beat the best earlier one by
#: more than this fraction (and its noise) to count as an improvement.
STOP_TOL = 1e-3


class Convergence:
    """Which inputs an optimiser still moves: each stops when its objective has
    stopped improving.

    The stated criterion: every :data:`STOP_WINDOW` steps, an input's mean
    objective over the window is compared with its best earlier window mean;
    it improved if it is higher by more than ``tol`` times that best and by
    more than :data:`STOP_Z` standard errors of the difference of the two means (the
    objective is estimated on each step's draws). An input stops after
    :data:`STOP_PATIENCE` windows in a row without improvement and keeps the
    parameters it has then; ``n_iter`` bounds the steps of every input.
    ``tol=None`` never stops an input: the papers' fixed ``n_iter``.

    An input's steps depend only on its own objectives (the draws are shared),
    so whether it stops does not depend on the rows optimised beside it.

    Parameters
    ----------
    m : int
        Inputs.
    tol : float or None
    device : torch.device
    """

    def __init__(self, m, tol, device):
        self.tol = tol
        self.active = torch.arange(m, device=device)
        self.steps = torch.zeros(m, dtype=torch.int64, device=device)
        self._window = torch.zeros(m, STOP_WINDOW, dtype=torch.float64, device=device)
        self._best = torch.full((m,), -torch.inf, dtype=torch.float64, device=device)
        self._best_se = torch.zeros(m, dtype=torch.float64, device=device)
        self._stale = torch.zeros(m, dtype=torch.int64, device=device)

    def record(self, it, objective):
        """Record step ``it``'s objective of the active inputs (in their order);
        returns the inputs that stop after it (indices into all inputs)."""
        rows = self.active
        self._window[rows, it % STOP_WINDOW] = objective.detach().to(torch.float64)
        self.steps[rows] += 1
        if self.tol is None or (it + 1) % STOP_WINDOW:
            return rows[:0]
        window = self._window[rows]
        mean = window.mean(dim=1)
        se = window.std(dim=1) / STOP_WINDOW**0.5
        best, best_se = self._best[rows], self._best_se[rows]
        margin = torch.maximum(
            self.tol * best.abs(), STOP_Z * torch.sqrt(se**2 + best_se**2)
        )
        improved = ~torch.isfinite(best) | (mean > best + margin)
        self._best[rows] = torch.where(improved, mean, best)
        self._best_se[rows] = torch.where(improved, se, best_se)
        self._stale[rows] = torch.where(improved, 0, self._stale[rows] + 1)
        done = self._stale[rows] >= STOP_PATIENCE
        self.active = rows[~done]
        return rows[done]

    @staticmethod
    def freeze(optimiser, param, rows):
        """Stop Adam moving ``rows`` of ``param``: with their first moment 0 and
        no gradient from then on, its steps leave them where they are."""
        state = optimiser.state.get(param)
        if len(rows) and state:
            state["exp_avg"][rows] = 0.0


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


#: Scales within this relative distance of a row's smallest are tied with it
#: (:func:`tied_min`): far above float32 rounding (6e-8), far below any
#: difference an optimiser step makes (its steps are lr, 1e-3 and up).
TIE_RTOL = 1e-5


def tied_min(values):
    """Each row's smallest value, its gradient shared equally by its ties.

    ``min`` passes its gradient to one entry, chosen by which is smallest;
    the objectives' ``kappa * min(S) * gap`` term then pushes that one scale
    alone. Starts are ties (an isotropic start repeats one sigma; Adam's
    first steps, about ``lr * sign(gradient)``, keep many scales equal), and
    among ties float rounding picks the entry: a row batched with others and
    the same row alone differ by an ulp, so the push went to different scales
    and RANCER's answer for one input moved by 7% with its neighbours in the
    call. Here every entry within :data:`TIE_RTOL` of the minimum shares the
    gradient (a subgradient of min, and for exact ties what ``torch.amin``
    does), so an ulp cannot move it; the value is their mean, above the
    minimum by at most ``TIE_RTOL`` of it.

    Parameters
    ----------
    values : torch.Tensor of shape (m, k), positive

    Returns
    -------
    torch.Tensor of shape (m,)
    """
    with torch.no_grad():
        low = values.min(dim=1, keepdim=True).values
        tied = (values <= low * (1.0 + TIE_RTOL)).to(values.dtype)
        weights = tied / tied.sum(dim=1, keepdim=True)
    return (values * weights).sum(dim=1)


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


#: Standard deviations of the comparison draws' noise a candidate's share
#: must clear (one-sided 0.001, the papers' alpha).
COMPARE_Z = 3.09

#: The strategies' default ``compare_draws``. The comparison's own noise,
#: ``COMPARE_Z / sqrt(compare_draws)``, must not swamp the width of
#: certification's bound, ``z_alpha / sqrt(n)`` (0.031 at n = 10,000): at
#: 1,000 draws it is 0.098, and on the 540 test digits (n = 10,000) ANCER then
#: kept a worse isotropic start where Cohen's sigma had a few stray votes (18
#: inputs lost 0.05 to 0.1 of radius; AC R-tilde 0.001 below Cohen's, interval
#: [-0.002, +0.001]); at 4,000 (0.049) it is 0.002 above Cohen's, interval
#: [+0.001, +0.004], for 9,000 more forward passes per input over three
#: candidates (8% of ANCER's time on digits). ``benchmarks/bench_quality.py``.
COMPARE_DRAWS = 4000


#: The first look of the comparison: looks halve from ``compare_draws`` while
#: they stay at least this large.
COMPARE_FIRST_LOOK = 500


def comparison_looks(n_draws):
    """The draws after which :func:`better_of` looks: halving from ``n_draws``
    while at least :data:`COMPARE_FIRST_LOOK`, ascending."""
    looks = [int(n_draws)]
    while looks[-1] // 2 >= COMPARE_FIRST_LOOK:
        looks.append(looks[-1] // 2)
    return looks[::-1]


def better_of(network, X, candidates, score, *, family, bank, offset, n_draws, p_max):
    """Per input, the candidate smoothing whose certificate looks largest.

    Each candidate (a :class:`~smoothlearn.scale.Scale`, one form for all
    candidates, with UCAN's offset where it has one, which moves the noise's
    centre) is run on the same optimisation-bank rows from ``offset`` (common
    random numbers, independent of the certification draws, so the memory
    covers the choice, DESIGN.md section 5). Its gap is a cautious estimate of
    what certification would give for its top vote share ``p`` (``k`` of
    ``n_draws`` votes):
    ``gap(min(p - (sqrt(w) + z / sqrt(n_draws)) sqrt(q (1 - q)), p_max))``
    (0 where that is at most 1/2), scored by ``score(gap, Scale)``. Here
    ``q = (k + 1/2) / (n_draws + 1)`` is the share's Jeffreys posterior mean,
    ``p_max = alpha^(1/n)`` is the largest bound certification's ``n`` draws
    can give, ``w = -2 ln p_max`` (about ``z_alpha^2 / n``) that bound's
    squared width per unit variance, and ``z = COMPARE_Z`` covers the
    comparison draws' own noise. Each term matters:

    * without the widths, a larger scale with the same ``sigma * gap`` ties
      with the start near a boundary, wins by luck, and then certifies far
      less or abstains (a linear classifier, ``sigma`` 3 against 0.3);
    * with ``p`` for ``q`` in the spread, a unanimous candidate would have no
      noise margin at all, so a smaller scale that happened to be unanimous
      displaced a start with a few stray votes and a larger certificate (a
      linear classifier at ``p = 0.998`` for ``sigma``, ``0.99984`` for 0.8
      ``sigma``, whose expected certificate is 8% smaller: the smaller won
      in 72% of banks at 1,000 draws and 33% at 4,000; 11% now);
    * without the cap at ``p_max``, a confident input looks capped by the
      comparison draws instead of by certification's, which favours larger
      scales (digits at n = 100,000: AC R-tilde 0.478 with a Clopper-Pearson
      bound on the 1,000 comparison draws, against Cohen's 0.487).

    The draws are spent sequentially (:func:`comparison_looks`): at each look
    before the last, every candidate's vote probability lies, at the
    comparison's level ``z``, within ``q -+ z sqrt(q (1 - q) / m)`` of its
    share after ``m`` draws, and an input is decided, and spends no more, once
    the leader's score at the low end beats every other candidate's at the
    high end (the score as the full ``n_draws`` would compute it). Inputs still
    undecided at the last look are chosen as above. The first candidate wins
    ties, so inputs that no candidate certifies keep it.

    Returns
    -------
    answer : Scale
        The chosen rows of the candidates, in their common form.
    chosen : ndarray of int, shape (m,)
        Index of the candidate each input took.
    """
    rows = _BankRows(bank, offset)
    # without the certification's ceiling (a strategy called on its own),
    # the papers' probability clamp
    ceiling = 1.0 - 1e-3 if p_max is None else p_max
    # z_alpha^2 / n of certification's bound, from p_max = alpha^(1/n) alone:
    # -2 ln p_max = 2 ln(1/alpha) / n, a little above z_alpha^2 / n (1.4x at
    # alpha = 0.001), so the estimated bound errs towards the start
    width = np.sqrt(-2.0 * np.log(ceiling))
    # and the comparison draws' own noise, so that a candidate displaces the
    # first only when its lead is more than luck on n_draws draws
    noise = COMPARE_Z / np.sqrt(n_draws)

    def gap(share, spread):
        bound = np.minimum(share - (width + noise) * spread, ceiling)
        return np.maximum(family.gap(np.maximum(bound, 0.5)), 0.0)

    def final_gap(share):
        """The gap the full comparison gives a share (its Jeffreys spread)."""
        jeffreys = (share * n_draws + 0.5) / (n_draws + 1.0)
        return gap(share, np.sqrt(jeffreys * (1.0 - jeffreys)))

    m = len(X)
    counts = [np.zeros((m, network.n_classes), dtype=np.int64) for _ in candidates]
    chosen = np.zeros(m, dtype=np.intp)
    undecided, done = np.arange(m), 0
    for look in comparison_looks(n_draws):
        # the undecided rows of each candidate (no copy while they are all)
        scales = candidates
        if len(undecided) < m:
            scales = [candidate[undecided] for candidate in candidates]
        for c, scale in enumerate(scales):
            # counted as the engine runs it: float32, at x + offset
            counts[c][undecided] += count_classes(
                network,
                X[undecided],
                scale,
                rows,
                look - done,
                batch_size=max(1000, n_draws),
                first_row=done,
            )
        done = look
        top = np.stack([k[undecided].max(axis=1) for k in counts])  # (c, u)
        jeffreys = (top + 0.5) / (look + 1.0)  # never 0 or 1, unlike the share
        if look == n_draws:
            spread = np.sqrt(jeffreys * (1.0 - jeffreys))
            scores = [
                score(gap(t / look, s), sc) for t, s, sc in zip(top, spread, scales)
            ]
            chosen[undecided] = np.argmax(np.stack(scores), axis=0)  # ties: the first
            break
        # where each candidate's score can be once all n_draws are in: its
        # share there at either end of the interval, with that share's spread
        half = COMPARE_Z * np.sqrt(jeffreys * (1.0 - jeffreys) / look)
        ends = [np.clip(jeffreys + sign * half, 0.0, 1.0) for sign in (-1, 1)]
        lows, highs = (
            np.stack([score(final_gap(p), sc) for p, sc in zip(end, scales)])
            for end in ends
        )
        leader = np.argmax(lows, axis=0)
        rivals = highs.copy()
        rivals[leader, np.arange(len(leader))] = -np.inf
        decided = lows[leader, np.arange(len(leader))] >= rivals.max(axis=0)
        chosen[undecided[decided]] = leader[decided]
        undecided = undecided[~decided]
        if not len(undecided):
            break
    return Scale.pick(candidates, chosen), chosen
