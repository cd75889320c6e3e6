"""The strategies started from the isotropic data-dependent sigma."""

import numpy as np

from ._base import BaseStrategy
from ._soft import better_of
from ._starts import start_once
from .isotropic_dd import IsotropicDD

__all__ = ["StartsFromIsotropic"]


class _StartOf:
    """An :class:`IsotropicDD` as a start: described by what its start reads."""

    def __init__(self, isotropic):
        self.isotropic = isotropic

    def describe(self):
        return self.isotropic.describe(skip=("compare_draws",))


class StartsFromIsotropic(BaseStrategy):
    """Base of the strategies started from the isotropic data-dependent solution.

    ANCER, RANCER and RDDRS hold an ``isotropic`` parameter (an
    :class:`~smoothlearn.strategies.IsotropicDD`, its defaults when None)
    whose per-input sigma is their start (``sigma_start`` of their
    ``optimise``) and floor.
    """

    def check(self, family, input_shape=None):
        super().check(family, input_shape)
        self._isotropic().check(family, input_shape)

    _renamed_params = {"n_samples": "n_draws"}
    _added_params = {"tol": None}

    def _isotropic(self):
        return IsotropicDD() if self.isotropic is None else self.isotropic

    def smoothing_params(self):
        """:meth:`BaseStrategy.smoothing_params`, with ``isotropic`` resolved.

        None stands for ``IsotropicDD()``; only the start is read from it
        (its ``optimise``), so its own ``compare_draws`` is left out.
        """
        params = super().smoothing_params()
        params["isotropic"] = _StartOf(self._isotropic())
        return params

    def optimisation_rows(self):
        """Optimisation-bank rows one call of ``optimise`` uses."""
        return self.n_iter * self._param("n_draws")

    def keep_best(
        self,
        network,
        X,
        answer,
        *,
        sigma,
        sigma_start,
        family,
        bank,
        offset,
        p_max,
        starts=(),
    ):
        """``answer`` or, per input, a start where that looks better.

        The candidates are the estimator's ``sigma`` (Cohen's smoothing), the
        isotropic data-dependent ``sigma_start``, any further ``starts``
        (Scales in ``answer``'s form: RANCER's ANCER start) and the optimised
        ``answer``, scored by the strategy's own objective ``gap * (gm(S) +
        kappa * min(S))`` with the gap of the top vote share (capped at
        ``p_max``) on ``compare_draws`` fresh optimisation-bank rows from
        ``offset`` (:func:`._soft.better_of`). So the certificate is never
        worse than its starts', up to Monte Carlo error; ``compare_draws=0``
        returns ``answer`` (the paper's method).
        """
        if not self.compare_draws:
            return answer
        d, every = X.shape[1], np.arange(len(X))
        candidates = [
            answer.with_isotropic(every, np.full(len(X), float(sigma))),
            answer.with_isotropic(every, sigma_start),
            *starts,
            answer,
        ]
        chosen, _ = better_of(
            network,
            X,
            candidates,
            lambda gap, s: gap * (s.geometric_mean(d) + self.kappa * s.smallest()),
            family=family,
            bank=bank,
            offset=offset,
            n_draws=self.compare_draws,
            p_max=p_max,
        )
        return chosen

    def isotropic_start(self, network, X, *, sigma, family, bank, p_max):
        """Validate; the isotropic sigma of each input and the bank rows it used."""
        self._validate_params()
        isotropic = self._isotropic()
        isotropic._validate_params()
        sigma_start = start_once(
            isotropic, network, X, sigma, family=family, bank=bank, p_max=p_max
        )
        return sigma_start, isotropic.optimisation_rows()
