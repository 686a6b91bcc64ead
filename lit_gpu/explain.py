"""Known failures as one line: :func:`explain` and its :data:`TRANSLATORS` (raise: lit_gpu.errors).

``lit-gpu`` prints what :func:`explain` returns as ``lit-gpu: error: ...`` and exits 2; anything it
does not recognise keeps its traceback (a lit_gpu bug). Each translator below takes an exception and
returns a one-line answer (texts in :mod:`lit_gpu.messages`) or ``None``. Device errors are rewritten
where the trainer is built (:mod:`lit_gpu.devices`), where the config that asked for them is known.
"""

from __future__ import annotations

import functools
import inspect
import os
import pickle
import re
import zipfile
from collections.abc import Callable
from typing import Any

import torch

from lit_gpu import messages
from lit_gpu.errors import LitGpuError

# ---- texts (this module's alone) ------------------------------------------------------------------------
STATE_DICT_MISMATCH = (
    "the checkpoint does not fit {target}: {summary}; it is a checkpoint of another model or config: "
    "pass the matching --config, or another --ckpt_path"
)
OUT_OF_MEMORY = (
    "out of memory during {what}{detail}. Next steps: (1) a smaller batch, e.g. --data.batch_size {half}; "
    "(2) keep the effective batch with --trainer.accumulate_grad_batches 2 (or more); "
    "(3) mixed precision: --config lit_gpu:trainer/amp (or lit_gpu:trainer/bf16); "
    "(4) a model too big for one GPU: --config lit_gpu:trainer/fsdp; "
    "(5) let Lightning find the largest batch that fits: lit-gpu fit ... --tune_batch_size true; "
    "(6) recover instead of stopping: --oom_recovery true halves the micro-batch and retries the step"
)
DATALOADER_WORKER_DIED = (
    "a DataLoader worker process died ({reason}); usual causes: out of host or shared memory "
    "(/dev/shm; in Docker use --shm-size 8g or --ipc host) or a crash in native dataset code; "
    "retry with fewer workers, or --data.num_workers 0 to see the real error"
)
DATASET_RAISED_IN_WORKER = (
    "the dataset raised {kind} in a DataLoader worker ({reason}); "
    "rerun with --data.num_workers 0 to get the full traceback"
)
MONITOR_NOT_LOGGED = (
    "--checkpoint.monitor {monitor}: the model never logs this metric (logged: {logged}); "
    "set --checkpoint.monitor to one of them (and --checkpoint.mode min or max)"
)
NET_INPUT_MISMATCH = (
    "the net {net} does not fit the data: it got a batch of shape {got}, but its first layer "
    "({layer}) expects {expects} ({reason}); {fix}"
)
NET_INPUT_FIX = (
    "use a net built for this data or set the net's input size (--model.net.init_args.*) to match it"
)
NET_INPUT_FIX_IMAGES = (
    "this net starts with a Linear layer and takes flat (B, features) inputs, not images: use an image net "
    "(e.g. --model.net lit_gpu.nets.MnistCNN) or flatten the input first (nn.Flatten())"
)


def is_out_of_memory(err: BaseException) -> bool:
    """Whether ``err`` is a CUDA (or host) out-of-memory error: ``torch.OutOfMemoryError`` or its text."""
    if isinstance(err, torch.OutOfMemoryError):
        return True
    text = str(err)
    return isinstance(err, RuntimeError) and (
        "CUDA out of memory" in text or "out of memory" in text.lower()[:80]
    )


def out_of_memory(err: BaseException, batch_size: int | None = None) -> str | None:
    """Next steps for a CUDA (or host) out-of-memory error."""
    if not is_out_of_memory(err):
        return None
    text = str(err)
    match = re.search(r"Tried to allocate ([\d.]+ \w+)", text)
    detail = f" (tried to allocate {match.group(1)})" if match else ""
    half = max(1, batch_size // 2) if batch_size else "<half the current value>"
    what = getattr(err, "lit_gpu_loop", "training")  # set by lit_gpu.oom.recovery.OOMLoopName
    return OUT_OF_MEMORY.format(what=what, detail=detail, half=half)


_KEYS = re.compile(r'"([^"]+)"')
_SIZE_MISMATCH = re.compile(
    r"size mismatch for ([^:]+): copying a param with shape torch\.Size\(\[([^\]]*)\]\) from "
    r"checkpoint, the shape in current model is torch\.Size\(\[([^\]]*)\]\)"
)


def _shape(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def state_dict_mismatch(err: BaseException) -> str | None:
    """torch's ``Error(s) in loading state_dict`` wall as one line of missing/unexpected/mis-shaped keys."""
    text = str(err)
    if not isinstance(err, RuntimeError) or "Error(s) in loading state_dict" not in text:
        return None
    from lit_gpu.checkpoints.load import LoadReport  # a leaf: no import circle with checkpoints

    report = LoadReport()
    for line in (ln.strip() for ln in text.splitlines()):
        if line.startswith("Missing key(s)"):
            report.missing = _KEYS.findall(line)
        elif line.startswith("Unexpected key(s)"):
            report.unexpected = _KEYS.findall(line)
        elif match := _SIZE_MISMATCH.match(line):
            report.shape_mismatches[match.group(1)] = (_shape(match.group(2)), _shape(match.group(3)))
    target = re.search(r"loading state_dict for (\w+)", text)
    return STATE_DICT_MISMATCH.format(
        target=target.group(1) if target else "the model", summary=report.summary()
    )


def _chain(err: BaseException, limit: int = 8) -> list[BaseException]:
    """``err`` and the exceptions it was raised from or while handling (``__cause__``/``__context__``)."""
    found: list[BaseException] = []
    current: BaseException | None = err
    while current is not None and len(found) < limit and all(current is not e for e in found):
        found.append(current)
        current = current.__cause__ or current.__context__
    return found


def dataloader_worker_died(err: BaseException) -> str | None:
    """A DataLoader worker killed by a signal (often /dev/shm or host memory).

    torch reports it from its SIGCHLD handler, so it is raised wherever the main process was, e.g. in
    a checkpoint save whose clean-up then fails with an error of its own: the chain is searched.
    """
    for raised in _chain(err):
        text = str(raised)
        died = "exited unexpectedly" in text or "killed by signal" in text
        if isinstance(raised, RuntimeError) and "DataLoader worker" in text and died:
            return DATALOADER_WORKER_DIED.format(reason=messages.first_line(raised))
    return None


def bad_checkpoint_file(err: BaseException) -> str | None:
    """torch.load's errors for truncated/corrupt files and for GPU checkpoints on a CPU-only machine."""
    text = str(err)
    if isinstance(err, RuntimeError):
        if "PytorchStreamReader failed" in text or "failed finding central directory" in text:
            return messages.CORRUPT_CHECKPOINT.format(what="the checkpoint", reason=messages.first_line(err))
        if "Attempting to deserialize object on a CUDA device" in text:
            return messages.SAVED_ON_GPU.format(what="the checkpoint")
    if isinstance(err, pickle.UnpicklingError | EOFError | zipfile.BadZipFile) and (
        "Weights only load failed" not in text
    ):
        return messages.CORRUPT_CHECKPOINT.format(what="the checkpoint", reason=messages.first_line(err))
    return None


def weights_only_refused(err: BaseException) -> str | None:
    """torch's "Weights only load failed" wall (a pickle payload in a checkpoint) as one line."""
    if isinstance(err, pickle.UnpicklingError) and "Weights only load failed" in str(err):
        return messages.PICKLE_REFUSED.format(
            path="the checkpoint", opt_out="pass --weights_only false (export: --trust)"
        )
    return None


def dataset_raised_in_worker(err: BaseException) -> str | None:
    """An exception re-raised from a DataLoader worker: the dataset's own error, with how to see it."""
    text = str(err)
    if "in DataLoader worker process" not in text:
        return None
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    reason = lines[-1].strip() if lines else messages.first_line(err)
    return DATASET_RAISED_IN_WORKER.format(kind=type(err).__name__, reason=reason)


_SHAPE_ERRORS = re.compile(
    r"mat1 and mat2 shapes cannot be multiplied|to have \d+ channels, but got \d+ channels"
    r"|Expected \d+D \(unbatched\) or \d+D \(batched\) input"
)
_CONVS = (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)


def _first_layer(net: torch.nn.Module) -> tuple[str, torch.nn.Module] | None:
    for name, module in net.named_modules():
        if isinstance(module, torch.nn.modules.lazy.LazyModuleMixin):
            return None  # sizes not known before the first batch
        if isinstance(module, (torch.nn.Linear, *_CONVS)):
            return name, module
    return None


def net_input_mismatch(net: torch.nn.Module, inputs: object, err: BaseException) -> str | None:
    """One line when ``net(inputs)`` failed because the batch does not fit the net's first layer.

    Only torch's shape errors, and only when the first ``Linear``/``Conv`` really does not take this
    batch; a shape error deeper in a net that took its input stays a traceback (it may be a bug).
    """
    if not isinstance(err, RuntimeError) or not _SHAPE_ERRORS.search(str(err)):
        return None
    if not isinstance(inputs, torch.Tensor) or (first := _first_layer(net)) is None:
        return None
    name, layer = first
    shape = tuple(inputs.shape)
    if isinstance(layer, torch.nn.Linear):
        if inputs.dim() >= 1 and shape[-1] == layer.in_features:
            return None
        expects = f"inputs of shape (B, {layer.in_features})"
        described = f"{name}: Linear, in_features={layer.in_features}"
    else:
        spatial = len(layer.kernel_size)
        if inputs.dim() == spatial + 2 and shape[1] == layer.in_channels:
            return None
        dims = ", ".join(["B", str(layer.in_channels), *"DHW"[-spatial:]] if spatial <= 3 else [])
        expects = f"inputs of shape ({dims})"
        described = f"{name}: {type(layer).__name__}, in_channels={layer.in_channels}"
    images = isinstance(layer, torch.nn.Linear) and inputs.dim() > 2
    return NET_INPUT_MISMATCH.format(
        net=type(net).__name__,
        got=shape,
        layer=described,
        expects=expects,
        reason=messages.first_line(err),
        fix=NET_INPUT_FIX_IMAGES if images else NET_INPUT_FIX,
    )


_MONITOR = re.compile(
    r"ModelCheckpoint\(monitor='([^']+)'\)` could not find the monitored key[^\[]*\[([^\]]*)\]"
)


def monitor_not_logged(err: BaseException) -> str | None:
    """Lightning's ``ModelCheckpoint(monitor=...)`` naming a metric the model never logs."""
    match = _MONITOR.search(str(err))
    if match is None or type(err).__name__ != "MisconfigurationException":
        return None
    logged = ", ".join(
        k.strip(" '") for k in match.group(2).split(",") if k.strip(" '") not in ("epoch", "step")
    )
    return MONITOR_NOT_LOGGED.format(monitor=match.group(1), logged=logged)


def _raised_in_lightning_trainer(err: BaseException) -> bool:
    tb = err.__traceback__
    last = None
    while tb is not None:
        last, tb = tb.tb_frame.f_code.co_filename, tb.tb_next
    where = (last or "").replace("\\", "/")
    return "lightning/pytorch/trainer/" in where or "lightning/pytorch/loops/" in where


def trainer_argument_error(err: BaseException) -> str | None:
    """A Trainer argument Lightning refuses only once it sees the data (``val_check_interval`` too large)."""
    if not isinstance(err, ValueError | TypeError) or not _raised_in_lightning_trainer(err):
        return None
    import inspect

    from lightning.pytorch import Trainer

    params = set(inspect.signature(Trainer.__init__).parameters)
    named = [n for n in re.findall(r"`(\w+)`", str(err)) if n in params]
    if not named:
        return None
    reason = messages.first_line(err).strip().rstrip(".")
    return messages.BAD_TRAINER_SETTING.format(source=f"trainer.{named[0]}", reason=reason)


def _partial_class(factory: Any) -> tuple[type, dict[str, Any]] | None:
    """Class and keywords of ``partial(cls, **kw)`` or jsonargparse's ``partial(call, inst, cls, **kw)``."""
    if not isinstance(factory, functools.partial):
        return None
    cls = factory.func if isinstance(factory.func, type) else None
    cls = cls or next((a for a in factory.args if isinstance(a, type)), None)
    return None if cls is None else (cls, dict(factory.keywords))


def refused_init_arg(factory: Any, make_arg: Callable[[], Any]) -> tuple[str, Any, BaseException] | None:
    """The config argument a class refuses on its own: ``(name, value, the class's error)``, or ``None``.

    ``factory`` is what the CLI built from ``class_path`` + ``init_args`` (e.g. the optimizer).
    Each of its keyword arguments is tried alone (with the ones that have no default) on a throwaway
    first argument from ``make_arg`` (a one-number parameter list, an optimizer of it); the first one the
    class answers with a ``ValueError`` or ``TypeError`` is named. Only called after the real call failed.
    """
    found = _partial_class(factory)
    if found is None:
        return None
    cls, keywords = found
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return None
    needed = {k: v for k, v in keywords.items() if k in params and params[k].default is params[k].empty}
    for name, value in keywords.items():
        try:
            cls(make_arg(), **{**needed, name: value})
        except (ValueError, TypeError) as err:
            return name, value, err
        except Exception:  # noqa: BLE001,S112  (another failure says nothing about this argument)
            continue
    return None


def init_arg_error(key: str, factory: Any, err: BaseException, make_arg: Callable[[], Any]) -> str | None:
    """One line for ``factory(...)``'s ``ValueError``/``TypeError`` caused by one of its config init_args.

    Names ``KEY.init_args.NAME`` and the value (``model.optimizer.init_args.momentum: None refused by
    SGD (...)``); torch's ``Invalid ...`` checks it cannot pin on one argument name ``KEY`` alone; any other
    error is not the config's (``None``: it keeps its traceback).
    """
    if not isinstance(err, ValueError | TypeError):
        return None
    found = refused_init_arg(factory, make_arg)
    if found is not None:
        name, value, own = found
        cls = _partial_class(factory)[0]  # type: ignore[index]  # found implies a class
        reason = f"{messages.shown(repr(value))} refused by {cls.__name__} ({messages.first_line(own)})"
        return messages.BAD_OPTIMIZER_SETTING.format(key=f"{key}.init_args.{name}", reason=reason)
    if isinstance(err, ValueError) and str(err).startswith("Invalid "):
        return messages.BAD_OPTIMIZER_SETTING.format(key=key, reason=messages.first_line(err))
    return None


def beyond_float32(factory: Any) -> tuple[str, float] | None:
    """A float init_arg of ``factory`` too large for float32 (``lr: 1e300``): ``(name, value)``, or ``None``.

    torch builds the optimizer with it and fails at the first step (``value cannot be converted to type
    float without overflow``), deep inside the training loop.
    """
    found = _partial_class(factory)
    largest = torch.finfo(torch.float32).max
    for name, value in (found[1] if found else {}).items():
        if isinstance(value, float) and abs(value) > largest:
            return name, value
    return None


def host_memory_bytes() -> int | None:
    """This machine's physical memory in bytes (``None`` where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def human_bytes(size: float) -> str:
    """``4000000000000`` -> ``"4.0 TB"`` (powers of 1000, as the allocator's messages count)."""
    for unit in ("bytes", "kB", "MB", "GB", "TB", "PB", "EB"):
        if size < 1000 or unit == "EB":
            return f"{size:.0f} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1000
    raise AssertionError("unreachable")


_HOST_ALLOCATION = re.compile(r"can't allocate memory: you tried to allocate (\d+) bytes")
_SIZE_OVERFLOW = re.compile(r"Storage size calculation overflowed with sizes=\[([^\]]*)\]")


def allocation_refused(err: BaseException) -> tuple[BaseException, str] | None:
    """The host allocator's refusal in ``err``'s chain and what was asked (``"4.0 TB"``), or ``None``.

    torch's ``DefaultCPUAllocator: can't allocate memory`` (more than the machine can map) and its
    ``Storage size calculation overflowed`` (more than 2**63 bytes): a size in a config far too large.
    """
    for raised in _chain(err):
        if not isinstance(raised, RuntimeError):
            continue
        text = str(raised)
        if match := _HOST_ALLOCATION.search(text):
            return raised, human_bytes(int(match.group(1)))
        if match := _SIZE_OVERFLOW.search(text):
            return raised, f"over {human_bytes(2**63)} (a tensor of shape ({match.group(1)}))"
    return None


HOST_ALLOCATION_REFUSED = (
    "the host could not allocate {asked}, more than this machine's {have} of memory; make the sizes "
    "in your config (net widths, data.num_samples, batch size) smaller"
)


def host_allocation_refused(err: BaseException) -> str | None:
    """torch's host allocator refusing a size no machine here has (the config's sizes are too big)."""
    found = allocation_refused(err)
    if found is None:
        return None
    have = host_memory_bytes()
    return HOST_ALLOCATION_REFUSED.format(asked=found[1], have=human_bytes(have) if have else "amount")


Translator = Callable[[BaseException], "str | None"]

# Tried in order; the first answer wins.
TRANSLATORS: tuple[Translator, ...] = (
    out_of_memory,
    state_dict_mismatch,
    dataloader_worker_died,
    bad_checkpoint_file,
    weights_only_refused,
    dataset_raised_in_worker,
    monitor_not_logged,
    trainer_argument_error,
    host_allocation_refused,
)


def _lit_gpu_cause(err: BaseException) -> LitGpuError | None:
    """The :class:`LitGpuError` an exception was explicitly raised from (``raise ... from``), if any."""
    seen: set[int] = set()
    cause = err.__cause__
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, LitGpuError):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__
    return None


def explain(err: BaseException) -> str | None:
    """One-line, actionable message for a :class:`LitGpuError` or a known failure, else ``None``."""
    if isinstance(err, LitGpuError):
        return str(err)
    if (cause := _lit_gpu_cause(err)) is not None:  # e.g. jsonargparse wraps errors raised in __init__
        return str(cause)
    for translate in TRANSLATORS:
        message = translate(err)
        if message:
            return message
    return None
