"""A class in the config too big to build (``in_features: 10000000``): one line naming its config key.

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


def explain_build_failure(err: BaseException, config: Any) -> str | None:
    """One line when building the config's classes failed on a size the host cannot allocate, else ``None``.

    Args:
        err: What building the classes raised.
        config: The (sub-command's) config as a dict, with ``class_path``/``init_args`` entries.
    """
    found = allocation_refused(err)
    if found is None:
        return None
    refused, asked = found
    specs = list(_specs(config))
    for cls in _classes_being_built(refused):
        for key, class_path, init_args in specs:
            if class_path.rsplit(".", 1)[-1] == cls.__name__:
                have = host_memory_bytes()
                return TOO_BIG_TO_BUILD.format(
                    key=key,
                    class_path=messages.shown(class_path),
                    init_args=messages.shown(_shown_args(init_args)),
                    asked=asked,
                    have=human_bytes(have) if have else "amount",
                )
    return None
