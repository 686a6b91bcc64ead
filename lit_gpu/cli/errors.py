"""The CLI's answers to a user's mistake, each one line (exit 2) where Lightning or jsonargparse would
print a wall or fail deep inside a run.

* parse errors (:func:`concise_parse_error`): jsonargparse's multi-line parse errors as one line that keeps
  the real cause;
* build failures (:func:`explain_build_failure`, :func:`missing_requirement`): a config class torch cannot
  build (``in_features: 10000000``, ``-1``, ``null``), named by its key;
* a module without the step an evaluation command needs (:func:`check_has_step`);
* no data to run on (:func:`check_has_data`);
* settings Lightning would refuse deep inside a run (:func:`check_seed`).
"""

from __future__ import annotations

import difflib
import inspect
import os
import pkgutil
import re
import sys
import types
import typing
from collections.abc import Iterator
from typing import Any

import lightning.pytorch as pl

from lit_gpu import messages
from lit_gpu.errors import LitGpuError
from lit_gpu.explain import allocation_refused, host_memory_bytes, human_bytes
from lit_gpu.messages import shown
from lit_gpu.run.layout import config_value
from lit_gpu.upstream import parser_actions

# ---- texts (this module's alone) ------------------------------------------------------------------------
MODULE_NOT_ON_PATH = (
    "{key}: cannot import {class_path}: No module named '{module}'; if {module} is your own code, "
    "put the folder that holds it on the Python path (from that folder: PYTHONPATH=. lit-gpu ...), "
    "else install the package that provides it (pip install ...)"
)
MODULE_HERE_NOT_ON_PATH = (
    "{key}: cannot import {class_path}: No module named '{module}', but {found} is in this folder, "
    "which is not on the Python path; run PYTHONPATH=. lit-gpu ... (or pip install -e . for a package)"
)
DEPENDENCY_MISSING = (
    "{key}: importing {class_path} failed: No module named '{module}'; "
    "install the package that provides {module} (pip install ...)"
)
NO_SUCH_MODULE = (
    "{key}: cannot import {class_path}: No module named '{module}'{suggestion}; "
    "check the spelling of the module path"
)
NO_SUCH_CLASS = (
    "{key}: module '{module}' has no attribute '{name}'{suggestion}; check the spelling of the class name"
)
UNKNOWN_ARGUMENT = (
    "{key}: {class_path} has no argument '{option}'{suggestion}; check the spelling of the init_args key"
)
MISSING_INIT_ARGS = (
    "{key}: {class_path} needs {names}, which the config does not give; "
    "set it under init_args (e.g. {example} VALUE)"
)
NOT_A_SUBCLASS = "{key}: {class_path} is not a {base}; give the class_path of a {base} subclass"
YAML_SYNTAX = "{path}, line {line}, column {column}: YAML syntax error: {problem}; fix the YAML there"
UNKNOWN_FLAG = "{flags}; flags are exact (no abbreviations): run '{prog} --help' for the options"
MISSING_REQUIREMENT = (
    "the config names a class that needs {requirement}, not installed here: pip install -U '{requirement}'"
)

# ---- parse errors ----------------------------------------------------------------------------------------
# jsonargparse reports a bad ``class_path`` as a tree: the outer key (``model``), every Union branch it
# tried (``Expected a NoneType``...) and, nested inside, the reason the class could not be used
# (``No module named 'mymod'``, ``module 'torch.optim' has no attribute 'Adamm'``).
# :func:`concise_parse_error` looks for those reasons first and answers with what, where and the fix; other
# errors keep the innermost key, what was expected and what was given.
_KEY = re.compile(r'Parser key "([^"]+)"')
_CLASS_PATHS = re.compile(
    r"Problem with given class_path '([^']+)'|Expected a path but (\S+) either not accessible"
    r"|class_path='([^']+)'|Given value: ([\w.]+)$",
    re.M,
)
_NO_MODULE = re.compile(r"No module named '([^']+)'")
_NO_ATTRIBUTE = re.compile(r"module '([^']+)' has no attribute '([^']+)'")
# jsonargparse >= 4.44 wording, or 4.39-4.43's ("Key 'x' is not expected", "Key "x" is required but ...")
_NOT_ACCEPTED = re.compile(r"(?:Option|Key) '([^']+)' is not (?:accepted|expected)")
_REQUIRED = re.compile(
    r"the following arguments are required: ([\w., ]+)|Key \"([\w.]+)\" is required but not included"
)
_CLASS_PATH_VALUE = re.compile(r"class_path='([^']+)'")
_GIVEN_CLASS = re.compile(r"Problem with given class_path '([^']+)'")
_NOT_SUBCLASS = re.compile(r"does not correspond to a subclass of (\w+)")
_CLASS_REPR = re.compile(r"<class '([\w.]+)'>")


def _key_path(message: str) -> str:
    """``model.optimizer.lr`` from the nested ``Parser key "..."`` headers (outermost first)."""
    keys: list[str] = []
    for key in _KEY.findall(message):
        if not keys or keys[-1] != key:
            keys.append(key)
    return ".".join(keys)


def _class_paths(message: str) -> list[str]:
    return [next(g for g in groups if g) for groups in _CLASS_PATHS.findall(message)]


def _pick_class_path(candidates: list[str], module: str) -> str | None:
    for path in reversed(candidates):
        if path == module or path.startswith(module + "."):
            return path
    return candidates[-1] if candidates else None


def _close(name: str, options: list[str], prefix: str = "") -> str:
    match = difflib.get_close_matches(name, options, n=1, cutoff=0.6)
    return f" (did you mean {prefix}{match[0]}?)" if match else ""


def _loaded(module: str) -> Any:
    # only modules already imported (jsonargparse imported them): nothing is imported to suggest a name
    return sys.modules.get(module)


def _missing_module(key: str, module: str, candidates: list[str]) -> str:
    class_path = _pick_class_path(candidates, module) or module
    parent, _, leaf = module.rpartition(".")
    if parent and _loaded(parent) is not None:  # a typo in a submodule of a package that exists
        names = [m.name for m in pkgutil.iter_modules(getattr(_loaded(parent), "__path__", []))]
        return NO_SUCH_MODULE.format(
            key=key, class_path=class_path, module=module, suggestion=_close(leaf, names, parent + ".")
        )
    if class_path.split(".")[0] == module.split(".")[0]:  # the class's own top-level module
        top = module.split(".")[0]
        here = [p for p in (f"{top}.py", f"{top}/") if os.path.exists(p)]
        if here:  # `lit-gpu` (a console script) does not put the working folder on sys.path
            return MODULE_HERE_NOT_ON_PATH.format(
                key=key, class_path=class_path, module=module, found=here[0]
            )
        return MODULE_NOT_ON_PATH.format(key=key, class_path=class_path, module=module)
    return DEPENDENCY_MISSING.format(key=key, class_path=class_path, module=module)


def _no_attribute(key: str, module: str, name: str) -> str:
    loaded = _loaded(module)
    options = [n for n in dir(loaded) if not n.startswith("_")] if loaded is not None else []
    return NO_SUCH_CLASS.format(
        key=key, module=module, name=name, suggestion=_close(name, options, module + ".")
    )


def _class_after(message: str, position: int, candidates: list[str]) -> str:
    """The class a nested error is about: the ``Got value``/``Given value`` right after the cause."""
    match = _CLASS_PATH_VALUE.search(message, position)
    if match and not match.group(1).startswith("typing."):  # typing.Union: no class_path was given
        return match.group(1)
    return (
        "its class (no class_path given there?)" if match else (candidates[-1] if candidates else "its class")
    )


def _not_accepted(key: str, option: str, class_path: str) -> str:
    module, _, name = class_path.rpartition(".")
    target = getattr(_loaded(module), name, None) if module else None
    try:
        params = [p for p in inspect.signature(target).parameters if p != "self"] if target else []
    except (TypeError, ValueError):
        params = []
    return UNKNOWN_ARGUMENT.format(
        key=key, class_path=class_path, option=option, suggestion=_close(option, params)
    )


def explain_cause(message: str) -> str | None:
    """The one-line answer for an import/class problem inside a parse error, or ``None``."""
    key = _key_path(message) or "a class_path"
    candidates = _class_paths(message)
    if match := _NO_MODULE.search(message):
        return _missing_module(key, match.group(1), candidates)
    if match := _NO_ATTRIBUTE.search(message):
        return _no_attribute(key, match.group(1), match.group(2))
    if match := _NOT_ACCEPTED.search(message):
        class_path = _class_after(message, match.end(), candidates)
        after = _CLASS_PATH_VALUE.search(message, match.end())
        given = _GIVEN_CLASS.findall(message, 0, match.start())  # the class tried where it failed (+=Name)
        if given and after is None:  # no class_path value after it: the NestedArg of a --key.name flag
            class_path = given[-1]
        return _not_accepted(key, match.group(1), class_path)
    if (match := _REQUIRED.search(message)) and _key_path(message):  # else argparse's own: plain
        class_path = _class_after(message, match.end(), candidates)
        required = match.group(1) or match.group(2)
        names = [n.strip().rpartition(".")[2] for n in required.split(",") if n.strip()]
        return MISSING_INIT_ARGS.format(
            key=key, class_path=class_path, names=", ".join(names), example=f"--{key}.init_args.{names[0]}"
        )
    if match := _NOT_SUBCLASS.search(message):
        class_path = candidates[-1] if candidates else "the class_path given"
        return NOT_A_SUBCLASS.format(key=key, class_path=class_path, base=match.group(1))
    return None


def _innermost(lines: list[str]) -> list[str]:
    """The lines of the deepest ``Parser key`` block (more indented than its header)."""
    starts = [i for i, line in enumerate(lines) if _KEY.search(line)]
    if not starts:
        return lines
    start = starts[-1]
    indent = len(lines[start]) - len(lines[start].lstrip())
    block = [lines[start]]
    for line in lines[start + 1 :]:
        if line.strip() and len(line) - len(line.lstrip()) <= indent:
            break
        block.append(line)
    return block


_NOISE = ("Expected a <class 'NoneType'>", "Expected a path but", "Expected a dot import path string")


def concise_parse_error(message: str, prog: str, parser: Any = None) -> str:
    """One line from jsonargparse's multi-line error: an unknown flag with the closest of ``parser``'s
    (:func:`unknown_flags`), the cause when a class could not be used, else the key, what was expected and
    what was given."""
    cause = (unknown_flags(message, parser, prog) if parser is not None else None) or explain_cause(message)
    if cause:
        return cause
    raw = [ln for ln in message.splitlines() if ln.strip()]
    if not raw:
        return f"invalid arguments; run '{prog} --help' for the options"
    key = _key_path(message)
    lines = [ln.strip().lstrip("- ").strip() for ln in _innermost(raw)]
    head = f'Parser key "{key}"' if key else lines[0].rstrip(":")
    keep = [head]
    expected = sorted({ln for ln in lines[1:] if ln.startswith("Expected")})
    useful = [ln for ln in expected if not ln.startswith(_NOISE)]
    if useful:
        expected = useful
    if expected:
        keep.append(" or ".join(expected))
    keep.extend(re.sub(r"\. Got value: .*$", "", ln) for ln in lines[1:] if ln.startswith("Given value:"))
    if len(keep) == 1 and len(lines) > 1:
        keep.append(lines[-1])
    elif len(keep) == 1 and key and _KEY.search(lines[0]):
        tail = _KEY.split(lines[0])[-1].lstrip(":").strip()
        if tail:
            keep.append(tail)
    text = _CLASS_REPR.sub(r"\1", "; ".join(keep))
    return text + f"; run '{prog} --help' for the options"


_UNRECOGNIZED = "unrecognized arguments:"
_NOT_ACCEPTED_KEY = re.compile(
    r"^(?:Subcommand '\w+'|Group '([\w.]+)') does not accept option '([^']+)'$", re.M
)  # a group's: a config file's key under trainer:, model:... (jsonargparse's wording)


def unknown_flags(message: str, parser: Any, prog: str) -> str | None:
    """``unknown flag --trainer.max_epoch (did you mean --trainer.max_epochs?)`` for argparse's
    ``unrecognized arguments: ...`` (and the key meant for jsonargparse's ``does not accept option`` of a
    config file's key), each held against ``parser``'s own options; else ``None``.

    The parser takes flags exactly (``allow_abbrev=False``): a prefix of a flag is a typo, as a misspelling.
    """
    options = [option for action in parser_actions(parser) for option in action.option_strings]
    if match := _NOT_ACCEPTED_KEY.search(message):  # a key in a config file: named as the file names it
        subparsers = next(
            (a for a in parser_actions(parser) if hasattr(a, "choices") and a.nargs == "A..."), None
        )
        for sub in dict(getattr(subparsers, "choices", None) or {}).values():  # the subcommands' keys
            options += [option for action in parser_actions(sub) for option in action.option_strings]
        keys = sorted({option.removeprefix("--") for option in options})
        first = message.splitlines()[0].strip()
        key = f"{match.group(1)}.{match.group(2)}" if match.group(1) else match.group(2)  # a group's key
        return f"{first}{_close(key, keys)}; run '{prog} --help' for the options"
    if not message.startswith(_UNRECOGNIZED):
        return None
    words = message[len(_UNRECOGNIZED) :].split()
    flags = [word.partition("=")[0] for word in words if word.startswith("-")]
    if not flags:
        return None
    named = "; ".join(f"unknown flag {flag}{_close(flag, options)}" for flag in flags[:3])
    more = f"; and {len(flags) - 3} more" if len(flags) > 3 else ""
    return UNKNOWN_FLAG.format(flags=named + more, prog=prog)


def yaml_error(err: BaseException | None, path: str) -> str | None:
    """``configs/x.yaml, line 5, column 6: ...`` for a YAML syntax error in a ``--config`` file."""
    cause = getattr(err, "__cause__", None)
    mark = getattr(cause, "problem_mark", None)
    if cause is None or mark is None:
        return None
    problem = getattr(cause, "problem", None) or messages.first_line(cause)
    context = getattr(cause, "context", None)
    context_mark = getattr(cause, "context_mark", None)
    if context and context_mark is not None:
        problem += f" ({context} started at line {context_mark.line + 1})"
    return YAML_SYNTAX.format(path=path, line=mark.line + 1, column=mark.column + 1, problem=problem)


# ---- build failures --------------------------------------------------------------------------------------
# jsonargparse builds the config's classes and wraps what their ``__init__`` raised: torch's host allocator
# refusing a size, torch refusing an argument (a negative size, ``None`` for a size), or a ``null`` given
# to a parameter that needs a value. :func:`explain_build_failure` finds which ``class_path`` entry was
# being built from the frames of the error (no import, no call) and names its key and its init_args;
# anything else keeps its traceback.
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
            return MISSING_REQUIREMENT.format(requirement=messages.shown(found[1]))
        current = current.__cause__ or current.__context__
    return None


# ---- a module without the step ---------------------------------------------------------------------------
NO_STEP = (
    "model.class_path {class_path}: the model has no {step}{extra}, so lit-gpu {command} cannot run it; "
    "define {step}(self, batch, batch_idx) in it, or use a lit_gpu module "
    "(e.g. lit_gpu.modules.ClassificationModule)"
)
# the step each evaluation command needs; predict also runs a module with forward only (as Lightning does)
STEPS = {"validate": "validation_step", "test": "test_step", "predict": "predict_step"}


def check_has_step(model: pl.LightningModule, config: Any, command: str) -> None:
    """Refuse ``lit-gpu validate/test/predict`` of a model without the step it needs: one line naming it.

    Lightning's own checks (``validation_step``/``test_step`` not overridden; ``predict_step`` None, or
    neither ``predict_step`` nor ``forward`` overridden) raise deep inside the Trainer; this one runs
    before it, where the config is known.
    """
    from lightning.pytorch.utilities.model_helpers import is_overridden

    step = STEPS[command]
    if getattr(model, step, None) is not None and (
        is_overridden(step, model) or (command == "predict" and is_overridden("forward", model))
    ):
        return
    class_path = config_value(config, f"{command}.model.class_path", None)
    if not isinstance(class_path, str):
        class_path = f"{type(model).__module__}.{type(model).__qualname__}"
    extra = " (nor forward)" if command == "predict" else ""
    raise LitGpuError(NO_STEP.format(class_path=class_path, step=step, extra=extra, command=command))


# Lightning's own Trainer methods, as imported (a test or a user replacing one runs its own checks)
_TRAINER_METHODS = {name: getattr(pl.Trainer, name) for name in ("fit", "validate", "test", "predict")}


def runs_lightnings(cli: Any, command: str) -> bool:
    """Whether ``command`` runs Lightning's own ``Trainer`` method, whose errors lit_gpu's checks foretell.

    LightningCLI runs the CLI's own method of that name where it defines one, and a ``trainer_class`` may
    override it: those decide for themselves what data they need.
    """
    if getattr(type(cli), command, None) is not None:
        return False
    return getattr(type(cli.trainer), command, None) is _TRAINER_METHODS.get(command)


# ---- no data ---------------------------------------------------------------------------------------------
# Without a data module (none given, or the ``data:`` of a run's ``config.yaml`` left out because it was
# not a ``class_path`` spec, e.g. a URL) and a model with no loader of its own, Lightning stops deep inside
# the loop with "`test_dataloader` must be implemented"; this check runs before, where the command is known.
#: the loader hook each command needs (Lightning's names)
LOADERS = {
    "fit": "train_dataloader",
    "validate": "val_dataloader",
    "test": "test_dataloader",
    "predict": "predict_dataloader",
}
NO_DATA = (
    "no data to {command} on: no data module was given and the model {model} has no "
    "{hook}; pass one with --data CLASS_PATH (e.g. --data lit_gpu.data.MNISTDataModule) or --config FILE "
    "with a data: section"
)
DATA_LACKS_LOADER = (
    "the data module {data} has no {hook}, so there is nothing to {command} on; "
    "use a data module that provides it (--data CLASS_PATH) or another command"
)


def _name(obj: Any) -> str:
    return shown(f"{type(obj).__module__}.{type(obj).__qualname__}")


def check_has_data(model: Any, datamodule: Any, command: str) -> None:
    """Raise a one-line :class:`LitGpuError` when ``command`` would find no loader to run on."""
    from lightning.pytorch.utilities.model_helpers import is_overridden

    hook = LOADERS.get(command)
    if hook is None:
        return
    if datamodule is not None:
        if not is_overridden(hook, datamodule):
            raise LitGpuError(DATA_LACKS_LOADER.format(command=command, data=_name(datamodule), hook=hook))
        return
    if not is_overridden(hook, model):
        raise LitGpuError(NO_DATA.format(command=command, model=_name(model), hook=hook))


# ---- settings refused before the run ---------------------------------------------------------------------
BAD_SEED = (
    "seed_everything: {seed!r} is out of range, the seed must be an integer from 0 to 4294967295 "
    "(or true for a random one, false for none); set --seed_everything (or seed_everything: in your config)"
)


def check_seed(config: Any) -> None:
    """Refuse a ``seed_everything`` Lightning's ``seed_everything`` would raise a ValueError for."""
    sub = config_value(config, "subcommand")
    seed = config_value(config, f"{sub}.seed_everything" if sub else "seed_everything")
    if seed is None or isinstance(seed, bool):
        return
    if not isinstance(seed, int) or not 0 <= seed <= 2**32 - 1:
        raise LitGpuError(BAD_SEED.format(seed=seed))
