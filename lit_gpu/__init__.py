"""lit_gpu: config-driven GPU training recipes on PyTorch Lightning 2.x."""

from lit_gpu import _quiet
from lit_gpu.errors import LitGpuError

_quiet.install()

from lit_gpu import strategies  # noqa: E402,F401  (registers Trainer(strategy="dp"))

__version__ = "0.1.0"

__all__ = ["LitGpuError", "__version__"]
