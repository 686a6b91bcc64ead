"""Names that become parts of paths (a study name, a name derived from a file name) are checked as names.

A name is one path component: not empty, not ``.`` or ``..``, no ``/``, ``\\`` or NUL, no character
that :func:`lit_gpu.messages.shown` would escape (control characters, C1 codes, bidi overrides,
zero-width marks), at most :data:`MAX_NAME` characters. :func:`check_name` raises one line naming the flag
that set it (or the file it came from) and the fix.
"""

from __future__ import annotations

from lit_gpu import messages
from lit_gpu.errors import LitGpuError

MAX_NAME = 200
BAD_NAME = "{what} {name} is not a plain name ({why}); {fix}"


def name_problem(name: object) -> str | None:
    """Why ``name`` cannot be one path component, or ``None`` when it can."""
    if not isinstance(name, str) or not name:
        return "it is empty"
    if name in (".", ".."):
        return "it is . or .."
    if any(sep in name for sep in ("/", "\\", "\0")):
        return "it holds a path separator"
    if len(name) <= MAX_NAME and messages.shown(name, limit=MAX_NAME + 1) != name:
        return "it holds control or invisible characters"
    if len(name) > MAX_NAME:
        return f"it is longer than {MAX_NAME} characters"
    return None


def check_name(name: object, what: str, fix: str) -> str:
    """``name`` when it is a plain name (:func:`name_problem`); else one line with ``what`` and ``fix``."""
    why = name_problem(name)
    if why is not None:
        shown = messages.shown(repr(name) if isinstance(name, str) else name, limit=80)
        raise LitGpuError(BAD_NAME.format(what=what, name=shown, why=why, fix=fix))
    return name  # type: ignore[return-value]
