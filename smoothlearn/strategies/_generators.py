"""UCAN's noise parameter generators (NPGs): torch modules giving (mu, sigma).

A generator's ``forward(X)`` takes a batch shaped like the inputs,
``(B, *input_shape)``, and returns ``(offset, multiplier)``: the mean offset
``mu`` and the positive, bounded multipliers of the base noise level, each
``(B, *input_shape)`` (input-dependent) or ``(1, *input_shape)`` (universal: the
same for every input). The noise added to ``x`` is ``mu + sigma * multiplier * z``
(ucan.md eq. 2, with ``lambda = sigma``).

Output layers (ucan.md section 4.2 and appendix E use an amplified tanh, ``gamma *
tanh(h)``). A multiplier must be positive and ``gamma * tanh`` is not, so we follow the
paper's intent (bounded, smooth) with ``floor + (gamma - floor) * (1 + tanh(h)) / 2``,
in ``(floor, gamma)``; the offset is ``offset_bound * tanh(h)``. Output layers start
near zero weights with biases giving multiplier 1 and offset 0, so training starts
from the isotropic noise of level ``sigma``.
"""

import math

import torch
from torch import nn

__all__ = ["AmplifiedTanh", "InputNoiseGenerator", "UniversalNoiseGenerator"]


class AmplifiedTanh(nn.Module):
    """Bounded outputs: multipliers in (floor, gamma), offsets in (-bound, bound).

    Parameters
    ----------
    gamma : float
        Upper bound of the multipliers (UCAN's amplification factor).
    floor : float
        Lower bound of the multipliers (> 0: a zero multiplier would flatten the
        certified region).
    offset_bound : float
        Bound of the offsets' magnitude (0: no offset).
    """

    def __init__(self, gamma, floor, offset_bound):
        super().__init__()
        self.gamma = float(gamma)
        self.floor = float(floor)
        self.offset_bound = float(offset_bound)

    def multiplier(self, h):
        return self.floor + (self.gamma - self.floor) * (1 + torch.tanh(h)) / 2

    def offset(self, h):
        return self.offset_bound * torch.tanh(h)

    def multiplier_bias(self):
        """The pre-activation giving multiplier 1 (or mid-range if 1 is outside)."""
        u = (1.0 - self.floor) / (self.gamma - self.floor)  # (1 + tanh) / 2
        u = min(max(u, 0.05), 0.95)
        return math.atanh(2 * u - 1)


def _start_isotropic(layer, bias):
    """Near-zero weights, a constant bias: the output starts at ``bias`` everywhere."""
    nn.init.normal_(layer.weight, std=1e-3)
    nn.init.constant_(layer.bias, bias)


class UniversalNoiseGenerator(nn.Module):
    """UCAN's universal NPG (ucan.md section 4.2): one (mu, sigma) for a whole dataset.

    A fixed constant input goes through five linear layers (the first four
    followed by leaky ReLU); the last one outputs the sigma map and the mu map,
    each bounded by :class:`AmplifiedTanh`. ``forward`` ignores its input's values
    and returns maps shaped ``(1, *input_shape)``.

    Parameters
    ----------
    input_shape : tuple of int
    width : int, default=128
        Units of the four hidden layers.
    latent : int, default=16
        Size of the constant input.
    gamma, floor, offset_bound : float
        See :class:`AmplifiedTanh`.
    """

    def __init__(
        self, input_shape, width=128, latent=16, gamma=5.0, floor=0.05, offset_bound=1.0
    ):
        super().__init__()
        self.input_shape = tuple(input_shape)
        d = math.prod(self.input_shape)
        self.register_buffer("constant", torch.ones(1, latent))
        layers, size = [], latent
        for _ in range(4):
            layers += [nn.Linear(size, width), nn.LeakyReLU(0.2)]
            size = width
        self.hidden = nn.Sequential(*layers)
        self.to_multiplier = nn.Linear(width, d)
        self.to_offset = nn.Linear(width, d)
        self.bounds = AmplifiedTanh(gamma, floor, offset_bound)
        _start_isotropic(self.to_multiplier, self.bounds.multiplier_bias())
        _start_isotropic(self.to_offset, 0.0)

    def forward(self, X):
        h = self.hidden(self.constant.to(X.dtype))
        shape = (1, *self.input_shape)
        offset = self.bounds.offset(self.to_offset(h)).reshape(shape)
        return offset, self.bounds.multiplier(self.to_multiplier(h)).reshape(shape)


def _map_network(input_shape, width, out_bias):
    """Five layers from an input to a map of its shape (conv for images, else MLP).

    Images (C, H, W): four 3x3 convolutions with leaky ReLU then a 3x3 convolution
    back to C channels (ucan.md appendix E, without its dense connections); flat
    inputs: four dense layers with leaky ReLU then one back to ``d``.
    """
    if len(input_shape) == 3:
        channels = input_shape[0]
        layers, size = [], channels
        for _ in range(4):
            layers += [nn.Conv2d(size, width, 3, padding=1), nn.LeakyReLU(0.2)]
            size = width
        last = nn.Conv2d(width, channels, 3, padding=1)
    else:
        d = math.prod(input_shape)
        layers, size = [nn.Flatten()], d
        for _ in range(4):
            layers += [nn.Linear(size, width), nn.LeakyReLU(0.2)]
            size = width
        last = nn.Linear(width, d)
    _start_isotropic(last, out_bias)
    return nn.Sequential(*layers, last)


class InputNoiseGenerator(nn.Module):
    """UCAN's input-dependent NPG (ucan.md section 4.3): cascaded mu then sigma.

    ``mu = G_mu(x)`` and ``multiplier = G_sigma(x + mu)``, two networks of the same
    architecture (convolutional for image inputs, an MLP for flat ones).

    Parameters
    ----------
    input_shape : tuple of int
    width : int, default=16
        Channels (images) or hidden units (flat inputs) of each hidden layer.
    gamma, floor, offset_bound : float
        See :class:`AmplifiedTanh`.
    """

    def __init__(self, input_shape, width=16, gamma=2.0, floor=0.05, offset_bound=1.0):
        super().__init__()
        self.input_shape = tuple(input_shape)
        self.bounds = AmplifiedTanh(gamma, floor, offset_bound)
        self.offset_net = _map_network(self.input_shape, width, 0.0)
        self.multiplier_net = _map_network(
            self.input_shape, width, self.bounds.multiplier_bias()
        )

    def forward(self, X):
        X = X.reshape(-1, *self.input_shape)
        offset = self.bounds.offset(self.offset_net(X).reshape(X.shape))
        h = self.multiplier_net(X + offset).reshape(X.shape)
        return offset, self.bounds.multiplier(h)
