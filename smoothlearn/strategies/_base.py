"""The strategy interface: how the smoothing scale ``S`` is chosen, and its lifecycle.

A strategy is built from a name or cloned from an instance
(:func:`~smoothlearn.strategies.get_strategy`), checked against the noise
family and input shape in ``fit``, adds what it needs to the network trained
there (:meth:`BaseStrategy.network_params`), takes what it needs from the
fitted network (:meth:`BaseStrategy.attach`), and answers, block by block at
certification time, the scale of each input (:meth:`BaseStrategy.scales`).
"""

import numpy as np
from sklearn.base import BaseEstimator

from ..utils._deprecation import RenamedParamsMixin
from ._soft import better_of

__all__ = ["BaseStrategy", "StartsFromIsotropic", "params_repr"]


def params_repr(strategy, skip=()):
    """A strategy's parameters but ``skip`` as sorted ``(name, repr)`` pairs:
    exact for numbers, so fit for keys."""
    params = sorted(strategy.get_params(deep=False).items())
    return tuple((name, repr(value)) for name, value in params if name not in skip)


class BaseStrategy(RenamedParamsMixin, BaseEstimator):
    """Base class of smoothing strategies.

    A strategy is a small estimator-like object (``get_params``/``set_params``,
    so ``SmoothedClassifier(strategy=ANCER(kappa=2.0))`` and
    ``GridSearchCV(..., {"strategy__kappa": [...]})`` work). It answers, for a
    batch of flat inputs, which scale each input is smoothed with.

    Class attributes
    ----------------
    name : str
        The name :func:`~smoothlearn.strategies.get_strategy` knows it by.
    data_dependent : bool
        True when the scale depends on the input; such certificates are only
        sound after memory-based certification.
    shared_scale : bool
        True when every input gets the same scale (the engine may then reuse
        the noise bank's response across inputs).
    noises : tuple of str
        The noise families the strategy supports.
    trained_in_fit : bool
        True when ``fit`` trains part of the strategy with the network (UCAN's
        generators): certification then uses the fitted strategy, and changing
        its parameters needs a new ``fit``...
    certification_params : tuple of str
        ...except these, which only certification reads (``compare_draws``):
        the fitted strategy certifies with their new values.
    """

    name = None
    data_dependent = False
    shared_scale = True
    trained_in_fit = False
    certification_params = ()
    noises = ("gaussian", "uniform", "laplace")
    _parameter_constraints: dict = {}

    def check(self, family, input_shape=None):
        """Validate the parameters, the noise family and the input shape."""
        self._validate_params()
        self.check_noise(family)
        if input_shape is not None:
            self.check_input_shape(tuple(input_shape))

    def check_input_shape(self, input_shape):
        """Raise a ValueError when the strategy cannot smooth inputs of this shape."""

    def check_noise(self, family):
        """Raise a ValueError when the strategy cannot use ``family``."""
        if family.name not in self.noises:
            raise ValueError(
                f"strategy {type(self).__name__} supports noise in "
                f"{list(self.noises)}; got {family.name!r}."
            )

    def scales(self, network, X, *, sigma, family, bank, p_max=None):
        """The scale of each input.

        Parameters
        ----------
        network : smoothlearn.network.FlatInputNetwork
        X : ndarray of shape (m, n_features)
            Flat inputs.
        sigma : float
            The estimator's base noise level.
        family : NoiseFamily
        bank : smoothlearn.certify.NoiseBank
            Optimisation draws, independent of the certification draws.
        p_max : float, default=None
            The largest probability bound certification can give (all ``n``
            draws voting for the top class), for strategies that cap their
            surrogate there.

        Returns
        -------
        dict
            Keyword arguments of :class:`~smoothlearn.regions.Certificates`
            describing the scale: ``scale`` and, for rotated scales, ``basis``
            and ``scale_rest``.
        """
        raise NotImplementedError  # abstract

    def training_scale(self, sigma, input_shape):
        """The scale used for noise augmentation when training the base network.

        A float, or an array of ``input_shape`` for a per-coordinate scale.
        """
        return float(sigma)

    def network_params(self, input_shape):
        """Parameters the strategy adds to the network trained in ``fit``.

        Keyword arguments of
        :class:`~smoothlearn.estimators._noisy_net.NoisyNeuralNetClassifier`;
        none here.
        """
        return {}

    def attach(self, net):
        """Take what certification needs from the fitted network (nothing here)."""


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

    def _isotropic(self):
        # imported here: IsotropicDD is itself a strategy built on this module
        from .isotropic_dd import IsotropicDD

        return IsotropicDD() if self.isotropic is None else self.isotropic

    def optimisation_rows(self):
        """Optimisation-bank rows one call of ``optimise`` uses."""
        return self.n_iter * self._param("n_draws")

    def keep_best(
        self, network, X, answer, *, sigma, sigma_start, family, bank, offset, p_max
    ):
        """``answer`` or, per input, an isotropic start where that looks better.

        The candidates are the estimator's ``sigma`` (Cohen's smoothing), the
        isotropic data-dependent ``sigma_start`` and the optimised ``answer``,
        each in ``answer``'s form, scored by the strategy's own objective
        ``gap * (gm(S) + kappa * min(S))`` with the gap of the top vote share
        (capped at ``p_max``) on ``compare_draws`` fresh optimisation-bank
        rows from ``offset`` (:func:`._soft.better_of`). So
        the certificate is never worse than its start's, up to Monte Carlo
        error; ``compare_draws=0`` returns ``answer`` (the paper's method).
        """
        if not self.compare_draws:
            return answer

        def isotropic(values):
            values = np.asarray(values, dtype=np.float64)
            out = {"scale": np.repeat(values[:, None], answer["scale"].shape[1], 1)}
            if "basis" in answer:
                out["basis"], out["scale_rest"] = answer["basis"], values
            return out

        d = X.shape[1]
        candidates = [
            isotropic(np.full(len(X), float(sigma))),
            isotropic(sigma_start),
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
        # imported here: the start cache keys optimisers by this module's
        # params_repr
        from ._starts import isotropic_start

        sigma_start = isotropic_start(
            isotropic, network, X, sigma, family=family, bank=bank, p_max=p_max
        )
        return sigma_start, isotropic.optimisation_rows()
