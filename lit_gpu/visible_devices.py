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

Only where the two upstreams disagree is a value a problem (:func:`torch_disagrees`): torch's ``_strtoul``
takes any Unicode digit (``str.isdigit``), so ``"\u00b2"`` (a superscript two) makes
``torch.cuda.device_count()`` raise ``ValueError`` and ``"\u0661"`` (an Arabic-Indic one) is GPU 1 to torch's
NVML count but no GPU to CUDA, whose ``strtoul`` reads ASCII ``0-9`` only. :func:`entries` gives CUDA's
reading (equal to torch's for every ASCII value); every other value is only reported (``lit-gpu env``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

__all__ = ["entries", "hides_all", "read_whole", "torch_disagrees", "uuid_ordinals"]


def _ascii_digit(char: str) -> bool:
    """A digit as C's ``strtoul`` reads one in the C locale (CUDA's reading): ``0``-``9`` only."""
    return "0" <= char <= "9"


def _strtoul(text: str, is_digit: Callable[[str], bool] = _ascii_digit) -> int:
    """The number ``text`` starts with, or -1 (torch's ``_strtoul`` inside ``_parse_visible_devices``, with
    CUDA's digits; ``is_digit=str.isdigit`` is torch's own, whose ``int()`` raises on ``"\u00b2"``)."""
    if not text:
        return -1
    end = 0
    for end, char in enumerate(text):
        if not (is_digit(char) or (end == 0 and char in "+-")):
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


def entries(
    value: str | None, is_digit: Callable[[str], bool] = _ascii_digit
) -> list[int] | list[str] | None:
    """The devices a ``CUDA_VISIBLE_DEVICES`` value lists: ordinals, or ``GPU-``/``MIG-`` UUID prefixes.

    ``None`` when unset (every GPU is visible). Mirrors ``torch.cuda._parse_visible_devices`` with CUDA's
    digits (``is_digit=str.isdigit``: torch's own, which raises ``ValueError`` on ``"\u00b2"``).
    """
    if value is None:
        return None
    if value.startswith("GPU-"):
        return _with_prefix(value, "GPU-")
    if value.startswith("MIG-"):
        return _with_prefix(value, "MIG-")
    ordinals: list[int] = []
    for entry in value.split(","):
        number = _strtoul(entry.strip(), is_digit)
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


def torch_disagrees(value: str | None) -> str | None:
    """Why torch and CUDA would not see the same GPUs for ``value``, or None (equal on every ASCII value).

    torch's ``_parse_visible_devices`` (its NVML count, what Lightning's ``num_cuda_devices`` returns) reads
    any Unicode digit; CUDA reads ``0``-``9``. A superscript digit makes torch raise ``ValueError``; another
    script's digit is a GPU to torch and none to CUDA (the run would fail when CUDA starts).
    """
    if value is None or value.isascii():
        return None
    try:
        torch_reads = entries(value, str.isdigit)
    except ValueError:
        return "torch.cuda.device_count() raises ValueError on it (a digit int() cannot read)"
    cuda_reads = entries(value)
    if torch_reads != cuda_reads:
        return f"torch reads it as {torch_reads}, CUDA as {cuda_reads} (CUDA reads the digits 0-9 only)"
    return None


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
