"""Isotropic data-dependent smoothing (Alfarra et al., 2020)."""

from numbers import Real

import numpy as np
import torch

from ..scale import Scale
from ..utils._deprecation import DEPRECATED
from ..utils._sklearn_compat import Interval
from ._base import BaseStrategy
from ._soft import (
    COMPARE_DRAWS,
    OPTIMISER_CONSTRAINTS,
    STOP_TOL,
    Convergence,
    better_of,
    optimisation_draws,
    resolve_clip,
    soft_gap,
)
from ._starts import start_once

__all__ = ["IsotropicDD"]


class IsotropicDD(BaseStrategy):
    """Per-input isotropic scale ``sigma_x I`` maximising ``sigma_x * gap``.

    For each input, plain gradient ascent on the surrogate radius
    ``sigma * soft_gap(sigma)`` of the soft smoothed classifier (Alfarra et al.'s
    Data Dependent Randomized Smoothing), started at the estimator's ``sigma``.
    Every step uses ``n_draws`` fresh draws from the optimisation bank,
    independent of the certification draws; all inputs of a block are
    optimised at once. Data-dependent: certificates are sound only after
    memory-based certification (the estimator's default).

    Parameters
    ----------
    lr : float, default=0.04
        Step size of the gradient ascent.
    n_iter : int, default=300
        The most ascent steps an input takes.
    tol : float or None, default=1e-3
        Relative improvement below which an input's optimisation stops (the
        rule: :class:`._soft.Convergence`). None runs every input ``n_iter``
        steps: the paper's method.
    n_draws : int, default=100
        Noise draws per input and step.
    compare_draws : int, default=4000
        Optimisation-bank draws on which ``sigma_x`` is compared, per input,
        with the estimator's ``sigma`` by hard votes; the larger certified
        ``sigma * gap`` is kept, so a certificate is never worse than Cohen's up to
        Monte Carlo error. The choice uses draws independent of
        certification's, and the memory covers it. 0 keeps ``sigma_x``
        always: the paper's method.
        Why 4,000: ``COMPARE_DRAWS`` in ``strategies/_soft.py``.
    n_samples : int
        Deprecated name of ``n_draws`` (scikit-learn's ``n_samples`` counts
        rows of ``X``); removed in 0.3.
    min_sigma : float, default=1e-3
        ``sigma_x`` is projected onto ``[min_sigma, inf)`` after each step.
    clip : float or 'auto', default=0.001
        Soft probabilities are clamped to ``[clip, 1 - clip]`` before the gap
        (the papers' 0.001). ``'auto'`` clamps at ``1 - p_max``, where
        ``p_max = alpha^(1/n)`` is the largest bound certification can give,
        so the surrogate gap has the certificate's ceiling (``Phi^-1(p_max)``,
        3.8 at n = 100,000 against 3.09 for 0.001).

    References
    ----------
    M. Alfarra, A. Bibi, P. Torr, B. Ghanem. Data Dependent Randomized
    Smoothing. UAI 2022 (arXiv 2012.04351).
    """

    name = "isotropic_dd"
    data_dependent = True
    shared_scale = False

    _parameter_constraints = {
        **OPTIMISER_CONSTRAINTS,
        "min_sigma": [Interval(Real, 0, None, closed="neither")],
    }

    _renamed_params = {"n_samples": "n_draws"}
    _added_params = {"tol": None}

    def __init__(
        self,
        lr=0.04,
        n_iter=300,
        n_draws=100,
        min_sigma=1e-3,
        clip=0.001,
        compare_draws=COMPARE_DRAWS,
        tol=STOP_TOL,
        n_samples=DEPRECATED,
    ):
        self.lr = lr
        self.n_iter = n_iter
        self.tol = tol
        self.n_draws = n_draws
        self.min_sigma = min_sigma
        self.clip = clip
        self.compare_draws = compare_draws
        self.n_samples = n_samples

    def optimise(self, network, X, sigma_start, *, family, bank, offset=0, p_max=None):
        """The optimised ``sigma_x`` of each input, shape (m,).

        ``sigma_start`` is the starting sigma: a float for every input (the
        estimator's ``sigma``) or one per input, shape (m,).
        """
        device = network.device
        X_t = network.inputs(X)
        start = np.broadcast_to(np.asarray(sigma_start, dtype=np.float32), len(X))
        sig = torch.tensor(start, device=device).reshape(-1, 1, 1)
        n_draws = self._param("n_draws")
        clip = resolve_clip(self.clip, p_max)
        converging = Convergence(len(X), self.tol, device)
        network.module.eval()
        for it in range(self.n_iter):
            rows = converging.active
            if not len(rows):
                break
            z = optimisation_draws(bank, it, n_draws, offset, device)
            moving = sig[rows].requires_grad_(True)
            with torch.enable_grad():
                gap = soft_gap(
                    network, X_t[rows], lambda z: moving * z, z, family, clip
                )
                radius = moving.reshape(-1) * gap
                (grad,) = torch.autograd.grad(radius.sum(), moving)
            with torch.no_grad():
                sig[rows] = (moving + self.lr * grad).clamp_(min=self.min_sigma)
            converging.record(it, radius)
        return sig.reshape(-1).cpu().numpy().astype(np.float64)

    def optimisation_rows(self):
        """Optimisation-bank rows one call of :meth:`optimise` uses."""
        return self.n_iter * self._param("n_draws")

    def scales(self, network, X, *, sigma, family, bank, p_max=None):
        self._validate_params()
        scale = start_once(
            self, network, X, sigma, family=family, bank=bank, p_max=p_max
        )
        if not self.compare_draws:
            return Scale(scale)
        # never worse than the start: sigma or sigma_x, whichever gives the
        # larger sigma * gap on fresh optimisation draws (ties keep sigma)
        answer, _ = better_of(
            network,
            X,
            [Scale(np.full(len(X), float(sigma))), Scale(scale)],
            lambda gap, s: gap * s.smallest(),
            family=family,
            bank=bank,
            offset=self.optimisation_rows(),
            n_draws=self.compare_draws,
            p_max=p_max,
        )
        return answer
