"""A class in the config too big (``in_features: 10000000``) or of a negative size: one line naming its key.

torch's host allocator refuses the size inside the class's ``__init__`` (jsonargparse wraps the error
while it builds the config's classes); :func:`explain_build_failure` finds which ``class_path`` entry
was being built from the frames of the refused allocation and names its key and its init_args.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from lit_gpu import messages
from lit_gpu.translate import allocation_refused, host_memory_bytes, human_bytes

TOO_BIG_TO_BUILD = (
    "{key}: {class_path}({init_args}) asks for {asked} while it is built, more than this machine's {have} "
    "of memory; make it smaller ({key}.init_args.* on the command line or in your config)"
)


def _specs(config: Any, prefix: str = "") -> Iterator[tuple[str, str, Any]]:
    """``(key, class_path, init_args)`` of each ``class_path`` entry in a config, outer first."""
    if isinstance(config, dict):
        if isinstance(config.get("class_path"), str):
            yield prefix, config["class_path"], config.get("init_args")
        for name, value in config.items():
            yield from _specs(value, f"{prefix}.{name}" if prefix else str(name))
    elif isinstance(config, list):
        for i, value in enumerate(config):
            yield from _specs(value, f"{prefix}[{i}]")


def _classes_being_built(err: BaseException) -> list[type]:
    """The classes whose ``__init__`` was running where ``err`` was raised, outermost first."""
    found: list[type] = []
    tb = err.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name == "__init__" and "self" in frame.f_code.co_varnames[:1]:
            found.append(type(frame.f_locals["self"]))
        tb = tb.tb_next
    return found


def _shown_args(init_args: Any) -> str:
    if not isinstance(init_args, dict):
        return ""
    plain = (int, float, str, bool, type(None))
    return ", ".join(f"{k}={v!r}" for k, v in init_args.items() if isinstance(v, plain))


CANNOT_BUILD = (
    "{key}: {class_path}({init_args}) cannot be built: {reason}; fix its sizes "
    "({key}.init_args.* on the command line or in your config)"
)
_SIZE_ERRORS = ("Trying to create tensor with negative dimension",)


def _built_by_config(err: BaseException, specs: list[tuple[str, str, Any]]) -> tuple[str, str, Any] | None:
    """The config entry whose class was being built where ``err`` was raised (outermost first)."""
    for cls in _classes_being_built(err):
        for key, class_path, init_args in specs:
            if class_path.rsplit(".", 1)[-1] == cls.__name__:
                return key, class_path, init_args
    return None


def _size_error(err: BaseException) -> BaseException | None:
    """torch's refusal of a size given to a layer (``nn.Linear(10, -1)``) in ``err``'s chain."""
    current: BaseException | None = err
    seen = 0
    while current is not None and seen < 8:
        if isinstance(current, RuntimeError) and any(s in str(current) for s in _SIZE_ERRORS):
            return current
        current, seen = current.__cause__ or current.__context__, seen + 1
    return None


def explain_build_failure(err: BaseException, config: Any) -> str | None:
    """One line when building the config's classes failed on a size the host cannot allocate, else ``None``.

    Args:
        err: What building the classes raised.
        config: The (sub-command's) config as a dict, with ``class_path``/``init_args`` entries.
    """
    specs = list(_specs(config))
    found = allocation_refused(err)
    if found is not None and (entry := _built_by_config(found[0], specs)) is not None:
        have = host_memory_bytes()
        return TOO_BIG_TO_BUILD.format(
            key=entry[0],
            class_path=messages.shown(entry[1]),
            init_args=messages.shown(_shown_args(entry[2])),
            asked=found[1],
            have=human_bytes(have) if have else "amount",
        )
    refused = _size_error(err)
    if refused is not None and (entry := _built_by_config(refused, specs)) is not None:
        return CANNOT_BUILD.format(
            key=entry[0],
            class_path=messages.shown(entry[1]),
            init_args=messages.shown(_shown_args(entry[2])),
            reason=messages.shown(messages.first_line(refused)),
        )
    return None
