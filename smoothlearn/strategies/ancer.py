"""ANCER: per-input anisotropic (diagonal) smoothing (Eiras et al., 2022)."""

from numbers import Real

import numpy as np
import torch

from ..scale import Scale
from ..utils._deprecation import DEPRECATED
from ..utils._sklearn_compat import HasMethods, Interval
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
from ._starts import AnswerOf, start_once

__all__ = ["ANCER", "ancer_frame"]


class ANCER(StartsFromIsotropic):
    """Per-input diagonal scale ``diag(theta_x)`` maximising the certified volume.

    ANCER's relaxed problem (ancer.md section 6 and appendix C)::

        max_theta  gap(theta) * prod(theta)^(1/d) + kappa * min(theta) * gap(theta)
        s.t.       theta >= sigma_start

    solved by Adam with projection onto ``theta >= sigma_start`` after every step,
    starting from the isotropic data-dependent solution ``sigma_start`` (found by
    the ``isotropic`` strategy). The gap is the soft smoothed classifier's, on
    the optimisation bank's draws. Data-dependent: certificates are sound only
    after memory-based certification (the estimator's default).

    Parameters
    ----------
    lr : float, default=0.04
        Adam's learning rate.
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
        Weight of the isotropic-radius term ``min(theta) * gap``.
    clip : float or 'auto', default=0.001
        Soft probabilities are clamped to ``[clip, 1 - clip]``; ``'auto'`` at
        the certificate's ceiling, as for :class:`IsotropicDD`.
    isotropic : IsotropicDD, default=None
        The strategy giving ``sigma_start`` (``IsotropicDD()`` when None); its
        parameters are reachable as ``strategy__isotropic__<name>``.

    References
    ----------
    F. Eiras, M. Alfarra, M. P. Kumar, P. Torr, P. Dokania, B. Ghanem, A. Bibi.
    ANCER: Anisotropic Certification via Sample-wise Volume Maximization.
    TMLR 2022.
    """

    name = "ancer"
    data_dependent = True
    shared_scale = False

    _parameter_constraints = {
        **OPTIMISER_CONSTRAINTS,
        "kappa": [Interval(Real, 0, None, closed="left")],
        "isotropic": [None, HasMethods(["optimise"])],
    }

    def __init__(
        self,
        lr=0.04,
        n_iter=100,
        n_draws=100,
        kappa=2.0,
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
        self.clip = clip
        self.isotropic = isotropic
        self.compare_draws = compare_draws
        self.tol = tol
        self.n_samples = n_samples

    def optimise(self, network, X, sigma_start, *, family, bank, offset=0, p_max=None):
        """The optimised ``theta_x`` of each input, shape (m, d).

        ``sigma_start`` (m,) is each input's isotropic sigma: the start and floor.
        """
        n_draws = self._param("n_draws")
        device = network.device
        m, d = X.shape
        X_t = network.inputs(X)
        floor = torch.as_tensor(sigma_start, dtype=torch.float32, device=device)
        floor = floor.reshape(m, 1, 1).expand(m, 1, d).clone()
        theta = floor.clone().requires_grad_(True)
        optimiser = torch.optim.Adam([theta], lr=self.lr)
        clip = resolve_clip(self.clip, p_max)
        converging = Convergence(m, self.tol, device)
        network.module.eval()
        for it in range(self.n_iter):
            rows = converging.active
            if not len(rows):
                break
            z = optimisation_draws(bank, it, n_draws, offset, device)
            with torch.enable_grad():
                moving = theta[rows]
                gap = soft_gap(
                    network, X_t[rows], lambda z: moving * z, z, family, clip
                )
                flat = moving.reshape(len(rows), d)
                objective = volume_objective(
                    gap, torch.log(flat).mean(dim=1), tied_min(flat), self.kappa
                )
                optimiser.zero_grad()
                (-objective.sum()).backward()
            optimiser.step()
            with torch.no_grad():
                # project the optimised tensor itself, so Adam keeps stepping
                # from the projected point
                torch.maximum(theta, floor, out=theta)
            converging.freeze(optimiser, theta, converging.record(it, objective))
        return theta.detach().reshape(m, d).cpu().numpy().astype(np.float64)

    def scales(self, network, X, *, sigma, family, bank, p_max=None):
        # once per process and inputs: rank-k RANCER builds on this answer
        theta = start_once(
            AnswerOf(self, self._answer),
            network,
            X,
            sigma,
            family=family,
            bank=bank,
            p_max=p_max,
        )
        return Scale(theta)

    def _answer(self, network, X, *, sigma, family, bank, p_max):
        """The answer per coordinate, shape (m, d): the optimised ``theta`` or,
        per input, the start that certifies more (:meth:`keep_best`)."""
        sigma_start, offset = self.isotropic_start(
            network, X, sigma=sigma, family=family, bank=bank, p_max=p_max
        )
        theta = self.optimise(
            network,
            X,
            sigma_start,
            family=family,
            bank=bank,
            offset=offset,
            p_max=p_max,
        )
        best = self.keep_best(
            network,
            X,
            Scale(theta),
            sigma=sigma,
            sigma_start=sigma_start,
            family=family,
            bank=bank,
            offset=offset + self.optimisation_rows(),
            p_max=p_max,
        )
        return np.array(best.per_coordinate(X.shape[1]))


def ancer_frame(strategy, network, X, *, sigma, family, bank, p_max, **params):
    """The diagonal frame rank-k RANCER and RDDRS build on.

    The square root of ANCER's answer for ``X`` (shape (m, d)), ANCER taking
    ``strategy``'s ``n_iter``, ``n_draws``, ``kappa``, ``clip``,
    ``isotropic``, ``compare_draws`` and ``tol`` (``params`` override or add:
    RANCER's ``lr``, which is ANCER's Adam step too; RDDRS's ``lr`` is a
    geodesic length, so its ANCER keeps ANCER's). With the defaults these are
    ANCER's own, and :meth:`ANCER.scales` keeps its answer once per process,
    so an ``ancer`` certified first has computed it. Also returns the
    optimisation-bank rows ANCER used after its isotropic start (its steps,
    then its comparison), which the caller's steps must not reuse.
    """
    ancer = ANCER(
        n_iter=strategy.n_iter,
        n_draws=strategy._param("n_draws"),
        kappa=strategy.kappa,
        clip=strategy.clip,
        isotropic=strategy.isotropic,
        compare_draws=strategy.compare_draws,
        tol=strategy.tol,
        **params,
    )
    theta = ancer.scales(
        network, X, sigma=sigma, family=family, bank=bank, p_max=p_max
    ).values
    return np.sqrt(theta), ancer.optimisation_rows() + ancer.compare_draws
