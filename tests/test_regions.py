import numpy as np
import pytest
from scipy.stats import ortho_group

from smoothlearn import Certificates


def _certs(scale, noise="gaussian", basis=None, scale_rest=None):
    n = len(scale)
    d = 3
    return Certificates(
        label=np.arange(n),
        abstained=np.array([False] * (n - 1) + [True]),
        p_lower=np.full(n, 0.9),
        gap=np.array([1.0] * (n - 1) + [0.0]),
        center=np.zeros((n, d)),
        scale=scale,
        noise=noise,
        basis=basis,
        scale_rest=scale_rest,
        class_index=np.array(list(range(n - 1)) + [-1]),
    )


def test_isotropic_radius_and_membership():
    cert = _certs(np.array([0.5, 2.0, 1.0]))
    np.testing.assert_allclose(cert.radius, [0.5, 2.0, 0.0])
    np.testing.assert_allclose(cert.proxy_radius, cert.radius)
    assert cert.contains(0, [0.49, 0, 0]) and not cert.contains(0, [0.3, 0.3, 0.3])
    assert not cert.contains(2, [0, 0, 0])  # abstained: empty region


def test_diagonal_radius_proxy_and_l1_membership():
    scale = np.array([[1.0, 2.0, 4.0], [1.0, 1.0, 1.0]])
    cert = _certs(scale, noise="uniform")
    c = np.sqrt(3)
    assert cert.radius[0] == pytest.approx(c * 1.0)
    assert cert.proxy_radius[0] == pytest.approx(c * 2.0)  # (1*2*4)^(1/3) = 2
    # l1 region ||S^-1 delta||_1 <= c: along axis 3 it reaches 4c
    assert cert.contains(0, [0, 0, 4 * c - 1e-6])
    assert not cert.contains(0, [0.5 * c, 0, 2.01 * c])
    np.testing.assert_allclose(cert.scale_matrix(0), np.diag(scale[0]))


def test_rotated_scale_matrix_and_membership():
    u = ortho_group.rvs(3, random_state=0)[:, :2]
    cert = _certs(
        np.array([[0.5, 3.0], [1.0, 1.0]]),
        basis=np.stack([u, u]),
        scale_rest=np.array([2.0, 1.0]),
    )
    s = cert.scale_matrix(0)
    np.testing.assert_allclose(np.sort(np.linalg.eigvalsh(s)), [0.5, 2.0, 3.0])
    assert cert.radius[0] == pytest.approx(0.5)
    assert cert.proxy_radius[0] == pytest.approx((0.5 * 3.0 * 2.0) ** (1 / 3))
    delta = 2.99 * u[:, 1]
    assert cert.contains(0, delta) and not cert.contains(0, 0.51 * u[:, 0])
    np.testing.assert_allclose(
        cert.inverse_scale_apply(0, delta), np.linalg.solve(s, delta)
    )


def test_slicing_concatenation_and_frame():
    cert = _certs(np.array([0.5, 2.0, 1.0]))
    part = cert[1:]
    assert len(part) == 2 and part.label.tolist() == [1, 2]
    assert len(cert[0]) == 1
    joined = Certificates.concatenate([cert[:1], cert[1:]])
    np.testing.assert_array_equal(joined.radius, cert.radius)
    frame = cert.to_frame()
    assert list(frame["radius"]) == list(cert.radius)
    with pytest.raises(ValueError, match="concatenate"):
        Certificates.concatenate([cert, _certs(np.ones((3, 3)))])
    with pytest.raises(IndexError):
        cert[5]


def test_l1_families_reject_rotations():
    u = np.eye(3)[:, :2]
    with pytest.raises(ValueError, match="l1"):
        _certs(
            np.ones((2, 2)),
            noise="laplace",
            basis=np.stack([u, u]),
            scale_rest=np.ones(2),
        )
