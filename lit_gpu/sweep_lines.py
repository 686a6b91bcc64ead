"""What ``lit-gpu sweep`` says as it runs (progress lines, printed with :func:`lit_gpu.messages.tell`)."""

from __future__ import annotations

SWEEP_START = "study {study} ({done} trials so far), {more} more; runs in {folder}{how}"
SWEEP_TRIAL_START = "trial {number}: {params}{gpus} -> {folder}"
SWEEP_TRIAL_FINISHED = "trial {number} finished: {metric}={value}"
SWEEP_TRIAL_PRUNED = "trial {number} pruned after validation {step} ({metric}={value})"
SWEEP_TRIAL_FAILED = "trial {number} failed: {reason}"
SWEEP_INTERRUPTED = (
    "trial {number} stopped with its last.ckpt in {folder}; the same command continues it from there"
)
SWEEP_TRIAL_CONTINUE = "trial {number}: continuing ({why}): {params}{gpus} from {start}"
SWEEP_WAITING = (
    "{finished} of {target} trials finished; the others run in other workers: waiting for them "
    "(a stale one is continued here)"
)
SWEEP_NOTHING_COMPLETE = "no trial of study {study} has completed yet; no best.yaml or plot written"
SWEEP_WROTE_BEST = "wrote {path} (run it: lit-gpu fit --config {path})"
SWEEP_WROTE_PLOT = "wrote {path}"
