"""What every layer that runs a torch module needs, below the network wrapper."""

__all__ = ["first_output"]


def first_output(out):
    """A module's class scores: its output, or the first item of a tuple output
    (skorch's convention for modules returning extra values)."""
    return out[0] if isinstance(out, tuple) else out
