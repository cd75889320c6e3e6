"""The base classifier's network as certification sees it.

The engine and the strategies see the fitted torch module through
:class:`FlatInputNetwork`: flat float32 inputs in, class scores out. This
module is also the one place that

* takes a module's first output where it returns a tuple (:func:`first_output`,
  skorch's convention for modules returning extra values, defined below both
  this module and :mod:`smoothlearn.first_layer`);
* lays a convolutional module out for fast inference (channels-last copy);
* runs the base classifier at its precision (:data:`PRECISIONS`: fp32, or
  bf16 / fp16 under autocast) and, if asked, compiled: both are part of what
  the base classifier is, so every pass of a call goes through :meth:`logits`
  (or the counting kernel's fused first layer, which is off at reduced
  precision and when compiled);
* checks that a module outputs one score per class (:func:`check_output_size`).

How a network is built and trained (skorch, the noise) lives with the
estimator, in :mod:`smoothlearn.estimators._noisy_net`; first-layer reuse in
:mod:`smoothlearn.first_layer`.
"""

import contextlib
import copy

import numpy as np
import torch

from .first_layer import find_first_linear
from .utils._torch import first_output

__all__ = [
    "PRECISIONS",
    "FlatInputNetwork",
    "check_output_size",
    "first_output",
    "network_arithmetic",
]

#: The precisions a base classifier runs at: the name and its autocast dtype
#: (None: the module's own float32 passes, no autocast).
PRECISIONS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def network_arithmetic(precision="fp32", compile=False):
    """How the base network computes, as a suffix of a smoothing's description.

    Empty for the default (float32, eager), so the descriptions, memory keys
    and checkpoints of such runs stay what they were; otherwise
    ``" precision=bf16"`` and/or ``" compile=..."``: another base classifier,
    another smoothed classifier.

    Examples
    --------
    >>> network_arithmetic("bf16", {"mode": "max-autotune"})
    " precision=bf16 compile={'mode': 'max-autotune'}"
    """
    out = "" if precision == "fp32" else f" precision={precision}"
    if compile:
        shown = True if compile is True else dict(sorted(dict(compile).items()))
        out += f" compile={shown!r}"
    return out


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
    precision : {'fp32', 'bf16', 'fp16'}, default='fp32'
        The module's passes run under :func:`torch.autocast` to this dtype
        (``'fp32'``: no autocast); scores come back as float32. At reduced
        precision there is no first-layer reuse: the base classifier is the
        whole network at that precision, one function of the noisy input.
    compile : bool or dict, default=False
        Run the module through :func:`torch.compile` (a dict: its keyword
        arguments; ``dynamic=True`` unless given, so a count's smaller last
        batch is not a new graph), compiled on first use in each process.
        No first-layer reuse either: the compiled network is the base
        classifier.
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
        precision="fp32",
        compile=False,
    ):
        if precision not in PRECISIONS:
            raise ValueError(
                f"precision must be one of {sorted(PRECISIONS)}; got {precision!r}"
            )
        self.precision, self.compile = precision, compile
        self.module = _for_inference(module, device, precision)
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
        self._compiled = None

    def __getstate__(self):
        # a worker finds its own split (a user's smoothlearn_first_linear may
        # return callables that do not pickle), measures its own device's
        # free memory and compiles its own graph
        return {
            **self.__dict__,
            "_first_linear": None,
            "_batch_sizes": {},
            "_compiled": None,
        }

    def autocast(self):
        """The context the module's passes run in: autocast to the precision's
        dtype on the module's device, or nothing at fp32."""
        dtype = PRECISIONS[self.precision]
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=dtype)

    def _forward(self, x, **kwargs):
        if not self.compile:
            return self.module(x, **kwargs)
        if self._compiled is None:
            options = {} if self.compile is True else dict(self.compile)
            options.setdefault("dynamic", True)
            self._compiled = torch.compile(self.module, **options)
        return self._compiled(x, **kwargs)

    @property
    def first_linear(self):
        """The module's :class:`~smoothlearn.first_layer.FirstLinear` split, or
        None (never at reduced precision or compiled: see the class docstring)."""
        if not self.reuse_first_layer or self.precision != "fp32" or self.compile:
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
        kwargs = {} if noise_level is None else {"noise_level": noise_level}
        with self.autocast():
            out = first_output(self._forward(x, **kwargs))
        if out.dtype in (torch.bfloat16, torch.float16):
            # autocast's output: exact in float32, as a fp32 network's scores
            # are (a float64 network's stay float64)
            out = out.float()
        if self.outputs_probabilities:
            return torch.log(out.clamp_min(torch.finfo(out.dtype).tiny))
        return out

    def probabilities(self, x_flat):
        out = self.logits(x_flat)
        if self.nonlinearity is None or self.outputs_probabilities:
            return torch.softmax(out, dim=-1)
        return self.nonlinearity(out)


def _for_inference(module, device, precision="fp32"):
    """The module as certification runs it: convolutions in channels-last.

    On the CPU, oneDNN's convolutions run 1.8-2.6x faster with their weights
    in channels-last (NHWC) layout (a user's small CNN on 1x28x28 inputs,
    ``benchmarks/bench_user_modules.py``); their outputs keep that layout, so
    the whole network follows. On a GPU, the tensor cores' bf16 / fp16
    convolutions take NHWC too (fp32 keeps its layout there). A copy is
    converted: the fitted module, which skorch may train further, keeps its
    own layout. Values are the same; float32 sums may be ordered differently.
    """
    has_conv = any(isinstance(m, torch.nn.Conv2d) for m in module.modules())
    on_cpu = torch.device(device).type == "cpu"
    if not has_conv or not (on_cpu or precision != "fp32"):
        return module
    return copy.deepcopy(module).to(memory_format=torch.channels_last)
