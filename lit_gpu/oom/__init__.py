"""Out of memory: :class:`OOMRecovery` (``--oom_recovery true``) retries a step in micro-batches and keeps the
effective batch; :class:`OOMLoopName` names the loop in the one-line message; :class:`OOMAbove` rehearses an
out-of-memory error on any machine, a CPU included (``--trainer.callbacks+=lit_gpu.oom.OOMAbove``)."""

from lit_gpu.oom.recovery import OOMLoopName, OOMRecovery
from lit_gpu.oom.rehearse import OOMAbove

__all__ = ["OOMAbove", "OOMLoopName", "OOMRecovery"]
