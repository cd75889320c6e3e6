"""Resumable certification: a log of finished blocks of inputs.

``SmoothedClassifier.certify(X, checkpoint=path)`` appends each finished block
of inputs to a JSON-lines file (flushed and fsynced) before going on. Run again
with the same path, it reads the log back, keeps the blocks whose inputs are
unchanged, and computes only the rest. The first line records the call's noise
key and a fingerprint of everything that determines a certificate (network
weights, strategy, noise, sigma, n0, n, alpha, radius_tolerance, the radius
of a sequential decision, classes): a log of another run is refused. The
memory step runs once after all blocks, over the whole call, so a resumed
run ends with exactly the certificates and memory of an uninterrupted one. Floats are
written with ``repr`` (JSON's own), so they read back exactly.
"""

import hashlib
import json
import os

import numpy as np
import torch

from .network import network_arithmetic

#: Tensor dtypes numpy has no type for (hashed by their bytes and dtype name;
#: the others by their numpy bytes alone, as before)
_NOT_IN_NUMPY = {torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2}

__all__ = ["CheckpointLog", "network_digest", "row_digest", "run_fingerprint"]

FORMAT = "smoothlearn-certify-log/1"


def network_digest(module):
    """SHA-256 of a torch module's parameters and buffers."""
    digest = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        digest.update(name.encode())
        tensor = tensor.detach().cpu().contiguous()
        if tensor.dtype in _NOT_IN_NUMPY:  # a bf16 module: its bytes, named
            digest.update(str(tensor.dtype).encode())
            tensor = tensor.reshape(-1).view(torch.uint8)
        digest.update(tensor.numpy().tobytes())
    return digest.hexdigest()


def row_digest(row):
    """SHA-1 of one flat float32 input."""
    return hashlib.sha1(
        np.ascontiguousarray(row, dtype=np.float32).tobytes()
    ).hexdigest()


def run_fingerprint(task, *, module, noise_generator, input_shape, classes):
    """What determines a run's certificates, as JSON: a log of another is refused.

    Parameters
    ----------
    task : SmoothingTask
        The classifier as the engine runs it: its strategy, noise family and
        settings (``sigma``, ``n0``, ``n``, ``alpha``, ``radius_tolerance``,
        the ``radius`` of a sequential decision, the grid step where there is
        one, and the network's precision and compilation where not fp32 and
        eager).
    module : torch.nn.Module
        The fitted base network (its weights are hashed).
    noise_generator : torch.nn.Module or None
        UCAN's fitted generator.
    input_shape : tuple of int
    classes : ndarray
        The fitted classes.
    """
    fingerprint = {
        "network": network_digest(module),
        "noise_generator": None
        if noise_generator is None
        else network_digest(noise_generator),
        # by value (describe), as the memory is keyed: not by how it prints
        "strategy": task.strategy.describe(),
        "noise": task.family.name,
        "sigma": float(task.sigma),
        "n0": int(task.n0),
        "n": int(task.n),
        "alpha": float(task.alpha),
        "radius_tolerance": None
        if task.radius_tolerance is None
        else float(task.radius_tolerance),
        "radius": None if task.radius is None else float(task.radius),
        "input_shape": list(input_shape),
        "classes": [str(c) for c in classes],
    }
    if getattr(task, "grid", None) is not None:
        # another smoothed classifier; float-noise logs keep their fingerprint
        fingerprint["grid"] = task.grid.step
    network = task.network
    if getattr(network, "precision", "fp32") != "fp32" or getattr(
        network, "compile", False
    ):
        # another base classifier (its arithmetic); fp32 logs keep theirs
        fingerprint["arithmetic"] = network_arithmetic(
            network.precision, network.compile
        ).strip()
    return fingerprint


class CheckpointLog:
    """The log file of one certification run: finished blocks, one line per input.

    The rows are :meth:`smoothlearn.blocks.BlockResult.rows`, with the input's
    index and digest.

    Parameters
    ----------
    path : str or path-like
    fingerprint : dict
        JSON-serialisable facts that determine the certificates
        (:func:`run_fingerprint`).
    """

    def __init__(self, path, fingerprint):
        self.path = os.fspath(path)
        self.fingerprint = json.loads(json.dumps(fingerprint))
        self._rows = {}

    def open(self, key):
        """Read the log if it exists; start it otherwise.

        Returns
        -------
        key : int
            The stored key when resuming, else ``key`` (which is written).
        """
        self._rows = {}
        if os.path.exists(self.path) and os.path.getsize(self.path) > 0:
            with open(self.path) as handle:
                lines = handle.read().splitlines()
            try:
                header = json.loads(lines[0])
            except json.JSONDecodeError:
                raise ValueError(
                    f"{self.path} is not a smoothlearn certify log"
                ) from None
            if header.get("format") != FORMAT:
                raise ValueError(f"{self.path} is not a smoothlearn certify log")
            if header["fingerprint"] != self.fingerprint:
                changed = sorted(
                    k
                    for k in set(header["fingerprint"]) | set(self.fingerprint)
                    if header["fingerprint"].get(k) != self.fingerprint.get(k)
                )
                raise ValueError(
                    f"checkpoint {self.path} belongs to another run (differs in "
                    f"{', '.join(changed)}); remove it or use another path."
                )
            for line in lines[1:]:
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    break  # a line cut short by a kill: recompute from here
                self._rows[row["idx"]] = row
            return header["key"]
        with open(self.path, "w") as handle:
            header = {"format": FORMAT, "key": key, "fingerprint": self.fingerprint}
            handle.write(json.dumps(header) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        return key

    def finished(self, X_flat, block):
        """The logged rows of ``block`` if all its inputs are logged unchanged."""
        indices = range(block.start, block.stop)
        rows = self._rows
        if not all(
            i in rows and rows[i]["digest"] == row_digest(X_flat[i]) for i in indices
        ):
            return None
        return [rows[i] for i in indices]

    def append(self, X_flat, block, rows):
        """Append one finished block's rows, flushed and fsynced."""
        lines = [
            json.dumps({"idx": i, "digest": row_digest(X_flat[i]), **row})
            for i, row in zip(range(block.start, block.stop), rows)
        ]
        with open(self.path, "a") as handle:
            handle.write("\n".join(lines) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
