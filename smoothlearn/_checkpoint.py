"""Resumable certification: a log of finished blocks of inputs.

``SmoothedClassifier.certify(X, checkpoint=path)`` appends each finished block
of inputs to a JSON-lines file (flushed and fsynced) before going on. Run again
with the same path, it reads the log back, keeps the blocks whose inputs are
unchanged, and computes only the rest. The first line records the call's noise
key and a fingerprint of everything that determines a certificate (network
weights, strategy, noise, sigma, n0, n, alpha, classes): a log of another run
is refused. The memory step runs after all blocks, in input order, so a
resumed run ends with exactly the certificates and memory of an uninterrupted
one. Floats are written with ``repr`` (JSON's own), so they read back exactly.
"""

import hashlib
import json
import os

import numpy as np

__all__ = ["CertifyLog", "network_digest", "row_digest"]

FORMAT = "smoothlearn-certify-log/1"


def network_digest(module):
    """SHA-256 of a torch module's parameters and buffers."""
    digest = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def row_digest(row):
    """SHA-1 of one flat float32 input."""
    return hashlib.sha1(
        np.ascontiguousarray(row, dtype=np.float32).tobytes()
    ).hexdigest()


def _to_json(value):
    if value is None:
        return None
    value = np.asarray(value)
    return value.tolist()


class CertifyLog:
    """The log file of one certification run.

    Parameters
    ----------
    path : str or path-like
    fingerprint : dict
        JSON-serialisable facts that determine the certificates.
    """

    def __init__(self, path, fingerprint):
        self.path = os.fspath(path)
        self.fingerprint = json.loads(json.dumps(fingerprint))

    def open(self, key):
        """Read the log if it exists; start it otherwise.

        Returns
        -------
        key : int
            The stored key when resuming, else ``key`` (which is written).
        rows : dict of int to dict
            Logged rows by input index.
        """
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
            rows = {}
            for line in lines[1:]:
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    break  # a line cut short by a kill: recompute from here
                rows[row["idx"]] = row
            return header["key"], rows
        with open(self.path, "w") as handle:
            header = {"format": FORMAT, "key": key, "fingerprint": self.fingerprint}
            handle.write(json.dumps(header) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        return key, {}

    @staticmethod
    def finished(rows, X_flat, block):
        """The logged result of ``block`` if all its inputs are logged unchanged."""
        indices = range(block.start, block.stop)
        if not all(
            i in rows and rows[i]["digest"] == row_digest(X_flat[i]) for i in indices
        ):
            return None
        logged = [rows[i] for i in indices]
        result = {
            "class_index": np.array([r["class_index"] for r in logged], dtype=np.intp),
            "p_lower": np.array([r["p_lower"] for r in logged], dtype=np.float64),
            "gap": np.array([r["gap"] for r in logged], dtype=np.float64),
            "time": np.array([r["time"] for r in logged], dtype=np.float64),
            "scale": {
                "scale": np.array([r["scale"] for r in logged], dtype=np.float64)
            },
        }
        for name in ("basis", "scale_rest"):
            if logged[0].get(name) is not None:
                result["scale"][name] = np.array(
                    [r[name] for r in logged], dtype=np.float64
                )
        return result

    def append(self, X_flat, block, result):
        """Append one finished block (one line per input), flushed and fsynced."""
        lines = []
        for j, i in enumerate(range(block.start, block.stop)):
            row = {
                "idx": i,
                "digest": row_digest(X_flat[i]),
                "class_index": int(result["class_index"][j]),
                "p_lower": float(result["p_lower"][j]),
                "gap": float(result["gap"][j]),
                "time": float(result["time"][j]),
            }
            for name, value in result["scale"].items():
                row[name] = _to_json(value[j])
            lines.append(json.dumps(row))
        with open(self.path, "a") as handle:
            handle.write("\n".join(lines) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
