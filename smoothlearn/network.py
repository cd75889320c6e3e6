"""The base classifier's network as certification sees it.

The engine and the strategies see the fitted torch module through
:class:`FlatInputNetwork`: flat float32 inputs in, class scores out. This
module is also the one place that

* takes a module's first output where it returns a tuple (:func:`first_output`,
  skorch's convention for modules returning extra values, defined below both
  this module and :mod:`smoothlearn.first_layer`);
* lays a convolutional module out for fast CPU inference (channels-last copy);
* checks that a module outputs one score per class (:func:`check_output_size`).

How a network is built and trained (skorch, the noise) lives with the
estimator, in :mod:`smoothlearn.estimators._noisy_net`; first-layer reuse in
:mod:`smoothlearn.first_layer`.
"""

import copy

import numpy as np
import torch

from .first_layer import find_first_linear
from .utils._torch import first_output

__all__ = ["FlatInputNetwork", "check_output_size", "first_output"]


def check_output_size(module, X_one, n_classes, device="cpu"):
    """Raise a ValueError unless ``module`` outputs one score per class.

    Parameters
    ----------
    module : torch.nn.Module
    X_one : ndarray
        One input (a batch of one) as the module takes it.
    n_classes : int
    device : str or torch.device, default='cpu'
    """
    with torch.inference_mode():
        module.eval()
        out = first_output(module(torch.as_tensor(X_one, device=device)))
    if out.ndim != 2 or out.shape[1] != n_classes:
        raise ValueError(
            f"the module must output one score per class: expected shape (batch, "
            f"{n_classes}), got {tuple(out.shape)}."
        )


class FlatInputNetwork:
    """The base classifier as the engine and the strategies see it.

    Wraps a torch module: inputs are flat float32 tensors of shape
    ``(m, n_features)`` reshaped to ``input_shape`` on the way in; the output is
    the module's first output (logits, or probabilities under an NLL criterion).

    Parameters
    ----------
    module : torch.nn.Module
    input_shape : tuple of int
        Shape of one input as the module takes it.
    n_classes : int
    device : str or torch.device
    nonlinearity : callable, default=None
        Maps module outputs to class probabilities (skorch's predict
        nonlinearity); softmax when None.
    reuse_first_layer : 'auto' or bool, default='auto'
        Reuse the first linear map's response to the noise bank when the
        module starts with one (see :mod:`smoothlearn.first_layer`): ``'auto'``
        where that is faster, True wherever a split exists, False never.
    outputs_probabilities : bool, default=False
        The module outputs class probabilities (skorch's convention under an
        ``NLLLoss`` criterion): :meth:`logits` then returns their logarithm,
        so losses, Hessians and softmaxes taken of it are the right ones.
    """

    def __init__(
        self,
        module,
        input_shape,
        n_classes,
        device="cpu",
        nonlinearity=None,
        reuse_first_layer="auto",
        outputs_probabilities=False,
    ):
        self.module = _for_inference(module, device)
        self.outputs_probabilities = outputs_probabilities
        self.input_shape = tuple(input_shape)
        self.n_features = int(np.prod(self.input_shape))
        self.n_classes = n_classes
        self.device = torch.device(device)
        self.nonlinearity = nonlinearity
        self.reuse_first_layer = reuse_first_layer
        self._first_linear = None
        #: How the module wants each input's noise level (a diffusion denoiser
        #: in front: :func:`smoothlearn.denoisers.noise_levels`), or None.
        self.noise_level_rule = getattr(self.module, "noise_level_rule", None)
        self._batch_sizes = {}

    def __getstate__(self):
        # a worker finds its own split (a user's smoothlearn_first_linear may
        # return callables that do not pickle) and measures its own device's
        # free memory
        return {**self.__dict__, "_first_linear": None, "_batch_sizes": {}}

    @property
    def first_linear(self):
        """The module's :class:`~smoothlearn.first_layer.FirstLinear` split, or None."""
        if not self.reuse_first_layer:
            return None
        if self._first_linear is None:
            found = find_first_linear(
                self.module,
                self.input_shape,
                self.n_features,
                when_faster=self.reuse_first_layer == "auto",
                device=self.device,
            )
            self._first_linear = found if found is not None else False
        return self._first_linear or None

    def inputs(self, X):
        """``X`` (m, n_features) as a contiguous float32 tensor on the device."""
        return torch.as_tensor(
            np.ascontiguousarray(X, dtype=np.float32), device=self.device
        )

    def batch_size_for(self, batch_size):
        """The forward batch to run instead of ``batch_size``: smaller where a
        module sized to memory (a diffusion model in front of the classifier)
        would not fit the GPU's free memory with ``batch_size`` inputs
        (:func:`smoothlearn.denoisers.batch_that_fits`); ``batch_size``
        itself elsewhere (on a CPU there is no such limit). Measured once per
        batch size."""
        if self.device.type != "cuda" or not getattr(
            self.module, "sized_to_memory", False
        ):
            return batch_size
        if batch_size not in self._batch_sizes:
            from .denoisers import batch_that_fits, cuda_memory_figures

            self._batch_sizes[batch_size] = batch_that_fits(
                batch_size, *cuda_memory_figures(self)
            )
        return self._batch_sizes[batch_size]

    def logits(self, x_flat, noise_level=None):
        """Class scores whose softmax is the class probabilities.

        The module's first output, or its logarithm where the module outputs
        probabilities (argmax unchanged). ``noise_level`` (one per row) goes
        to a module that takes it (``noise_level_rule`` not None).
        """
        x = x_flat.reshape(-1, *self.input_shape)
        if noise_level is None:
            out = first_output(self.module(x))
        else:
            out = first_output(self.module(x, noise_level=noise_level))
        if self.outputs_probabilities:
            return torch.log(out.clamp_min(torch.finfo(out.dtype).tiny))
        return out

    def probabilities(self, x_flat):
        out = self.logits(x_flat)
        if self.nonlinearity is None or self.outputs_probabilities:
            return torch.softmax(out, dim=-1)
        return self.nonlinearity(out)


def _for_inference(module, device):
    """The module as certification runs it: convolutions in channels-last.

    On the CPU, oneDNN's convolutions run 1.8-2.6x faster with their weights
    in channels-last (NHWC) layout (a user's small CNN on 1x28x28 inputs,
    ``benchmarks/bench_user_modules.py``); their outputs keep that layout, so
    the whole network follows. A copy is converted: the fitted module, which
    skorch may train further, keeps its own layout. Values are the same;
    float32 sums may be ordered differently.
    """
    has_conv = any(isinstance(m, torch.nn.Conv2d) for m in module.modules())
    if not has_conv or torch.device(device).type != "cpu":
        return module
    return copy.deepcopy(module).to(memory_format=torch.channels_last)
