"""UCAN's trained noise parameter generators: universal and input-dependent noise.

Both strategies are trained with the base network in ``SmoothedClassifier.fit``
(ucan.md sections 4.2-4.3): the generator maps a batch to a mean offset ``mu`` and
multipliers ``m`` of the base level ``sigma``, the network sees
``x + mu + sigma * m * z`` and the loss of the training method (noise augmentation by
default, the paper's smoothing loss) gets UCAN's variance term
``-variance_weight * mean(m)``; both parts train through skorch in one optimiser.

Certification smooths ``f(. + mu)`` with scale ``sigma * m``: by ucan.md Theorem 3.2
the offset does not enter the certificate, so the region is centred on ``x`` and
shaped by ``sigma * m`` (proxy radius = UCAN's ALM, radius = ``min_i sigma m_i * R``,
Corollary 3.3).
"""

from numbers import Integral, Real

import numpy as np
import torch

from ..scale import Scale
from ..utils._deprecation import DEPRECATED, deprecated_option
from ..utils._sklearn_compat import Interval
from ._base import BaseStrategy
from ._generators import InputNoiseGenerator, UniversalNoiseGenerator
from ._soft import COMPARE_DRAWS, OPTIMISER_CONSTRAINTS, better_of

__all__ = ["UCANInput", "UCANUniversal"]


class _GeneratorStrategy(BaseStrategy):
    """A strategy whose noise comes from a generator trained in ``fit``.

    After ``SmoothedClassifier.fit`` the trained generator is ``generator_`` (the
    same module as the estimator's ``noise_generator_``).
    """

    #: SmoothedClassifier trains the generator in fit and certifies with it
    trained_in_fit = True
    #: a mean offset moves the rounding: no exact sampler on the grid
    on_grid = False

    _parameter_constraints = {
        "max_multiplier": [Interval(Real, 0, None, closed="neither")],
        "min_multiplier": [Interval(Real, 0, None, closed="neither")],
        "gamma": [deprecated_option(), Interval(Real, 0, None, closed="neither")],
        "floor": [deprecated_option(), Interval(Real, 0, None, closed="neither")],
        "offset_bound": [Interval(Real, 0, None, closed="left")],
        "width": [Interval(Integral, 1, None, closed="left")],
        "variance_weight": [Interval(Real, 0, None, closed="left")],
        "lr": [None, Interval(Real, 0, None, closed="neither")],
    }
    _renamed_params = {"gamma": "max_multiplier", "floor": "min_multiplier"}

    def check(self, family, input_shape=None):
        super().check(family, input_shape)
        low, high = self._param("min_multiplier"), self._param("max_multiplier")
        if low >= high:
            raise ValueError(
                f"min_multiplier must be smaller than max_multiplier; got "
                f"min_multiplier={low} and max_multiplier={high}."
            )

    #: the generator module class, built with the strategy's parameters
    generator_class = None

    def build_generator(self, input_shape):
        """A new, untrained generator for inputs of ``input_shape``."""
        return self.generator_class(
            input_shape,
            width=self.width,
            gamma=self._param("max_multiplier"),
            floor=self._param("min_multiplier"),
            offset_bound=self.offset_bound,
        )

    def network_params(self, input_shape):
        """A new generator to train with the network, and its loss weight and lr."""
        return {
            "noise_generator": self.build_generator(input_shape),
            "variance_weight": self.variance_weight,
            "generator_lr": self.lr,
        }

    def attach(self, net):
        """Certify with the generator trained in ``net``."""
        self.generator_ = net.noise_generator_

    def scales(self, network, X, *, sigma, family, bank, p_max=None):
        generator = getattr(self, "generator_", None)
        if generator is None:
            raise ValueError(
                f"strategy {self.name!r} has no trained generator: fit the "
                "SmoothedClassifier with it first."
            )
        device = next(generator.parameters()).device
        X_t = torch.as_tensor(np.asarray(X, dtype=np.float32), device=device)
        generator.eval()
        with torch.inference_mode():
            offset, multiplier = generator(X_t.reshape(-1, *network.input_shape))
        m = len(X)
        offset = offset.reshape(-1, X.shape[1]).expand(m, -1).cpu().numpy()
        multiplier = multiplier.reshape(-1, X.shape[1]).expand(m, -1).cpu().numpy()
        return Scale(
            float(sigma) * multiplier.astype(np.float64),
            offset=offset.astype(np.float32),
        )


class UCANUniversal(_GeneratorStrategy):
    """Universal anisotropic noise: one (mu, sigma) map learned for the whole dataset.

    A fixed-input generator (five linear layers, amplified tanh; ucan.md section
    4.2) is trained with the base network in ``fit``. Every input gets the same
    scale ``sigma * m`` and offset ``mu``, so certificates need no memory and the
    first layer's response to the noise is reused. Tabular and image inputs.

    Parameters
    ----------
    max_multiplier : float, default=5.0
        Upper bound of the multipliers (the paper's gamma for MNIST and CIFAR10).
    min_multiplier : float, default=0.05
        Lower bound of the multipliers.
    offset_bound : float, default=1.0
        Bound of the offsets' magnitude (0 disables the offset).
    width : int, default=128
        Hidden units of the generator.
    variance_weight : float, default=0.1
        Weight of UCAN's variance term ``-mean(m)`` in the training loss. The
        paper's weight 1 drives every multiplier to its maximum on digits (certified
        accuracy 8%); 0.3 still does, 0.1 trades well
        (``examples/ucan_images.py`` compares them).
    lr : float or None, default=1e-4
        Learning rate of the generator (its own optimiser parameter group);
        the estimator's ``lr`` when None. The generator's outputs saturate at
        their bounds (where tanh has no gradient left) at the network's 1e-3.
    gamma, floor : float
        Deprecated names of ``max_multiplier`` and ``min_multiplier``
        (RANCER's ``gamma1``, ``gamma2`` and MACER's ``gamma`` mean other
        things); removed in 0.3.

    Attributes
    ----------
    generator_ : UniversalNoiseGenerator
        The trained generator (after ``SmoothedClassifier.fit``).
    """

    name = "ucan_universal"
    data_dependent = False
    shared_scale = True
    generator_class = UniversalNoiseGenerator

    def __init__(
        self,
        max_multiplier=5.0,
        min_multiplier=0.05,
        offset_bound=1.0,
        width=128,
        variance_weight=0.1,
        lr=1e-4,
        gamma=DEPRECATED,
        floor=DEPRECATED,
    ):
        self.max_multiplier = max_multiplier
        self.min_multiplier = min_multiplier
        self.offset_bound = offset_bound
        self.width = width
        self.variance_weight = variance_weight
        self.lr = lr
        self.gamma = gamma
        self.floor = floor


class UCANInput(_GeneratorStrategy):
    """Input-dependent anisotropic noise: cascaded generators mu(x), sigma(x + mu).

    Two small networks (convolutional for image inputs, MLPs for flat ones; ucan.md
    section 4.3, appendix E) are trained with the base network in ``fit``. The
    noise depends on the input, so the certificates are data-dependent and pass
    through the :class:`~smoothlearn.MemoryCertifier` by default. The paper
    certifies each input on its own, which is not sound for input-dependent
    noise (two inputs' regions may overlap with different labels); we follow the
    data-dependent certification of ANCER section 6 instead.

    Parameters
    ----------
    max_multiplier : float, default=2.0
        Upper bound of the multipliers, the paper's gamma (the midpoint of
        ``(0, 2)`` is 1: training starts from isotropic noise of level ``sigma``).
    min_multiplier : float, default=0.05
        Lower bound of the multipliers.
    offset_bound : float, default=1.0
        Bound of the offsets' magnitude (0 disables the offset).
    width : int, default=16
        Channels (images) or hidden units (flat inputs) of the generators.
    variance_weight : float, default=0.3
        Weight of UCAN's variance term ``-mean(m)`` in the training loss (the
        paper's 1 costs 8 points of certified accuracy on digits; 0.3 costs 0-1).
    lr : float or None, default=1e-4
        Learning rate of the generator (its own optimiser parameter group);
        the estimator's ``lr`` when None. The generator's outputs saturate at
        their bounds (where tanh has no gradient left) at the network's 1e-3.
    compare_draws : int, default=4000
        Optimisation-bank draws on which, per input, the generator's noise is
        compared with its isotropic starts: Cohen's (scale ``sigma``, no
        offset) and the generator's offset with scale ``sigma`` (multipliers
        1, where training starts). The one with the largest estimated proxy
        radius (UCAN's ALM, the quantity UCAN maximises) is certified, so a
        certificate is never worse than its start's up to Monte Carlo error.
        The choice uses draws independent of certification's, and the memory
        covers it. 0 certifies the generator's noise always: the paper's
        method. Only certification reads it, so it can be changed after
        ``fit`` without training again. Why 4,000: ``COMPARE_DRAWS`` in
        ``strategies/_soft.py``.
    gamma, floor : float
        Deprecated names of ``max_multiplier`` and ``min_multiplier``
        (RANCER's ``gamma1``, ``gamma2`` and MACER's ``gamma`` mean other
        things); removed in 0.3.

    Attributes
    ----------
    generator_ : InputNoiseGenerator
        The trained generators (after ``SmoothedClassifier.fit``).
    """

    name = "ucan_input"
    data_dependent = True
    shared_scale = False
    generator_class = InputNoiseGenerator
    certification_params = ("compare_draws",)

    _parameter_constraints = {
        **_GeneratorStrategy._parameter_constraints,
        "compare_draws": OPTIMISER_CONSTRAINTS["compare_draws"],
    }

    def __init__(
        self,
        max_multiplier=2.0,
        min_multiplier=0.05,
        offset_bound=1.0,
        width=16,
        variance_weight=0.3,
        lr=1e-4,
        compare_draws=COMPARE_DRAWS,
        gamma=DEPRECATED,
        floor=DEPRECATED,
    ):
        self.max_multiplier = max_multiplier
        self.min_multiplier = min_multiplier
        self.offset_bound = offset_bound
        self.width = width
        self.variance_weight = variance_weight
        self.lr = lr
        self.compare_draws = compare_draws
        self.gamma = gamma
        self.floor = floor

    def scales(self, network, X, *, sigma, family, bank, p_max=None):
        answer = super().scales(
            network, X, sigma=sigma, family=family, bank=bank, p_max=p_max
        )
        if not self.compare_draws:
            return answer
        isotropic = np.full_like(answer.values, float(sigma))
        candidates = [
            Scale(isotropic, offset=np.zeros_like(answer.offset)),
            Scale(isotropic, offset=answer.offset),
            answer,
        ]
        d = X.shape[1]
        # nothing else has read the optimisation bank: its rows from 0
        chosen, _ = better_of(
            network,
            X,
            candidates,
            lambda gap, s: gap * s.geometric_mean(d),
            family=family,
            bank=bank,
            offset=0,
            n_draws=self.compare_draws,
            p_max=p_max,
        )
        return chosen
