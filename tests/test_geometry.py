"""Intersection and projection against brute-force convex solves."""

import numpy as np
import pytest
from scipy.optimize import linprog, minimize
from scipy.stats import ortho_group

from smoothlearn.geometry import (
    Region,
    contains_point,
    ellipsoids_disjoint,
    l1_distance_lower_bound,
    l2_distance_to_ellipsoid,
)


def _random_region(rng, d, kind, center):
    s = rng.uniform(0.3, 2.0, d)
    if kind == "diagonal":
        return Region(center, 1.0, s)
    if kind == "isotropic":
        return Region(center, 1.0, float(s[0]))
    u = ortho_group.rvs(d, random_state=rng)
    return Region(center, 1.0, s, basis=u, scale_rest=1.0)


def _brute_min_max(a, b):
    """min over x of max(q_a(x), q_b(x)) by SLSQP; the ellipsoids meet iff <= 1."""
    ia, ib = np.linalg.inv(a.covariance()), np.linalg.inv(b.covariance())
    d = a.d

    def q(x, r):
        v = x - r.center
        return v @ (ia if r is a else ib) @ v

    cons = [{"type": "ineq", "fun": lambda v, r=r: v[d] - q(v[:d], r)} for r in (a, b)]
    x0 = np.append((a.center + b.center) / 2, 10.0)
    res = minimize(
        lambda v: v[d],
        x0,
        constraints=cons,
        method="SLSQP",
        options={"ftol": 1e-12, "maxiter": 1000},
    )
    return res.fun


def _touching_factor(a, b_shape, direction):
    """Scale of ``direction`` at which b (centred there) just touches a."""
    lo, hi = 0.0, 20.0
    for _ in range(60):
        mid = (lo + hi) / 2
        b = Region(
            a.center + mid * direction,
            b_shape.rho,
            b_shape.scale,
            basis=b_shape.basis,
            scale_rest=b_shape.scale_rest,
        )
        lo, hi = (mid, hi) if not ellipsoids_disjoint(a, b, tolerance=0) else (lo, mid)
    return (lo + hi) / 2


@pytest.mark.parametrize(
    "kind_a, kind_b",
    [
        ("diagonal", "diagonal"),
        ("rotated", "diagonal"),
        ("rotated", "rotated"),
        ("isotropic", "rotated"),
    ],
)
def test_intersection_agrees_with_brute_force(kind_a, kind_b):
    rng = np.random.RandomState(hash((kind_a, kind_b)) % 2**31)
    d = 3
    seen = {True: 0, False: 0}
    for trial in range(8):
        a = _random_region(rng, d, kind_a, rng.randn(d))
        shape = _random_region(rng, d, kind_b, np.zeros(d))
        direction = rng.randn(d)
        direction /= np.linalg.norm(direction)
        touch = _touching_factor(a, shape, direction)
        # near-touching on both sides, and clearly apart / overlapping
        for factor in (0.5, 0.99, 1.01, 2.0):
            b = Region(
                a.center + factor * touch * direction,
                1.0,
                shape.scale,
                basis=shape.basis,
                scale_rest=shape.scale_rest,
            )
            disjoint = ellipsoids_disjoint(a, b)
            brute = _brute_min_max(a, b)
            assert disjoint == (brute > 1.0), (factor, brute)
            seen[disjoint] += 1
    assert seen[True] > 5 and seen[False] > 5


def test_projection_lands_on_the_boundary_and_is_the_nearest_point():
    rng = np.random.RandomState(0)
    d = 4
    for kind in ("diagonal", "rotated"):
        for _ in range(5):
            region = _random_region(rng, d, kind, rng.randn(d))
            point = region.center + 4 * rng.randn(d)
            if contains_point(region, point):
                continue
            dist = l2_distance_to_ellipsoid(region, point)
            shape = np.linalg.inv(region.covariance())
            cons = {
                "type": "ineq",
                "fun": lambda x: 1 - (x - region.center) @ shape @ (x - region.center),
            }
            res = minimize(
                lambda x: np.sum((x - point) ** 2),
                region.center,
                constraints=[cons],
                method="SLSQP",
                options={"ftol": 1e-14, "maxiter": 500},
            )
            assert dist == pytest.approx(np.sqrt(res.fun), rel=1e-5)
            # the nearest point sits on the boundary
            x_star = res.x - region.center
            assert x_star @ shape @ x_star == pytest.approx(1.0, abs=1e-5)
    inside = Region(np.zeros(d), 1.0, 1.0)
    assert l2_distance_to_ellipsoid(inside, np.full(d, 0.1)) == 0.0


def test_rank_k_projection_matches_the_dense_one():
    rng = np.random.RandomState(1)
    d, k = 6, 2
    u = ortho_group.rvs(d, random_state=2)[:, :k]
    region = Region(np.zeros(d), 0.7, np.array([2.0, 0.5]), basis=u, scale_rest=1.3)
    full_u = np.linalg.eigh(region.covariance())[1]
    dense = Region(
        np.zeros(d),
        1.0,
        np.sqrt(np.linalg.eigvalsh(region.covariance())),
        basis=full_u,
        scale_rest=1.0,
    )
    for _ in range(5):
        p = 3 * rng.randn(d)
        assert l2_distance_to_ellipsoid(region, p) == pytest.approx(
            l2_distance_to_ellipsoid(dense, p), rel=1e-8
        )


def test_l1_distance_bound_is_sound_and_exact_on_facets():
    rng = np.random.RandomState(3)
    d = 4
    for _ in range(20):
        t = rng.uniform(0.3, 2.0, d)
        region = Region(rng.randn(d), 1.0, t, norm="l1")
        point = region.center + 3 * rng.randn(d)
        bound = l1_distance_lower_bound(region, point)
        # exact l1 distance by LP: x = a + v, sum |v_i| / t_i <= 1, min sum |x - p|
        # variables: v (d), |v| (d), |x - p| (d)
        y = point - region.center
        c = np.concatenate([np.zeros(2 * d), np.ones(d)])
        eye = np.eye(d)
        A = np.block(
            [
                [eye, -eye, 0 * eye],
                [-eye, -eye, 0 * eye],
                [eye, 0 * eye, -eye],
                [-eye, 0 * eye, -eye],
                [np.zeros((1, d)), 1 / t[None], np.zeros((1, d))],
            ]
        )
        b = np.concatenate([np.zeros(2 * d), y, -y, [1.0]])
        exact = linprog(
            c, A_ub=A, b_ub=b, bounds=[(None, None)] * d + [(0, None)] * (2 * d)
        ).fun
        assert bound <= exact + 1e-9
        if exact > 0:
            assert bound > 0


def test_l1_paper_formula_would_be_unsound_here():
    # ANCER D.5 takes ||x* - y||_1 of the l2 projection onto the facet plane;
    # for this cross-polytope and point it exceeds the true l1 distance.
    region = Region(np.zeros(2), 1.0, np.array([1.0, 4.0]), norm="l1")
    point = np.array([1.5, 1.5])
    w = np.sign(point) / region.semi_axes()
    x_star = point - (w @ point - 1) * w / (w @ w)
    paper = np.abs(x_star - point).sum()
    ours = l1_distance_lower_bound(region, point)
    # moving along the first axis reaches the facet at (0.625, 1.5): the true l1
    # distance is 0.875, which is our bound
    assert ours == pytest.approx((1.5 / 1 + 1.5 / 4 - 1) * 1.0)
    assert paper > ours


def test_rank_k_intersection_test_matches_the_dense_one():
    """Rank-k rotated regions (and balls) take the (k_a + k_b)-sized K(t); it must
    give the dense generalised-eigendecomposition value."""
    from smoothlearn.geometry import _k_dense, _minimise_k, min_k

    rng = np.random.RandomState(0)
    d, k = 30, 3
    checked = 0
    for trial in range(20):
        regions = []
        for kind in ("rank-k", "rank-k" if trial % 2 else "ball"):
            centre = rng.randn(d) * rng.uniform(0.05, 0.5)
            if kind == "ball":
                regions.append(Region(centre, 1.0, float(rng.uniform(0.3, 1.0))))
                continue
            u = np.linalg.qr(rng.randn(d, k))[0]
            regions.append(
                Region(
                    centre,
                    rng.uniform(0.5, 2.0),
                    rng.uniform(0.1, 3.0, k),
                    basis=u,
                    scale_rest=rng.uniform(0.2, 1.0),
                )
            )
        a, b = regions
        for region in (a, b):  # the low-rank K(t) is the one taken
            assert region.form.isotropic_plus_low_rank(0, d, region.rho) is not None
        fast = min_k(a, b)
        dense = _minimise_k(_k_dense(b.center - a.center, a, b)[0])[0]
        assert fast == pytest.approx(dense, abs=1e-7)
        checked += fast < 0
    assert 0 < checked < 20  # both disjoint and intersecting pairs were seen


def test_dense_k_survives_a_divide_and_conquer_svd_that_does_not_converge(
    monkeypatch,
):
    """numpy's SVD driver failed to converge on a benign 784 x 784 matrix (a
    dense RANCER region against a ball) and stopped a certification; where it
    fails, the QR-iteration driver gives the same K(t)."""
    from smoothlearn import geometry
    from smoothlearn.geometry import _k_dense, _minimise_k

    rng = np.random.RandomState(1)
    d, k = 12, 4
    u = np.linalg.qr(rng.randn(d, k))[0]
    a = Region(rng.randn(d) * 0.3, 1.0, 0.5)
    b = Region(
        rng.randn(d) * 0.3, 1.2, rng.uniform(0.2, 2.0, k), basis=u, scale_rest=0.7
    )
    expected = _minimise_k(_k_dense(b.center - a.center, a, b)[0])[0]

    def no_convergence(*args, **kwargs):
        raise np.linalg.LinAlgError("SVD did not converge")

    monkeypatch.setattr(geometry.np.linalg, "svd", no_convergence)
    assert _minimise_k(_k_dense(b.center - a.center, a, b)[0])[0] == pytest.approx(
        expected, abs=1e-10
    )
