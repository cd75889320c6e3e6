"""Checks of SmoothedClassifier's parameters and inputs that scikit-learn's
parameter validation does not make: nested and network parameters by name,
the strategies the grid path can sample, image-shaped and grid inputs."""

import difflib

import numpy as np

from ..strategies import STRATEGIES, get_strategy
from ..training import TRAININGS, get_training
from ._noisy_net import DENOISER_PREFIX, NETWORK_PREFIXES, is_network_param

__all__ = [
    "check_grid_strategy",
    "check_nested_params",
    "check_network_param_names",
    "flatten_images",
    "on_grid",
]


def check_network_param_names(names, strategy, training):
    """Refuse, by name, a constructor argument that is no network parameter:
    a strategy's or training's own (which go on its object or through
    ``set_params``) or one without a known prefix."""
    current = {"strategy": strategy, "training": training}
    for name in names:
        for nested in ("strategy", "training"):
            if name.startswith(f"{nested}__"):
                key = name[len(nested) + 2 :]
                check_nested_params(nested, current[nested], {key: None})
                raise TypeError(
                    f"SmoothedClassifier got {name!r} as a constructor argument; "
                    f"a {nested}'s parameters go on its object "
                    f"({nested}=ANCER(kappa=2.0), say) or through "
                    f"set_params({name}=...), as in a grid search."
                )
        if not is_network_param(name):
            raise TypeError(
                f"SmoothedClassifier got an unexpected parameter {name!r}; "
                f"network parameters take a prefix: "
                + ", ".join(f"{p}__" for p in (*NETWORK_PREFIXES, DENOISER_PREFIX))
            )


def check_nested_params(name, current, nested):
    """A ValueError naming the strategies (or trainings) a nested parameter
    belongs to, where ``current`` has no such parameter: ``strategy__kappa``
    with ``strategy='cohen'`` says that ``kappa`` is ANCER's and RANCER's."""
    registry = STRATEGIES if name == "strategy" else TRAININGS
    resolve = get_strategy if name == "strategy" else get_training
    try:
        target = resolve(current)
        valid = set(target.get_params(deep=False))
    except (ValueError, TypeError, AttributeError):
        return  # an unknown name or object: the usual validation says so
    for key in nested:
        param = key.split("__")[0]
        if param in valid:
            continue
        owners = sorted(
            {
                option
                for option, cls in registry.items()
                if param in cls().get_params(deep=False)
                and getattr(cls(), "name", option) == option  # no aliases
            }
        )
        shown = f"{name}={current!r}" if isinstance(current, str) else repr(target)
        takes = ", ".join(sorted(valid)) if valid else "none"
        if owners:
            where = "it belongs to " + ", ".join(f"{name}={o!r}" for o in owners)
            fix = (
                f"; set {name}={owners[0]!r} with it, e.g. set_params({name}="
                f"{owners[0]!r}, {name}__{key}=...), or in a grid "
                f"{{'{name}': [{owners[0]!r}], '{name}__{key}': [...]}}"
            )
        else:
            close = difflib.get_close_matches(param, sorted(valid), n=1)
            where = f"did you mean {close[0]!r}" if close else ""
            where = where or f"no {name} smoothlearn knows takes it"
            fix = ""
        raise ValueError(
            f"Invalid parameter {param!r} for {shown} ({name}__{key}; its "
            f"parameters: {takes}): {where}{fix}."
        )


def check_grid_strategy(grid, strategy):
    """Refuse, before any work, a strategy the grid path cannot sample exactly."""
    if grid is not None and not getattr(strategy, "on_grid", True):
        raise ValueError(
            f"strategy {strategy.name!r} has no exact sampler on the grid (rotated "
            "scales and mean offsets: round(S z / h) is not a product of "
            "one-dimensional laws); use grid=None with it, or cohen, isotropic_dd, "
            "ancer or ucan_pattern on the grid."
        )


def on_grid(X, grid):
    """``X`` checked on ``grid`` (or rounded to it), as float32 grid points."""
    shape = X.shape
    j = grid.indices(X.reshape(len(X), -1))
    if grid.off_grid == "raise":
        return X
    return (j * grid.step).astype(np.float32).reshape(shape)


def flatten_images(X):
    """``(X, image_shape)``: image-shaped inputs flattened for validation.

    scikit-learn's validation counts ``X.shape[1]`` as the features, which for
    ``(n, C, H, W)`` images would be the channels; flattened, every value is a
    feature. Flat inputs (data frames included) pass through with None.
    """
    if hasattr(X, "columns"):
        return X, None
    if not hasattr(X, "ndim"):  # lists and other array-likes
        try:
            X = np.asarray(X)
        except ValueError:  # ragged nested lists: validation will say so
            return X, None
    if X.ndim <= 2:
        return X, None
    X = np.asarray(X)
    return X.reshape(len(X), -1), tuple(X.shape[1:])
