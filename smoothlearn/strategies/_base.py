"""The strategy interface: how the smoothing scale ``S`` is chosen."""

from sklearn.base import BaseEstimator

__all__ = ["BaseStrategy"]


class BaseStrategy(BaseEstimator):
    """Base class of smoothing strategies.

    A strategy is a small estimator-like object (``get_params``/``set_params``,
    so ``SmoothedClassifier(strategy=ANCER(kappa=2.0))`` and
    ``GridSearchCV(..., {"strategy__kappa": [...]})`` work). It answers, for a
    batch of flat inputs, which scale each input is smoothed with.

    Class attributes
    ----------------
    data_dependent : bool
        True when the scale depends on the input; such certificates are only
        sound after memory-based certification.
    shared_scale : bool
        True when every input gets the same scale (the engine may then reuse
        the noise bank's response across inputs).
    noises : tuple of str
        The noise families the strategy supports.
    """

    data_dependent = False
    shared_scale = True
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
        network : smoothlearn.certify.BaseNetwork
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

    @property
    def name(self):
        return type(self).__name__.lower()
