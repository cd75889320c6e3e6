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
"""

import copy

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .utils._torch import first_output

__all__ = [
    "DenoisedNetwork",
    "ResidualCNNDenoiser",
    "ResidualMLPDenoiser",
    "default_denoiser_for",
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

    def forward(self, X):
        return self.classifier(self.denoiser(X))

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
