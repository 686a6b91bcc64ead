"""Before a command runs: the model has data to run on, or one line says what to pass.

Without a data module (none given, or the ``data:`` of a run's ``config.yaml`` left out because it was
not a ``class_path`` spec, e.g. a URL) and a model with no loader of its own, Lightning stops deep inside
the loop with "`test_dataloader` must be implemented"; this check runs before, where the command is known.
"""

from __future__ import annotations

from typing import Any

from lit_gpu.errors import LitGpuError
from lit_gpu.messages import shown

#: the loader hook each command needs (Lightning's names)
LOADERS = {
    "fit": "train_dataloader",
    "validate": "val_dataloader",
    "test": "test_dataloader",
    "predict": "predict_dataloader",
}
NO_DATA = (
    "no data to {command} on: no data module was given and the model {model} has no "
    "{hook}; pass one with --data CLASS_PATH (e.g. --data lit_gpu.data.MNISTDataModule) or --config FILE "
    "with a data: section"
)
DATA_LACKS_LOADER = (
    "the data module {data} has no {hook}, so there is nothing to {command} on; "
    "use a data module that provides it (--data CLASS_PATH) or another command"
)


def _name(obj: Any) -> str:
    return shown(f"{type(obj).__module__}.{type(obj).__qualname__}")


def check_has_data(model: Any, datamodule: Any, command: str) -> None:
    """Raise a one-line :class:`LitGpuError` when ``command`` would find no loader to run on."""
    from lightning.pytorch.utilities.model_helpers import is_overridden

    hook = LOADERS.get(command)
    if hook is None:
        return
    if datamodule is not None:
        if not is_overridden(hook, datamodule):
            raise LitGpuError(DATA_LACKS_LOADER.format(command=command, data=_name(datamodule), hook=hook))
        return
    if not is_overridden(hook, model):
        raise LitGpuError(NO_DATA.format(command=command, model=_name(model), hook=hook))
