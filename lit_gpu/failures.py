"""One-line answers for the failures users hit most: OOM, bad checkpoints, dead DataLoader workers.

Registered in :data:`lit_gpu.errors.TRANSLATORS`; ``lit-gpu`` prints the message and exits 2.
"""

from __future__ import annotations

import pickle
import re
import zipfile

import torch

from lit_gpu.checkpoints import LoadReport

OOM_ADVICE = (
    "out of memory during {what}{detail}. Next steps: (1) a smaller batch, e.g. --data.batch_size {half}; "
    "(2) keep the effective batch with --trainer.accumulate_grad_batches 2 (or more); "
    "(3) mixed precision: --config configs/trainer/amp.yaml (or bf16.yaml); "
    "(4) a model too big for one GPU: --config configs/trainer/fsdp.yaml; "
    "(5) let Lightning find the largest batch that fits: lit-gpu fit ... --tune_batch_size true"
)


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _is_oom(err: BaseException) -> bool:
    if isinstance(err, torch.OutOfMemoryError):
        return True
    text = str(err)
    return isinstance(err, RuntimeError) and (
        "CUDA out of memory" in text or "out of memory" in text.lower()[:80]
    )


def oom_message(err: BaseException, batch_size: int | None = None) -> str:
    """The next-steps message for an out-of-memory error."""
    match = re.search(r"Tried to allocate ([\d.]+ \w+)", str(err))
    detail = f" (tried to allocate {match.group(1)})" if match else ""
    half = max(1, batch_size // 2) if batch_size else "<half the current value>"
    return OOM_ADVICE.format(what="training", detail=detail, half=half)


_KEYS = re.compile(r'"([^"]+)"')


def _state_dict_mismatch(text: str) -> str | None:
    if "Error(s) in loading state_dict" not in text:
        return None
    report = LoadReport()
    target = re.search(r"loading state_dict for (\w+)", text)
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("Missing key(s)"):
            report.missing = _KEYS.findall(line)
        elif line.startswith("Unexpected key(s)"):
            report.unexpected = _KEYS.findall(line)
        elif line.startswith("size mismatch for"):
            m = re.match(
                r"size mismatch for ([^:]+): copying a param with shape torch\.Size\(\[([^\]]*)\]\) from "
                r"checkpoint, the shape in current model is torch\.Size\(\[([^\]]*)\]\)",
                line,
            )
            if m:
                shape = lambda s: tuple(int(x) for x in s.split(",") if x.strip())  # noqa: E731
                report.shape_mismatches[m.group(1)] = (shape(m.group(2)), shape(m.group(3)))
    name = target.group(1) if target else "the model"
    return (
        f"the checkpoint does not fit {name}: {report.summary()}; it is a checkpoint of another model "
        "or config: pass the matching --config, or another --ckpt_path"
    )


def translate(err: BaseException) -> str | None:
    """One-line message for a known failure, else ``None``."""
    text = str(err)
    if _is_oom(err):
        return oom_message(err)
    if isinstance(err, RuntimeError):
        mismatch = _state_dict_mismatch(text)
        if mismatch:
            return mismatch
        if "DataLoader worker" in text and ("exited unexpectedly" in text or "killed by signal" in text):
            return (
                f"a DataLoader worker process died ({_first_line(err)}); usual causes: out of host or "
                "shared memory (/dev/shm; in Docker use --shm-size 8g or --ipc host) or a crash in native "
                "dataset code; retry with fewer workers, or --data.num_workers 0 to see the real error"
            )
        if "PytorchStreamReader failed" in text or "failed finding central directory" in text:
            return (
                f"the checkpoint is corrupt or truncated ({_first_line(err)}); use another checkpoint "
                "(e.g. an earlier last.ckpt or best-*.ckpt)"
            )
        if "Attempting to deserialize object on a CUDA device" in text:
            return (
                "the checkpoint was saved on a GPU and this machine has none; load it with "
                "map_location='cpu' (lit_gpu.checkpoints.load_into does this by default)"
            )
    if isinstance(err, pickle.UnpicklingError | EOFError | zipfile.BadZipFile) and (
        "Weights only load failed" not in text
    ):
        return f"the checkpoint is corrupt or truncated ({_first_line(err)}); use another checkpoint"
    if "in DataLoader worker process" in text:
        original = next((ln for ln in reversed(text.strip().splitlines()) if ln.strip()), _first_line(err))
        return (
            f"the dataset raised {type(err).__name__} in a DataLoader worker ({original.strip()}); "
            "rerun with --data.num_workers 0 to get the full traceback"
        )
    return None
