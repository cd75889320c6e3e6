"""``gram_defect_bound``: a proved upper bound of ``||U^T U - I||_F`` for a
stored float64 basis, against the exact value in rational arithmetic.

The cut geometry, the rotated scales' smallest semi-axis and the input-units
radius subtract or divide by this defect; a value that rounds below the exact
one overstates them. For a basis orthonormal to float64 rounding (every basis
the engine stores) float64's own rounding of ``U^T U`` is as large as the
defect, so the plain float64 norm falls below it (shown below).
"""

from fractions import Fraction
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from smoothlearn import _bases
from smoothlearn._bases import gram_defect_bound


def exact_defect_squared(u):
    """``||U^T U - I||_F^2`` of the float64 array ``u`` (d, k), exactly."""
    d, k = u.shape
    cols = [[Fraction(float(x)) for x in u[:, j]] for j in range(k)]
    total = Fraction(0)
    for a in range(k):
        for b in range(a, k):
            entry = sum(x * y for x, y in zip(cols[a], cols[b], strict=True))
            entry -= 1 if a == b else 0
            total += entry * entry * (1 if a == b else 2)
    return total


def qr_basis(seed, d, k, perturbation):
    rng = np.random.default_rng(seed)
    k = min(k, d)
    u = np.linalg.qr(rng.standard_normal((d, k)))[0]
    return u + perturbation * rng.standard_normal((d, k))


bases = st.builds(
    qr_basis,
    seed=st.integers(0, 2**32 - 1),
    d=st.integers(2, 40),
    k=st.integers(1, 6),
    perturbation=st.sampled_from([0.0, 0.0, 1e-15, 1e-12, 1e-6]),
)


@pytest.mark.parametrize("path", ["long double", "float64"])
@settings(max_examples=40, deadline=None)
@given(u=bases)
def test_gram_defect_bound_is_above_the_exact_defect(u, path):
    work = _bases._WIDE_WORK if path == "long double" else 0
    with mock.patch.object(_bases, "_WIDE_WORK", work):
        bound = gram_defect_bound(u)
    exact = exact_defect_squared(u)
    assert Fraction(bound) ** 2 >= exact
    # and tight: within the rounding allowance of the path, no more
    d, k = u.shape
    unit = float(np.finfo(np.longdouble if path == "long double" else float).eps)
    slack = 2.0 * d * k * unit + 1e-12 * float(exact) ** 0.5
    assert bound <= float(exact) ** 0.5 + slack


def test_gram_defect_bound_of_a_stack_is_each_rows():
    stack = np.stack([qr_basis(seed, 30, 4, 1e-13) for seed in range(5)])
    rows = [gram_defect_bound(u) for u in stack]
    np.testing.assert_array_equal(gram_defect_bound(stack), rows)


def test_the_plain_float64_defect_rounds_below_the_exact_one():
    """Why the allowance: QR bases of float64 whose computed defect is below
    the exact one."""
    below = 0
    for seed in range(40):
        u = qr_basis(seed, 32, 4, 0.0)
        naive = float(np.linalg.norm(u.T @ u - np.eye(4)))
        exact = exact_defect_squared(u)
        below += Fraction(naive) ** 2 < exact
        assert Fraction(gram_defect_bound(u)) ** 2 >= exact
    assert below >= 5


def test_gram_defect_bound_of_an_overflowing_or_oversized_basis():
    """An independent checker's cases: U^T U overflowing in float64 (NaN
    there) gives an infinite bound, never NaN; a basis beyond the bound's
    range is refused."""
    d = 1000
    u = np.full((d, 2), 1e155)
    u[d // 2 :, 1] = -1e155
    with mock.patch.object(_bases, "_WIDE_WORK", 0):
        assert gram_defect_bound(u) == np.inf
    assert gram_defect_bound(u) >= 0  # long double: no overflow, or inf
    # 2^50 x 9 rows of zeros, not stored: d eps sqrt(k) = 0.75 in float64
    huge = np.lib.stride_tricks.as_strided(np.zeros(1), (2**50, 9), (0, 0))
    with mock.patch.object(_bases, "_WIDE_WORK", 0):
        with pytest.raises(ValueError, match="beyond"):
            gram_defect_bound(huge)
