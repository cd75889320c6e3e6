"""Binomial bounds of the engine, the decisions made from them, and the sample
sizes they need.

CERTIFY and PREDICT (Cohen et al., 2019; DESIGN.md section 4) decide from
count tables: :func:`certify_from_counts` (the selected class and its
Clopper-Pearson bound, abstaining below 1/2) and :func:`predict_from_counts`
(the top two counts' binomial test).

Three things decide how many estimation draws an input costs:

* the one-sided Clopper-Pearson bounds (:func:`clopper_pearson_lower`,
  :func:`clopper_pearson_upper`);
* input-specific sample sizes (:func:`plan_sample_sizes`): a pilot count, drawn
  independently of the estimation draws, picks the smallest size whose
  expected certified radius is within a fraction of what ``n`` would give;
* sequential decisions at a fixed radius (:func:`sequential_looks`): the
  estimation draws are looked at on a geometric grid and each input stops as
  soon as "certified at radius r" is decided, with ``alpha`` spent over the
  looks.

Why each keeps the ``1 - alpha`` guarantee
------------------------------------------
Write ``p`` for the true probability of the selected class ``c`` under the
smoothing noise, and ``k_m`` for its count over the first ``m`` rows of the
estimation bank. The rows are i.i.d. and independent of the inputs, of the
selection bank (the class and the pilot) and of the optimisation bank (a
data-dependent scale), so, given all of those, ``k_m ~ Binomial(m, p)`` for
every fixed ``m``.

*Input-specific size.* The size ``m(x)`` is a function of the selection
counts only. Given the selection draws, ``m`` is fixed and
``P(clopper_pearson_lower(k_m, m, alpha) > p | m) <= alpha``; averaging over
the selection draws leaves ``<= alpha``. Choosing ``m`` from the estimation
draws themselves would not be covered (a plan that stops where the bound
happens to look good is optimistic), which is why the pilot is the selection
bank.

*Sequential looks.* At looks ``m_1 < ... < m_J`` with levels ``alpha_j``
summing to ``alpha``, each look's bound fails with probability at most
``alpha_j``, so by the union bound no look's bound exceeds ``p`` except with
probability at most ``alpha``. On that event the bound at *any* look is valid,
in particular at the look where an input stops, whatever rule decided to stop
there (stopping for "certified", for "cannot be certified", or at the last
look). This is a group-sequential plan with Bonferroni alpha spending. We
chose it over a confidence sequence (a betting or mixture martingale, valid at
every draw) because the network runs in batches and we look only at a grid
anyway, the union bound is exact for any dependence between the looks (no
asymptotics, no normal approximation), and the Clopper-Pearson bound widens
only like ``sqrt(log(1 / alpha))``: spending half of ``alpha`` on the last
look moves a gaussian gap at ``p = 0.99``, ``n = 100,000`` by 0.1%.
"""

from functools import lru_cache

import numpy as np
from scipy.stats import beta as _beta
from scipy.stats import binom as _binom

from .noise import QUANTILE_MARGIN, get_noise

__all__ = [
    "FIRST_LOOK",
    "SMALLEST_SIZE",
    "UPPER_QUANTILE",
    "certificate_from_bound",
    "certify_from_counts",
    "clopper_pearson_lower",
    "clopper_pearson_upper",
    "expected_gap",
    "largest_certifiable_radius",
    "plan_sample_sizes",
    "predict_from_counts",
    "sample_size_grid",
    "sequential_looks",
    "sequential_stop",
    "top_two_pvalue",
]

#: Fewest estimation draws an input-specific plan chooses (inputs the pilot
#: says will abstain get this many).
SMALLEST_SIZE = 100

#: The smallest first look of a sequential decision: looks halve from ``n``
#: while they stay at least this large.
FIRST_LOOK = 256

#: Posterior quantiles averaged over when a plan takes an expectation.
_QUANTILES = (np.arange(64) + 0.5) / 64

#: The posterior quantile of p at which a plan must keep the tolerance too.
UPPER_QUANTILE = 0.9


def clopper_pearson_lower(k, n, alpha):
    """One-sided ``(1 - alpha)`` Clopper-Pearson lower bound of a binomial proportion.

    ``beta.ppf(alpha, k, n - k + 1)`` taken down by
    :data:`~smoothlearn.noise.QUANTILE_MARGIN` (scipy's value lies within a
    few ulps of the exact bound, on either side), and 0 where ``k = 0``.
    ``k``, ``n`` and ``alpha`` broadcast.

    Examples
    --------
    >>> round(float(clopper_pearson_lower(100, 100, 0.001)), 6)
    0.933254
    """
    k = np.asarray(k, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        p = _beta.ppf(alpha, k, n - k + 1)
    return np.where(k > 0, p * (1.0 - QUANTILE_MARGIN), 0.0)


def largest_certifiable_radius(noise, sigma, n, alpha):
    """The largest radius CERTIFY can state with ``n`` draws at level ``alpha``.

    When all ``n`` estimation draws vote for the selected class, the one-sided
    Clopper-Pearson bound is ``alpha^(1/n)``, the largest it can be; the
    radius is then the family's ``c * gap(alpha^(1/n)) * sigma``: for gaussian
    noise ``sigma * Phi^-1(alpha^(1/n))``. No input certified with noise of
    scale ``sigma`` gets a larger radius, so certified accuracy beyond it is
    0 by construction (data-dependent strategies that raise an input's
    scale above ``sigma`` may exceed it).

    Parameters
    ----------
    noise : str or NoiseFamily
    sigma : float
        The smallest per-coordinate scale of the noise.
    n : int
        Estimation draws.
    alpha : float

    Returns
    -------
    float

    Examples
    --------
    >>> round(largest_certifiable_radius("gaussian", 0.25, 100_000, 0.001), 4)
    0.9529
    """
    family = get_noise(noise)
    p_max = float(clopper_pearson_lower(n, n, alpha))
    return float(family.radius(p_max, float(sigma)))


def clopper_pearson_upper(k, n, alpha):
    """One-sided ``(1 - alpha)`` Clopper-Pearson upper bound; 1 where ``k = n``.

    ``beta.ppf(1 - alpha, k + 1, n - k)`` taken up by
    :data:`~smoothlearn.noise.QUANTILE_MARGIN` (at most 1).

    Examples
    --------
    >>> round(float(clopper_pearson_upper(0, 100, 0.001)), 6)
    0.066746
    """
    k = np.asarray(k, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        p = _beta.ppf(1.0 - np.asarray(alpha, dtype=np.float64), k + 1, n - k)
    return np.where(k < n, np.minimum(p * (1.0 + QUANTILE_MARGIN), 1.0), 1.0)


def expected_gap(p, n, alpha, family):
    """The gap CERTIFY gives at ``n`` draws when the count is its mean ``p n``.

    ``family.certified_gap(clopper_pearson_lower(p n, n, alpha))``: 0 where
    that bound is below 1/2 (an abstention). The plug-in count is not an
    integer; the beta quantile is defined for it and interpolates between
    counts.
    """
    k = np.asarray(p, dtype=np.float64) * n
    return family.certified_gap(clopper_pearson_lower(k, n, alpha))


def sample_size_grid(n):
    """The sizes a plan chooses from: ``n 2^(-j/4)`` down to :data:`SMALLEST_SIZE`.

    Ascending, with ``n`` last; just ``[n]`` when ``n`` is that small.
    """
    sizes = {int(n)}
    j = 1
    while (size := int(round(n * 2.0 ** (-j / 4)))) >= SMALLEST_SIZE:
        sizes.add(size)
        j += 1
    return np.array(sorted(sizes), dtype=np.int64)


@lru_cache(maxsize=4096)
def _planned_size(top, n_pilot, n, alpha, tolerance, family_name):
    """One plan (cached: a pilot of ``n_pilot`` draws has ``n_pilot + 1`` counts)."""
    family = get_noise(family_name)
    # Jeffreys posterior of p given the pilot; its quantiles carry the
    # uncertainty, so a pilot of all votes for c plans for p near 1 as well
    posterior = (top + 0.5, n_pilot - top + 0.5)
    p = _beta.ppf(_QUANTILES, *posterior)
    grid = sample_size_grid(n)
    expected = expected_gap(p[None, :], grid[:, None], alpha, family).mean(axis=1)
    enough = expected >= (1.0 - tolerance) * expected[-1]
    # and at the posterior's upper quantile: near p = 1 the bound keeps growing
    # with n, and the mean alone under-sampled unanimous pilots (Fashion-MNIST:
    # 98.4% of the mean radius kept at tolerance 0.01)
    high = expected_gap(_beta.ppf(UPPER_QUANTILE, *posterior), grid, alpha, family)
    enough &= high >= (1.0 - tolerance) * high[-1]
    return int(grid[np.argmax(enough)])  # the last size always qualifies


def plan_sample_sizes(pilot_top, n_pilot, n, alpha, tolerance, family):
    """Each input's estimation sample size, from its pilot count.

    The size is the smallest of :func:`sample_size_grid` whose expected gap
    (hence radius: the scale is fixed before sampling) is at least ``1 -
    tolerance`` times the expected gap at ``n``. The expectation is over a
    Jeffreys posterior ``Beta(k + 1/2, n_pilot - k + 1/2)`` of the selected
    class's probability given its pilot count ``k``, with the count at each
    size taken at its mean (:func:`expected_gap`); the same must hold at the
    posterior's :data:`UPPER_QUANTILE` of ``p``, since near ``p = 1`` the
    bound keeps growing with ``n`` and a unanimous pilot cannot tell 0.99
    from 0.99999.

    The pilot must be independent of the estimation draws (the engine uses
    the selection draws); then every certificate keeps its ``1 - alpha``
    guarantee (module docstring).

    Parameters
    ----------
    pilot_top : array-like of int, shape (m,)
        The selected class's count among the pilot draws.
    n_pilot : int
        Pilot draws per input.
    n : int
        The largest size (the estimator's ``n``).
    alpha : float
    tolerance : float
        Fraction of the expected radius at ``n`` that may be given up, in (0, 1).
    family : NoiseFamily

    Returns
    -------
    ndarray of int64, shape (m,)
    """
    return np.array(
        [
            _planned_size(
                int(k),
                int(n_pilot),
                int(n),
                float(alpha),
                float(tolerance),
                family.name,
            )
            for k in np.asarray(pilot_top)
        ],
        dtype=np.int64,
    )


def sequential_looks(n, alpha, multiple=1):
    """The looks of a sequential decision and the level spent at each.

    Looks halve from ``n`` while they stay at least :data:`FIRST_LOOK`
    (``n = 100,000``: 390, 781, ..., 50,000, 100,000), each rounded up to a
    multiple of ``multiple`` below ``n`` (the grid's pinned counts, whose
    base classifier is the same at every multiple of the forward batch:
    1,000, 2,000, 4,000, 7,000, ... for ``multiple = 1000``), repeats
    dropped. The last look gets ``alpha / 2`` and the others share ``alpha
    / 2`` equally; a single look gets all of ``alpha`` (then the decision is
    CERTIFY's).

    Returns
    -------
    looks : ndarray of int64, ascending, ending at ``n``
    alphas : ndarray of float64, summing to ``alpha``
    """
    looks = [int(n)]
    while looks[-1] // 2 >= FIRST_LOOK:
        looks.append(looks[-1] // 2)
    looks = np.array(looks[::-1], dtype=np.int64)
    if multiple > 1:
        looks = np.unique(np.minimum(-(-looks // multiple) * multiple, int(n)))
    if len(looks) == 1:
        return looks, np.array([float(alpha)])
    alphas = np.full(len(looks), alpha / 2 / (len(looks) - 1))
    alphas[-1] = alpha / 2
    return looks, alphas


def sequential_stop(k, look, level, needed, last):
    """Whether a sequential decision stops at a look, and the bound it gives.

    At a look of ``look`` draws, ``k`` of them for the selected class, an
    input stops when its lower bound at ``level`` reaches ``needed``
    (certified), when its upper bound at the same level falls below it (not
    certified), or at the ``last`` look; its bound is then the lower bound
    at this look. Every argument broadcasts: inputs at different looks are
    decided together, each on its own count.

    Returns
    -------
    stop : ndarray of bool
    lower : ndarray of float64
        :func:`clopper_pearson_lower` ``(k, look, level)``.
    """
    lower = clopper_pearson_lower(k, look, level)
    stop = np.asarray(last) | (lower >= needed)
    stop |= clopper_pearson_upper(k, look, level) < needed
    return stop, lower


# --------------------------------------------------------------- decisions
def certify_from_counts(selection_counts, estimation_counts, n, alpha, family):
    """CERTIFY from the two count tables.

    Returns
    -------
    top : ndarray of int, shape (m,)
        Selected class index (-1 where abstained).
    p_lower : ndarray of shape (m,)
    gap : ndarray of shape (m,)
        ``family.gap(p_lower)``, 0 where abstained.
    abstained : ndarray of bool, shape (m,)
    """
    top = np.argmax(selection_counts, axis=1)
    k = estimation_counts[np.arange(len(top)), top]
    return certificate_from_bound(top, clopper_pearson_lower(k, n, alpha), family)


def certificate_from_bound(top, p_lower, family):
    """CERTIFY's answer for a selected class and its probability bound.

    Returns ``(top, p_lower, gap, abstained)`` as :func:`certify_from_counts`:
    abstain where ``p_lower < 1/2``.
    """
    abstained = p_lower < 0.5
    return (
        np.where(abstained, -1, top),
        p_lower,
        family.certified_gap(p_lower),
        abstained,
    )


def top_two_pvalue(counts):
    """Two-sided binomial test p-value of the top two counts against 1/2.

    Equals ``scipy.stats.binomtest(nA, nA + nB, 0.5).pvalue`` for each row:
    the null distribution is symmetric, so the two-sided p-value is
    ``min(1, 2 P(X >= nA))``.
    """
    order = np.sort(counts, axis=1)
    n_a, n_b = order[:, -1], order[:, -2] if counts.shape[1] > 1 else 0 * order[:, -1]
    total = n_a + n_b
    p = 2.0 * _binom.sf(n_a - 1, total, 0.5)
    return np.where(n_a == n_b, 1.0, np.minimum(p, 1.0))


def predict_from_counts(counts, alpha):
    """PREDICT from a count table: the top class index, or -1 where abstained."""
    top = np.argmax(counts, axis=1)
    # the p-value as computed, taken up by the margin: a decision only where
    # the exact one is at most alpha too
    pvalue = top_two_pvalue(counts) * (1.0 + QUANTILE_MARGIN)
    return np.where(pvalue <= alpha, top, -1)
