"""The probability bounds and gaps a certificate states, against 50-digit and
exact references: each on its sound side of the exact value, and within
``QUANTILE_MARGIN`` of it.

scipy computes ``beta.ppf``, ``ndtri`` and ``binom.sf`` to a few ulps, on
either side of the exact value: a Clopper-Pearson bound one ulp above the
exact one is no bound, and the radius built on it overstates the exact
radius. The engine takes each down (or up) by a relative margin far above
that error.
"""

import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from smoothlearn.bounds import (
    clopper_pearson_lower,
    clopper_pearson_upper,
    predict_from_counts,
)
from smoothlearn.noise import QUANTILE_MARGIN, get_noise

mpmath.mp.dps = 50


def binomial_tail(n, k, p):
    """``P(Binomial(n, p) >= k)`` in 50 digits, summed from ``j = n`` down
    (``n - k + 1`` terms)."""
    p = mpmath.mpf(p)
    q = 1 - p
    term = p**n
    total = term
    for j in range(n, k, -1):
        term = term * j / (n - j + 1) * q / p
        total += term
    return total


def binomial_head(n, k, p):
    """``P(Binomial(n, p) <= k)`` in 50 digits, summed from ``j = 0`` up
    (``k + 1`` terms)."""
    p = mpmath.mpf(p)
    q = 1 - p
    term = q**n
    total = term
    for j in range(k):
        term = term * (n - j) / (j + 1) * p / q
        total += term
    return total


cases = st.tuples(
    st.sampled_from([50, 1_000, 10_000, 100_000]),
    st.integers(0, 120),
    st.sampled_from([0.001, 0.0005, 0.05, 0.001 / 7]),
)


@settings(max_examples=40, deadline=None)
@given(case=cases)
def test_the_lower_bound_is_below_the_exact_clopper_pearson_bound(case):
    n, misses, alpha = case
    k = n - min(misses, n // 2)
    p = float(clopper_pearson_lower(k, n, alpha))
    # the tail grows with p: p is at most the exact bound iff its tail is <= alpha
    assert binomial_tail(n, k, p) <= alpha
    # and not further below it than the margin (and scipy's ulps)
    assert binomial_tail(n, k, p * (1.0 + 4.0 * QUANTILE_MARGIN)) > alpha


@settings(max_examples=40, deadline=None)
@given(case=cases)
def test_the_upper_bound_is_above_the_exact_one(case):
    n, hits, alpha = case
    k = min(hits, n - 1)
    p = float(clopper_pearson_upper(k, n, alpha))
    # the head shrinks as p grows: p is at least the exact bound iff
    # P(Binomial(n, p) <= k) <= alpha
    assert binomial_head(n, k, p) <= alpha
    assert binomial_head(n, k, p * (1.0 - 4.0 * QUANTILE_MARGIN)) > alpha


@pytest.mark.parametrize("family", ["gaussian", "laplace", "uniform"])
@settings(max_examples=40, deadline=None)
@given(p=st.floats(0.5, 1.0 - 2.0**-40))
def test_the_stated_gap_is_at_most_the_exact_gap_of_the_bound(family, p):
    noise = get_noise(family)
    gap = float(noise.certified_gap(p))
    exact = {
        "gaussian": lambda g: mpmath.ncdf(g),
        "laplace": lambda g: 1 - mpmath.exp(-mpmath.mpf(g)) / 2,
        "uniform": lambda g: (mpmath.mpf(g) + 1) / 2,
    }[family]
    # the gap's probability (its exact inverse) is at most p: gap <= gap(p)
    assert exact(gap) <= mpmath.mpf(p)
    if family != "uniform" and gap > 0:
        assert exact(gap * (1.0 + 4.0 * QUANTILE_MARGIN) + 1e-300) > mpmath.mpf(p)
    if family == "uniform":
        assert exact(gap) == mpmath.mpf(p)  # exact: no margin


def test_scipy_alone_is_not_on_the_sound_side():
    """Why the margin: scipy's bound above the exact one, and its normal
    quantile above the exact quantile, on these fixed cases."""
    above = 0
    for n, k in [(1_000, 997), (10_000, 9_950), (100_000, 99_990), (50, 48)]:
        for alpha in (0.001, 0.05, 0.0005, 0.001 / 7):
            raw = float(stats.beta.ppf(alpha, k, n - k + 1))
            above += binomial_tail(n, k, raw) > alpha
    assert above >= 2
    quantile_above = sum(
        mpmath.ncdf(float(stats.norm.ppf(p))) > mpmath.mpf(p)
        for p in np.linspace(0.5, 0.99999, 200)[1:]
    )
    assert quantile_above >= 5


def _exact_two_sided_pvalue(n_a, n_b):
    t = n_a + n_b
    tail = Fraction(sum(math.comb(t, j) for j in range(max(n_a, n_b), t + 1)), 2**t)
    return min(Fraction(1), 2 * tail) if n_a != n_b else Fraction(1)


@settings(max_examples=60, deadline=None)
@given(
    total=st.integers(10, 400),
    share=st.floats(0.5, 1.0),
    alpha=st.sampled_from([0.001, 0.01, 0.05]),
)
def test_predict_decides_only_where_the_exact_pvalue_is_at_most_alpha(
    total, share, alpha
):
    n_a = int(round(share * total))
    counts = np.array([[n_a, total - n_a, 0]])
    decided = predict_from_counts(counts, alpha)[0] >= 0
    exact = _exact_two_sided_pvalue(n_a, total - n_a)
    if decided:
        assert exact <= Fraction(alpha)
    elif exact * (1 + Fraction(1, 2**30)) <= Fraction(alpha):
        # clear of the margin: it decides
        pytest.fail(f"abstained at exact p-value {float(exact)} below {alpha}")
