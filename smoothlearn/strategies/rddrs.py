"""RDDRS: a full SPD smoothing scale by Riemannian gradient ascent (rddrs.md §3)."""

import math
from numbers import Integral, Real

import numpy as np
import torch

from ..scale import Scale
from ..utils._deprecation import DEPRECATED
from ..utils._sklearn_compat import HasMethods, Interval, StrOptions
from ._curvature import (
    curvature_basis,
    hessian_seed,
    resolve_rank,
    with_resolved_rank,
)
from ._from_isotropic import StartsFromIsotropic
from ._soft import (
    COMPARE_DRAWS,
    OPTIMISER_CONSTRAINTS,
    STOP_TOL,
    Convergence,
    optimisation_draws,
    resolve_clip,
    soft_gap,
    tied_min,
    volume_objective,
)
from .ancer import ancer_frame

__all__ = ["RDDRS"]


def _spd_exp(M, bound):
    """``expm(M)`` for symmetric ``M`` (batched) by scaling and squaring a
    second-order Taylor step, given ``bound >= ||M||_2`` of every matrix.

    With ``M / 2^s`` of norm at most 1/4, ``T = I + M / 2^s + (M / 2^s)^2 / 2``
    is positive definite and increasing in each eigenvalue (``1 + x + x^2/2``
    is, on ``[-1, 1]``), and ``T^(2^s)`` keeps both: a retraction that agrees
    with the exponential map of rddrs.md eq. 6 to second order and within
    1.3% in each eigenvalue (``4 log(1 - 1/4 + 1/32) = -0.988`` against -1),
    at ``2 + s`` matrix products where ``expm`` by eigendecomposition costs an
    ``eigh`` (at d = 784, an ``eigh`` is most of a dense step). Rounding in
    the squarings costs the smallest eigenvalues ``eps exp(2 ||M||)`` of
    relative accuracy (1e-9 at a norm of 8); the eigenvalue band projected
    after each step absorbs it.
    """
    squarings = max(0, math.ceil(math.log2(4.0 * max(bound, 1e-300))))
    M = M / 2.0**squarings
    T = torch.eye(M.shape[-1], dtype=M.dtype, device=M.device) + M + M @ M / 2
    for _ in range(squarings):
        T = T @ T
    return (T + T.transpose(-1, -2)) / 2


def framed_subspace_noise(z, frame, basis, A, rest):
    """``F (Q A Q^T + r (I - Q Q^T)) F z`` per input, ``F = diag(frame)``:
    rank-k RDDRS on ANCER's diagonal while it optimises (``A`` and ``r`` in
    units of the frame, ``I`` and 1 their start).

    z (n, d), frame (m, d), basis (m, d, k), A (m, k, k), rest (m,)
    -> (m, n, d).
    """
    y = frame[:, None, :] * z[None]
    eye = torch.eye(A.shape[-1], dtype=A.dtype, device=A.device)
    coef = torch.einsum("mnd,mdk->mnk", y, basis) @ (A - rest[:, None, None] * eye)
    out = rest[:, None, None] * y + torch.einsum("mnk,mdk->mnd", coef, basis)
    return out * frame[:, None, :]


def subspace_noise(z, basis, A, rest):
    """``Q A Q^T z + r (I - Q Q^T) z`` per input; ``Q A Q^T z`` when ``rest``
    is None (``Q`` then spans everything, a dense ``C``).

    RDDRS's own parametrisation while it optimises: ``A`` is a full symmetric
    (k, k) matrix on the subspace, not yet diagonalised, so this is not a
    :class:`~smoothlearn.regions.Scale`; the answer is recorded as one after
    the final eigendecomposition.

    z (n, d), basis (m, d, k), A (m, k, k), rest (m,) or None -> (m, n, d).
    """
    coef = torch.einsum("nd,mdk->mnk", z, basis)
    if rest is None:
        return (coef @ A) @ basis.transpose(1, 2)
    eye = torch.eye(A.shape[-1], dtype=A.dtype, device=A.device)
    coef = torch.einsum("mnk,mkl->mnl", coef, A - rest[:, None, None] * eye)
    return rest[:, None, None] * z + torch.einsum("mnl,mdl->mnd", coef, basis)


class RDDRS(StartsFromIsotropic):
    """Per-input full SPD scale ``C`` by Riemannian gradient ascent.

    rddrs.md section 3: maximise ``H(C) = gap * gm(C) + kappa * min(C) * gap``
    (eq. 5, with the d-th root of the eigenvalue product, as ANCER) over
    symmetric positive definite ``C``, for noise ``C z``, by ascent with the
    affine-invariant metric ``g_C(A, B) = tr(C^-1 A C^-1 B)`` and its
    exponential map (eq. 6)::

        grad = C G C                  (G: the symmetrised Euclidean gradient)
        C <- C^1/2 expm(t C^1/2 G C^1/2) C^1/2,   t = lr sqrt(c) / ||grad||_C

    then eigenvalues are projected into ``[sigma*, sigma* (1 + gamma2)]``:
    raised to at least ``sigma*`` (the isotropic data-dependent solution, also
    the start ``C = sigma* I``; the paper's constraint) and, our addition,
    lowered to at most ``(1 + gamma2) sigma*`` (RANCER's upper band). The paper
    bounds C only from below; without a ceiling a step long enough to move C
    at all lets a few eigenvalues grow without limit, past where the
    vote-based certificate of a network trained at one sigma stops improving
    (Fashion-MNIST, dense C: lr 0.4 gave AC R~ 0.050 against 0.574 at lr
    0.04). ``G`` comes from
    autograd through the reparameterised noise ``x + C z`` on ``n_samples``
    draws per step (the paper's Monte Carlo formula for the gradient is this
    expectation). The step is normalised (a geodesic step of length
    ``lr sqrt(c)``, ``c`` the eigenvalues moved; the paper leaves ``gamma_t``
    open), and ``expm`` is taken by scaling and squaring a second-order
    Taylor step (:func:`_spd_exp`: positive definite, within 1.3% of the
    exponential in each eigenvalue, and no eigendecomposition).
    Rotation-equivariant by design: rotating the data and the network
    rotates ``C`` (dense; the rank-k form below builds on ANCER's axes).
    Gaussian noise only; data-dependent (memory-based certification).

    ``rank=k``: as rank-k :class:`RANCER`, on top of ANCER's answer ``D``
    (computed once per process and inputs, shared with an ``ancer`` of the
    same ``n_iter``, ``n_draws``, ``kappa``, ``clip``, ``isotropic``,
    ``compare_draws`` and ``tol``): ``C = D^1/2 (Q A Q^T + r (I - Q Q^T))
    D^1/2`` with ``Q`` the top-k eigenvectors of the loss's input Hessian,
    ``A`` a k x k SPD matrix and ``r > 0`` in units of the frame (start ``I``
    and 1, eigenvalues in ``[1, 1 + gamma2]``, the same ascent, ``r`` with
    the metric of the positive reals ``(dr / r)^2``, weighed as one
    direction), and ANCER's answer one more
    candidate of the comparison: O(d k) per certificate, never worse than
    ANCER's by the comparison's rule. Our extension; the paper's method is
    ``rank=None`` (a dense d x d ``C``). The earlier rank-k form, ``Q A Q^T +
    r (I - Q Q^T)`` from the isotropic start, stayed at the start's level on
    Fashion-MNIST (AC R~ 1.20 against ANCER's 2.23, 500 images): the
    proxy radius of 784 pixels barely moves with 9 directions.

    Parameters
    ----------
    lr : float, default=0.04
        Root-mean-square change of the log-eigenvalues in one step: the step
        is a geodesic of length ``lr sqrt(c)``, ``c`` the number of
        eigenvalues it moves (k, and one for ``r`` in the rank-k form). It
        was a geodesic of length ``lr`` whatever ``c`` before, so each
        log-eigenvalue of a dense ``C`` moved by about ``lr / sqrt(d)`` and
        dense ``C`` barely left its start at d = 784 (eigenvalues within 1.2x
        of ``sigma*`` after 100 steps on Fashion-MNIST). Before the ceiling
        (``gamma2``) long steps let a few eigenvalues grow without limit
        (digits, dense ``C``, a length of 0.8: eigenvalues up to 621).
    n_iter : int, default=100
    n_draws : int, default=100
        Noise draws per input and step.
    compare_draws : int, default=4000
        Optimisation-bank draws on which the optimised smoothing is compared,
        per input, with its isotropic starts (the estimator's ``sigma`` and
        the isotropic data-dependent sigma); the best by the strategy's own
        objective on hard votes is kept, so a certificate is never worse than
        its start's up to Monte Carlo error. The choice uses draws independent
        of certification's, and the memory covers it. 0 keeps the optimised
        smoothing always: the paper's method.
        Why 4,000: ``COMPARE_DRAWS`` in ``strategies/_soft.py``.
    tol : float or None, default=1e-3
        Relative improvement below which an input's optimisation stops (the
        rule: :class:`._soft.Convergence`); ``n_iter`` bounds its steps. None
        runs every input ``n_iter`` steps: the paper's method.
    n_samples : int
        Deprecated name of ``n_draws`` (scikit-learn's ``n_samples`` counts
        rows of ``X``); removed in 0.3.
    kappa : float, default=2.0
    gamma2 : float or None, default=3.0
        Eigenvalues of ``C`` stay at most ``(1 + gamma2) sigma*`` (and ``r``
        too), RANCER's upper band: large steps can then not run away. None
        leaves ``C`` unbounded above, as the paper.
    rank : 'auto', int or None, default='auto'
        None: a dense ``C`` (the paper); an int: the rank-k form above;
        ``'auto'``: dense up to 256 input features (at 784 a dense ascent
        costs about 2.6 times ANCER's time on a CNN, 15 times on an MLP at
        n = 100,000), ``K - 1`` directions above
        (:func:`~smoothlearn.strategies._curvature.resolve_rank`).
    clip : float or 'auto', default=0.001
    isotropic : IsotropicDD, default=None
        Gives ``sigma*`` (``IsotropicDD()`` when None).

    References
    ----------
    P. Labarbarie, H. Hajri, M. Arnaudon. Riemannian data-dependent randomized
    smoothing for neural networks certification (rddrs.md).
    """

    name = "rddrs"
    data_dependent = True
    shared_scale = False
    #: rotated scales: round(S z / h) is no product law, no exact sampler
    on_grid = False
    noises = ("gaussian",)

    _parameter_constraints = {
        **OPTIMISER_CONSTRAINTS,
        "kappa": [Interval(Real, 0, None, closed="left")],
        "gamma2": [None, Interval(Real, 0, None, closed="left")],
        "rank": [
            None,
            StrOptions({"auto"}),
            Interval(Integral, 1, None, closed="left"),
        ],
        "isotropic": [None, HasMethods(["optimise"])],
    }

    def __init__(
        self,
        lr=0.04,
        n_iter=100,
        n_draws=100,
        kappa=2.0,
        gamma2=3.0,
        rank="auto",
        clip=0.001,
        isotropic=None,
        compare_draws=COMPARE_DRAWS,
        tol=STOP_TOL,
        n_samples=DEPRECATED,
    ):
        self.lr = lr
        self.n_iter = n_iter
        self.n_draws = n_draws
        self.kappa = kappa
        self.gamma2 = gamma2
        self.rank = rank
        self.clip = clip
        self.isotropic = isotropic
        self.compare_draws = compare_draws
        self.tol = tol
        self.n_samples = n_samples

    def optimise(
        self,
        network,
        X,
        sigma_start,
        *,
        family,
        bank,
        offset=0,
        p_max=None,
        basis,
        frame=None,
    ):
        """Eigen-pairs of ``A`` (m, k, k) on the subspace (all of R^d when
        ``basis`` is None) and ``r``: returns ``(values (m, k) ascending,
        vectors (m, k, k), r)``. ``sigma_start`` (m,), each input's isotropic
        sigma, is the start and the floor of the eigenvalues (the paper's
        sigma*); ``(1 + gamma2)`` times it their ceiling. With ``frame``
        (m, d) the noise is ``F (Q A Q^T + r (I - Q Q^T)) F z``: ``A`` and
        ``r`` in units of the frame, from ``I`` and 1, in ``[1, 1 + gamma2]``.

        ``A`` is carried as its eigendecomposition ``U diag(v) U^T``, which
        the band's projection computes anyway, and each step is taken in that
        eigenbasis: there ``A`` and ``C^1/2`` are diagonal, the volume terms'
        gradient is ``diag(dH/dv)`` and the gap's is its gradient with respect
        to ``diag(v)`` in ``Q U diag(v) U^T Q^T z``, so a dense step costs
        the retraction's products, one ``U V`` and one ``eigh``, all in
        float32 (about 2.4x faster per step than forming ``A``, ``C^1/2`` and
        ``C^1/2 G C^1/2`` in float64 on the Fashion-MNIST CNN); one float64
        ``eigh`` at the end makes the answer's basis orthonormal to rounding.
        """
        X_t = network.inputs(X)
        n_draws = self._param("n_draws")
        m, d = X_t.shape
        k = d if basis is None else basis.shape[2]
        floor = torch.as_tensor(sigma_start, dtype=torch.float64, device=X_t.device)
        if frame is not None:  # A in units of the frame, which stays
            floor = torch.ones_like(floor)
            frame = torch.as_tensor(frame, dtype=torch.float32, device=X_t.device)
            frame_log_volume = 2.0 * torch.log(frame.double()).sum(dim=1)
            frame_smallest = frame.double().min(dim=1).values ** 2
        moves_rest = k < d
        ceiling = (
            torch.full_like(floor, torch.inf)
            if self.gamma2 is None
            else floor * (1 + self.gamma2)
        )
        values = floor[:, None].expand(m, k).clone()
        # the eigenvectors are carried in float32 (a dense step's products and
        # eigh at twice float64's speed; the eigenvalues stay in [sigma*,
        # 4 sigma*], so C is well conditioned) and made exact once, at the end
        vectors = torch.eye(k, dtype=torch.float32, device=X_t.device).repeat(m, 1, 1)
        rest = floor.clone()
        clip = resolve_clip(self.clip, p_max)
        # the geodesic length of a step, lr sqrt(c) (c: the eigenvalues of A,
        # and r where it is one): log-eigenvalues move by lr in root mean
        # square, whatever the dimension
        length = self.lr * (k + moves_rest) ** 0.5
        converging = Convergence(m, self.tol, X_t.device)
        network.module.eval()
        for it in range(self.n_iter):
            rows = converging.active
            if not len(rows):
                break
            z = optimisation_draws(bank, it, n_draws, offset, X_t.device)
            sub = basis if basis is None or len(rows) == m else basis[rows]
            v_rows, U_rows, r_rows = values[rows], vectors[rows], rest[rows]
            # in A's eigenbasis (axes = Q U, or U for a dense C): the
            # gradient with respect to Y = diag(v) is U^T G U (docstring)
            axes = U_rows if sub is None else sub @ U_rows
            Y_var = torch.diag_embed(v_rows).float().requires_grad_(True)
            values_var = v_rows.clone().requires_grad_(True)
            r_var = r_rows.float().requires_grad_(True)
            with torch.enable_grad():
                Y_sym = (Y_var + Y_var.transpose(1, 2)) / 2
                if frame is not None:
                    frame_rows = frame[rows]

                    def noise(z):
                        return framed_subspace_noise(z, frame_rows, axes, Y_sym, r_var)

                else:

                    def noise(z):
                        return subspace_noise(z, axes, Y_sym, None if k == d else r_var)

                gap = soft_gap(network, X_t[rows], noise, z, family, clip)
                log_volume = torch.log(values_var).sum(dim=1)
                # eigenvalues at the floor are ties: the push of the min term
                # goes to their whole eigenspace, not to one vector of it
                scales = values_var
                if k < d:
                    log_volume = log_volume + (d - k) * torch.log(r_var)
                    scales = torch.cat([values_var, r_var[:, None].double()], dim=1)
                smallest = tied_min(scales)
                if frame is not None:  # Scale.smallest's bound: min(F)^2 times
                    log_volume = log_volume + frame_log_volume[rows]
                    smallest = frame_smallest[rows] * smallest
                objective = volume_objective(
                    gap.double(), log_volume / d, smallest, self.kappa
                )
                G, g_values, g_rest = torch.autograd.grad(
                    objective.sum(), [Y_var, values_var, r_var], allow_unused=True
                )
                if g_rest is None:  # a full C: no complement
                    g_rest = torch.zeros_like(r_var)
            with torch.no_grad():
                G = G.double() + torch.diag_embed(g_values)
                G = (G + G.transpose(1, 2)) / 2
                root = v_rows.sqrt()
                # C^1/2 G C^1/2; ||C G C||_C = ||M||_F
                M = root[:, :, None] * G * root[:, None, :]
                g_rest = g_rest.double() * r_rows  # r g: its norm on the positive reals
                norm = torch.sqrt((M**2).sum(dim=(1, 2)) + moves_rest * g_rest**2)
                # no step where the gradient overflowed (eigenvalues run away
                # without a ceiling, gamma2=None): the row keeps its C
                lost = ~torch.isfinite(norm)
                M[lost], g_rest[lost], norm[lost] = 0.0, 0.0, 1.0
                step = length / torch.clamp(norm, min=1e-12)
                # ||step M||_2 <= ||step M||_F <= step * norm <= lr sqrt(c)
                E = _spd_exp((step[:, None, None] * M).float(), length)
                root = root.float()
                A = root[:, :, None] * E * root[:, None, :]
                if moves_rest:
                    r_rows = r_rows * torch.exp(step * g_rest)
                # eigenvalues in [sigma*, (1 + gamma2) sigma*]: the paper's
                # floor and RANCER's ceiling
                v_rows, V = torch.linalg.eigh((A + A.transpose(1, 2)) / 2)
                values[rows] = torch.clamp(
                    v_rows.double(), floor[rows, None], ceiling[rows, None]
                )
                vectors[rows] = U_rows @ V
                rest[rows] = torch.clamp(r_rows, floor[rows], ceiling[rows])
            converging.record(it, objective)
        # float32 steps leave the eigenvectors orthonormal to about 1e-6 per
        # step: one float64 eigendecomposition of A = U diag(v) U^T makes the
        # answer's basis exact (the certificate's geometry assumes it is)
        U = vectors.double()
        values, vectors = torch.linalg.eigh((U * values[:, None]) @ U.transpose(1, 2))
        values = torch.clamp(values, floor[:, None], ceiling[:, None])
        return values, vectors, rest

    def resolved(self, n_features, n_classes):
        return with_resolved_rank(self, n_features, n_classes)

    def scales(self, network, X, *, sigma, family, bank, p_max=None):
        sigma_start, offset = self.isotropic_start(
            network, X, sigma=sigma, family=family, bank=bank, p_max=p_max
        )
        m, d = X.shape
        X_t = network.inputs(X)
        basis = frame = None
        starts = ()
        rank = resolve_rank(self.rank, d, network.n_classes)
        if rank is not None:
            _, basis = curvature_basis(network, X_t, rank, seed=hessian_seed(bank))
            frame, used = ancer_frame(
                self, network, X, sigma=sigma, family=family, bank=bank, p_max=p_max
            )
            offset += used
        values, vectors, rest = self.optimise(
            network,
            X,
            sigma_start,
            family=family,
            bank=bank,
            offset=offset,
            p_max=p_max,
            basis=basis,
            frame=frame,
        )
        values, vectors = values.flip(1), vectors.flip(2)
        if basis is not None:
            vectors = basis.double() @ vectors
        else:
            rest = values[:, -1]  # a full basis has no complement
        values, vectors = values.cpu().numpy(), vectors.cpu().numpy()
        rest = rest.cpu().numpy()
        answer = Scale(values, vectors, rest, frame=frame)
        if frame is not None:  # ANCER's answer, in this form
            ones = np.ones(len(X))
            starts = (Scale(np.ones_like(values), vectors, ones, frame=frame),)
        return self.keep_best(
            network,
            X,
            answer,
            sigma=sigma,
            sigma_start=sigma_start,
            family=family,
            bank=bank,
            offset=offset + self.optimisation_rows(),
            p_max=p_max,
            starts=starts,
        )
