"""First-layer reuse: certify below the naive floor of n full forward passes.

When the base network starts with a linear map ``L`` (``nn.Linear`` or
``nn.Conv2d``, possibly after ``nn.Flatten``), ``L(x + S z) = L x + L(S z)``.
For a scale that is the same for every input the bank's response ``L(S z)`` is
computed once per window of draws and reused by every input; for per-input
isotropic scales ``L(s_i z) = s_i L z`` reuses ``L z``. Only the rest of the
network runs per noisy input. The counts are those of the same network on the
same draws: each input's count stays Binomial(n, p_x) with draws independent
of ``x`` (up to float32 rounding, which batched BLAS calls perturb anyway).

How a network declares its first linear map
-------------------------------------------
* ``nn.Sequential`` whose first layers are ``[nn.Flatten()] + nn.Linear`` or a
  ``nn.Conv2d``: detected.
* Any module can define ``smoothlearn_first_linear(self)`` returning
  ``(linear, rest)`` with ``self(x) == rest(linear(x))`` for inputs ``x`` as the
  module takes them (``linear`` an ``nn.Linear`` on flattened inputs or an
  ``nn.Conv2d`` on image inputs). It may return None to opt out. The built-in
  MLP and CNN do. The split is checked once on a random input; a wrong hook
  raises rather than giving wrong counts.

Networks without a linear first map take the plain path.
"""

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["FirstLinear", "split_sequential", "find_first_linear"]


def split_sequential(sequential):
    """``(linear, rest)`` of a Sequential starting with [Flatten] + Linear, or Conv2d.

    Returns None when the Sequential starts otherwise.
    """
    layers = list(sequential)
    flattened = False
    while layers and isinstance(layers[0], nn.Flatten):
        layers.pop(0)
        flattened = True
    if not layers:
        return None
    first = layers[0]
    if isinstance(first, nn.Conv2d) and not flattened:
        return first, nn.Sequential(*layers[1:])
    if isinstance(first, nn.Linear):
        return first, nn.Sequential(*layers[1:])
    return None


class FirstLinear:
    """A network split as ``rest(linear(x))`` with the linear map's pieces.

    Parameters
    ----------
    linear : nn.Linear or nn.Conv2d
    rest : callable
    input_shape : tuple of int
        Shape of one input as the module takes it.
    """

    def __init__(self, linear, rest, input_shape):
        self.linear = linear
        self.rest = rest
        self.input_shape = tuple(input_shape)
        self.is_conv = isinstance(linear, nn.Conv2d)

    def _shaped(self, x_flat):
        if self.is_conv:
            return x_flat.reshape(-1, *self.input_shape)
        return x_flat.reshape(len(x_flat), -1)

    def apply(self, x_flat):
        """``L x`` (with bias) for flat inputs."""
        return self.linear(self._shaped(x_flat))

    def apply_linear_part(self, z_flat):
        """``L z`` without the bias: the response to a noise draw."""
        lin = self.linear
        z = self._shaped(z_flat)
        if self.is_conv:
            # torch's own convolution with its padding mode, without the bias
            return lin._conv_forward(z, lin.weight, None)
        return F.linear(z, lin.weight)


def find_first_linear(module, input_shape, n_features):
    """The :class:`FirstLinear` split of ``module``, or None for the plain path."""
    hook = getattr(module, "smoothlearn_first_linear", None)
    if callable(hook):
        split = hook()
    elif isinstance(module, nn.Sequential):
        split = split_sequential(module)
    else:
        return None
    if split is None:
        return None
    linear, rest = split
    if isinstance(linear, nn.Linear) and linear.in_features != n_features:
        return None
    if isinstance(linear, nn.Conv2d) and len(input_shape) != 3:
        return None
    if not isinstance(linear, (nn.Linear, nn.Conv2d)):
        raise TypeError(
            "smoothlearn_first_linear must return an nn.Linear or nn.Conv2d first; "
            f"got {type(linear).__name__}"
        )
    found = FirstLinear(linear, rest, input_shape)
    _check_split(module, found, input_shape, n_features)
    return found


def _check_split(module, found, input_shape, n_features):
    """Raise if ``rest(linear(x))`` is not ``module(x)`` on a random input."""
    param = next(module.parameters(), None)
    device = param.device if param is not None else "cpu"
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, n_features, generator=gen).to(device)
    was_training = module.training
    module.eval()
    with torch.inference_mode():
        whole = module(x.reshape(-1, *input_shape))
        whole = whole[0] if isinstance(whole, tuple) else whole
        split = found.rest(found.apply(x))
    module.train(was_training)
    same = split.shape == whole.shape and torch.allclose(
        split, whole, rtol=1e-4, atol=1e-5
    )
    if not same:
        raise ValueError(
            f"{type(module).__name__}.smoothlearn_first_linear does not reproduce the "
            "module: rest(linear(x)) != module(x)"
        )
