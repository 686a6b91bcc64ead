"""What ``--oom_recovery`` says: its refusals (error answers) and its progress lines (printed with
:func:`lit_gpu.messages.tell`)."""

from __future__ import annotations

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
OOM_ADAPTED = "out of memory at step {step} ({point}) with {was} -> micro-batch {micro} x {count}"
OOM_ADAPTED_EVAL = "out of memory during {loop} at batch {index} with {was} -> micro-batch {micro} x {count}"
OOM_ADAPTED_PROCESSES = " on all {world} processes ({failed} ran out)"
OOM_ADAPTED_BATCHNORM = " (BatchNorm layers now compute batch statistics over {micro} samples, not {total})"
MICRO_BATCH_FROM_CHECKPOINT = (
    "micro-batch {micro} x {count} from the checkpoint (found by out-of-memory recovery)"
)
