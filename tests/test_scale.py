"""Every form of :class:`smoothlearn.scale.Scale` against its dense matrix.

Each fact the engine, the memory's geometry and the metrics take from a Scale
(extreme singular values, volume, powers, the structures geometry and
first-layer reuse exploit, the noise it draws) is checked against the dense
``S_i`` built from the form's definition, on random rows of every form.
"""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from smoothlearn.scale import Scale

FORMS = ("isotropic", "diagonal", "rotated-rank-k", "rotated-full", "rotated-framed")


def random_scale(rng, form, m, d):
    """A Scale of ``form`` with ``m`` rows on ``d`` features, and its dense rows."""
    if form == "isotropic":
        values = 10 ** rng.uniform(-2, 1, m)
        return Scale(values), np.stack([v * np.eye(d) for v in values])
    if form == "diagonal":
        values = 10 ** rng.uniform(-2, 1, (m, d))
        return Scale(values), np.stack([np.diag(v) for v in values])
    k = d if form == "rotated-full" else int(rng.randint(1, d))
    basis = np.stack([np.linalg.qr(rng.randn(d, k))[0] for _ in range(m)])
    values = 10 ** rng.uniform(-2, 1, (m, k))
    rest = 10 ** rng.uniform(-2, 1, m)
    dense = np.stack(
        [
            (u * s) @ u.T + r * (np.eye(d) - u @ u.T)
            for u, s, r in zip(basis, values, rest)
        ]
    )
    if form == "rotated-full":
        rest = values.min(axis=1)  # no complement: rest is not part of S
    if form == "rotated-framed":  # S = F R F
        frame = 10 ** rng.uniform(-1, 0.5, (m, d))
        dense = frame[:, :, None] * dense * frame[:, None, :]
        return Scale(values, basis, rest, frame=frame), dense
    return Scale(values, basis, rest), dense


cases = st.tuples(st.integers(0, 2**31 - 1), st.sampled_from(FORMS), st.integers(2, 7))


@settings(max_examples=200, deadline=None)
@given(cases)
def test_facts_of_every_form_match_the_dense_matrix(case):
    seed, form, d = case
    rng = np.random.RandomState(seed)
    scale, dense = random_scale(rng, form, 3, d)
    assert scale.kind == form.split("-")[0]
    singular = np.linalg.svd(dense, compute_uv=False)  # descending
    framed = form == "rotated-framed"
    if framed:  # bounds, on the sound side: inside the extremes, never past
        smallest, largest = scale.smallest(), scale.largest()
        assert np.all(smallest <= singular[:, -1] * (1 + 1e-12))
        assert np.all(largest >= singular[:, 0] * (1 - 1e-12))
        # and exactly min(F)^2 and max(F)^2 times R's extremes
        r_dense = dense / (scale.frame[:, :, None] * scale.frame[:, None, :])
        r_singular = np.linalg.svd(r_dense, compute_uv=False)
        np.testing.assert_allclose(
            smallest, scale.frame.min(axis=1) ** 2 * r_singular[:, -1], rtol=1e-10
        )
        np.testing.assert_allclose(
            largest, scale.frame.max(axis=1) ** 2 * r_singular[:, 0], rtol=1e-10
        )
    else:
        np.testing.assert_allclose(scale.smallest(), singular[:, -1], rtol=1e-10)
        np.testing.assert_allclose(scale.largest(), singular[:, 0], rtol=1e-10)
    log_det = np.linalg.slogdet(dense)[1]
    np.testing.assert_allclose(scale.geometric_mean(d), np.exp(log_det / d), rtol=1e-9)
    v = rng.randn(4, d)
    for i in range(3):
        np.testing.assert_allclose(scale.dense(i, d), dense[i], atol=1e-12)
        np.testing.assert_allclose(
            scale.apply(i, v, power=-1.0), np.linalg.solve(dense[i], v.T).T, rtol=1e-8
        )
        if framed:
            np.testing.assert_allclose(
                scale.apply(i, v, factor=0.5), v @ (0.5 * dense[i]), atol=1e-12
            )
            with pytest.raises(ValueError, match="powers 1 and -1"):
                scale.apply(i, v, power=2.0)
        else:
            np.testing.assert_allclose(
                scale.apply(i, v, power=2.0, factor=0.5),
                v @ (0.25 * dense[i] @ dense[i]),
            )
        covariance = 4.0 * dense[i] @ dense[i]
        np.testing.assert_allclose(
            scale.covariance(i, d, factor=2.0), covariance, rtol=1e-9, atol=1e-12
        )
        compact = scale.diagonal_or_dense(i, d, factor=2.0)
        as_matrix = np.diag(compact) if compact.ndim == 1 else compact
        np.testing.assert_allclose(as_matrix, 2.0 * dense[i], atol=1e-12)
        _check_structures(scale, i, d, covariance, rng)


def _check_structures(scale, i, d, covariance, rng):
    """What geometry reads of row ``i`` (factor 2) reproduces its covariance."""
    diagonal = scale.diagonal_covariance(i, d, factor=2.0)
    if diagonal is not None:
        np.testing.assert_allclose(np.diag(diagonal), covariance, rtol=1e-12)
    low_rank = scale.isotropic_plus_low_rank(i, d, factor=2.0)
    if low_rank is not None:
        c, u, extra = low_rank
        assert u.shape[1] < d
        np.testing.assert_allclose(
            c * np.eye(d) + (u * extra) @ u.T, covariance, rtol=1e-9, atol=1e-12
        )
    # principal axes: |T^-1 y| is the norm of coordinates / semi-axes
    semi, coordinates = scale.principal_axes(i, d, factor=2.0)
    y = rng.randn(d)
    whitened = np.linalg.solve(np.linalg.cholesky(covariance), y)
    np.testing.assert_allclose(
        np.linalg.norm(coordinates(y) / semi), np.linalg.norm(whitened), rtol=1e-8
    )
    # a ball's exact circumscribed and inscribed radii (bounds in a frame)
    if scale.frame is not None:
        assert semi.max() <= 2.0 * scale.largest()[i] * (1 + 1e-12)
        assert semi.min() >= 2.0 * scale.smallest()[i] * (1 - 1e-12)
        return
    assert np.isclose(semi.max(), 2.0 * scale.largest()[i], rtol=1e-12)
    assert np.isclose(semi.min(), 2.0 * scale.smallest()[i], rtol=1e-12)


@settings(max_examples=100, deadline=None)
@given(cases)
def test_noise_and_first_layer_parts_draw_s_z(case):
    seed, form, d = case
    rng = np.random.RandomState(seed)
    scale, dense = random_scale(rng, form, 3, d)
    z = rng.randn(50, d)
    expected = np.einsum("mde,we->mwd", dense, z)
    np.testing.assert_allclose(scale.noise(z), expected, atol=1e-10)
    as_torch = scale.map(torch.as_tensor)
    z_t = torch.as_tensor(z)
    np.testing.assert_allclose(as_torch.noise(z_t).numpy(), expected, atol=1e-10)
    centres = torch.as_tensor(rng.randn(3, d))
    np.testing.assert_allclose(
        as_torch.perturb(centres, z_t).numpy(),
        centres.numpy()[:, None] + expected,
        atol=1e-10,
    )
    parts = scale.shared_parts()
    if parts is None:  # per-input diagonals and frames share nothing
        assert form in ("diagonal", "rotated-framed")
        return
    common, factor, basis, stretch = parts
    shared = z if common is None else z * common
    drawn = (
        np.ones((3, 1, 1)) * shared
        if factor is None
        else factor[:, None, None] * shared
    )
    if basis is not None:
        drawn = drawn + np.einsum("mdk,mk,mek,we->mwd", basis, stretch, basis, z)
    np.testing.assert_allclose(drawn, expected, atol=1e-10)


def test_a_shared_diagonal_is_drawn_through_its_common_part():
    values = np.tile([0.5, 1.0, 2.0], (4, 1))
    common, factor, basis, stretch = Scale(values).shared_parts()
    np.testing.assert_array_equal(common, values[0])
    assert factor is None and basis is None and stretch is None


@pytest.mark.parametrize("form", FORMS)
def test_noise_covariance_is_s_squared(form):
    rng = np.random.RandomState(0)
    scale, dense = random_scale(rng, form, 1, 4)
    z = rng.randn(200_000, 4)
    noise = scale.noise(z)[0]
    covariance = dense[0] @ dense[0]
    # the sample covariance's standard error is about |M| sqrt(2 / n)
    tolerance = 6 * np.abs(covariance).max() * np.sqrt(2 / len(z))
    np.testing.assert_allclose(np.cov(noise.T), covariance, atol=tolerance)


@pytest.mark.parametrize("form", FORMS)
def test_rows_fields_concatenation_and_picks_keep_the_form(form):
    rng = np.random.RandomState(1)
    a, dense_a = random_scale(rng, form, 3, 5)
    b, _ = random_scale(rng, form, 2, 5)
    if form.startswith("rotated"):  # one rank for both
        b, _ = random_scale(np.random.RandomState(1), form, 2, 5)
    again = Scale.from_fields(**a.fields())
    assert again.equals(a) and not again.equals(a[:2])
    joined = Scale.concatenate([a, b])
    assert joined[:3].equals(a) and joined[3:].equals(b)
    assert len(joined) == 5 and joined.kind == a.kind
    picked = Scale.pick([a[:2], b], np.array([1, 0]))
    assert picked[:1].equals(b[:1]) and picked[1:].equals(a[1:2])
    balls = a.with_isotropic([0, 2], [0.3, 0.7])
    for i, s in ((0, 0.3), (2, 0.7)):
        np.testing.assert_allclose(balls.dense(i, 5), s * np.eye(5), atol=1e-12)
    np.testing.assert_allclose(balls.dense(1, 5), dense_a[1], atol=1e-12)
    # the balls are isotropic rows wherever a form can tell (a rotated form
    # carries its basis, so no row of it counts as isotropic)
    expected = {"isotropic": [1, 1, 1], "diagonal": [1, 0, 1]}.get(form, [0, 0, 0])
    np.testing.assert_array_equal(balls.isotropic_rows(), np.array(expected, bool))
    assert a.equals(random_scale(np.random.RandomState(1), form, 3, 5)[0])  # a copy


@pytest.mark.parametrize("form", FORMS)
def test_the_offset_travels_with_the_rows_but_not_into_a_region(form):
    rng = np.random.RandomState(2)
    scale, _ = random_scale(rng, form, 3, 4)
    offset = rng.randn(3, 4)
    scale = Scale(scale.values, scale.basis, scale.rest, offset, scale.frame)
    np.testing.assert_array_equal(scale[1:].offset, offset[1:])
    assert "offset" not in " ".join(scale.fields())
    run, recorded = scale.as_run()
    assert run.offset.dtype == np.float32 and recorded.offset is None
    assert np.array_equal(run.values, run.values.astype(np.float32))


def test_scales_check_their_shapes():
    Scale(np.ones((2, 3))).check(2, 3)
    with pytest.raises(ValueError, match="one column per feature"):
        Scale(np.ones((2, 3))).check(2, 4)
    with pytest.raises(ValueError, match="basis must be"):
        Scale(np.ones((2, 2)), np.zeros((2, 3, 3)), np.ones(2)).check(2, 3)
    with pytest.raises(ValueError, match="both basis and rest"):
        Scale(np.ones((2, 2)), np.zeros((2, 3, 2)))


def test_a_frame_is_checked_and_with_unit_scales_is_the_diagonal_it_squares():
    rng = np.random.RandomState(3)
    frame = 10 ** rng.uniform(-1, 0.5, (2, 6))
    basis = np.stack([np.linalg.qr(rng.randn(6, 2))[0] for _ in range(2)])
    framed = Scale(np.ones((2, 2)), basis, np.ones(2), frame=frame)
    framed.check(2, 6)
    diagonal = Scale(frame**2)
    for i in range(2):
        np.testing.assert_allclose(framed.dense(i, 6), diagonal.dense(i, 6), atol=1e-12)
    # RANCER's ANCER candidate: bounds, volume and noise are ANCER's exactly
    np.testing.assert_allclose(framed.smallest(), diagonal.smallest())
    np.testing.assert_allclose(framed.largest(), diagonal.largest())
    np.testing.assert_allclose(framed.geometric_mean(6), diagonal.geometric_mean(6))
    z = rng.randn(5, 6)
    np.testing.assert_allclose(framed.noise(z), diagonal.noise(z), atol=1e-12)
    with pytest.raises(ValueError, match="frame must have shape"):
        Scale(np.ones((2, 2)), basis, np.ones(2), frame=frame[:, :5]).check(2, 6)
    with pytest.raises(ValueError, match="belongs to a rotated scale"):
        Scale(np.ones((2, 6)), frame=frame)


def _mp_norm_of_inverse_times(dense, other):
    """``||dense^-1 other||_2`` in 60-digit arithmetic (the containment test
    of ``E(other)`` in ``E(dense)``)."""
    import mpmath

    with mpmath.workdps(60):
        ratio = mpmath.inverse(mpmath.matrix(dense.tolist())) * mpmath.matrix(
            other.tolist()
        )
        singular = mpmath.svd_r(ratio, compute_uv=False)
        return float(max(singular))


@settings(max_examples=120, deadline=None)
@given(cases, st.floats(0.01, 30.0))
def test_a_capped_row_lies_in_the_row_and_the_ball_and_holds_the_smaller_ball(
    case, limit
):
    seed, form, d = case
    rng = np.random.RandomState(seed)
    scale, dense = random_scale(rng, form, 2, d)
    capped = scale.capped(1, d, limit)
    assert len(capped) == 1
    got = capped.dense(0, d)
    singular = np.linalg.svd(dense[1], compute_uv=False)  # descending
    # inside the row's region (60-digit reference on the float64 matrices,
    # whose own rounding is about 1e-16) and inside the ball
    assert _mp_norm_of_inverse_times(dense[1], got) <= 1.0 + 1e-12
    assert np.linalg.svd(got, compute_uv=False).max() <= limit * (1 + 1e-12)
    assert capped.largest()[0] <= limit * (1 + 1e-12)
    # holding the ball of min(limit, smallest semi-axis): the papers' reduced
    # region, with its certified radius, never worse (up to a frame's margin:
    # 1e-9 and the decomposition's rounding relative to the smallest axis)
    # 1e-9 and the decomposition's rounding relative to the smallest axis;
    # a rotated row's: the shrink by its basis's distance from orthonormal,
    # 8 |U^T U - I| max|s - r| / s_min, about 1e-12 here)
    margin = {"rotated-framed": 1e-8, "rotated-rank-k": 1e-10, "rotated-full": 1e-10}
    ball = min(limit, singular[-1]) * (1 - margin.get(form, 1e-12))
    assert capped.smallest()[0] >= ball
    np.testing.assert_allclose(
        np.linalg.svd(got, compute_uv=False).min(), capped.smallest()[0], rtol=1e-9
    )
    assert capped.geometric_mean(d)[0] >= ball
    exact = np.exp(np.log(np.minimum(singular, limit)).mean())
    if form == "rotated-framed":  # k shortest axes kept, the rest at most
        assert capped.geometric_mean(d)[0] <= exact * (1 + 1e-9)
    else:  # the same axes, each capped
        np.testing.assert_allclose(capped.geometric_mean(d)[0], exact, rtol=1e-9)
    # written back, the row reads the same and the others are untouched
    back = scale.with_rows([1], [capped])
    np.testing.assert_allclose(back.dense(1, d), got, atol=1e-12)
    np.testing.assert_allclose(back.dense(0, d), dense[0], atol=1e-12)
    assert back.kind == scale.kind and scale.equals(
        random_scale(np.random.RandomState(seed), form, 2, d)[0]
    )


def test_rows_are_written_back_in_their_own_form_only():
    rng = np.random.RandomState(5)
    diagonal, _ = random_scale(rng, "diagonal", 2, 3)
    rotated, _ = random_scale(rng, "rotated-rank-k", 2, 3)
    with pytest.raises(ValueError, match="own form"):
        diagonal.with_rows([0], [rotated[:1]])
    ball = diagonal.with_rows([1], [Scale(np.array([0.4]))])
    np.testing.assert_array_equal(ball.values[1], [0.4, 0.4, 0.4])


@settings(max_examples=120, deadline=None)
@given(
    st.integers(0, 2**31 - 1),
    st.integers(2, 7),
    st.booleans(),
    st.integers(7, 14),
    st.floats(0.01, 30.0),
)
def test_a_capped_row_stays_inside_for_a_basis_orthonormal_only_to_rounding(
    seed, d, full, digits, limit
):
    """A rotated row built by a user, its basis unit and orthogonal only to
    ``10^-digits``: capping the same axes could leave the region about
    ``cond(S) |U^T U - I|`` outside the row (1e-9 relative seen). Inside both
    as the stored form ``S`` (60-digit reference) and as the memory's
    covariance ``M = r^2 I + U diag(s^2 - r^2) U^T``."""
    rng = np.random.RandomState(seed)
    k = d if full else int(rng.randint(1, d))
    basis = np.linalg.qr(rng.randn(d, k))[0] + 10.0**-digits * rng.randn(d, k)
    values = 10 ** rng.uniform(-2, 2, (1, k))
    # with no complement the rest is no part of S: the engine stores the
    # smallest value there (random_scale's rotated-full)
    rest = values.min(axis=1) if full else 10 ** rng.uniform(-2, 2, 1)
    scale = Scale(values, basis[None], rest)
    capped = scale.capped(0, d, limit)
    # (the float64 matrices' own rounding is about 1e-16 cond; the stored
    # basis's 10^-digits would stick out by up to 1e-5)
    tight = 1.0 + 1e-12
    assert _mp_norm_of_inverse_times(scale.dense(0, d), capped.dense(0, d)) <= tight
    M, M_capped = scale.covariance(0, d), capped.covariance(0, d)
    # M' <= M: no generalised eigenvalue of (M', M) above 1 (60 digits)
    import mpmath

    with mpmath.workdps(60):
        root = mpmath.cholesky(mpmath.matrix(M.tolist()))
        inv = mpmath.inverse(root)
        spread = inv * mpmath.matrix(M_capped.tolist()) * inv.T
        assert max(mpmath.eigsy(spread)[0]) <= tight
    # the cap still caps, and gives up no more than the basis's error costs:
    # the form's largest value over the kept ball, squared (the covariance),
    # times |U^T U - I|, and the check's rounding margin
    assert capped.largest()[0] <= limit
    small = min(limit, scale.smallest()[0])
    spread = max(scale.values.max(), scale.rest[0]) / small
    error = np.abs(basis.T @ basis - np.eye(k)).max()
    kept = capped.smallest()[0] / small
    assert kept >= 1 - 100 * spread**2 * error - 1e-4


def _with_cuts(scale, dense, rng, n_cuts):
    """``scale`` with ``n_cuts`` random rank-one cuts per row (each to a
    random share of the row's support along a random direction), and the
    dense covariances ``S^2 - C C^T`` built from the cut columns."""
    d = dense.shape[1]
    rows = []
    for i in range(len(scale)):
        row = scale[[i]]
        for _ in range(n_cuts):
            v = rng.randn(d)
            v /= np.linalg.norm(v)
            support = np.sqrt(v @ row.covariance(0, d) @ v)
            row = row.cut(0, d, v, support * rng.uniform(0.05, 0.95))
        rows.append(row)
    cut = Scale.concatenate(rows)
    cov = np.stack(
        [dense[i] @ dense[i] - cut.cuts[i] @ cut.cuts[i].T for i in range(len(cut))]
    )
    return cut, cov


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**31 - 1), st.sampled_from(FORMS), st.integers(1, 3))
def test_a_cut_row_has_the_covariance_volume_and_radius_of_its_cuts(seed, form, n_cuts):
    rng = np.random.RandomState(seed)
    d = 4
    scale, dense = random_scale(rng, form, 3, d)
    cut, cov = _with_cuts(scale, dense, rng, n_cuts)
    assert cut.has_cuts and cut.cuts.shape == (3, d, n_cuts)
    for i in range(3):
        lam = np.linalg.eigvalsh(cov[i])
        # inside the row: S^2 - C C^T <= S^2, and positive definite
        assert lam[0] > 0
        assert np.linalg.eigvalsh(dense[i] @ dense[i] - cov[i])[0] > -1e-12 * lam[-1]
        np.testing.assert_allclose(cut.covariance(i, d), cov[i], atol=1e-12 * lam[-1])
        # exact volume, and an inscribed radius below the true one and tight
        # (a frame's: within the dense eigenvalues' rounding)
        assert cut.geometric_mean(d)[i] == pytest.approx(
            np.exp(np.log(lam).sum() / (2 * d)), rel=1e-9
        )
        smallest = cut.smallest()[i]
        assert smallest <= np.sqrt(lam[0])
        floor = lam[0]
        if form == "rotated-framed":
            # dense eigenvalues, less their rounding against the quantities
            # rounded (||S||^2 + ||C||_F^2, not the cut covariance's norm)
            gross = cut.largest()[i] ** 2 + np.sum(cut.cuts[i] ** 2)
            floor -= (2 * d + 32) * d * np.finfo(float).eps * gross
        assert smallest >= np.sqrt(max(floor, 0.0)) * (1 - 1e-6)
        assert cut.largest()[i] >= np.sqrt(lam[-1]) * (1 - 1e-12)
        # the factor L (L L^T = covariance): its inverse gives the gauge,
        # its transpose the support function
        v = rng.randn(5, d)
        gauge = np.einsum("nd,nd->n", v, np.linalg.solve(cov[i], v.T).T)
        np.testing.assert_allclose(
            (cut.apply(i, v, power=-1.0) ** 2).sum(1), gauge, rtol=1e-9
        )
        support = np.einsum("nd,nd->n", v, v @ cov[i])
        np.testing.assert_allclose(
            (cut.apply(i, v, transpose=True) ** 2).sum(1), support, rtol=1e-9
        )
        factor = cut.factor(i, d)
        np.testing.assert_allclose(factor @ factor.T, cov[i], atol=1e-10 * lam[-1])
        root = cut.dense(i, d)  # the public dense S: symmetric, S S = M
        np.testing.assert_allclose(root, root.T, atol=1e-12 * np.sqrt(lam[-1]))
        np.testing.assert_allclose(root @ root, cov[i], atol=1e-10 * lam[-1])


def test_a_cut_keeps_the_row_in_its_slab_and_costs_volume_along_one_direction():
    d = 3
    row = Scale(np.array([[1.0, 2.0, 4.0]]))
    v = np.array([0.0, 0.6, 0.8])
    s = v @ row.covariance(0, d) @ v  # the support's square along v
    cut = row.cut(0, d, v, 1.0)
    cov = cut.covariance(0, d)
    assert v @ cov @ v <= 1.0 and v @ cov @ v == pytest.approx(1.0, rel=1e-8)
    # volume falls by g / sqrt(s) exactly; the axis orthogonal to v and to
    # S^2 v is kept (here e_1)
    ratio = cut.geometric_mean(d)[0] / row.geometric_mean(d)[0]
    assert ratio**d == pytest.approx(1.0 / np.sqrt(s), rel=1e-8)
    assert np.allclose(cov[0], [1.0, 0.0, 0.0])
    # a row already in the slab is not cut; a cut too thin to be sound is None
    assert row.cut(0, d, v, 100.0).cuts is None
    assert row.cut(0, d, v, 1e-9) is None


def test_cut_rows_travel_through_rows_concatenation_and_pickles_but_never_run():
    import pickle

    rng = np.random.RandomState(0)
    scale, dense = random_scale(rng, "diagonal", 4, 3)
    cut, _ = _with_cuts(scale, dense, rng, 2)
    # rows written back: a ball clears its row's cuts, a cut row brings them
    mixed = scale.with_rows([0, 2], [Scale(np.array([0.5])), cut[[2]]])
    assert mixed.cuts.shape == (4, 3, 2) and not mixed.cuts[[0, 1, 3]].any()
    assert mixed[[2]].equals(cut[[2]])
    # a ball with a cut, written back into a diagonal Scale: the same region
    ball = Scale(np.array([0.5])).cut(0, 3, np.array([0.6, 0.8, 0.0]), 0.2)
    written = cut.with_rows([1], [ball])
    np.testing.assert_allclose(written.covariance(1, 3), ball.covariance(0, 3))
    np.testing.assert_array_equal(written.cuts[[0, 2, 3]], cut.cuts[[0, 2, 3]])
    joined = Scale.concatenate([scale, cut[[1]]])  # no cuts and cuts: padded
    assert joined.cuts.shape == (5, 3, 2) and not joined.cuts[:4].any()
    assert joined[[4]].geometric_mean(3)[0] == cut.geometric_mean(3)[1]
    assert pickle.loads(pickle.dumps(cut)).equals(cut)
    for run in (lambda: cut.noise(np.zeros((2, 3))), cut.as_run, cut.shared_parts):
        with pytest.raises(ValueError, match="never a smoothing to run"):
            run()
    with pytest.raises(ValueError, match="cuts must have shape"):
        Scale(np.ones((2, 3)), cuts=np.zeros((2, 4, 1))).check(2, 3)


@settings(max_examples=40, deadline=None)
@given(
    st.integers(0, 2**31 - 1),
    st.sampled_from(("isotropic", "diagonal", "rotated-rank-k", "rotated-full")),
    st.integers(1, 4),
)
def test_a_cut_that_keeps_a_ball_keeps_it_and_the_most_volume_near_the_largest(
    seed, form, n_cuts
):
    """``keep``: each cut keeps the ball (the region's or the slab's, what a cap
    keeps) inside, stays in its slab and in the row, and loses little of the
    largest cut's volume."""
    rng = np.random.RandomState(seed)
    d = 5
    row, _ = random_scale(rng, form, 1, d)
    keep = float(row.smallest()[0]) * (1 - 1e-6)
    plain = row
    for _ in range(n_cuts):
        v = rng.randn(d)
        v /= np.linalg.norm(v)
        cov = row.covariance(0, d)
        g = np.sqrt(v @ cov @ v) * rng.uniform(0.2, 0.95)
        keep = min(keep, g * (1 - 1e-6))
        new = row.cut(0, d, v, g, keep=keep)
        new_cov = new.covariance(0, d)
        assert v @ new_cov @ v <= g**2
        assert np.linalg.eigvalsh(cov - new_cov)[0] >= -1e-12 * np.abs(cov).max()
        assert np.linalg.eigvalsh(new_cov)[0] >= keep**2 * (1 - 1e-7)
        plain = plain.cut(0, d, v, g)
        row = new
        keep *= 1 - 1e-8
    lowest = np.sqrt(np.linalg.eigvalsh(row.covariance(0, d))[0])
    assert row.smallest()[0] >= lowest * (1 - 1e-4)  # the stated radius, tight
    assert row.geometric_mean(d)[0] <= plain.geometric_mean(d)[0] * (1 + 1e-9) or (
        n_cuts > 1  # a later largest cut starts from another region
    )
