"""What lit-gpu says to the user: one constant per message, and the one way to print it.

Error answers (``lit-gpu: error: ...``) are built from these by :mod:`lit_gpu.errors` and by the code
that raises :class:`~lit_gpu.errors.LitGpuError`; progress lines (``lit-gpu: resuming from ...``) go
through :func:`tell`, which prints once per job (global rank zero).
"""

from __future__ import annotations

import sys
from typing import TextIO

PREFIX = "lit-gpu: "

# ---- fixes that several answers share -----------------------------------------------------------
CPU_FIX = "to run on CPU use --config configs/trainer/cpu.yaml or --trainer.accelerator cpu"

# ---- error answers ------------------------------------------------------------------------------
CORRUPT_CHECKPOINT = (
    "{what} is corrupt or truncated ({reason}); use another checkpoint "
    "(e.g. an earlier last.ckpt or best-*.ckpt) or re-download the file"
)
SAVED_ON_GPU = (
    "{what} was saved on a GPU and this machine has none; load it with map_location='cpu' "
    "(lit_gpu.checkpoints.load_into does this by default)"
)
STATE_DICT_MISMATCH = (
    "the checkpoint does not fit {target}: {summary}; it is a checkpoint of another model or config: "
    "pass the matching --config, or another --ckpt_path"
)
OUT_OF_MEMORY = (
    "out of memory during {what}{detail}. Next steps: (1) a smaller batch, e.g. --data.batch_size {half}; "
    "(2) keep the effective batch with --trainer.accumulate_grad_batches 2 (or more); "
    "(3) mixed precision: --config configs/trainer/amp.yaml (or bf16.yaml); "
    "(4) a model too big for one GPU: --config configs/trainer/fsdp.yaml; "
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
NO_GPU = "{source} asks for a GPU, but none is available{why}; " + CPU_FIX + " (details: lit-gpu env)"
TOO_FEW_GPUS = (
    "{source} asks for GPUs {requested}, but only {count} {verb} visible {available}; "
    "use --trainer.devices {count} (or 'free:N'), or " + CPU_FIX
)
TUNE_NEEDS_BATCH_SIZE = "--tune_batch_size needs a data module with a batch_size argument"
OOM_RECOVERY_MANUAL_OPTIMIZATION = (
    "--oom_recovery splits batches under automatic optimization, but {module} uses manual optimization; "
    "catch torch.OutOfMemoryError in its training_step instead"
)
OOM_RECOVERY_STRATEGY = (
    "--oom_recovery works with one device, ddp and dp, not {strategy}; drop --oom_recovery, or use "
    "--trainer.strategy ddp"
)
OOM_RECOVERY_SYNC_BATCHNORM = (
    "--oom_recovery cannot be combined with SyncBatchNorm (--trainer.sync_batchnorm true): it exchanges "
    "statistics inside the forward pass, so an OOM on one process would hang the others"
)

# ---- progress lines (printed with tell) ---------------------------------------------------------
RESUMING_FROM = "resuming from {path}"
USING_CHECKPOINT = "using {path}"
BATCH_SIZE_FOUND = "batch-size finder chose data.batch_size={size}; set it in your config to skip tuning"
INTERRUPTED = "interrupted at global step {step}; saved {path}; resume with --ckpt_path last"
OOM_ADAPTED = "out of memory at step {step} with {was} -> micro-batch {micro} x {count}"
OOM_ADAPTED_PROCESSES = " on all {world} processes ({failed} ran out)"
OOM_ADAPTED_BATCHNORM = " (BatchNorm layers now compute batch statistics over {micro} samples, not {total})"
MICRO_BATCH_FROM_CHECKPOINT = (
    "micro-batch {micro} x {count} from the checkpoint (found by out-of-memory recovery)"
)
WROTE_PREDICTIONS = "wrote {rows} predictions to {path}"
EXPORTED = "exported {weights} (metadata: {sidecar})"
WROTE_PLOT = "wrote {path} ({width}x{height} px)"


def first_line(err: BaseException) -> str:
    """The first line of an exception's message, or its type name when the message is empty."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _global_rank() -> int:
    try:
        from lightning.fabric.utilities.rank_zero import rank_zero_only
    except ModuleNotFoundError:  # plain-torch installs (exported nets): one process
        return 0
    return int(getattr(rank_zero_only, "rank", 0) or 0)


def tell(text: str, *, stream: TextIO | None = None) -> None:
    """Print ``lit-gpu: <text>`` (flushed, to stderr unless ``stream``) on global rank zero only."""
    if _global_rank() == 0:
        print(PREFIX + text, file=sys.stderr if stream is None else stream, flush=True)


def tell_error(text: str) -> None:
    """Print ``lit-gpu: error: <text>`` to stderr, on every rank (each rank exits on its own)."""
    print(f"{PREFIX}error: {text}", file=sys.stderr, flush=True)
