"""What a progress line says and how it is written: its words, its numbers, text or strict JSON.

:class:`~lit_gpu.callbacks.progress_log.ProgressLog` decides *when* a line is due and counts what it
reports; this room turns one record of a point in the run (an ``event`` dict and its text) into the line
that is printed: ``lit-gpu: ...`` start and end lines, the trial's number under a sweep, text escaped
through :func:`~lit_gpu.messages.one_line`, or one strict JSON object a line (non-finite numbers as the
strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``; every control and non-ASCII character escaped).
"""

from __future__ import annotations

import json
import math
import os
import shlex
import sys
from typing import Any, Literal, NamedTuple, TextIO

from lit_gpu import messages, numbering
from lit_gpu.messages import shown

__all__ = [
    "Point",
    "clock",
    "end_line",
    "number",
    "point_line",
    "resume_command",
    "scalars",
    "start_line",
    "write_line",
]

PROGRESS_RUN = "run {folder}"
PROGRESS_RESUME = "; resume: {command}"
PROGRESS_END = "{stage} done in {wall}: {metrics}"
PROGRESS_END_CHECKPOINT = "; checkpoint {path}"
PROGRESS_END_BEST = " (best: {path})"


#: flags the resume command leaves out: the checkpoint is named anew, and the run continues in its folder
_REPLACED_FLAGS = ("--ckpt_path", "--new_run")


def resume_command(argv: list[str], checkpoint: str) -> str:
    """``lit-gpu <argv>`` with ``--ckpt_path checkpoint`` in place of any ``--ckpt_path`` it had
    (a ``--new_run true`` left out: the resume continues the folder of ``checkpoint``; a last ``--new_run
    false`` kept, as LitGpuCLI adds it where a config file set ``new_run: true``), as one line that bash
    reads back to the same words (:func:`command_word`). A command longer than :data:`RESUME_MAX_CHARS`
    (the printed line would be cut) names the arguments instead of a cut, wrong command."""
    kept: list[str] = []
    new_run: str | None = None  # the value of the last --new_run
    skip: str | None = None  # a dropped flag whose value comes next
    for arg in argv:
        if skip is not None:
            new_run = arg if skip == "--new_run" else new_run
            skip = None
            continue
        flag, equals, value = arg.partition("=")
        if flag in _REPLACED_FLAGS:
            if not equals:
                skip = flag
            elif flag == "--new_run":
                new_run = value
            continue
        kept.append(arg)
    if new_run is not None and new_run.strip().lower() == "false":  # a file may say new_run: true
        kept += ["--new_run", "false"]
    program = " ".join(command_word(word) for word in messages.command_program() or _program(argv))
    program = messages.command_env() + program  # PYTHONPATH=. where the run needed it
    command = " ".join([program, *(command_word(word) for word in [*kept, "--ckpt_path", checkpoint])])
    if len(command) > RESUME_MAX_CHARS:
        return f"{program} <the same arguments> --ckpt_path {command_word(checkpoint)}"
    return command


def _program(argv: list[str]) -> list[str]:
    """The words that started this process before ``argv``: ``lit-gpu``, or, when ``argv`` is this process's
    own command line run by another program (``python train.py`` with a LitGpuCLI of its own, ``python -m
    lit_gpu``), those words as Python recorded them (``sys.orig_argv``): the resume runs the same CLI."""
    own = sys.argv[1:]
    if not own or argv[: len(own)] != own or os.path.basename(sys.argv[0]) == "lit-gpu" or not sys.argv[0]:
        return ["lit-gpu"]
    words = sys.orig_argv[: len(sys.orig_argv) - len(own)]
    return words if words and own == sys.orig_argv[len(words) :] else ["lit-gpu"]


#: the longest resume command printed whole (a stop line is cut at messages.LINE_MAX_CHARS)
RESUME_MAX_CHARS = 3000


def command_word(word: str) -> str:
    """``word`` as a bash (and zsh) word that reads back as ``word`` and that :func:`~lit_gpu.messages.shown`
    prints unchanged: ``shlex.quote``, or, where ``word`` holds a character ``shown`` would escape (a
    newline, a control, a bidi or format character, an undecodable byte), ANSI-C quoting ``$'...'`` with
    that character's bytes as ``\\xHH`` (bash's definition of ``$'...'``; ``!`` as ``\\x21``: no history
    expansion)."""
    if all(shown(char) == char for char in word):
        return shlex.quote(word)
    out = []
    for char in word:
        if char in "\\'":
            out.append("\\" + char)
        elif char == "!" or shown(char) != char:
            try:
                raw = os.fsencode(char)  # a lone surrogate: the undecodable byte it stands for
            except UnicodeEncodeError:
                raw = char.encode("utf-8", "surrogatepass")
            out.append("".join(f"\\x{byte:02x}" for byte in raw))
        else:
            out.append(char)
    return "$'" + "".join(out) + "'"


def clock(seconds: float) -> str:
    """``H:MM:SS``; ``?`` for a time not known (not finite, negative)."""
    if not math.isfinite(seconds) or seconds < 0:
        return "?"
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def number(value: float) -> str:
    """A metric's value in a text line: four significant digits."""
    return f"{value:.4g}" if abs(value) < 1e5 else f"{value:.3e}"


def _strict(value: Any) -> Any:
    """``value`` with every non-finite float as the string ``"NaN"``, ``"Infinity"`` or ``"-Infinity"``."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {key: _strict(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_strict(item) for item in value]
    return value


def scalars(metrics: dict[str, Any]) -> dict[str, float]:
    """The metrics that are numbers, as floats (one ``.item()`` each where they are tensors)."""
    out: dict[str, float] = {}
    for key, value in metrics.items():
        try:
            out[key] = float(value)  # progress_bar_metrics are floats already; one .item() otherwise
        except (TypeError, ValueError, RuntimeError):
            continue
    return out


def write_line(
    event: dict[str, Any],
    text: str,
    *,
    format: Literal["text", "json"],  # noqa: A002 - the flag's name
    trial: int | None,
    stream: TextIO,
) -> None:
    """Print one line: ``text`` (escaped) or ``event`` as strict JSON, with the sweep trial's number."""
    if trial is not None:
        event = {"trial": trial, **event}
        prefix = messages.PREFIX if text.startswith(messages.PREFIX) else ""
        text = f"{prefix}trial {trial} {text.removeprefix(prefix)}"
    print(  # JSON escapes every control and non-ASCII character (ensure_ascii); text: one_line
        json.dumps(_strict(event), separators=(",", ":"), allow_nan=False, ensure_ascii=True)
        if format == "json"
        else messages.one_line(text),
        file=stream,
        flush=True,
    )


def start_line(stage: str, folder: str | None, shown_folder: Any, resume: str | None) -> tuple[dict, str]:
    """The start line of a command: its run folder and, for a fit, the command that resumes it."""
    text = PROGRESS_RUN.format(folder=shown(shown_folder))
    event: dict[str, Any] = {"event": "start", "stage": stage, "folder": folder}
    if stage == "fit":
        event["resume"] = resume
    if resume:
        text += PROGRESS_RESUME.format(command=shown(resume, limit=messages.LINE_MAX_CHARS))
    return event, text


def end_line(
    stage: str, wall: float, metrics: dict[str, float], path: str, best: str
) -> tuple[dict[str, Any], str]:
    """The end line of a command: wall time, final metrics, the last (and best) checkpoint of a fit."""
    listed = " ".join(f"{shown(k)}={number(v)}" for k, v in metrics.items())
    text = PROGRESS_END.format(stage=stage, wall=clock(wall), metrics=listed or "no metrics logged")
    if path:
        text += PROGRESS_END_CHECKPOINT.format(path=shown(path))
        if best and best != path:
            text += PROGRESS_END_BEST.format(path=shown(best))
    event: dict[str, Any] = {"event": "end", "stage": stage, "wall_s": round(wall, 3), "metrics": metrics}
    event["checkpoint"] = path or None
    if best:
        event["best"] = best
    return event, text


class Point(NamedTuple):
    """Where a progress line stands: the stage, a fit's epoch (Lightning's 0-based index, of ``max_epochs``),
    the batches done in the epoch (or the evaluation) and how many there are, a fit's step as its loggers
    number it (metrics.csv's ``step``), the global step, and the run's percent done."""

    stage: str
    epoch: tuple[int, int | None] | None
    epoch_end: bool
    batch: int
    batches: int | float
    step: int | None
    global_step: int
    percent: float | None


def point_line(
    point: Point, metrics: dict[str, float], rate: float, elapsed: float, eta: float
) -> tuple[dict[str, Any], str]:
    """A progress line: stage, epoch/last, batch/total, step, percent, metrics, samples/s, elapsed and ETA."""
    event: dict[str, Any] = {"event": "epoch_end" if point.epoch_end else "progress", "stage": point.stage}
    parts = [point.stage]
    if point.epoch is not None:
        epoch, epochs = point.epoch
        event.update(epoch=epoch, epochs=epochs)
        parts.append(numbering.epoch_point(epoch, epochs) + (" end" if point.epoch_end else ""))
    finite = math.isfinite(point.batches)
    batches = int(point.batches) if finite else None
    event.update(batch=point.batch, batches=batches, step=point.step, global_step=point.global_step)
    parts.append(f"batch {point.batch}/{batches if finite else '?'}")
    if point.step is not None:
        parts.append(f"step {point.step}")
    if point.percent is not None:
        parts.append(f"({point.percent:.0f}%)")
    parts += [f"{shown(k)}={number(v)}" for k, v in metrics.items()]
    parts += ["|", f"{rate:.0f} samples/s", "|", clock(elapsed), "ETA", clock(eta)]
    event.update(
        percent=None if point.percent is None else round(point.percent, 2),
        metrics=metrics,
        samples_per_s=round(rate, 2),
        elapsed_s=round(elapsed, 3),
        eta_s=None if math.isnan(eta) else round(eta, 3),
    )
    return event, " ".join(parts)
