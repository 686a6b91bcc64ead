"""``CUDA_VISIBLE_DEVICES`` read the way CUDA and torch read it (standard library only, no CUDA context).

CUDA accepts any value: it reads entries up to the first one that is not a device and ignores the rest.
:func:`entries` mirrors torch's own reading of it, ``torch.cuda._parse_visible_devices`` (torch 2.14,
``torch/cuda/__init__.py``; the HIP branch left out), and :func:`uuid_ordinals` its
``torch.cuda._transform_uuid_to_ordinals``; ``tests/unit/test_visible_devices.py`` checks both against
the installed torch on a corpus of values. So:

- unset: every GPU; ``""``, ``"-1"``, ``"NoDevFiles"`` (what slurmd sets on a CPU-only job): no GPU;
- ``"0,1,"`` (the ``nvidia-smi ... | tr '\\n' ','`` idiom): GPUs 0 and 1, the empty entry ends the list;
- an index is read as C's ``strtoul`` reads it (``"1gpu2,2ampere"`` is ``1,2``), a negative one ends the
  list; a value starting ``GPU-`` or ``MIG-`` is a list of UUIDs (a unique prefix is enough);
- a repeated entry makes the whole list empty.

No value is refused: lit_gpu only reports (``lit-gpu env``) what CUDA will see.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["entries", "hides_all", "read_whole", "uuid_ordinals"]


def _strtoul(text: str) -> int:
    """The number ``text`` starts with, or -1 (torch's ``_strtoul`` inside ``_parse_visible_devices``)."""
    if not text:
        return -1
    end = 0
    for end, char in enumerate(text):
        if not (char.isdigit() or (end == 0 and char in "+-")):
            break
        if end + 1 == len(text):
            end += 1
    return int(text[:end]) if end > 0 else -1


def _with_prefix(value: str, prefix: str) -> list[str]:
    """torch's ``parse_list_with_prefix``: entries up to the first without ``prefix``; a repeat: none."""
    found: list[str] = []
    for entry in value.split(","):
        if entry in found:  # a repeated id: CUDA shows no device at all
            return []
        if not entry.startswith(prefix):
            break
        found.append(entry)
    return found


def entries(value: str | None) -> list[int] | list[str] | None:
    """The devices a ``CUDA_VISIBLE_DEVICES`` value lists: ordinals, or ``GPU-``/``MIG-`` UUID prefixes.

    ``None`` when unset (every GPU is visible). Mirrors ``torch.cuda._parse_visible_devices``.
    """
    if value is None:
        return None
    if value.startswith("GPU-"):
        return _with_prefix(value, "GPU-")
    if value.startswith("MIG-"):
        return _with_prefix(value, "MIG-")
    ordinals: list[int] = []
    for entry in value.split(","):
        number = _strtoul(entry.strip())
        if number in ordinals:  # a repeated ordinal: CUDA shows no device at all
            return []
        if number < 0:  # not a number, empty or negative: the list ends here
            break
        ordinals.append(number)
    return ordinals


def uuid_ordinals(candidates: Sequence[str], uuids: Sequence[str]) -> list[int]:
    """The positions in ``uuids`` of UUID prefixes ``candidates``: up to the first unknown or ambiguous one;
    a repeat: none. Mirrors ``torch.cuda._transform_uuid_to_ordinals``."""
    found: list[int] = []
    for candidate in candidates:
        matches = [i for i, uuid in enumerate(uuids) if uuid.startswith(candidate)]
        if len(matches) != 1:  # unknown or ambiguous: the list ends here
            break
        if matches[0] in found:
            return []
        found.append(matches[0])
    return found


def hides_all(value: str | None) -> bool:
    """Whether CUDA sees no GPU at all whatever the machine has (``""``, ``-1``, ``NoDevFiles``, ``0,0``)."""
    return value is not None and not entries(value)


def read_whole(value: str | None) -> bool:
    """Whether CUDA reads every entry of ``value`` (a trailing comma and spaces aside): ``"0;1"`` (read as
    ``0``) or ``"0,x,1"`` (read as ``0``) is not, ``"0,1,"`` and ``"NoDevFiles"``'s intent ("none") are."""
    if value is None or value.strip() in ("", "-1", "NoDevFiles"):
        return True
    listed = entries(value) or []
    typed = ",".join(part.strip() for part in value.split(",")).strip(",")
    return ",".join(str(item) for item in listed) == typed
