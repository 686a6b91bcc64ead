"""What lit-gpu says to the user: one constant per message, and the one way to print it.

Error answers (``lit-gpu: error: ...``) are built from these by :mod:`lit_gpu.errors` and by the code
that raises :class:`~lit_gpu.errors.LitGpuError`; progress lines (``lit-gpu: resuming from ...``) go
through :func:`tell`, which prints once per job (global rank zero).
"""

from __future__ import annotations

import os
import shlex
import sys
import unicodedata
from typing import Any, TextIO

PREFIX = "lit-gpu: "

# ---- fixes that several answers share -----------------------------------------------------------
CPU_FIX = "to run on CPU use --config lit_gpu:trainer/cpu or --trainer.accelerator cpu"

# ---- error answers ------------------------------------------------------------------------------
CORRUPT_CHECKPOINT = (
    "{what} is corrupt or truncated ({reason}); use another checkpoint "
    "(e.g. an earlier last.ckpt or best-*.ckpt) or re-download the file"
)
SAVED_ON_GPU = (
    "{what} was saved on a GPU and this machine has none; load it with map_location='cpu' "
    "(lit_gpu.checkpoints.load_into does this by default)"
)
NO_GPU = "{source} asks for a GPU, but none is available{why}; " + CPU_FIX + " (details: lit-gpu env)"
TOO_FEW_GPUS = (
    "{source} asks for GPUs {requested}, but only {count} {verb} visible {available}; "
    "use --trainer.devices {count} (or 'free:N'), or " + CPU_FIX
)
NUM_CLASSES_MISMATCH = (
    "the net {net} outputs {outputs} classes but model.num_classes is {num_classes}; "
    "set --model.num_classes {outputs} or change the net's output size to {num_classes}"
)
BAD_OPTIMIZER_SETTING = "{key}: {reason}; fix its init_args on the command line or in your config"
BAD_DATA_CHOICE = (
    "data.{name} must be one of {choices}, got {value!r}; set --data.{name} (or {name}: in your config)"
)
SWEEP_SPACE_SETS_A_SWITCH = (
    "a search space cannot set what a trial resumes from or a safety switch (config, ckpt_path, "
    "weights_only, trust_module, predict_out); remove it from the space file"
)
BAD_TRAINER_SETTING = (
    "{source}: invalid trainer setting: {reason}; "
    "fix it on the command line or in the config's trainer: section"
)
BAD_DATA_SETTING = (
    "data.{name} must be {rule}, got {value!r}; set --data.{name} (or {name}: in your config) to {example}"
)
TRUNCATED_IDX_FILE = (
    "{path} is truncated or corrupt: {size} bytes, its header promises {expected} bytes; "
    "delete it and download MNIST again (--data.download true) or copy the file again"
)
NOT_AN_IDX_FILE = (
    "{path} is not an IDX file (magic number {magic:#010x}); delete it and download MNIST again "
    "(--data.download true) or copy the real file there"
)
PICKLE_REFUSED = (
    "{path} holds pickled Python objects, which can run code when loaded, so weights-only loading refused "
    "it; use a checkpoint that holds weights only (any lit-gpu fit writes one), or, only if you trust the "
    "file and where it came from, {opt_out}"
)

SWEEP_BAD_SPACE = (
    "search space {where}: {what}; write e.g. 'model.init_args.optimizer.init_args.lr: "
    "{{type: float, low: 1.0e-4, high: 0.1, log: true}}' (types: float, int, categorical)"
)
SWEEP_SPACE_NOT_FOUND = "search space {path} not found; pass e.g. --search lit_gpu:sweeps/simple"
SWEEP_UNKNOWN_KEY = "search space {path}: {key} is not a setting of this run's config; {hint}"
SWEEP_BAD_COUNT = "{flag} must be 0 ({zero}) or more, got {value}"
SWEEP_TWO_BUDGETS = (
    "--n_trials and --until_complete both given; pass one: --n_trials N runs N more trials, "
    "--until_complete N runs until the study holds N finished trials"
)
SWEEP_NEEDS_OPTUNA = "lit-gpu sweep needs optuna ({error}); install it: pip install 'lit-gpu[sweep]'"
SWEEP_RUN_DIR_OUTSIDE = (
    "storage {storage}: trial {number}'s run_dir {path} is not its own folder {own} in the sweep folder "
    "{folder}; the storage was written by someone else: use a new --study_name or --storage"
)
SWEEP_TRIAL_LINKS_OUT = (
    "not running trial {number} in {folder}: it holds links that lead outside it ({links}), so the trial "
    "would write there; remove them, or use a new --study_name"
)
SWEEP_VALUE_OUTSIDE = (
    "storage {storage}: trial {number} has {key}={value}, which {what} the search space {space}; a queued "
    "trial or a changed space: remove it from the storage, or use a new --study_name"
)
SWEEP_UNKNOWN_STORAGE = (
    "--storage {spec}: unknown scheme {scheme!r}; use a journal file path, sqlite:///sweep.db "
    "or postgresql://user:password@host/db"
)
SWEEP_OTHER_DIRECTION = (
    "study {study!r} was created with --direction {direction}; pass that, or a new --study_name"
)
SWEEP_OTHER_METRIC = (
    "study {study!r} optimises {metric}, not {given}; pass --metric {metric} or a new --study_name"
)
SWEEP_METRIC_NOT_LOGGED = (
    "--metric {metric} was never logged by trial {number} (logged: {logged}); pass one of those, and make "
    "sure the config validates (trainer.limit_val_batches > 0)"
)
GUARANTEES_SWITCH_INVALID = (
    "{name}={value!r} is neither true nor false; unset it (lit_gpu's guarantees on) or set it to false "
    "(off: a run behaves as Lightning's, with no stop checkpoint on SIGINT/SIGTERM)"
)

# ---- progress lines (printed with tell) ---------------------------------------------------------
STATE_PATHS_DROPPED = (
    "{ckpt}: ignored {count} path(s) in its callback state that lead outside {folder} ({fields}); "
    "nothing outside the run is touched"
)
REMOVE_OUTSIDE_REFUSED = (
    "not removing {path}: it is not a checkpoint file inside {dirpath} (resolved: {real}); left as it is"
)
RESUMED_BETWEEN_MICRO_BATCHES = (
    "resumed at {point}, between the micro-batches of an optimizer step ({done} of {every} accumulated):"
    " a checkpoint holds no accumulated gradients, so this run differs from an uninterrupted one"
    " (lit_gpu writes last.ckpt and a stop's checkpoint only at a step's end)"
)
RESUMED_UNSTARTED_EPOCH = (
    "the checkpoint was written by a fit that itself resumed at an epoch's last batch without lit_gpu's"
    " fix (an older lit_gpu): its epoch counters are repaired (steps continue exactly), but this epoch's"
    " aggregates (*_epoch in metrics.csv) hold only its batches from here"
)
MONITOR_FALLBACK = (
    "{model} does not log {monitor!r} ({logged}); keeping last.ckpt only; "
    "pick best checkpoints with --checkpoint.monitor NAME"
)
CUDA_GRAPH_ASIDE = "whole-step capture (speed.cuda_graph) stands aside, steps run as usual: {reason}"
REMOVED_STALE_TEMP = "removed {file}, left by a killed save"
WROTE_PREDICTIONS = "wrote {rows} predictions to {path}"
EXPORTED = "exported {weights} (metadata: {sidecar})"
WROTE_PLOT = "wrote {path} ({width}x{height} px)"
FREE_GPU_OF_RANK = "local rank {rank} -> GPU {index} {name} ({uuid})"
DEPENDENCY_OUT_OF_RANGE = "{name} {found}: lit-gpu supports {supported}; pip install '{requirement}'"
CUDA_READS_PART = (
    "CUDA_VISIBLE_DEVICES={value}: CUDA reads it as {listed} (the list ends at the first entry that is not a "
    "GPU index or UUID); give GPU indices or UUIDs separated by commas"
)
FINISHED_RUN = (
    "nothing to train: {ckpt} is of a run that already reached {limit} ({point}); to train it further "
    "resume with a larger {flag} (e.g. {example}; add --new_run true to log that into a new folder), "
    "or leave out --ckpt_path to start a new run"
)
TORCHVISION_MISMATCH = (
    "torchvision {vision} does not fit torch {torch} ({why}): they come from different builds; install the "
    "pair from one index: pip install --force-reinstall 'torch=={base}' '{wanted}'{index}"
)

# a resume whose training loader is not the checkpoint's (resume/state.py, resume/plain.py)
LOADER_CHANGED = (
    "resumed at {point}, but the training loader changed since the checkpoint ({what}): its order from here"
    " on is not the stopped run's, so this run differs from an uninterrupted one"
)


#: longest text from a file shown in one message; the rest is cut with an ellipsis
SHOWN_MAX_CHARS = 200


def shown(value: object, *, limit: int = SHOWN_MAX_CHARS) -> str:
    """``value`` as one safe line for a terminal or log: the one function for text that came from a file.

    Every string read from a file, a checkpoint or a model (a path, a step, a name, a metric key) goes
    through here before it is printed: control characters (newlines, escape sequences, C1 codes, bidi
    overrides) are written as Python escapes (``\\n``, ``\\x1b``), so a file cannot forge a ``lit-gpu:``
    line, move the cursor or set a terminal's title (format characters and lone surrogates too: ``\\u202e``);
    longer texts are cut at ``limit`` characters.
    """
    text = value if isinstance(value, str) else str(value)
    out = []
    for char in text:
        code = ord(char)
        if char == "\\":
            out.append(char)
        elif code < 0x20 or 0x7F <= code < 0xA0 or _hidden(char):
            out.append(char.encode("unicode_escape").decode("ascii") if code < 0x100 else _escape(code))
        else:
            out.append(char)
    line = "".join(out)
    return line if len(line) <= limit else line[: limit - 1] + "\u2026"


def _escape(code: int) -> str:
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _hidden(char: str) -> bool:
    """A format character (Cf: reorders or hides text), a line or paragraph separator, or a lone surrogate
    (from a file's undecodable bytes or a pickled string: printing it raises UnicodeEncodeError)."""
    return ord(char) >= 0xA0 and unicodedata.category(char) in ("Cf", "Cs", "Zl", "Zp")


def first_line(err: BaseException) -> str:
    """The first line of an exception's message, or its type name when the message is empty."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


#: the variables Lightning reads a process's rank from before a Trainer sets it (lightning.fabric's _get_rank)
_RANK_VARIABLES = ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK")


def _global_rank() -> int:
    """Lightning's global rank where Lightning is imported, else the launcher's (environment); no import."""
    rank_zero = sys.modules.get("lightning.fabric.utilities.rank_zero")
    if rank_zero is not None:
        return int(getattr(rank_zero.rank_zero_only, "rank", 0) or 0)
    for key in _RANK_VARIABLES:
        value = os.environ.get(key)
        if value is not None:
            try:
                return int(value)
            except ValueError:
                return 0
    return 0


#: longest line printed (progress, resolution, error); one line, whatever text from outside it quotes
LINE_MAX_CHARS = ERROR_MAX_CHARS = 4000


def one_line(text: str) -> str:
    """``text`` as one printable line (:func:`shown`, line limit): what every printed line goes through."""
    return shown(text, limit=LINE_MAX_CHARS)


def tell(text: str, *, stream: TextIO | None = None) -> None:
    """Print ``lit-gpu: <text>`` as :func:`one_line` (flushed, stderr unless ``stream``) on global rank 0."""
    if _global_rank() == 0:
        print(PREFIX + one_line(text), file=sys.stderr if stream is None else stream, flush=True)


def tell_error(text: str) -> None:
    """Print ``lit-gpu: error: <text>`` to stderr, on every rank (each rank exits on its own).

    The whole line goes through :func:`shown`: whatever an error quotes from a file or an exception (a path,
    a key, a value), it stays one line with no control characters, so no file can forge a line or drive
    the terminal through an error.
    """
    print(f"{PREFIX}error: {one_line(text)}", file=sys.stderr, flush=True)


# ---- the resume command: words several rooms print (progress lines, the stop line) ----------------------
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
    program = " ".join(command_word(word) for word in command_program() or _program(argv))
    program = command_env() + program  # PYTHONPATH=. where the run needed it
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
    """``word`` as a bash (and zsh) word that reads back as ``word`` and that :func:`shown`
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


# ---- how a printed command starts ------------------------------------------------------------------
#: set by the CLI once it has built the model (every CLI sets it anew): the program that runs it (``lit-gpu``,
#: ``python train.py``) and the variables the run needed to find the user's code (``PYTHONPATH`` of a
#: ``lit-gpu init`` project), which a printed command (the stop line's) sets again
_COMMAND_PROGRAM: list[list[str]] = []  # [] or [words]
_COMMAND_ENV: dict[str, str] = {}


def command_starts(program: list[str] | None, env: dict[str, str]) -> None:
    """Commands printed from now on run ``program`` (None: the printer's own guess) with ``env`` set."""
    _COMMAND_PROGRAM[:] = [] if program is None else [list(program)]
    _COMMAND_ENV.clear()
    _COMMAND_ENV.update(env)


def command_program() -> list[str] | None:
    """The words of the program a printed command runs, or None (the printer guesses)."""
    return list(_COMMAND_PROGRAM[0]) if _COMMAND_PROGRAM else None


def command_env() -> str:
    """``PYTHONPATH=. `` (bash's per-command assignments, a trailing space) or ``""``."""
    import shlex

    return "".join(f"{name}={shlex.quote(value)} " for name, value in _COMMAND_ENV.items())


# ---- one numbering: every line that names an epoch or a step --------------------------------------------
# Lightning's own (docs/runs.md, "What the numbers mean"): an epoch is its 0-based index (current_epoch,
# metrics.csv's epoch, the checkpoint's epoch, the bar's "Epoch 1/2": index 1 of 0..2); a step is the
# 0-based index of the training step as Lightning's loggers write it (metrics.csv's step: global_step - 1
# once a step is done); a batch b/B counts the batches done in the epoch, as the bar's counter does.
def epoch_point(epoch: int, epochs: Any, batch: int | None = None, batches: Any = None) -> str:
    """``epoch e/L batch b/B`` as the progress bar names a point of a fit: ``e`` Lightning's 0-based
    ``current_epoch`` of the last index ``L`` (``max_epochs - 1``), ``b`` the batches done in that epoch
    (``epochs``: ``max_epochs``; unknown ``L``/``B``: ?)."""
    text = f"epoch {epoch}/{epochs - 1 if epochs is not None else '?'}"
    return text if batch is None else f"{text} batch {batch}/{batches if batches is not None else '?'}"


def fit_point(trainer: Any, batch: int, epoch: int | None = None) -> str:
    """:func:`epoch_point` of a running fit: ``epoch`` (0-based; ``trainer``'s current one by default) of its
    ``max_epochs`` (unknown when unbounded), ``batch`` of its training batches (unknown when infinite)."""
    epochs = trainer.max_epochs if trainer.max_epochs is not None and trainer.max_epochs > 0 else None
    batches = trainer.num_training_batches
    epoch = trainer.current_epoch if epoch is None else epoch
    return epoch_point(epoch, epochs, batch, batches if batches != float("inf") else None)


def logged_step(trainer: Any) -> int:
    """The step of the last training step done as Lightning's loggers number it (metrics.csv's ``step``): from
    0, one a batch that stepped (``global_step - 1`` under automatic optimization); -1 before the first."""
    module = getattr(trainer, "lightning_module", None)
    if module is None or getattr(module, "automatic_optimization", True):
        return int(trainer.global_step) - 1
    return int(trainer.fit_loop.epoch_loop.batch_progress.total.processed) - 1  # manual: every batch steps


def optimizer_steps_note(global_step: int, batches: int | None) -> str:
    """``; optimizer steps: N a batch`` where the global step counts optimizer steps, not batches (manual
    optimization with several optimizers), else nothing."""
    if batches is None or batches <= 0 or global_step == batches:
        return ""
    per = global_step / batches
    return f"; global steps are optimizer steps: {per:g} a batch, {batches} batches"


def ckpt_point(step: Any, epoch: Any) -> str:
    """``step S, epoch E`` for a checkpoint: ``S`` the loggers' step of its last training step, ``E`` its
    0-based epoch, the numbers metrics.csv shows for that point."""
    return f"step {shown(step)}" + ("" if epoch is None else f", epoch {shown(epoch)}")
