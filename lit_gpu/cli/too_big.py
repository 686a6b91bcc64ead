"""A config class torch cannot build (``in_features: 10000000``, ``-1``, ``null``): one line naming its key.

jsonargparse builds the config's classes and wraps what their ``__init__`` raised: torch's host allocator
refusing a size, torch refusing an argument (a negative size, ``None`` for a size), or a ``null`` given
to a parameter that needs a value. :func:`explain_build_failure` finds which ``class_path`` entry was
being built from the frames of the error (no import, no call) and names its key and its init_args;
anything else keeps its traceback.
"""

from __future__ import annotations

import os
import re
import sys
import types
import typing
from collections.abc import Iterator
from typing import Any

from lit_gpu import messages
from lit_gpu.errors import LitGpuError
from lit_gpu.explain import allocation_refused, host_memory_bytes, human_bytes

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
    "{key}: {class_path}({init_args}) cannot be built ({reason}); fix its init_args "
    "({key}.init_args.* on the command line or in your config)"
)


def _built_by_config(err: BaseException, specs: list[tuple[str, str, Any]]) -> tuple[str, str, Any] | None:
    """The config entry whose class was being built where ``err`` was raised (outermost first)."""
    for cls in _classes_being_built(err):
        for key, class_path, init_args in specs:
            if class_path.rsplit(".", 1)[-1] == cls.__name__:
                return key, class_path, init_args
    return None


def _raised_in_torch(err: BaseException) -> bool:
    tb, last = err.__traceback__, ""
    while tb is not None:
        last, tb = tb.tb_frame.f_code.co_filename, tb.tb_next
    return any(f"{os.sep}{package}{os.sep}" in last for package in ("torch", "torchmetrics"))


def _torch_refusal(err: BaseException) -> BaseException | None:
    """torch refusing an argument a config class passed on (``nn.Linear(10, -1)``, ``nn.Linear(None, 3)``)."""
    current: BaseException | None = err
    seen = 0
    while current is not None and seen < 8:
        if isinstance(current, RuntimeError | TypeError | ValueError) and _raised_in_torch(current):
            return current
        current, seen = current.__cause__ or current.__context__, seen + 1
    return None


NULL_FOR_A_VALUE = (
    "{key}.{name}: null, but {class_path} needs {expects} there; "
    "set a value (on the command line or in your config)"
)


def _null_for_a_value(
    err: BaseException, specs: list[tuple[str, str, Any]], groups: set[tuple[str, str]]
) -> str | None:
    """A ``null`` init_arg whose parameter's annotation does not admit ``None`` (``neural_num: null``).

    Only the classes whose ``__init__`` was running where ``err`` (or an error it came from) was raised
    are looked at, and only if already imported: nothing is imported here.
    """
    building: set[type] = set()
    current: BaseException | None = err
    for _ in range(8):
        if current is None:
            break
        building.update(_classes_being_built(current))
        current = current.__cause__ or current.__context__
    for key, class_path, init_args in specs:
        module_name, _, name = class_path.rpartition(".")
        cls = getattr(sys.modules.get(module_name), "__dict__", {}).get(name)
        if cls not in building or not isinstance(init_args, dict):
            continue
        hints: dict[str, Any] = {}
        for klass in reversed(cls.__mro__):  # a subclass's __init__(**kwargs) passes its base's on
            try:
                hints.update(typing.get_type_hints(klass.__init__))
            except Exception:  # noqa: BLE001,S112  (unresolvable annotations: nothing to say)
                continue
        for arg, value in init_args.items():
            hint = hints.get(arg)
            if value is not None or hint is None or hint is Any:
                continue
            options = (
                typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else ()
            )
            if hint is not type(None) and type(None) not in options:
                expects = getattr(hint, "__name__", None) or str(hint)
                args_key = key if (key, class_path) in groups else f"{key}.init_args"
                return NULL_FOR_A_VALUE.format(
                    key=args_key,
                    name=arg,
                    class_path=messages.shown(class_path),
                    expects=f"a value of type {expects}",
                )
    return None


REFUSED_SETTING = "{key}: {reason}; fix {key}.* on the command line or in your config"


def _lightning_refusal(err: BaseException) -> BaseException | None:
    """Lightning's ``MisconfigurationException`` (its error for a setting the user chose) in the chain."""
    current: BaseException | None = err
    for _ in range(8):
        if current is None:
            return None
        if type(current).__name__ == "MisconfigurationException":
            return current
        current = current.__cause__ or current.__context__
    return None


def explain_build_failure(
    err: BaseException, config: Any, groups: dict[str, type] | None = None
) -> str | None:
    """One line when building the config's classes failed on a size the host cannot allocate, else ``None``.

    Args:
        err: What building the classes raised.
        config: The (sub-command's) config as a dict, with ``class_path``/``init_args`` entries.
        groups: Config keys holding one class's arguments without a ``class_path`` (``checkpoint``).
    """
    current: BaseException | None = err
    for _ in range(8):  # a class that said what is wrong itself (a LitGpuError): its line stands
        if current is None:
            break
        if isinstance(current, LitGpuError):
            return None
        current = current.__cause__ or current.__context__
    specs = list(_specs(config))
    grouped = {(key, f"{cls.__module__}.{cls.__qualname__}") for key, cls in (groups or {}).items()}
    specs += [(key, class_path, config.get(key)) for key, class_path in sorted(grouped)]
    if (null := _null_for_a_value(err, specs, grouped)) is not None:
        return null
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
    refused = _torch_refusal(err)
    if refused is not None and (entry := _built_by_config(refused, specs)) is not None:
        return CANNOT_BUILD.format(
            key=entry[0],
            class_path=messages.shown(entry[1]),
            init_args=messages.shown(_shown_args(entry[2])),
            reason=messages.shown(messages.first_line(refused), limit=160),
        )
    refused = _lightning_refusal(err)
    if refused is not None and (entry := _built_by_config(refused, specs)) is not None:
        return REFUSED_SETTING.format(key=entry[0], reason=messages.shown(messages.first_line(refused)))
    return None


#: lightning_utilities' RequirementCache message (Lightning's optional loggers, profilers, strategies)
_REQUIREMENT_HINT = re.compile(r"HINT: Try running `pip install -U '?([^'`\s]+)'?`")


def missing_requirement(err: BaseException) -> str | None:
    """One line when building a class failed on an optional package Lightning's requirement check found
    missing (``WandbLogger`` without ``wandb``); jsonargparse keeps that error only in its message."""
    current: BaseException | None = err
    for _ in range(8):
        if current is None:
            break
        found = _REQUIREMENT_HINT.search(str(current))
        if found is not None:
            return messages.MISSING_REQUIREMENT.format(requirement=messages.shown(found[1]))
        current = current.__cause__ or current.__context__
    return None
