"""Built-in base networks, sized from the data when ``module=None``."""

import numpy as np
from torch import nn

from ..first_layer import split_sequential

__all__ = ["MLP", "SmallCNN", "default_module_for"]


class MLP(nn.Module):
    """A ReLU multilayer perceptron on flattened inputs.

    Parameters
    ----------
    n_features : int
        Size of the flattened input.
    n_classes : int
    hidden_units : tuple of int, default=(256, 256)
    dropout : float, default=0.0
    """

    def __init__(self, n_features, n_classes, hidden_units=(256, 256), dropout=0.0):
        super().__init__()
        layers = [nn.Flatten()]
        width = n_features
        for units in hidden_units:
            layers += [nn.Linear(width, units), nn.ReLU()]
            if dropout:
                layers.append(nn.Dropout(dropout))
            width = units
        layers.append(nn.Linear(width, n_classes))
        self.layers = nn.Sequential(*layers)

    def forward(self, X):
        return self.layers(X)

    def smoothlearn_first_linear(self):
        """``(first linear map, rest)``: lets certification reuse the first layer."""
        return split_sequential(self.layers)


class SmallCNN(nn.Module):
    """A small convolutional network for image inputs shaped (C, H, W).

    Two 3x3 convolutions, each followed by 2x2 max pooling, then a hidden dense
    layer. Kept light (about 1.2 M multiply-adds on 28x28) because
    certification runs it n = 100,000 times per input on a CPU.

    Parameters
    ----------
    in_channels, height, width : int
    n_classes : int
    channels : tuple of int, default=(16, 32)
    hidden_units : int, default=128
    """

    def __init__(
        self, in_channels, height, width, n_classes, channels=(16, 32), hidden_units=128
    ):
        super().__init__()
        c1, c2 = channels
        h, w = max(1, height // 4), max(1, width // 4)
        self.layers = nn.Sequential(
            nn.Conv2d(in_channels, c1, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2) if height >= 2 and width >= 2 else nn.Identity(),
            nn.Conv2d(c1, c2, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveMaxPool2d((h, w)),
            nn.Flatten(),
            nn.Linear(c2 * h * w, hidden_units),
            nn.ReLU(),
            nn.Linear(hidden_units, n_classes),
        )

    def forward(self, X):
        return self.layers(X)

    def smoothlearn_first_linear(self):
        """``(first linear map, rest)``: lets certification reuse the first layer."""
        return split_sequential(self.layers)


def default_module_for(input_shape, n_classes):
    """The built-in module class and its sizing parameters for one input shape.

    An MLP for flat (and any non-image) inputs, a :class:`SmallCNN` for
    image-shaped inputs ``(C, H, W)``.
    """
    if len(input_shape) == 3:
        c, h, w = input_shape
        return SmallCNN, {
            "in_channels": c,
            "height": h,
            "width": w,
            "n_classes": n_classes,
        }
    return MLP, {"n_features": int(np.prod(input_shape)), "n_classes": n_classes}
