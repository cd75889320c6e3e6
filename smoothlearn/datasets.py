"""Loading data for the command line and the examples (offline only).

* scikit-learn's digits (8x8 images, shipped with scikit-learn);
* an ``.npz`` file holding arrays ``X`` and ``y`` (and optionally
  ``X_test``/``y_test``);
* a folder of MNIST-format idx files (``train-images-idx3-ubyte[.gz]`` or
  ``train-images.idx3-ubyte[.gz]``,
  ``train-labels-idx1-ubyte[.gz]``, ``t10k-...``): MNIST, or Fashion-MNIST as
  Debian's ``dataset-fashion-mnist`` installs it under
  ``/usr/share/datasets/fashion-mnist``.

Pixel data are scaled to [0, 1].
"""

import gzip
import os
from dataclasses import dataclass

import numpy as np

__all__ = ["Dataset", "load_dataset", "read_idx"]


@dataclass
class Dataset:
    """A train/test split. ``X_*`` flat (n, d) or images (n, C, H, W)."""

    name: str
    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    image_shape: tuple = None

    def as_images(self):
        """The same data shaped (n, C, H, W) (needs a known image shape)."""
        if self.image_shape is None:
            raise ValueError(f"dataset {self.name!r} has no image shape")
        shape = (-1, *self.image_shape)
        return Dataset(
            self.name,
            self.X_train.reshape(shape),
            self.y_train,
            self.X_test.reshape(shape),
            self.y_test,
            self.image_shape,
        )


def read_idx(path):
    """Read one idx file (optionally gzipped) into a numpy array."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rb") as handle:
        data = handle.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise ValueError(f"{path} is not an idx file")
    dtypes = {
        0x08: np.uint8,
        0x09: np.int8,
        0x0B: ">i2",
        0x0C: ">i4",
        0x0D: ">f4",
        0x0E: ">f8",
    }
    if data[2] not in dtypes:
        raise ValueError(f"{path}: unknown idx data type {data[2]:#x}")
    ndim = data[3]
    shape = tuple(
        int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)
    )
    array = np.frombuffer(data, dtype=dtypes[data[2]], offset=4 + 4 * ndim)
    if array.size != int(np.prod(shape)):
        raise ValueError(f"{path}: truncated idx file")
    return array.reshape(shape)


def _find(folder, stem):
    """The file of ``stem`` (e.g. ``train-images-idx3-ubyte``) in ``folder``.

    Both common namings: ``train-images-idx3-ubyte`` (LeCun's) and
    ``train-images.idx3-ubyte`` (a dot before ``idx``), each optionally
    gzipped.
    """
    dotted = stem.replace("-idx", ".idx")
    for name in (stem, stem + ".gz", dotted, dotted + ".gz"):
        path = os.path.join(folder, name)
        if os.path.exists(path):
            return path
    raise ValueError(
        f"{folder} has no {stem}[.gz] (nor {dotted}[.gz]): not an MNIST-format folder"
    )


def _load_idx_folder(folder):
    parts = {}
    for split, prefix in (("train", "train"), ("test", "t10k")):
        images = read_idx(_find(folder, f"{prefix}-images-idx3-ubyte"))
        labels = read_idx(_find(folder, f"{prefix}-labels-idx1-ubyte"))
        if len(images) != len(labels):
            raise ValueError(f"{folder}: {prefix} images and labels differ in count")
        parts[split] = (images, labels.astype(np.int64))
    (X_tr, y_tr), (X_te, y_te) = parts["train"], parts["test"]
    h, w = X_tr.shape[1:]
    scale = 255.0 if X_tr.dtype == np.uint8 else 1.0
    return Dataset(
        os.path.basename(os.path.normpath(folder)),
        (X_tr.reshape(len(X_tr), -1) / scale).astype(np.float32),
        y_tr,
        (X_te.reshape(len(X_te), -1) / scale).astype(np.float32),
        y_te,
        (1, h, w),
    )


def _split(name, X, y, test_size, random_state, image_shape=None):
    from sklearn.model_selection import train_test_split

    X_tr, X_te, y_tr, y_te = train_test_split(
        X, y, test_size=test_size, stratify=y, random_state=random_state
    )
    return Dataset(name, X_tr, y_tr, X_te, y_te, image_shape)


def load_dataset(source="digits", *, test_size=0.2, random_state=0):
    """Load a dataset by name or path.

    Parameters
    ----------
    source : str, default='digits'
        ``'digits'``, a path to an ``.npz`` file, or a folder of idx files.
    test_size : float, default=0.2
        Held-out share where the source has no test split of its own.
    random_state : int, default=0
        Seed of that split.

    Returns
    -------
    Dataset
    """
    if source == "digits":
        from sklearn.datasets import load_digits

        X, y = load_digits(return_X_y=True)
        X = (X / 16.0).astype(np.float32)
        return _split("digits", X, y, test_size, random_state, (1, 8, 8))
    if os.path.isdir(source):
        return _load_idx_folder(source)
    if os.path.isfile(source) and source.endswith(".npz"):
        with np.load(source, allow_pickle=False) as data:
            if "X" not in data or "y" not in data:
                raise ValueError(f"{source} must hold arrays named X and y")
            X, y = data["X"].astype(np.float32), data["y"]
            name = os.path.splitext(os.path.basename(source))[0]
            if "X_test" in data and "y_test" in data:
                return Dataset(
                    name, X, y, data["X_test"].astype(np.float32), data["y_test"]
                )
        image_shape = tuple(X.shape[1:]) if X.ndim == 4 else None
        return _split(name, X, y, test_size, random_state, image_shape)
    raise ValueError(
        f"--data must be 'digits', an .npz file or a folder of idx files; "
        f"got {source!r}"
    )
