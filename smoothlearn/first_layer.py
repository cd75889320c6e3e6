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
In order, the first that applies and passes the numerical check:

* Any module can define ``smoothlearn_first_linear(self)`` returning
  ``(linear, rest)`` with ``self(x) == rest(linear(x))`` for inputs ``x`` as the
  module takes them (``linear`` an ``nn.Linear`` on flattened inputs or an
  ``nn.Conv2d`` on image inputs). It may return None to opt out. The built-in
  MLP and CNN do. A hook that takes an argument is given the input shape
  (:class:`~smoothlearn.denoisers.DenoisedNetwork` uses it to split the network
  behind its denoiser). A wrong hook raises rather than giving wrong counts.
* ``nn.Sequential`` whose first layers are ``[nn.Flatten()] + nn.Linear`` or a
  ``nn.Conv2d``: detected without tracing.
* Any module that ``torch.fx`` can trace, whose input goes only through
  reshapes (``flatten``, ``view``, ``reshape``, ``nn.Flatten``) into one
  ``nn.Linear`` or ``nn.Conv2d`` and is not used again: split into that map
  and the rest of the traced graph (:func:`split_traced`).
* Any other module, by running it (:func:`split_probed`): hooks find the
  first affine layer that runs and what it is given on probe inputs; it must
  run once per forward and see the module's input reshaped, after at most an
  elementwise ``a * x + b`` (a normalisation constant, folded into the map),
  and the rest of the module is run with that layer's output injected. So
  ``x.reshape(len(x), -1)``, which torch.fx cannot trace, or ``(x - mean) /
  std`` in front of the first layer, still reuse it.

Every split is checked on random inputs (:func:`_unusable`): the rest of the
network applied to the map's response must reproduce the module. Where none
applies or passes, the plain path is taken and the ``smoothlearn`` logger says
why at DEBUG level.

Networks without a linear first map take the plain path, and so do those
whose split :func:`why_reuse_is_slower` finds slower than the plain path (a
narrow first Linear; a first convolution on the CPU, where convolutions run in
channels-last layout).
"""

import copy
import inspect
import itertools
import logging
import operator
import threading

import numpy as np
import torch
import torch.fx
import torch.nn.functional as F
from torch import nn

from .utils._torch import first_output

__all__ = [
    "FirstLinear",
    "find_first_linear",
    "split_probed",
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
        (a traced split); None: ``layer_shape``, else flattened for a Linear
        and ``input_shape`` for a Conv2d.
    layer_shape : tuple of int, default=None
        The shape of one input as ``linear`` takes it (a probed split).
    front : (Tensor, Tensor), default=None
        ``(a, b)``, each of ``n_features``: ``linear`` sees ``a * x + b``
        (a normalisation in front of it, folded into the map); None: ``x``.
    """

    def __init__(
        self, linear, rest, input_shape, reshape=None, layer_shape=None, front=None
    ):
        self.linear = linear
        self.rest = rest
        self.input_shape = tuple(input_shape)
        self.reshape = reshape
        self.layer_shape = None if layer_shape is None else tuple(layer_shape)
        self.front = front
        self.is_conv = isinstance(linear, nn.Conv2d)

    def _shaped(self, x_flat):
        if self.reshape is not None:
            return self.reshape(x_flat.reshape(-1, *self.input_shape))
        if self.layer_shape is not None:
            return x_flat.reshape(-1, *self.layer_shape)
        if self.is_conv:
            return x_flat.reshape(-1, *self.input_shape)
        return x_flat.reshape(len(x_flat), -1)

    def apply(self, x_flat):
        """``L x`` (with bias) for flat inputs."""
        if self.front is not None:
            scale, shift = self.front
            x_flat = torch.addcmul(shift, x_flat, scale)
        return self.linear(self._shaped(x_flat))

    def apply_linear_part(self, z_flat):
        """``L z`` without the bias: the response to a noise draw."""
        lin = self.linear
        if self.front is not None:
            z_flat = z_flat * self.front[0]
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
        self.common, self.factor, basis, stretch = parts
        m, d = centres.shape
        self.Lx = first.apply(centres)[:, None]  # (m, 1, *hidden)
        self.hidden_shape = self.Lx.shape[2:]
        self.LB = self.columns = self.folded = None
        if basis is not None:
            k = basis.shape[2]
            # (L B_i) diag(stretch_i) for every input: (m, k, hidden)
            LB = first.apply_linear_part(basis.transpose(1, 2).reshape(m * k, d))
            self.LB = LB.reshape(m, k, -1) * stretch[:, :, None]
            self.basis, self.k = basis, k
            hidden = self.LB.shape[2]
            if k * (d + hidden) > d * hidden:
                # so many directions (a dense scale) that B_i^T z then (L B_i)
                # costs more per draw than L S_i z itself: fold each input's
                # whole map, (L S_i)^T = factor_i L^T + B_i (L B_i stretch_i)^T,
                # (m, d, hidden) as LB was, and a draw costs what the plain
                # first layer does (dense RANCER on an MLP counted at 3.5x a
                # diagonal scale's time before)
                eye = torch.eye(d, dtype=centres.dtype, device=centres.device)
                transposed = first.apply_linear_part(eye).reshape(d, hidden)
                self.folded = torch.baddbmm(
                    self.factor.reshape(m, 1, 1) * transposed, basis, self.LB
                )
                self.LB = None
            elif 4 * k <= d:
                # a few directions per input: every input's B_i^T z in one
                # product per window (m k columns) instead of m products of k
                # columns each, which run at a fraction of the matrix units' rate
                self.columns = basis.permute(1, 0, 2).reshape(d, m * k)
        elif self.factor is not None:  # per-input isotropic: s_i L z
            self.factor = self.factor.reshape(m, 1, *([1] * len(self.hidden_shape)))

    def window_key(self):
        """What :meth:`window` depends on besides the window's draws (the map
        and the common scale), for keeping it across counts; None where it
        also depends on the inputs (a low-rank part, a folded map)."""
        if self.folded is not None or self.LB is not None:
            return None
        common = None if self.common is None else self.common.cpu().numpy().tobytes()
        return id(self.first), common

    def window(self, z):
        """The map's response to the window, shared by every input; with a
        low-rank part, also every input's coordinates ``B_i^T z``."""
        if self.folded is not None:
            return None
        if self.LB is not None:
            Lz = self.first.apply_linear_part(z).reshape(len(z), -1)  # (w, hidden)
            return Lz, None if self.columns is None else z @ self.columns
        scaled = z if self.common is None else z * self.common
        return self.first.apply_linear_part(scaled)[None]

    def part(self, shared, a, b):
        """What :meth:`window` shares, for the window's rows ``[a, b)``."""
        if shared is None:
            return None
        if self.LB is not None:
            Lz, coordinates = shared
            return Lz[a:b], None if coordinates is None else coordinates[a:b]
        return shared[:, a:b]

    def batch(self, size):
        """An empty forward batch of ``size`` first-layer responses for
        :meth:`inputs` to write into; None after a convolution, whose
        responses keep the layout the rest of the network runs fastest in
        (a packed batch's pieces are then joined, :mod:`smoothlearn.counting`)."""
        if self.first.is_conv:
            return None
        return self.Lx.new_empty((size, *self.hidden_shape))

    def inputs(self, i0, i1, z, shared, out=None):
        """The first layer's response ``L x_i + L(S_i z)`` for inputs ``i0:i1``
        and the window's rows ``z``: what the rest of the network takes,
        input-major; written into ``out`` where given (rows of :meth:`batch`)."""
        g, w = i1 - i0, len(z)
        dest = None if out is None else out.view(g, w, -1)
        if self.folded is not None:
            hidden = torch.baddbmm(
                self.Lx[i0:i1].reshape(g, 1, -1),
                z.expand(g, *z.shape),
                self.folded[i0:i1],
                out=dest,
            )
            hidden = hidden.reshape(g, w, *self.hidden_shape)
        elif self.LB is None:
            if self.factor is None:
                hidden = torch.add(self.Lx[i0:i1], shared, out=dest)
            else:
                hidden = torch.addcmul(
                    self.Lx[i0:i1], self.factor[i0:i1], shared, out=dest
                )
        else:
            Lz, coordinates = shared
            k = self.k
            if coordinates is None:
                coef = torch.einsum("wd,gdk->gwk", z, self.basis[i0:i1])
            else:
                coef = coordinates[:, i0 * k : i1 * k].reshape(w, g, k).transpose(0, 1)
            # L x_i + factor_i L z + (L B_i stretch_i) B_i^T z, the last
            # accumulated into the first two by one batched product
            base = torch.addcmul(
                self.Lx[i0:i1].reshape(g, 1, -1), self.factor[i0:i1, None, None], Lz
            )
            hidden = torch.baddbmm(base, coef, self.LB[i0:i1], out=dest)
            hidden = hidden.reshape(g, w, *self.hidden_shape)
        return hidden.reshape(-1, *self.hidden_shape)

    def forward(self, hidden, owners):
        """Class scores of the rest of the network on first-layer responses of
        any inputs (``owners``, each row's input, is not needed here)."""
        return first_output(self.first.rest(hidden))


def find_first_linear(
    module, input_shape, n_features, *, when_faster=False, device="cpu"
):
    """The :class:`FirstLinear` split of ``module``, or None for the plain path.

    In order: the module's ``smoothlearn_first_linear`` hook (a wrong one
    raises), a Sequential's first layers, a ``torch.fx`` trace, probes of the
    forward (:func:`split_probed`); the first split that reproduces the module
    on random inputs is taken. With ``when_faster``, a split is not used where
    :func:`why_reuse_is_slower` gives a reason on ``device``. Every reason for
    the plain path is logged at DEBUG level on the ``smoothlearn`` logger.
    """
    name = type(module).__name__
    hook = getattr(module, "smoothlearn_first_linear", None)
    if callable(hook):
        split = hook(tuple(input_shape)) if _takes_an_argument(hook) else hook()
        if split is None:
            logger.debug("plain path (no first-layer reuse): %s opts out", name)
            return None
        linear, rest = split
        if not isinstance(linear, (nn.Linear, nn.Conv2d)):
            raise TypeError(
                "smoothlearn_first_linear must return an nn.Linear or nn.Conv2d "
                f"first; got {type(linear).__name__}"
            )
        found = FirstLinear(linear, rest, input_shape)
        reason = _unusable(module, found, input_shape, n_features)
        if reason is not None:
            raise ValueError(
                f"{name}.smoothlearn_first_linear does not reproduce the module: "
                f"{reason}"
            )
        return _when_faster(found, name, when_faster, device)
    reasons = []
    for attempt in (_sequential_split, _traced_split, split_probed):
        found = attempt(module, input_shape, device)
        if isinstance(found, FirstLinear):
            found = _checked(module, found, input_shape, n_features)
        if isinstance(found, FirstLinear):
            return _when_faster(found, name, when_faster, device)
        reasons.append(found)
    logger.debug(
        "plain path (no first-layer reuse) for %s: %s", name, "; ".join(reasons)
    )
    return None


def _takes_an_argument(hook):
    try:
        parameters = inspect.signature(hook).parameters.values()
    except (TypeError, ValueError):  # a callable without a signature
        return False
    return any(
        p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
        for p in parameters
    )


def _when_faster(found, name, when_faster, device):
    reason = why_reuse_is_slower(found.linear, device) if when_faster else None
    if reason is not None:
        logger.debug("plain path (no first-layer reuse) for %s: %s", name, reason)
        return None
    return found


def _checked(module, found, input_shape, n_features):
    """``found``, or why it does not reproduce ``module``."""
    reason = _unusable(module, found, input_shape, n_features)
    return found if reason is None else f"{type(module).__name__}: {reason}"


def _sequential_split(module, input_shape, device):
    if not isinstance(module, nn.Sequential):
        return f"{type(module).__name__} is no nn.Sequential"
    split = split_sequential(module)
    if split is None:
        return "the nn.Sequential does not start with a linear map"
    return FirstLinear(*split, input_shape)


def _traced_split(module, input_shape, device):
    traced = split_traced(module)
    if isinstance(traced, str):
        return traced
    linear, rest, reshape = traced
    return FirstLinear(linear, rest, input_shape, reshape)


def split_probed(module, input_shape, device="cpu"):
    """The split of any module whose first affine layer sees its input through
    reshapes and an elementwise affine map, found by running it.

    No tracing: forward pre-hooks on every ``nn.Linear`` and ``nn.Conv2d``
    record which runs first and what it is given, on probe inputs. The split
    is accepted only if, on every probe,

    * that layer runs once per forward, on one tensor;
    * its input is the module's input in the same order (a reshape) after
      ``a * x + b`` elementwise (a normalisation constant, or nothing), with
      ``a`` and ``b`` read off the all-zeros and all-ones probes;

    and the rest of the module, run with that layer's output injected
    (:class:`_Injected`), reproduces the module on random probes
    (:func:`_unusable`, at the caller). So a forward written with ``len(x)``,
    ``x.size(0)``, ``x.view``, ``torch.flatten``, an ``nn.Flatten`` attribute
    or a normalisation in front splits, whatever Python surrounds it.

    Returns
    -------
    FirstLinear or str
        The split, or a sentence saying why there is none.
    """
    name = type(module).__name__
    layers = [m for m in module.modules() if isinstance(m, (nn.Linear, nn.Conv2d))]
    if not layers:
        return f"{name} has no nn.Linear or nn.Conv2d"
    d = int(np.prod(input_shape))
    param = next(module.parameters(), None)
    device = param.device if param is not None else torch.device(device)
    gen = torch.Generator().manual_seed(0)
    probes = [
        torch.zeros(2, d),
        torch.ones(2, d),
        2.0 * torch.randn(2, d, generator=gen) + 0.5,
        torch.rand(2, d, generator=gen),
    ]
    seen = []
    for x in probes:
        calls = _layer_calls(module, layers, x.to(device).reshape(-1, *input_shape))
        if isinstance(calls, str):
            return f"{name}: {calls}"
        seen.append(calls)
    first = seen[0][0][0]
    inputs = []
    for calls in seen:
        if calls[0][0] is not first:
            return f"{name}'s first affine layer depends on its input"
        if sum(layer is first for layer, _ in calls) != 1:
            return f"{name}'s first affine layer runs more than once per forward"
        given = calls[0][1]
        if given is None:
            return f"{name}'s first affine layer takes more than one tensor"
        if given.numel() != 2 * d or given.shape[0] != 2:
            return (
                f"{name}'s first affine layer sees {tuple(given.shape[1:])} per "
                f"input, not the input's {d} values"
            )
        inputs.append(given.reshape(2, d).double().cpu())
    shift = inputs[0][0]
    scale = inputs[1][0] - shift
    for x, seen_by_layer in zip(probes[2:], inputs[2:]):
        expected = x.double() * scale + shift
        tolerance = 1e-5 * (expected.abs() + shift.abs() + 1e-3)
        if not ((seen_by_layer - expected).abs() <= tolerance).all():
            return (
                f"{name}'s first affine layer does not see a reshape of its input "
                "(after at most an elementwise scale and shift)"
            )
    front = None
    if not (torch.equal(scale, torch.ones(d, dtype=scale.dtype)) and not shift.any()):
        front = (scale.float().to(device), shift.float().to(device))
    layer_shape = tuple(seen[0][0][1].shape[1:])
    rest = _Injected.rest_of(module, first, input_shape)
    return FirstLinear(first, rest, input_shape, layer_shape=layer_shape, front=front)


def _layer_calls(module, layers, x):
    """``[(layer, its input or None), ...]`` in the order ``module(x)`` calls them."""
    calls = []

    def record(layer, args, kwargs):
        single = len(args) == 1 and not kwargs and torch.is_tensor(args[0])
        calls.append((layer, args[0].detach().clone() if single else None))

    handles = [
        layer.register_forward_pre_hook(record, with_kwargs=True)
        for layer in set(layers)
    ]
    was_training = module.training
    module.eval()
    try:
        with torch.inference_mode():
            module(x)
    except Exception as exc:  # a module that cannot run on a probe has no split
        return f"it fails on a probe input: {exc}"
    finally:
        module.train(was_training)
        for handle in handles:
            handle.remove()
    if not calls:
        return "no affine layer runs"
    return calls


class _Injected(nn.Module):
    """Stands for a module's first affine layer in a copy of the module: returns
    the response it is given instead of computing one.

    :meth:`rest_of` makes the copy (sharing every parameter and buffer with the
    module, so it follows in-place updates of the weights) and returns its rest,
    ``rest(h)``: the copy run on a zero input of ``len(h)`` rows (an expanded
    view, no memory), with ``h`` standing for the layer's output. The response
    is held per thread.
    """

    def __init__(self):
        super().__init__()
        self._local = threading.local()

    def forward(self, *args, **kwargs):
        return self._local.value

    @classmethod
    def rest_of(cls, module, layer, input_shape):
        shared = {
            id(t): t for t in itertools.chain(module.parameters(), module.buffers())
        }
        copy_ = copy.deepcopy(module, shared)
        injected = cls()
        for path, found in module.named_modules(remove_duplicate=False):
            if found is layer:
                parent, _, attribute = path.rpartition(".")
                setattr(copy_.get_submodule(parent), attribute, injected)
        copy_.eval()
        zero = torch.zeros((1, *input_shape), device=_device_of(module))

        def rest(h):
            injected._local.value = h
            try:
                return first_output(copy_(zero.expand(len(h), *input_shape)))
            finally:
                injected._local.value = None

        return rest


def _device_of(module):
    param = next(itertools.chain(module.parameters(), module.buffers()), None)
    return param.device if param is not None else torch.device("cpu")


def _unusable(module, found, input_shape, n_features):
    """Why ``rest(linear(x))`` cannot stand for ``module(x)``, or None.

    Checked on two random inputs of each of two kinds (standard normal, and
    uniform on [0, 1) like pixels).
    """
    device = _device_of(module)
    gen = torch.Generator().manual_seed(0)
    x = torch.cat(
        [
            torch.randn(2, n_features, generator=gen),
            torch.rand(2, n_features, generator=gen),
        ]
    ).to(device)
    was_training = module.training
    module.eval()
    try:
        with torch.inference_mode():
            whole = first_output(module(x.reshape(-1, *input_shape)))
            shaped = found._shaped(x)
            wrong = shaped.dim() != 4 if found.is_conv else shaped.dim() < 2
            if wrong or len(shaped) != len(x):
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
