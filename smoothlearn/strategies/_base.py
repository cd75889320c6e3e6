"""The strategy interface: how the smoothing scale ``S`` is chosen, and its lifecycle.

A strategy is built from a name or cloned from an instance
(:func:`~smoothlearn.strategies.get_strategy`), checked against the noise
family and input shape in ``fit``, adds what it needs to the network trained
there (:meth:`BaseStrategy.network_params`), takes what it needs from the
fitted network (:meth:`BaseStrategy.attach`), and answers, block by block at
certification time, the scale of each input (:meth:`BaseStrategy.scales`).
"""

from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator

from ..utils._deprecation import DEPRECATED, RenamedParamsMixin

__all__ = ["BaseStrategy", "describe_smoothing", "describe_value"]


def describe_value(value):
    """A parameter's value written by what it is, not by how it prints.

    Numbers by value whatever their type (``2``, ``2.0``, ``np.int64(2)`` and
    ``np.float32(2)`` are all ``'2'``; a float is written exactly, with
    ``repr``), strategies by :meth:`BaseStrategy.describe`, sequences and
    arrays element by element, anything else by its type and ``repr``.
    scikit-learn's display settings (``print_changed_only``) change nothing.
    Two values with one description run the same: the description keys
    memories and start caches.
    """
    if isinstance(value, (bool, np.bool_)):
        return repr(bool(value))
    if isinstance(value, Real) and not isinstance(value, Integral):
        value = float(value)
        if not np.isfinite(value):
            return repr(value)
        if value != int(value):
            return repr(value)
        value = int(value)
    if isinstance(value, Integral):
        return str(int(value))
    if hasattr(value, "describe"):  # a strategy, or what stands for one
        return value.describe()
    if value is None or isinstance(value, str):
        return repr(value)
    if isinstance(value, (tuple, list, np.ndarray)):
        return (
            "["
            + ", ".join(describe_value(v) for v in np.ravel(value))
            + "]"
            + (f"{np.shape(value)}" if np.ndim(value) > 1 else "")
        )
    # anything else (a user's own object) by its type and repr
    return f"{type(value).__qualname__}:{value!r}"


def describe_smoothing(strategy, family, sigma):
    """One smoothing, written whole: strategy with its parameters, family, sigma.

    What certificates record (``Certificates.smoothing``, TSV logs, the command
    line's summary) and what keys the estimator's memories: two settings with
    one description run the same smoothing and share one memory.

    Examples
    --------
    >>> from smoothlearn.noise import get_noise
    >>> from smoothlearn.strategies import Cohen
    >>> describe_smoothing(Cohen(), get_noise("gaussian"), 0.25)
    'cohen() gaussian sigma=0.25'
    """
    return f"{strategy.describe()} {family.name} sigma={describe_value(sigma)}"


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
    on_grid : bool
        True when its scales are isotropic or diagonal with no mean offset,
        which the grid path samples exactly (:mod:`smoothlearn.grid`).
    """

    #: Parameters added in a later version, with the value that behaves as
    #: before they existed: at that value the description leaves them out, so
    #: a memory kept under the earlier description is the same smoothing's.
    _added_params: dict = {}

    name = None
    data_dependent = False
    shared_scale = True
    trained_in_fit = False
    on_grid = True
    certification_params = ()
    noises = ("gaussian", "uniform", "laplace")
    _parameter_constraints: dict = {}

    def smoothing_params(self):
        """The parameters as the engine runs them.

        Renamed parameters given under their old name stand under their new
        one (the old name is dropped); subclasses resolve defaults that stand
        for another value (``isotropic=None``).
        """
        params = self.get_params(deep=False)
        for old, new in self._renamed_params.items():
            # (a subclass may drop the old name from its own __init__)
            if params.pop(old, DEPRECATED) != DEPRECATED:
                params[new] = getattr(self, old)
        return params

    def describe(self, skip=()):
        """The strategy's name and parameters but ``skip``, by value.

        ``name(param=value, ...)``, sorted, each value by
        :func:`describe_value`; a subclass is named by its class as well.
        """
        params = self.smoothing_params()
        for name, before in self._added_params.items():
            if describe_value(params.get(name)) == describe_value(before):
                params.pop(name, None)
        body = ", ".join(
            f"{name}={describe_value(params[name])}"
            for name in sorted(params)
            if name not in skip
        )
        name = self.name
        from_class = type(self).__dict__.get("name") == name
        if not from_class:  # a user's subclass: its own behaviour, its own key
            name = f"{name}<{type(self).__module__}.{type(self).__qualname__}>"
        return f"{name}({body})"

    def resolved(self, n_features, n_classes):
        """The strategy as it runs on inputs of ``n_features`` and ``n_classes``.

        A parameter whose value stands for a choice made from the data
        (rancer's and rddrs's ``rank='auto'``) is replaced by what it
        resolves to, so that settings that run one smoothing are described,
        and remembered, as one. Strategies without such parameters return
        themselves.
        """
        return self

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
        bank : smoothlearn.banks.NoiseBank
            Optimisation draws, independent of the certification draws.
        p_max : float, default=None
            The largest probability bound certification can give (all ``n``
            draws voting for the top class), for strategies that cap their
            surrogate there.

        Returns
        -------
        Scale
            The scale of each input (:class:`~smoothlearn.scale.Scale`, any
            form), with the noise's mean offset where the strategy moves it.
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
