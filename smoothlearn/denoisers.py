"""Denoised smoothing: a frozen, pretrained classifier behind a trained denoiser.

Salman et al. (NeurIPS 2020, "Denoised Smoothing: A Provable Defense for
Pretrained Classifiers") smooth ``f(D(x + delta))``: ``f`` is a network the
user already trained (on clean data, say), used as it is, and ``D`` a
denoiser trained in front of it. The certificate is the ordinary
randomized-smoothing certificate of the composed base classifier ``f o D``,
so strategies, the memory, pipelines and scorers apply unchanged.
``SmoothedClassifier(module=pretrained, denoiser="auto")`` builds a
:class:`DenoisedNetwork` and trains only its denoiser.

The built-in denoisers are residual, ``D(x) = x + g(x)`` with the last layer
of ``g`` zero at the start, so an untrained denoiser is the identity and
``f o D`` starts as ``f``:

* :class:`ResidualMLPDenoiser` for flat inputs;
* :class:`ResidualCNNDenoiser` for images ``(C, H, W)``, DnCNN-style (Zhang et
  al. 2017) but cheap: the certification cost of ``f o D`` is the denoiser's
  forward pass plus the classifier's, per noise draw, so the residual branch
  works at half resolution on 2x2 blocks of pixels.

A denoiser that needs no training: :class:`DiffusionDenoiser`, one step of a
pretrained diffusion model (Carlini et al., ICLR 2023, "(Certified!!)
Adversarial Robustness for Free!"). ``fit`` trains nothing of it; the engine
tells it each input's smoothing noise level (:func:`noise_levels`).
"""

import copy

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .utils._torch import first_output

__all__ = [
    "DenoisedNetwork",
    "DiffusionDenoiser",
    "ResidualCNNDenoiser",
    "ResidualMLPDenoiser",
    "batch_that_fits",
    "cuda_memory_figures",
    "default_denoiser_for",
    "noise_levels",
]


class ResidualMLPDenoiser(nn.Module):
    """``D(x) = x + g(x)``, ``g`` a ReLU MLP on the flattened input.

    The last layer of ``g`` starts at zero, so the untrained denoiser is the
    identity.

    Parameters
    ----------
    n_features : int
        Size of the flattened input.
    hidden_units : tuple of int, default=None
        Widths of ``g``'s hidden layers; None: one layer of
        ``min(256, 2 * n_features)`` units (on 64 features, 128 units certify
        as well as 256 and cost 1.34x the bare classifier's time instead of
        1.48x).
    """

    def __init__(self, n_features, hidden_units=None):
        super().__init__()
        if hidden_units is None:
            hidden_units = (min(256, 2 * n_features),)
        if not hidden_units:
            raise ValueError("hidden_units must name at least one hidden layer.")
        widths = (n_features, *hidden_units)
        self.first = nn.Linear(n_features, hidden_units[0])
        layers = [nn.ReLU()]
        for a, b in zip(widths[1:-1], widths[2:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        last = nn.Linear(widths[-1], n_features)
        nn.init.zeros_(last.weight)
        nn.init.zeros_(last.bias)
        self.tail = nn.Sequential(*layers, last)

    def forward(self, X):
        flat = X.reshape(len(X), -1)
        return (flat + self.tail(self.first(flat))).reshape(X.shape)

    def smoothlearn_first_linear(self):
        """``(linear, rest)`` with ``self(x) == rest(linear(x))`` on flat inputs.

        The skip connection needs ``x`` after the first layer, so the map is
        the first layer with the identity stacked on top, ``[I; W]``:
        certification then computes it once per noise window
        (:mod:`smoothlearn.first_layer`) and each draw costs ``g``'s later
        layers plus additions.
        """
        d = self.first.in_features
        first = self.first
        stacked = nn.Linear(d, d + first.out_features).to(
            device=first.weight.device, dtype=first.weight.dtype
        )
        with torch.no_grad():
            stacked.weight.copy_(
                torch.cat([torch.eye(d).to(first.weight), first.weight])
            )
            stacked.bias.copy_(torch.cat([torch.zeros(d).to(first.bias), first.bias]))
        return stacked, _ResidualRest(d, self.tail)


class _ResidualRest(nn.Module):
    """The rest of a residual MLP after its stacked first map: ``x + tail(h)``."""

    def __init__(self, n_features, tail):
        super().__init__()
        self.n_features = n_features
        self.tail = tail

    def forward(self, stacked):
        x, hidden = stacked[:, : self.n_features], stacked[:, self.n_features :]
        return x + self.tail(hidden)


class ResidualCNNDenoiser(nn.Module):
    """``D(x) = x + g(x)`` for images, ``g`` a small DnCNN-style CNN.

    ``g`` works on the space-to-depth image (each ``factor x factor`` block of
    pixels as ``factor**2`` channels, ``pixel_unshuffle``): ``depth`` 3x3
    convolutions with ReLU between them, ``channels`` wide, the last back to
    the blocks' channels, then ``pixel_shuffle`` to full resolution. Its last
    convolution starts at zero, so the untrained denoiser is the identity.
    Images whose sides are not multiples of ``factor`` are padded with zeros
    for ``g`` and cropped back.

    Parameters
    ----------
    in_channels : int
    channels : int, default=16
    depth : int, default=2
        Convolutions in ``g`` (at least 2).
    factor : int, default=2
        Side of the pixel blocks (1: DnCNN's full resolution throughout).

    Notes
    -----
    The defaults keep certification cheap, since every noise draw passes
    through the denoiser and then the network. In front of the built-in CNN
    on Fashion-MNIST (stability training, sigma = 0.5) they certified as
    well as a 3-layer, 16-channel strided design (certified accuracy within 2
    points at radii 0 to 0.75) at 1.5x the bare network's time on an H200
    (that design: 1.9x; 32 channels and 3 layers: +4 points at radius 0.5,
    2.0x).
    """

    def __init__(self, in_channels, channels=16, depth=2, factor=2):
        super().__init__()
        if depth < 2:
            raise ValueError(f"depth must be at least 2; got {depth}.")
        blocks = in_channels * factor * factor
        layers = [nn.Conv2d(blocks, channels, 3, padding=1), nn.ReLU()]
        for _ in range(depth - 2):
            layers += [nn.Conv2d(channels, channels, 3, padding=1), nn.ReLU()]
        last = nn.Conv2d(channels, blocks, 3, padding=1)
        nn.init.zeros_(last.weight)
        nn.init.zeros_(last.bias)
        self.factor = factor
        self.branch = nn.Sequential(*layers, last)

    def forward(self, X):
        f = self.factor
        h, w = X.shape[-2:]
        padded = X
        if h % f or w % f:  # only then: a pad is one more pass over the batch
            padded = F.pad(X, (0, -w % f, 0, -h % f))
        residual = F.pixel_shuffle(self.branch(F.pixel_unshuffle(padded, f)), f)
        return X + residual[..., :h, :w]


def default_denoiser_for(input_shape):
    """The built-in denoiser class and its sizing parameters for one input shape.

    A :class:`ResidualCNNDenoiser` for images ``(C, H, W)`` of at least 2x2
    pixels, else a :class:`ResidualMLPDenoiser` on the flattened input.
    """
    if len(input_shape) == 3 and min(input_shape[1:]) >= 2:
        return ResidualCNNDenoiser, {"in_channels": input_shape[0]}
    return ResidualMLPDenoiser, {"n_features": int(np.prod(input_shape))}


class DenoisedNetwork(nn.Module):
    """``classifier(denoiser(x))`` with the classifier frozen.

    The classifier is a copy of the one given, with ``requires_grad`` off
    and kept in eval mode (its batch-norm statistics and dropout as at
    inference) whatever ``train`` asks: only the denoiser learns. The one
    given is never touched.

    Parameters
    ----------
    denoiser : torch.nn.Module
        Maps inputs to inputs of the same shape.
    classifier : torch.nn.Module
        The trained base network (copied).
    """

    def __init__(self, denoiser, classifier):
        super().__init__()
        self.denoiser = denoiser
        self.classifier = copy.deepcopy(classifier)
        self.classifier.requires_grad_(False)
        self.classifier.eval()

    def train(self, mode=True):
        self.training = mode
        self.denoiser.train(mode)
        self.classifier.eval()
        return self

    @property
    def noise_level_rule(self):
        """How the engine sums up an input's smoothing scale as one noise
        level for the denoiser (:func:`noise_levels`), or None where the
        denoiser takes no level (a trained one learnt its level)."""
        return getattr(self.denoiser, "noise_level_rule", None)

    @property
    def sized_to_memory(self):
        """Whether certification sizes its batches to the device's free
        memory (a diffusion model in front: :meth:`FlatInputNetwork.batch_size_for
        <smoothlearn.network.FlatInputNetwork.batch_size_for>`)."""
        return isinstance(self.denoiser, DiffusionDenoiser)

    def forward(self, X, noise_level=None):
        if noise_level is None:
            return self.classifier(self.denoiser(X))
        # the denoiser's output goes to the classifier as it is: one device,
        # no copy between the two
        return self.classifier(self.denoiser(X, noise_level=noise_level))

    def smoothlearn_first_linear(self, input_shape=None):
        """The first affine map of ``f o D`` to reuse, and the rest, or None.

        The classifier's first layer ``L`` sees ``D(x + S z)``, not linear in
        the noise, so in general only the denoiser's first map is reused:
        through its own ``smoothlearn_first_linear`` (the built-in MLP
        denoiser has one) or an ``nn.Sequential`` denoiser's first layers.

        Behind the residual MLP denoiser ``D(y) = y + W a(y) + c`` (``a`` the
        last hidden layer of ``g``) and a classifier that starts with an
        ``nn.Linear`` ``L`` on the flattened input, ``L D(y) = L y + (L W)
        a(y) + L c``: ``L y`` is linear in the noise again. Where it costs
        less per draw, ``L`` and the denoiser's first layer are reused
        together (one stacked map) and ``L W`` replaces the two large products
        ``W a`` and ``L D(y)`` (a user's 784-256 MLP: 256 x 256 multiply-adds
        instead of 2 x 784 x 256).
        """
        from .first_layer import split_sequential

        if input_shape is not None and isinstance(self.denoiser, ResidualMLPDenoiser):
            folded = self._folded_split(input_shape)
            if folded is not None:
                return folded
        hook = getattr(self.denoiser, "smoothlearn_first_linear", None)
        if callable(hook):
            split = hook()
        elif isinstance(self.denoiser, nn.Sequential):
            split = split_sequential(self.denoiser)
        else:
            split = None
        if split is None:
            return None
        linear, rest = split
        return linear, _Then(rest, self.classifier)

    def _folded_split(self, input_shape):
        """``(stacked map, rest)`` with the classifier's first layer folded
        into the residual MLP denoiser's last, or None where that does not pay
        or the classifier has no flat first ``nn.Linear``."""
        from .first_layer import find_first_linear

        d = int(np.prod(input_shape))
        classifier = find_first_linear(self.classifier, input_shape, d)
        if classifier is None or not isinstance(classifier.linear, nn.Linear):
            return None
        first = classifier.linear
        if first.in_features != d or classifier.layer_shape not in (None, (d,)):
            return None  # a Linear on part of each input: nothing to fold
        weight = first.weight
        bias = first.bias if first.bias is not None else torch.zeros_like(weight[:, 0])
        if classifier.front is not None:  # L (a * y + b): fold a and b into L
            scale, shift = classifier.front
            weight, bias = weight * scale.to(weight), bias + weight @ shift.to(weight)
        last = self.denoiser.tail[-1]
        hidden_f, hidden_g = weight.shape[0], last.in_features
        if hidden_g * hidden_f >= hidden_g * d + d * hidden_f:
            return None  # L W costs more per draw than W then L
        den = self.denoiser.first
        with torch.no_grad():
            stacked = nn.Linear(d, hidden_f + den.out_features).to(weight)
            stacked.weight.copy_(torch.cat([weight, den.weight.to(weight)]))
            stacked.bias.copy_(torch.cat([bias, den.bias.to(weight)]))
            fold = nn.Linear(hidden_g, hidden_f).to(weight)
            fold.weight.copy_(weight @ last.weight.to(weight))
            fold.bias.copy_(weight @ last.bias.to(weight))
        middle = nn.Sequential(*list(self.denoiser.tail)[:-1])
        return stacked, _FoldedRest(hidden_f, middle, fold, classifier.rest)


class _FoldedRest(nn.Module):
    """``f``'s rest on ``L y + (L W) a(y) + L c``, from the stacked map's
    output ``[L y + b_L, first(y)]`` (``DenoisedNetwork._folded_split``)."""

    def __init__(self, hidden_f, middle, fold, rest):
        super().__init__()
        self.hidden_f = hidden_f
        self.middle = middle
        self.fold = fold
        self.rest = rest

    def forward(self, stacked):
        own, hidden = stacked[:, : self.hidden_f], stacked[:, self.hidden_f :]
        return self.rest(own + self.fold(self.middle(hidden)))


class _Then(nn.Module):
    """``second(first(x))``, the first's output as the second takes it."""

    def __init__(self, first, second):
        super().__init__()
        self.first = first
        self.second = second

    def forward(self, X):
        return self.second(first_output(self.first(X)))


#: What ``DiffusionDenoiser.prediction`` may name: the model's output as
#: ``diffusers`` schedulers read it (``prediction_type``).
PREDICTIONS = ("epsilon", "sample", "v_prediction")

#: How an anisotropic scale is summed up as one noise level (:func:`noise_levels`).
LEVEL_RULES = ("rms", "geometric")


class DiffusionDenoiser(nn.Module):
    """One denoising step of a pretrained diffusion model (Carlini et al., 2023).

    For smoothing noise of standard deviation ``sigma`` (in the units of
    ``data_range``) the noisy input ``y = x + delta`` is mapped to the model's
    ``[-1, 1]`` range (``y' = 2 (y - lo) / (hi - lo) - 1``, so the noise level
    becomes ``sigma' = 2 sigma / (hi - lo)``), the timestep ``t`` whose level
    ``sqrt((1 - a_t) / a_t)`` is nearest ``sigma'`` is taken, ``x_t =
    sqrt(a_t) y'`` is given to the model, and its one-step estimate of the
    clean input

    * ``'epsilon'``: ``x0 = (x_t - sqrt(1 - a_t) eps(x_t, t)) / sqrt(a_t)``;
    * ``'sample'``: ``x0 = model(x_t, t)``;
    * ``'v_prediction'``: ``x0 = sqrt(a_t) x_t - sqrt(1 - a_t) v(x_t, t)``

    (``diffusers``' definitions) is mapped back to ``data_range``. Nothing is
    clipped.

    The timestep rule: ``t = argmin_t |level_t - sigma'|`` (the first on a
    tie). Where ``sigma'`` lies between the smallest and the largest level,
    the level used is off by at most half the largest gap between neighbouring
    levels around ``sigma'`` (:meth:`level_mismatch` gives it for one sigma);
    outside, the nearest end is used. The smoothing noise itself is never
    changed, so certificates are sound whatever the match: a mismatch costs
    accuracy only.

    Used as every denoiser is, ``SmoothedClassifier(module=classifier,
    denoiser=DiffusionDenoiser(...))``: ``fit`` trains nothing of it (it
    records the classes and the input shape, and checks the two models
    together); the diffusion model and the classifier are used frozen, in
    eval mode, and never modified. Each certification count gives the
    denoiser the noise level of each input's own scale (:func:`noise_levels`);
    elsewhere (a strategy's optimisation steps, a direct call) it uses
    ``sigma``.

    Parameters
    ----------
    model : torch.nn.Module
        ``model(x_t, t)`` with ``t`` a long tensor of one timestep per row;
        returns the prediction (a tensor, a tuple whose first item is it, or
        an object with a ``.sample``, as ``diffusers``' ``UNet2DModel``). An
        output with twice the input's channels (a learned variance after the
        prediction, as OpenAI's guided-diffusion models give) is cut to its
        first half.
    alphas_cumprod : array-like of shape (T,)
        The schedule's cumulative products ``a_t``, in ``(0, 1]`` and
        non-increasing in ``t``.
    data_range : (float, float), default=(0, 1)
        The range ``(lo, hi)`` the classifier's inputs live in, mapped to the
        model's ``[-1, 1]``.
    prediction : {'epsilon', 'sample', 'v_prediction'}, default='epsilon'
        What the model predicts.
    noise_level_rule : {'rms', 'geometric'}, default='rms'
        For anisotropic smoothing (``ancer``, ``rancer``, ...), the level the
        denoiser is given for an input smoothed by ``S``: the RMS of ``S``'s
        eigenvalues, ``sqrt(tr(S^2) / d)`` (the noise's energy per
        coordinate, what an isotropic noise of that level carries), or their
        geometric mean, ``det(S)^(1/d)`` (the certified region's volume). The
        two agree for isotropic noise.
    sigma : float, default=None
        The level used where none is given; ``SmoothedClassifier.fit`` sets
        its copy's to the estimator's ``sigma`` when None.

    Attributes
    ----------
    levels : torch.Tensor of shape (T,), float64
        Each timestep's level ``sqrt((1 - a_t) / a_t)`` in the model's range.

    Examples
    --------
    >>> import torch
    >>> from smoothlearn.denoisers import DiffusionDenoiser
    >>> class NoNoise(torch.nn.Module):  # predicts no noise: x0 = the input
    ...     def forward(self, x, t):
    ...         return torch.zeros_like(x)
    >>> ddpm = torch.cumprod(1 - torch.linspace(1e-4, 0.02, 1000), 0)  # DDPM's
    >>> d = DiffusionDenoiser(NoNoise(), ddpm)  # data in [0, 1]
    >>> t = d.timestep(0.25)  # level 0.5 in [-1, 1]
    >>> t, round(d.level(t), 4), round(d.level_mismatch(0.25), 5)
    (144, 0.2497, 0.00029)
    >>> d(torch.full((1, 3), 0.7), noise_level=0.25)
    tensor([[0.7000, 0.7000, 0.7000]])
    """

    def __init__(
        self,
        model,
        alphas_cumprod,
        *,
        data_range=(0, 1),
        prediction="epsilon",
        noise_level_rule="rms",
        sigma=None,
    ):
        super().__init__()
        if not isinstance(model, nn.Module):
            raise TypeError(
                f"model must be a torch.nn.Module; got {type(model).__name__}."
            )
        a = torch.as_tensor(
            np.asarray(
                alphas_cumprod.detach().cpu()
                if isinstance(alphas_cumprod, torch.Tensor)
                else alphas_cumprod,
                dtype=np.float64,
            )
        )
        if a.ndim != 1 or len(a) == 0:
            raise ValueError(
                f"alphas_cumprod must be 1-D and non-empty; got shape {tuple(a.shape)}."
            )
        if not (torch.isfinite(a).all() and (a > 0).all() and (a <= 1).all()):
            raise ValueError("alphas_cumprod must lie in (0, 1].")
        if (a[1:] > a[:-1]).any():
            raise ValueError("alphas_cumprod must be non-increasing in t.")
        lo, hi = (float(v) for v in data_range)
        if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi):
            raise ValueError(
                f"data_range must be (lo, hi) with lo < hi; got {data_range}."
            )
        if prediction not in PREDICTIONS:
            raise ValueError(
                f"prediction must be one of {PREDICTIONS}; got {prediction!r}."
            )
        if noise_level_rule not in LEVEL_RULES:
            raise ValueError(
                f"noise_level_rule must be one of {LEVEL_RULES}; got "
                f"{noise_level_rule!r}."
            )
        if sigma is not None and not (np.isfinite(sigma) and sigma > 0):
            raise ValueError(f"sigma must be a positive number; got {sigma!r}.")
        self.model = model
        self.data_range = (lo, hi)
        self.prediction = prediction
        self.noise_level_rule = noise_level_rule
        self.sigma = sigma
        self.register_buffer("alphas_cumprod", a)
        self.register_buffer("levels", torch.sqrt((1 - a) / a))
        # the timestep rule's thresholds: level t is nearest for sigma' in
        # [midpoint t-1, midpoint t)
        self.register_buffer("_midpoints", (self.levels[1:] + self.levels[:-1]) / 2)

    @classmethod
    def from_diffusers(cls, unet, scheduler, **kwargs):
        """Build from a ``diffusers`` model and scheduler: the scheduler's
        ``alphas_cumprod`` and ``prediction_type``.

        Parameters
        ----------
        unet : torch.nn.Module
            A ``diffusers`` model (``UNet2DModel``) or any module taking
            ``(x_t, t)``.
        scheduler : object
            A ``diffusers`` scheduler with ``alphas_cumprod`` (DDPM, DDIM ...).
        **kwargs
            ``data_range``, ``noise_level_rule``, ``sigma`` (``prediction``
            comes from the scheduler's config unless given).
        """
        alphas = getattr(scheduler, "alphas_cumprod", None)
        if alphas is None:
            raise TypeError(
                f"{type(scheduler).__name__} has no alphas_cumprod: give a diffusers "
                "scheduler of a DDPM-type schedule (DDPMScheduler, DDIMScheduler ...)."
            )
        config = getattr(scheduler, "config", {})
        prediction = kwargs.pop(
            "prediction", getattr(config, "prediction_type", None) or "epsilon"
        )
        return cls(unet, alphas, prediction=prediction, **kwargs)

    # ------------------------------------------------------- the timestep rule
    def _model_units(self, sigma):
        lo, hi = self.data_range
        return 2.0 * np.asarray(sigma, dtype=np.float64) / (hi - lo)

    def _sigma(self, sigma):
        if sigma is None:
            if self.sigma is None:
                raise ValueError(
                    "give sigma: this denoiser has none yet (SmoothedClassifier.fit "
                    "sets its copy's)."
                )
            return self.sigma
        return sigma

    def timestep(self, sigma=None):
        """The timestep for smoothing noise ``sigma`` (data units; the
        denoiser's own ``sigma`` when None): an int, or an array of ints for an
        array of sigmas."""
        mapped = torch.as_tensor(self._model_units(self._sigma(sigma)))
        t = torch.bucketize(mapped, self._midpoints.cpu(), right=False)
        return int(t) if t.ndim == 0 else t.numpy()

    def level(self, t=None):
        """The noise level timestep ``t`` stands for, in data units (``t``:
        the timestep of the denoiser's own ``sigma`` when None)."""
        lo, hi = self.data_range
        t = self.timestep() if t is None else t
        return float(self.levels[int(t)]) * (hi - lo) / 2.0

    def level_mismatch(self, sigma=None):
        """``|level(timestep(sigma)) - sigma|``, in data units."""
        sigma = self._sigma(sigma)
        return abs(self.level(self.timestep(sigma)) - float(sigma))

    # ------------------------------------------------------------- the step
    def train(self, mode=True):
        # the diffusion model stays in eval mode (its dropout off) whatever is asked
        self.training = mode
        self.model.eval()
        return self

    def forward(self, X, noise_level=None):
        """The one-step estimate of the clean ``X``.

        Parameters
        ----------
        X : torch.Tensor, one input per row (n, ...)
            Noisy inputs in the units of ``data_range``.
        noise_level : float or torch.Tensor of shape (n,), default=None
            Each row's smoothing noise level (data units); ``sigma`` when None.
        """
        if noise_level is None:
            if self.sigma is None:
                raise ValueError(
                    "DiffusionDenoiser needs the noise level: give noise_level, or "
                    "sigma (SmoothedClassifier.fit sets it)."
                )
            noise_level = self.sigma
        lo, hi = self.data_range
        to_model = 2.0 / (hi - lo)
        mapped = (
            torch.as_tensor(
                noise_level, dtype=self._midpoints.dtype, device=self._midpoints.device
            )
            * to_model
        )
        t = torch.bucketize(mapped, self._midpoints).expand(len(X))
        shape = (len(X),) + (1,) * (X.dim() - 1)
        a = self.alphas_cumprod[t].to(X.dtype).reshape(shape)
        root_a, root_rest = a.sqrt(), (1 - a).sqrt()
        x_t = root_a * ((X - lo) * to_model - 1.0)
        out = self._prediction(x_t, t)
        if self.prediction == "epsilon":
            x0 = (x_t - root_rest * out) / root_a
        elif self.prediction == "sample":
            x0 = out
        else:  # v = sqrt(a) eps - sqrt(1 - a) x0
            x0 = root_a * x_t - root_rest * out
        return (x0 + 1.0) / to_model + lo

    def _prediction(self, x_t, t):
        dtype = next(self.model.parameters(), x_t).dtype
        out = self.model(x_t.to(dtype), t)
        out = getattr(out, "sample", out)
        out = out[0] if isinstance(out, tuple) else out
        if out.dim() == x_t.dim() > 2 and out.shape[1] == 2 * x_t.shape[1]:
            out = out[:, : x_t.shape[1]]  # a learned variance after the prediction
        if out.shape != x_t.shape:
            raise ValueError(
                f"the diffusion model must return its prediction in the input's "
                f"shape {tuple(x_t.shape)}; got {tuple(out.shape)}."
            )
        return out.to(x_t.dtype)


def noise_levels(scale, n_features, rule="rms"):
    """One noise level per row of a smoothing scale, for a denoiser.

    Parameters
    ----------
    scale : smoothlearn.scale.Scale
        Isotropic, diagonal or rotated (with or without a diagonal frame).
    n_features : int
    rule : {'rms', 'geometric'}, default='rms'
        ``'rms'``: ``sqrt(tr(S^2) / d)``, the root mean square of ``S``'s
        eigenvalues; ``'geometric'``: ``det(S)^(1/d)``. Both are the scale
        itself for isotropic rows.

    Returns
    -------
    ndarray of shape (m,), float64
    """
    if rule not in LEVEL_RULES:
        raise ValueError(f"rule must be one of {LEVEL_RULES}; got {rule!r}.")
    if scale.kind == "isotropic":
        return np.array(scale.values, dtype=np.float64)
    if rule == "geometric":
        return scale.geometric_mean(n_features)
    values = np.asarray(scale.values, dtype=np.float64)
    if scale.kind == "diagonal":
        return np.sqrt(np.mean(values**2, axis=1))
    if scale.frame is None:  # eigenvalues: the k in-basis scales, d - k times rest
        rest = np.asarray(scale.rest, dtype=np.float64)
        k = values.shape[1]
        return np.sqrt(
            ((values**2).sum(axis=1) + (n_features - k) * rest**2) / n_features
        )
    return np.array(
        [
            np.linalg.norm(scale.dense(i, n_features)) / np.sqrt(n_features)
            for i in range(len(scale))
        ]
    )


#: Share of the GPU's free memory a forward batch may take: the rest is left
#: to the noise bank's chunk, the counts and the allocator's fragmentation.
MEMORY_HEADROOM = 0.8


def batch_that_fits(batch_size, bytes_per_input, fixed_bytes, free_bytes):
    """The largest forward batch, at most ``batch_size``, whose memory fits.

    A batch of ``b`` inputs takes ``fixed_bytes + b * bytes_per_input``; it
    fits where that is at most :data:`MEMORY_HEADROOM` of ``free_bytes``. At
    least 1 (a model that does not fit with one input fails on its own).

    Parameters
    ----------
    batch_size : int
    bytes_per_input, fixed_bytes, free_bytes : float
    """
    room = MEMORY_HEADROOM * free_bytes - fixed_bytes
    if bytes_per_input <= 0:
        return batch_size
    return int(max(1, min(batch_size, room // bytes_per_input)))


#: Batch sizes of the two probe passes of :func:`cuda_memory_figures`.
PROBE_BATCHES = (4, 16)


def cuda_memory_figures(network):
    """``(bytes_per_input, fixed_bytes, free_bytes)`` of a network on its GPU.

    Two probe forward passes (:data:`PROBE_BATCHES` inputs, in inference
    mode, as certification runs them) give the peak memory each allocates
    above what was allocated before; their slope is the cost per input (the
    activations of the diffusion model and the classifier together, plus the
    noisy inputs and their noise window), the rest is fixed (workspaces).
    Free memory is what the driver reports free plus what torch's allocator
    holds unused.

    Parameters
    ----------
    network : FlatInputNetwork
        On a CUDA device.
    """
    device = network.device
    peaks = []
    for b in PROBE_BATCHES:
        x = torch.zeros((b, network.n_features), device=device)
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        with torch.inference_mode():
            network.logits(x)
        torch.cuda.synchronize(device)
        peaks.append(torch.cuda.max_memory_allocated(device) - before)
        del x
    (b0, b1), (p0, p1) = PROBE_BATCHES, peaks
    inputs = 2 * 4 * network.n_features  # a noisy input and its draw, float32
    per_input = max((p1 - p0) / (b1 - b0), 0.0) + inputs
    fixed = max(p0 - b0 * (per_input - inputs), 0.0)
    free, _ = torch.cuda.mem_get_info(device)
    unused = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    return per_input, fixed, free + unused
