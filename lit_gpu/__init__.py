"""lit_gpu: config-driven GPU training recipes on PyTorch Lightning 2.x.

Importing it has no side effect on warnings or logging (the ``lit-gpu`` CLI quiets upstream chatter
in :func:`lit_gpu.cli.main`); it registers ``Trainer(strategy="dp")`` in Lightning's strategy registry.
"""

from lit_gpu.errors import LitGpuError

try:  # registers Trainer(strategy="dp"); skipped where only torch is installed, so that
    # `lit_gpu.nets` (plain nn.Modules) still imports for exported models.
    from lit_gpu import strategies  # noqa: F401
except ModuleNotFoundError as err:  # pragma: no cover - exercised in a subprocess test
    if err.name is None or not err.name.startswith(("lightning", "torchmetrics", "jsonargparse")):
        raise

__version__ = "0.1.0"

__all__ = ["LitGpuError", "__version__"]
