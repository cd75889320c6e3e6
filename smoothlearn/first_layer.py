"""First-layer reuse: certify below the naive floor of n full forward passes.

When the base network starts with a linear map ``L`` (``nn.Linear`` or
``nn.Conv2d``, possibly after ``nn.Flatten``), ``L(x + S z) = L x + L(S z)``.
For a scale that is the same for every input the bank's response ``L(S z)`` is
computed once per window of draws and reused by every input; for per-input
isotropic scales ``L(s_i z) = s_i L z`` reuses ``L z``. Only the rest of the
network runs per noisy input. The counts are those of the same network on the
same draws: each input's count stays Binomial(n, p_x) with draws independent
of ``x`` (up to float32 rounding, which batched BLAS calls perturb anyway).

How the first linear map is found
---------------------------------
* Any module that ``torch.fx`` can trace, whose input goes only through
  reshapes (``flatten``, ``view``, ``reshape``, ``nn.Flatten``) into one
  ``nn.Linear`` or ``nn.Conv2d`` and is not used again: split into that map
  and the rest of the traced graph (:func:`split_traced`). A module whose
  first step is anything else (a normalisation, a sum with the input) is not
  split. Where tracing fails (data-dependent control flow), the plain path is
  taken and the ``smoothlearn`` logger says why at DEBUG level.
* ``nn.Sequential`` whose first layers are ``[nn.Flatten()] + nn.Linear`` or a
  ``nn.Conv2d``: detected without tracing.
* Any module can define ``smoothlearn_first_linear(self)`` returning
  ``(linear, rest)`` with ``self(x) == rest(linear(x))`` for inputs ``x`` as the
  module takes them (``linear`` an ``nn.Linear`` on flattened inputs or an
  ``nn.Conv2d`` on image inputs). It may return None to opt out. The built-in
  MLP and CNN do. The split is checked once on a random input; a wrong hook
  raises rather than giving wrong counts.

Networks without a linear first map take the plain path, and so do those
whose split :func:`why_reuse_is_slower` finds slower than the plain path (a
narrow first Linear; a first convolution on the CPU, where convolutions run in
channels-last layout).
"""

import logging
import operator

import torch
import torch.fx
import torch.nn.functional as F
from torch import nn

from .utils._torch import first_output

__all__ = [
    "FirstLinear",
    "find_first_linear",
    "split_sequential",
    "split_traced",
    "why_reuse_is_slower",
]

logger = logging.getLogger("smoothlearn")

#: Reshapes (and the shape queries they take) that may stand between the
#: input and the first linear map: they keep each input's values in order.
_RESHAPE_METHODS = {"view", "reshape", "flatten", "contiguous", "size", "dim"}
_RESHAPE_FUNCTIONS = {torch.flatten, torch.reshape}
#: Attributes read as ``x.shape``; any other (``x.T``, ``x.mT``) moves values.
_SHAPE_ATTRIBUTES = {"shape", "ndim"}


def _is_shape_query(node):
    if node.op == "call_method":
        return node.target in ("size", "dim")
    return (
        node.op == "call_function"
        and node.target is getattr
        and node.args[1] in _SHAPE_ATTRIBUTES
    )


def _is_reshape(node, module):
    if _is_shape_query(node):
        return True
    if node.op == "call_method":
        return node.target in _RESHAPE_METHODS
    if node.op == "call_function":
        if node.target is operator.getitem:  # only of a shape, never of values
            source = node.args[0]
            return isinstance(source, torch.fx.Node) and _is_shape_query(source)
        return node.target in _RESHAPE_FUNCTIONS
    if node.op == "call_module":
        return isinstance(module.get_submodule(node.target), nn.Flatten)
    return node.op == "get_attr"


def split_traced(module):
    """``(linear, rest, reshape)`` of a traceable module, or why it has none.

    The traced graph must run only reshapes (and shape queries) on its input
    before one ``nn.Linear`` or ``nn.Conv2d`` module, and use none of them
    after it. ``reshape`` maps the module's input to what ``linear`` takes;
    ``rest`` is the graph after ``linear``, taking its output.

    Returns
    -------
    tuple or str
        The split, or a sentence saying why there is none.
    """
    name = type(module).__name__
    try:
        traced = torch.fx.symbolic_trace(module)
    except Exception as exc:  # any tracing failure means: no split
        return f"torch.fx cannot trace {name}: {exc}"
    nodes = list(traced.graph.nodes)
    if sum(n.op == "placeholder" for n in nodes) != 1 or nodes[0].op != "placeholder":
        return f"{name}.forward does not take exactly one input"
    position = 1
    while position < len(nodes) and _is_reshape(nodes[position], traced):
        position += 1
    node = nodes[position]
    first = traced.get_submodule(node.target) if node.op == "call_module" else None
    if not isinstance(first, (nn.Linear, nn.Conv2d)):
        return f"{name}'s first operation on its input is {node.op} {node.target!r}"
    if len(node.args) != 1 or node.kwargs:
        return f"{name}'s first linear map takes more than its input"
    before, after = nodes[1:position], nodes[position + 1 : -1]
    try:
        reshape = _subgraph(traced, nodes[0], before, node.args[0])
        rest = _subgraph(traced, node, after, nodes[-1])
    except _SplitError as exc:
        return f"{name}: {exc}"
    return first, rest, reshape


class _SplitError(Exception):
    """A traced module that does not split at its first linear map."""


def _subgraph(traced, start, nodes, output):
    """A GraphModule computing ``output`` from ``start``'s value through ``nodes``."""
    graph = torch.fx.Graph()
    env = {start: graph.placeholder("x")}

    def copy(node):
        for arg in node.all_input_nodes:
            if arg in env:
                continue
            if arg.op != "get_attr":
                raise _SplitError("the input is used again after the first linear map")
            env[arg] = graph.node_copy(arg, env.__getitem__)
        env[node] = graph.node_copy(node, env.__getitem__)

    for node in nodes:
        copy(node)
    if output.op == "output":
        graph.output(torch.fx.map_arg(output.args[0], env.__getitem__))
    else:
        graph.output(env[output])
    return torch.fx.GraphModule(traced, graph)


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


#: Reuse pays when a first ``nn.Linear`` does at least this many
#: multiply-adds per output value (its fan-in): the fused path replaces them
#: by one addition plus a read of the shared response, and below this the
#: saved arithmetic no longer pays for the larger hidden tensors it moves.
REUSE_MIN_FAN_IN = 8


def why_reuse_is_slower(linear, device):
    """Why reusing ``linear``'s response would be slower than the plain path.

    A first ``nn.Conv2d`` on the CPU is not reused: there the engine runs
    convolutions in channels-last layout, whose plain path measured as fast or
    faster (user CNNs on 1x28x28: plain 1.14-1.22x faster than fused; on
    3x32x32: 0.93-1.19x, ``benchmarks/bench_user_modules.py``).

    Returns
    -------
    str or None
        The reason reuse is slower, None where it is faster.
    """
    if isinstance(linear, nn.Conv2d):
        if torch.device(device).type == "cpu":
            return "a first convolution on the CPU runs faster channels-last, unfused"
        return None
    if fan_in(linear) < REUSE_MIN_FAN_IN:
        return (
            f"the first map's fan-in {fan_in(linear)} is below {REUSE_MIN_FAN_IN}, "
            "where reuse is slower"
        )
    return None


def fan_in(linear):
    """Multiply-adds per output value of an ``nn.Linear`` or ``nn.Conv2d``."""
    if isinstance(linear, nn.Linear):
        return linear.in_features
    kh, kw = linear.kernel_size
    return linear.in_channels // linear.groups * kh * kw


class FirstLinear:
    """A network split as ``rest(linear(x))`` with the linear map's pieces.

    Parameters
    ----------
    linear : nn.Linear or nn.Conv2d
    rest : callable
    input_shape : tuple of int
        Shape of one input as the module takes it.
    reshape : callable, default=None
        Maps inputs shaped as the module takes them to what ``linear`` takes
        (a traced split); None: flattened for a Linear, ``input_shape`` for a
        Conv2d.
    """

    def __init__(self, linear, rest, input_shape, reshape=None):
        self.linear = linear
        self.rest = rest
        self.input_shape = tuple(input_shape)
        self.reshape = reshape
        self.is_conv = isinstance(linear, nn.Conv2d)

    def _shaped(self, x_flat):
        if self.reshape is not None:
            return self.reshape(x_flat.reshape(-1, *self.input_shape))
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

    def fused_response(self, centres, parts):
        """The network's class scores on ``x_i + S_i z`` through ``L x_i + L(S_i z)``.

        ``parts`` is the scale's :meth:`~smoothlearn.scale.Scale.shared_parts`,
        ``S_i z = factor_i (common * z) + B_i (stretch_i * B_i^T z)``: ``L x_i``
        and ``L B_i`` are computed once per input, ``L (common * z)`` once per
        window of draws for every input, so a draw costs the rest of the
        network plus O(k (d + hidden)) instead of a pass through ``L``.
        """
        return _FusedResponse(self, centres, parts)


class _FusedResponse:
    """Class scores of ``rest(L x_i + L(S_i z))`` (``FirstLinear.fused_response``)."""

    def __init__(self, first, centres, parts):
        self.first = first
        self.common, self.factor, self.basis, self.stretch = parts
        m, d = centres.shape
        self.Lx = first.apply(centres)[:, None]  # (m, 1, *hidden)
        self.hidden_shape = self.Lx.shape[2:]
        if self.basis is not None:
            k = self.basis.shape[2]
            # (L B_i) for every input: (m, k, hidden)
            LB = first.apply_linear_part(self.basis.transpose(1, 2).reshape(m * k, d))
            self.LB = LB.reshape(m, k, -1)
        elif self.factor is not None:  # per-input isotropic: s_i L z
            self.factor = self.factor.reshape(m, 1, *([1] * len(self.hidden_shape)))

    def window(self, z):
        """The map's response to the window, shared by every input."""
        if self.basis is not None:
            return self.first.apply_linear_part(z).reshape(len(z), -1)  # (w, hidden)
        scaled = z if self.common is None else z * self.common
        return self.first.apply_linear_part(scaled)[None]

    def scores(self, i0, i1, z, Lz):
        if self.basis is None:
            if self.factor is None:
                hidden = self.Lx[i0:i1] + Lz
            else:
                hidden = torch.addcmul(self.Lx[i0:i1], self.factor[i0:i1], Lz)
        else:
            coef = torch.einsum("wd,gdk->gwk", z, self.basis[i0:i1])
            coef = coef * self.stretch[i0:i1, None]
            hidden = self.factor[i0:i1, None, None] * Lz[None] + torch.einsum(
                "gwk,gkh->gwh", coef, self.LB[i0:i1]
            )
            hidden = self.Lx[i0:i1] + hidden.reshape(
                i1 - i0, len(z), *self.hidden_shape
            )
        out = self.first.rest(hidden.reshape(-1, *self.hidden_shape))
        return first_output(out)


def find_first_linear(
    module, input_shape, n_features, *, when_faster=False, device="cpu"
):
    """The :class:`FirstLinear` split of ``module``, or None for the plain path.

    In order: the module's ``smoothlearn_first_linear`` hook (a wrong one
    raises), a Sequential's first layers, a ``torch.fx`` trace. With
    ``when_faster``, a split is not used where :func:`why_reuse_is_slower`
    gives a reason on ``device``. Every reason for the plain path
    is logged at DEBUG level on the ``smoothlearn`` logger.
    """
    name = type(module).__name__
    hook = getattr(module, "smoothlearn_first_linear", None)
    declared = callable(hook)
    reshape = None
    if declared:
        split = hook()
    elif isinstance(module, nn.Sequential):
        split = split_sequential(module)
    else:
        traced = split_traced(module)
        if isinstance(traced, str):
            logger.debug("plain path (no first-layer reuse): %s", traced)
            return None
        *split, reshape = traced
    if split is None:
        logger.debug(
            "plain path (no first-layer reuse): %s does not start with a linear map",
            name,
        )
        return None
    linear, rest = split
    if not isinstance(linear, (nn.Linear, nn.Conv2d)):
        raise TypeError(
            "smoothlearn_first_linear must return an nn.Linear or nn.Conv2d first; "
            f"got {type(linear).__name__}"
        )
    found = FirstLinear(linear, rest, input_shape, reshape)
    reason = _unusable(module, found, input_shape, n_features)
    if reason is not None and declared:
        raise ValueError(
            f"{name}.smoothlearn_first_linear does not reproduce the module: {reason}"
        )
    if reason is None and when_faster:
        reason = why_reuse_is_slower(linear, device)
    if reason is not None:
        logger.debug("plain path (no first-layer reuse) for %s: %s", name, reason)
        return None
    return found


def _unusable(module, found, input_shape, n_features):
    """Why ``rest(linear(x))`` cannot stand for ``module(x)``, or None.

    Checked once on two random inputs.
    """
    param = next(module.parameters(), None)
    device = param.device if param is not None else "cpu"
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, n_features, generator=gen).to(device)
    was_training = module.training
    module.eval()
    try:
        with torch.inference_mode():
            whole = first_output(module(x.reshape(-1, *input_shape)))
            shaped = found._shaped(x)
            expected = 4 if found.is_conv else 2
            if shaped.dim() != expected or len(shaped) != 2:
                return f"the first map's input has shape {tuple(shaped.shape)}"
            split = first_output(found.rest(found.apply(x)))
    except Exception as exc:  # a split that cannot run is no split
        return f"the split fails on a random input: {exc}"
    finally:
        module.train(was_training)
    if split.shape != whole.shape or not torch.allclose(
        split, whole, rtol=1e-4, atol=1e-5
    ):
        return "rest(linear(x)) != module(x) on a random input"
    return None
