"""The exception of a mistake the user can fix: :class:`LitGpuError` (a leaf: imports nothing of lit_gpu).

Raise it where the mistake is found, with one line saying what went wrong, where, and the fix;
``lit-gpu`` prints it as ``lit-gpu: error: ...`` and exits 2. Recognising other failures (out of
memory, a state_dict that does not fit...) is :mod:`lit_gpu.explain`'s job.
"""

from __future__ import annotations


class LitGpuError(RuntimeError):
    """A mistake the user can fix (bad path, missing data, impossible device request...).

    The message must say what went wrong and what to do instead, in one line.
    """


__all__ = ["LitGpuError"]
