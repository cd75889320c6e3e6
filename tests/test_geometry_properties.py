"""Property-based tests of the region geometry against a 60-digit reference.

Random isotropic, diagonal, rank-k, dense and framed (rank-k in a diagonal
frame) pairs with semi-axes spanning
1e-3..1e2 (condition numbers up to 1e10), placed just inside and just outside
touching. Soundness (never "disjoint" for intersecting pairs, never a distance
above the true one) must hold everywhere; tightness only where the reference
says the pair is clearly apart.
"""

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from smoothlearn.geometry import (
    SEPARATION_MARGIN,
    Region,
    ellipsoids_disjoint,
    l2_distance_to_ellipsoid,
    support_extent,
)
from smoothlearn.scale import Scale

from . import _reference as reference

KINDS = (
    "isotropic",
    "diagonal",
    "rank-k",
    "dense",
    "framed",
    "framed-thin",
    "cut-isotropic",
    "cut-diagonal",
    "cut-rank-k",
    "cut-framed",
    "cut-framed-thin",
)


def _region(rng, d, kind, centre):
    if kind.startswith("cut-"):
        # the memory's cut form: one or two rank-one cuts of another kind
        region = _region(rng, d, kind[4:], centre)
        for _ in range(rng.randint(1, 3)):
            v = rng.randn(d)
            v /= np.linalg.norm(v)
            region = region.cut(v, support_extent(region, v) * rng.uniform(0.05, 0.9))
        return region
    semi = 10 ** rng.uniform(-3, 2, d)
    if kind == "isotropic":
        return Region(centre, 1.0, float(semi[0]))
    if kind == "diagonal":
        return Region(centre, 1.0, semi)
    # framed-thin: one direction, so that M = diag + rank 2 and pairs of
    # thin or cheaper kinds take K(t)'s and the distance's Woodbury path
    k = d if kind == "dense" else 1 if kind == "framed-thin" else max(1, d // 2)
    basis = np.linalg.qr(rng.randn(d, k))[0]
    if kind.startswith("framed"):  # rank k in a diagonal frame: S = F R F
        # the frame's square spans 1e-3..1e2 like the other kinds' semi-axes,
        # R's own scales 0.3..30 on top of it
        frame = 10 ** rng.uniform(-1.5, 1.0, d)
        form = Scale(
            10 ** rng.uniform(-0.5, 1.5, (1, k)),
            basis[None],
            np.array([10 ** rng.uniform(-0.5, 0.5)]),
            frame=frame[None],
        )
        return Region(centre, 1.0, form)
    return Region(centre, 1.0, semi[:k], basis=basis, scale_rest=float(semi[-1]))


pairs = st.tuples(
    st.integers(0, 2**31 - 1),
    st.integers(2, 5),
    st.sampled_from(KINDS),
    st.sampled_from(KINDS),
)


def _near_touching(seed, d, kind_a, kind_b):
    rng = np.random.RandomState(seed)
    a = _region(rng, d, kind_a, rng.randn(d))
    shape = _region(rng, d, kind_b, np.zeros(d))
    u = rng.randn(d)
    u /= np.linalg.norm(u)
    tau = float(reference.touching_distance(a, shape, u))

    def at(factor):
        return Region(a.center + factor * tau * u, 1.0, shape.form)

    return a, at


@settings(max_examples=40, deadline=None)
@given(pairs, st.sampled_from([1e-9, 1e-7, 1e-4, 1e-2]))
def test_intersecting_pairs_are_never_called_disjoint(pair, below):
    a, at = _near_touching(*pair)
    b = at(1.0 - below)
    assert reference.min_k(a, b) > 0  # the reference: they overlap
    assert not ellipsoids_disjoint(a, b)
    assert not ellipsoids_disjoint(b, a)


@settings(max_examples=40, deadline=None)
@given(pairs, st.sampled_from([1e-3, 1e-2, 0.5]))
def test_clearly_apart_pairs_are_called_disjoint(pair, above):
    a, at = _near_touching(*pair)
    b = at(1.0 + above)
    assert reference.min_k(a, b) < 0
    assert ellipsoids_disjoint(a, b)
    assert ellipsoids_disjoint(b, a)


@settings(max_examples=40, deadline=None)
@given(
    st.integers(0, 2**31 - 1),
    st.integers(2, 5),
    st.sampled_from(KINDS),
    st.floats(1.0 + 1e-6, 50.0),
)
def test_distance_is_a_tight_lower_bound(seed, d, kind, far):
    rng = np.random.RandomState(seed)
    region = _region(rng, d, kind, rng.randn(d))
    u = rng.randn(d)
    u /= np.linalg.norm(u)
    # a point outside, on the ray through a boundary point
    edge = 1.0 / np.linalg.norm(region.whiten(u))
    point = region.center + far * edge * u
    exact = float(reference.l2_distance(region, point))
    ours = l2_distance_to_ellipsoid(region, point)
    assert ours <= exact
    # the only slack allowed is the stated rounding margin
    slack = 2 * SEPARATION_MARGIN * (far * edge + region.circumradius)
    assert ours == pytest.approx(exact, rel=1e-9, abs=slack)


@given(
    st.integers(0, 2**31 - 1),
    st.integers(1, 5),
    st.sampled_from(KINDS),
    st.integers(0, 6),
    st.integers(6, 16),
)
def test_distance_of_points_a_hair_outside_small_regions_is_sound(
    seed, d, kind, small, hair
):
    """A point ``10^-hair`` (relative) outside a region ``10^-small`` times the
    usual size: the root of the projection's equation then sits far below
    any fixed absolute tolerance (it raised ZeroDivisionError for a ball of
    radius 1e-3 and a point 1e-9 outside). The answer must be a sound
    distance: 0 (abstain or shrink to nothing) up to the exact one."""
    rng = np.random.RandomState(seed)
    d = max(d, 2) if kind != "isotropic" else d
    base = _region(rng, d, kind, np.zeros(d))
    region = Region(rng.randn(d), 10.0**-small, base.form)
    u = rng.randn(d)
    u /= np.linalg.norm(u)
    edge = 1.0 / np.linalg.norm(region.whiten(u))
    point = region.center + (1.0 + 10.0**-hair) * edge * u
    ours = l2_distance_to_ellipsoid(region, point)
    assert 0.0 <= ours <= float(reference.l2_distance(region, point))


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 6), st.sampled_from(KINDS))
def test_support_function_is_attained_and_never_exceeded(seed, d, kind):
    rng = np.random.RandomState(seed)
    region = _region(rng, max(d, 2), kind, rng.randn(max(d, 2)))
    v = rng.randn(region.d)
    h = support_extent(region, v)
    # attained at T T^T v / ||T^T v|| (on the boundary, T u with ||u|| = 1),
    # never exceeded on it (T is symmetric but for a cut region's factor)
    t = region.matrix()
    tv = region.stretch(v)
    np.testing.assert_allclose(tv, t.T @ v, rtol=1e-9, atol=1e-12 * np.abs(tv).max())
    # h is a proved upper bound (its rounding taken against ||S v||^2 and
    # ||C^T v||^2), tight: the 60-digit support, and the factor's attained
    # point, lie at most 1e-6 below it
    true = float(
        mpmath.sqrt(
            (
                mpmath.matrix(v.tolist()).T
                * reference.covariance(region)
                * mpmath.matrix(v.tolist())
            )[0]
        )
    )
    assert true <= h <= true * (1 + 1e-6)
    assert v @ (t @ (tv / np.linalg.norm(tv))) == pytest.approx(h, rel=1e-6)
    u = rng.randn(200, region.d)
    boundary = (u / np.linalg.norm(u, axis=1, keepdims=True)) @ t.T
    assert np.all(boundary @ v <= h * (1 + 1e-9))


@settings(max_examples=60, deadline=None)
@given(pairs, st.floats(0.05, 3.0))
def test_answers_agree_with_the_exact_k_at_any_distance(pair, factor):
    # the cheap proofs (separating directions, a shared point of the centres'
    # segment) settle most pairs before K(t); whichever answers, the answer
    # is the reference's wherever the pair is not within rounding of touching
    a, at = _near_touching(*pair)
    if abs(factor - 1.0) < 1e-3:
        return
    b = at(factor)
    exact_disjoint = reference.min_k(a, b) < 0
    assert ellipsoids_disjoint(a, b) == exact_disjoint
    assert ellipsoids_disjoint(b, a) == exact_disjoint


@pytest.mark.parametrize("apart", [False, True])
def test_dense_pairs_settled_by_a_direction_or_the_segment_skip_the_svd(
    apart, monkeypatch
):
    import smoothlearn.geometry as geometry

    def no_svd(*args):
        raise AssertionError("K(t) was computed")

    monkeypatch.setattr(geometry, "_k_function", no_svd)
    rng = np.random.RandomState(0)
    d = 40
    a = _region(rng, d, "dense", np.zeros(d))
    b = _region(rng, d, "dense", np.zeros(d))
    reach = a.circumradius + b.circumradius
    u = rng.randn(d)
    u /= np.linalg.norm(u)
    # farther apart than the circumradii reach: disjoint, and the centres'
    # difference separates; closer than either inradius: each centre lies in
    # the other region, so the segment has a shared point
    shift = 1.01 * reach if apart else 0.5 * min(a.inradius, b.inradius)
    b = Region(shift * u, 1.0, b.scale, basis=b.basis, scale_rest=b.scale_rest)
    assert ellipsoids_disjoint(a, b) == apart
    assert ellipsoids_disjoint(b, a) == apart


def test_framed_rows_take_woodbury_solves_not_dense_decompositions(monkeypatch):
    # rank-k rancer/rddrs rows in ANCER's frame are diagonal plus rank 2k:
    # K(t) and the distance must not fall back to a d x d SVD or eigh (on
    # 784 features that cost 5x to 8x the memory's time), and must agree
    # with the dense answers
    import smoothlearn.geometry as geometry

    rng = np.random.RandomState(1)
    d = 40
    a = _region(rng, d, "framed-thin", rng.randn(d))
    b = _region(rng, d, "cut-framed-thin", rng.randn(d))
    point = a.center + 3.0 * a.circumradius * np.eye(d)[0]
    diff = b.center - a.center
    dense_k = geometry._k_dense(diff, a, b)[0]
    dense_distance = float(reference.l2_distance(a, point))

    def refuse(*args, **kwargs):
        raise AssertionError("a dense decomposition was computed")

    monkeypatch.setattr(geometry, "_k_dense", refuse)
    monkeypatch.setattr(np.linalg, "eigh", refuse)
    monkeypatch.setattr(np.linalg, "svd", refuse)
    k_of_t = geometry._k_function(diff, a, b)[0]
    for t in (0.1, 0.5, 0.9):
        assert k_of_t(t) == pytest.approx(dense_k(t), rel=1e-9)
    distance = l2_distance_to_ellipsoid(a, point)
    assert distance <= dense_distance
    # the only slack is the stated rounding margin
    slack = 2 * SEPARATION_MARGIN * (np.linalg.norm(point - a.center) + a.circumradius)
    assert distance == pytest.approx(dense_distance, rel=1e-9, abs=slack)
