"""Training for certifiability: the loss of one training batch.

``SmoothedClassifier(training=...)`` picks how the base network is trained
(ancer.md Table 1 certifies networks trained these ways):

* ``'gaussian'`` -- noise augmentation (Cohen et al., 2019): cross-entropy of
  ``f(x + S z)`` with noise from the estimator's family and scale;
* ``'consistency'`` -- Jeong & Shin (2020): ``m`` noisy copies, cross-entropy
  plus a consistency term pulling each copy's prediction to their mean;
* ``'macer'`` -- Zhai et al. (2020): cross-entropy of the soft smoothed
  classifier plus a hinge on its certified gap;
* ``'smoothadv'`` -- Salman et al. (2019): PGD on the soft smoothed classifier
  inside an l2 ball, then noise augmentation at the adversarial point.

With a denoiser in front of a frozen network (``SmoothedClassifier(denoiser=
...)``, :mod:`smoothlearn.denoisers`), the method trains the denoiser ``D``
alone (Salman et al., 2020):

* ``'stability'`` -- cross-entropy of ``f(D(x + S z))`` against the frozen
  network's own label ``argmax f(x)``: no labels needed;
* ``'mse'`` -- ``||D(x + S z) - x||^2``, averaged over coordinates;
* ``'gaussian'`` -- cross-entropy of ``f(D(x + S z))`` against ``y``.

Each is a small estimator-like object (``get_params``/``set_params``), so
``GridSearchCV(..., {"training__lbd": [...]})`` works. A method computes the
loss of one batch, called from skorch's training step on the network's
device; shapes are whatever the module takes (flat or image inputs).

The interface is :meth:`BaseTraining.loss` ``(forward, X, y, sample_noise,
family, scale, epoch, criterion)``: ``forward`` maps inputs to class scores
whose softmax is the class probabilities (the module's logits, or the log of
its outputs when it outputs probabilities under an ``NLLLoss`` criterion, as
skorch reads them), ``sample_noise(shape)`` draws scaled noise ``S z`` of a shape
whose trailing dimensions are one input's, ``scale`` is the scale tensor,
``epoch`` the current training epoch (from 1) and ``criterion`` the network's
loss of those scores, which noise augmentation uses; the other methods
are defined on logits by their papers and use cross-entropy. The denoiser's
objectives (:class:`DenoiserTraining`) also get ``denoise`` (the denoiser)
and ``classify`` (the frozen network's class scores).
"""

from numbers import Integral, Real

import torch
import torch.nn.functional as F
from sklearn.base import BaseEstimator, clone

from .utils._deprecation import DEPRECATED, RenamedParamsMixin, deprecated_option
from .utils._sklearn_compat import Interval

__all__ = [
    "TRAININGS",
    "BaseTraining",
    "Consistency",
    "DenoiserMSE",
    "DenoiserTraining",
    "GaussianAugmentation",
    "MACER",
    "SmoothAdv",
    "Stability",
    "get_training",
]


def _repeat(X, m):
    """``X`` repeated ``m`` times along a new axis 1, flattened: (n * m, ...)."""
    return X.unsqueeze(1).expand(X.shape[0], m, *X.shape[1:]).reshape(-1, *X.shape[1:])


class BaseTraining(RenamedParamsMixin, BaseEstimator):
    """Base class of training methods (one batch's loss)."""

    _parameter_constraints: dict = {}

    #: What the method can train: ``'network'`` (the base network, no
    #: denoiser), ``'denoiser'`` (only a denoiser in front of a frozen
    #: network) or ``'either'``.
    trains = "network"

    def loss(self, forward, X, y, sample_noise, *, family, scale, epoch, criterion):
        """The training loss of one batch (a scalar tensor)."""
        raise NotImplementedError  # abstract

    def check(self, denoiser=False):
        """Validate the parameters (raises ValueError/TypeError).

        ``denoiser``: whether a denoiser is trained in front of a frozen
        network; a method that cannot train what is asked raises ValueError.
        """
        self._validate_params()
        name = type(self).__name__
        if denoiser and self.trains == "network":
            raise ValueError(
                f"training {name} trains the base network; with a denoiser only "
                f"the denoiser is trained: use one of {sorted(DENOISER_TRAININGS)}."
            )
        if not denoiser and self.trains == "denoiser":
            raise ValueError(
                f"training {name} trains a denoiser in front of a frozen network; "
                "give SmoothedClassifier a denoiser (denoiser='auto') and a trained "
                "module, or train the network with one of "
                f"{sorted(n for n, c in TRAININGS.items() if c.trains != 'denoiser')}."
            )


class GaussianAugmentation(BaseTraining):
    """Noise augmentation: cross-entropy of ``f(x + S z)`` (Cohen et al., 2019).

    The noise comes from the estimator's family, so ``'gaussian'`` means
    "augmentation with the smoothing noise" for every family.

    With ``max_multiplier > min_multiplier`` each training input's noise is
    ``u S z`` with ``u`` drawn uniformly from ``[min_multiplier,
    max_multiplier]``: the network then sees the larger scales that
    data-dependent strategies move to (isotropic_dd, ANCER, RANCER and RDDRS
    start at ``sigma`` and grow it), as Alfarra et al. train with per-input
    sigmas. At equal epochs it costs what plain augmentation costs.

    Parameters
    ----------
    min_multiplier, max_multiplier : float, default=1.0
        Range of the per-input noise multiplier (1 and 1: plain augmentation).
    """

    _parameter_constraints = {
        "min_multiplier": [Interval(Real, 0, None, closed="neither")],
        "max_multiplier": [Interval(Real, 0, None, closed="neither")],
    }

    trains = "either"

    def __init__(self, min_multiplier=1.0, max_multiplier=1.0):
        self.min_multiplier = min_multiplier
        self.max_multiplier = max_multiplier

    def check(self, denoiser=False):
        super().check(denoiser)
        if self.max_multiplier < self.min_multiplier:
            raise ValueError(
                f"max_multiplier={self.max_multiplier} is below "
                f"min_multiplier={self.min_multiplier}."
            )

    def loss(self, forward, X, y, sample_noise, *, family, scale, epoch, criterion):
        noise = sample_noise(X.shape)
        if self.max_multiplier != self.min_multiplier or self.min_multiplier != 1.0:
            u = torch.empty(X.shape[0], device=noise.device, dtype=noise.dtype)
            u.uniform_(self.min_multiplier, self.max_multiplier)
            noise = noise * u.view(-1, *([1] * (noise.dim() - 1)))
        return criterion(forward(X + noise), y)


class Consistency(BaseTraining):
    """Consistency regularisation (Jeong & Shin, 2020).

    With ``m`` noisy copies of each input, predictions ``p_i =
    softmax(f(x + S z_i))`` and their mean ``p_bar``::

        loss = mean_i CE(f(x + S z_i), y)
               + lbd * mean_i KL(p_bar || p_i) + eta * H(p_bar)

    Parameters
    ----------
    m : int, default=2
        Noisy copies per input.
    lbd : float, default=10.0
        Weight of the consistency (KL) term.
    eta : float, default=0.5
        Weight of the entropy term.
    """

    _parameter_constraints = {
        "m": [Interval(Integral, 2, None, closed="left")],
        "lbd": [Interval(Real, 0, None, closed="left")],
        "eta": [Interval(Real, 0, None, closed="left")],
    }

    def __init__(self, m=2, lbd=10.0, eta=0.5):
        self.m = m
        self.lbd = lbd
        self.eta = eta

    def loss(self, forward, X, y, sample_noise, *, family, scale, epoch, criterion):
        n = X.shape[0]
        copies = _repeat(X, self.m)
        logits = forward(copies + sample_noise(copies.shape)).reshape(n, self.m, -1)
        ce = F.cross_entropy(
            logits.reshape(n * self.m, -1), y.repeat_interleave(self.m)
        )
        log_p = F.log_softmax(logits, dim=-1)
        p_bar = log_p.exp().mean(dim=1)
        log_p_bar = torch.log(p_bar.clamp_min(1e-12))
        kl = (p_bar[:, None] * (log_p_bar[:, None] - log_p)).sum(-1).mean()
        entropy = -(p_bar * log_p_bar).sum(-1).mean()
        return ce + self.lbd * kl + self.eta * entropy


class MACER(BaseTraining):
    """MACER: maximise the soft certified radius (Zhai et al., 2020).

    With ``k`` noisy copies, the soft smoothed classifier
    ``g = mean_i softmax(f(x + S z_i))`` and its inverse-temperature version
    ``g_beta = mean_i softmax(beta f(x + S z_i))``::

        loss = CE(log g, y) + lbd * mean_batch[ s/2 * (gamma - G) on the inputs
               that g_beta classifies correctly with 0 <= G <= gamma ]

    where ``G = 2 * soft_gap(top, second)`` of ``g_beta`` (for Gaussian noise
    ``Phi^-1(top) - Phi^-1(second)``, MACER's gap) and ``s`` the mean scale.

    Parameters
    ----------
    n_draws : int, default=16
        Noisy copies per input (MACER's k).
    beta : float, default=16.0
        Inverse temperature of the robustness term.
    gamma : float, default=8.0
        Hinge threshold on the gap.
    lbd : float, default=12.0
        Weight of the robustness term.
    n_samples : int
        Deprecated name of ``n_draws`` (scikit-learn's ``n_samples`` counts
        rows of ``X``); removed in 0.3.
    """

    _parameter_constraints = {
        "n_draws": [Interval(Integral, 1, None, closed="left")],
        "n_samples": [deprecated_option(), Interval(Integral, 1, None, closed="left")],
        "beta": [Interval(Real, 0, None, closed="neither")],
        "gamma": [Interval(Real, 0, None, closed="neither")],
        "lbd": [Interval(Real, 0, None, closed="left")],
    }

    _renamed_params = {"n_samples": "n_draws"}

    def __init__(
        self, n_draws=16, beta=16.0, gamma=8.0, lbd=12.0, n_samples=DEPRECATED
    ):
        self.n_draws = n_draws
        self.n_samples = n_samples
        self.beta = beta
        self.gamma = gamma
        self.lbd = lbd

    def loss(self, forward, X, y, sample_noise, *, family, scale, epoch, criterion):
        n, k = X.shape[0], self._param("n_draws")
        copies = _repeat(X, k)
        logits = forward(copies + sample_noise(copies.shape)).reshape(n, k, -1)
        g = F.softmax(logits, dim=-1).mean(dim=1)
        classification = F.nll_loss(torch.log(g + 1e-10), y)
        g_beta = F.softmax(self.beta * logits, dim=-1).mean(dim=1)
        top2, idx = g_beta.topk(2, dim=1)
        correct = idx[:, 0] == y
        eps = 1e-6
        gap = 2.0 * family.soft_gap(
            top2[:, 0].clamp(eps, 1 - eps), top2[:, 1].clamp(eps, 1 - eps)
        )
        hinge = correct & torch.isfinite(gap) & (gap >= 0) & (gap <= self.gamma)
        s = torch.as_tensor(scale, dtype=X.dtype, device=X.device).mean()
        robustness = (s / 2) * (self.gamma - gap[hinge]).sum() / n
        return classification + self.lbd * robustness


class SmoothAdv(BaseTraining):
    """SmoothAdv: adversarial training of the smoothed classifier (Salman et al., 2019).

    For each input, ``steps`` steps of l2 PGD inside the ball of radius
    ``epsilon`` maximise the cross-entropy of the soft smoothed classifier
    ``mean_i softmax(f(x' + S z_i))`` over ``n_noise`` fixed noise draws; the
    network then trains on ``x' + S z_i`` (cross-entropy over the copies).
    ``epsilon`` ramps up linearly over the first ``warmup`` epochs.

    Parameters
    ----------
    epsilon : float, default=0.5
        Radius of the l2 attack ball.
    steps : int, default=2
        PGD steps.
    attack_step_size : float, default=None
        l2 length of one PGD step; ``2 * epsilon / steps`` when None. Its own
        parameter, unrelated to the certification ``alpha``.
    n_noise : int, default=2
        Noise draws per input, shared by the attack and the training step.
    warmup : int, default=1
        Epochs over which ``epsilon`` grows linearly from ``epsilon / warmup``.
    """

    _parameter_constraints = {
        "epsilon": [Interval(Real, 0, None, closed="left")],
        "steps": [Interval(Integral, 1, None, closed="left")],
        "attack_step_size": [None, Interval(Real, 0, None, closed="neither")],
        "n_noise": [Interval(Integral, 1, None, closed="left")],
        "warmup": [Interval(Integral, 1, None, closed="left")],
    }

    def __init__(
        self, epsilon=0.5, steps=2, attack_step_size=None, n_noise=2, warmup=1
    ):
        self.epsilon = epsilon
        self.steps = steps
        self.attack_step_size = attack_step_size
        self.n_noise = n_noise
        self.warmup = warmup

    def current_epsilon(self, epoch):
        return self.epsilon * min(1.0, epoch / self.warmup)

    def attack(self, forward, X, y, noise, epsilon):
        """l2 PGD on the soft smoothed classifier with fixed ``noise`` (n, m, ...)."""
        step = self.attack_step_size or 2.0 * self.epsilon / self.steps
        n, m = noise.shape[:2]
        delta = torch.zeros_like(X, requires_grad=True)
        for _ in range(self.steps):
            noisy = _repeat(X + delta, m) + noise.reshape(n * m, *X.shape[1:])
            probs = F.softmax(forward(noisy), dim=-1).reshape(n, m, -1).mean(dim=1)
            loss = F.nll_loss(torch.log(probs + 1e-10), y)
            (grad,) = torch.autograd.grad(loss, delta)
            with torch.no_grad():
                norm = grad.flatten(1).norm(dim=1).clamp_min(1e-12)
                delta += step * grad / norm.view(-1, *([1] * (X.dim() - 1)))
                length = delta.flatten(1).norm(dim=1).clamp_min(1e-12)
                factor = (epsilon / length).clamp(max=1.0)
                delta *= factor.view(-1, *([1] * (X.dim() - 1)))
        return (X + delta).detach()

    def loss(self, forward, X, y, sample_noise, *, family, scale, epoch, criterion):
        n, m = X.shape[0], self.n_noise
        noise = sample_noise((n, m, *X.shape[1:]))
        epsilon = self.current_epsilon(epoch)
        X_adv = self.attack(forward, X, y, noise, epsilon) if epsilon > 0 else X
        noisy = _repeat(X_adv, m) + noise.reshape(n * m, *X.shape[1:])
        return F.cross_entropy(forward(noisy), y.repeat_interleave(m))


class DenoiserTraining(BaseTraining):
    """Base class of objectives that train only a denoiser ``D`` in front of a
    frozen network ``f`` (:mod:`smoothlearn.denoisers`).

    Their :meth:`loss` also gets ``denoise`` (``D``, inputs to inputs) and
    ``classify`` (``f``'s class scores, as ``forward`` gives them for ``f o
    D``).
    """

    trains = "denoiser"

    def loss(
        self,
        forward,
        X,
        y,
        sample_noise,
        *,
        family,
        scale,
        epoch,
        criterion,
        denoise,
        classify,
    ):
        """The training loss of one batch (a scalar tensor)."""
        raise NotImplementedError  # abstract


class Stability(DenoiserTraining):
    """Stability training of a denoiser (Salman et al., 2020)::

        loss = CE(f(D(x + S z)), argmax f(x))

    The frozen network's own label on the clean input is the target, so no
    labels are needed (``y`` is not used), and ``f o D`` learns to agree with
    ``f`` where ``f`` is right and wrong alike.
    """

    def loss(self, forward, X, y, sample_noise, *, criterion, classify, **context):
        with torch.no_grad():
            target = classify(X).argmax(dim=1)
        return criterion(forward(X + sample_noise(X.shape)), target)


class DenoiserMSE(DenoiserTraining):
    """The denoiser's reconstruction error (Salman et al., 2020's MSE)::

        loss = mean over coordinates of (D(x + S z) - x)^2

    Neither labels nor the network are used: the denoiser learns to remove
    the noise.
    """

    def loss(self, forward, X, y, sample_noise, *, denoise, **context):
        return F.mse_loss(denoise(X + sample_noise(X.shape)), X)


TRAININGS = {
    "gaussian": GaussianAugmentation,
    "consistency": Consistency,
    "macer": MACER,
    "smoothadv": SmoothAdv,
    "stability": Stability,
    "mse": DenoiserMSE,
}

#: The methods that can train a denoiser in front of a frozen network.
DENOISER_TRAININGS = {
    name: cls for name, cls in TRAININGS.items() if cls.trains != "network"
}


def get_training(training):
    """A fresh training object for a name, or a clone of an object."""
    if isinstance(training, str):
        if training not in TRAININGS:
            raise ValueError(
                f"training must be one of {sorted(TRAININGS)} or a BaseTraining "
                f"instance; got {training!r}."
            )
        return TRAININGS[training]()
    if isinstance(training, BaseTraining):
        return clone(training)
    raise TypeError(
        f"training must be a string or a BaseTraining; got {type(training).__name__}."
    )
