"""``strategy: dp``: plain PyTorch's ``torch.nn.DataParallel`` as a Lightning 2.x strategy.

One process; each batch is split across ``devices`` CUDA GPUs and the outputs are gathered on the
first. Only the LightningModule's *net* (``module.net``; see ``net_attr``) is wrapped, so
``training_step``, ``self.log`` and torchmetrics run on the main thread exactly as on one device,
and checkpoints keep the single-device keys (no ``module.`` prefix).

Behaviour by device count:
    * one device (CPU, or a single GPU): equivalent to single-device training; no warning;
    * several CUDA GPUs: DataParallel over the net;
    * several CPU (or other non-CUDA) devices: refused with a pointer to ``strategy: ddp``.
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import torch
from lightning.fabric.plugins import CheckpointIO
from lightning.fabric.utilities.distributed import ReduceOp
from lightning.pytorch.plugins.precision import Precision
from lightning.pytorch.strategies import ParallelStrategy, StrategyRegistry
from lightning.pytorch.strategies.strategy import TBroadcast
from torch import Tensor, nn
from typing_extensions import override

from lit_gpu.errors import LitGpuError
from lit_gpu.upstream import stands_aside

__all__ = ["DataParallelStrategy", "missing_net_message", "register", "unwrap_net", "wrap_net"]

DP_NO_SUCH_NET = (
    "strategy 'dp' parallelises the sub-module {attr!r}, which {model} does not have; its sub-modules: "
    "{listed}; name one with --trainer.strategy lit_gpu.strategies.DataParallelStrategy "
    "--trainer.strategy.net_attr {first} (or use --trainer.strategy ddp)"
)
DP_NO_SUB_MODULE = (
    "strategy 'dp' splits the batch over one sub-module of the model, but {model} has no "
    "sub-module with parameters; use --trainer.strategy ddp (one process per GPU) instead"
)


# ---- ParallelStrategy's protected set-up hooks behind public names (feature ``dp`` of lit_gpu.upstream:
# it cannot stand aside, there is no stock ``dp``; on another Lightning one line says so) ------------
class OneProcessStrategy(ParallelStrategy):
    """A parallel strategy in one process: no launcher, the model set up by :meth:`setup_net`."""

    def check_devices(self) -> None:
        """Refuse what the strategy cannot do; called once the Trainer has set accelerator and devices."""

    def setup_net(self, model: nn.Module) -> nn.Module:
        """Set up the model before the optimizers are built (as ``Strategy._setup_model``)."""
        return model

    @override
    def _configure_launcher(self) -> None:
        stands_aside("dp")  # cannot stand aside: on a mismatch the line says so, and it runs
        self.check_devices()
        self._launcher = None

    @override
    def _setup_model(self, model: nn.Module) -> nn.Module:
        return self.setup_net(model)


def register_strategy(name: str, cls: type, description: str, registry: Any = StrategyRegistry) -> None:
    """Register ``cls`` as ``Trainer(strategy=name)`` in Lightning's StrategyRegistry (idempotent)."""
    if name not in registry:
        registry.register(name, cls, description=description)


class AutocastReplica(nn.Module):
    """Runs ``net`` under the autocast state captured on the main thread.

    torch's ``parallel_apply`` re-enters autocast in every replica thread with ``enabled=`` only, so
    the dtype falls back to the device default (float16 on CUDA): ``bf16-mixed`` would silently
    train in fp16. Autocast state is thread-local, so the main thread records it here
    (:meth:`capture_autocast`) before replication and each replica re-enters it explicitly.

    Args:
        net: The module to run.
        device_type: Autocast device type (``"cuda"`` for DataParallel; ``"cpu"`` in tests).
    """

    def __init__(self, net: nn.Module, device_type: str = "cuda") -> None:
        super().__init__()
        self.net = net
        self.device_type = device_type
        self.autocast_enabled = False
        self.autocast_dtype: torch.dtype = torch.get_autocast_dtype(device_type)

    def capture_autocast(self) -> None:
        """Record the calling thread's autocast state; replicas copy these attributes."""
        self.autocast_enabled = torch.is_autocast_enabled(self.device_type)
        self.autocast_dtype = torch.get_autocast_dtype(self.device_type)

    @override
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        with torch.autocast(self.device_type, dtype=self.autocast_dtype, enabled=self.autocast_enabled):
            return self.net(*args, **kwargs)


class NetDataParallel(nn.DataParallel):
    """``nn.DataParallel`` over an :class:`AutocastReplica`; unknown attributes fall through to the net.

    ``self.net.some_layer`` inside a LightningModule keeps working while the net is wrapped.
    """

    @override
    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        self.module.capture_autocast()
        return super().forward(*inputs, **kwargs)

    @override
    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name == "module":
                raise
            return getattr(super().__getattr__("module").net, name)


def wrap_net(
    module: nn.Module,
    attr: str = "net",
    device_ids: list[int] | None = None,
    device_type: str = "cuda",
) -> NetDataParallel:
    """Make ``module.<attr>`` run through DataParallel without changing the module's state_dict.

    The raw net stays registered as the child ``attr`` (parameters, ``state_dict``, ``.to()``
    are unchanged: no ``module.`` keys); an instance ``__dict__`` entry of the same name shadows it,
    so ``module.<attr>(x)`` calls the DataParallel wrapper. :func:`unwrap_net` removes the shadow.

    Raises:
        LitGpuError: if ``module.<attr>`` is not an ``nn.Module``.
    """
    net = dict(module.named_children()).get(attr)
    if not isinstance(net, nn.Module):
        raise LitGpuError(missing_net_message(module, attr))
    output_device = device_ids[0] if device_ids else None
    wrapper = NetDataParallel(
        AutocastReplica(net, device_type), device_ids=device_ids, output_device=output_device
    )
    module.__dict__[attr] = wrapper
    return wrapper


def missing_net_message(module: nn.Module, attr: str) -> str:
    """One line: the model has no sub-module ``attr``; name one of its sub-modules, or use ddp."""
    name = type(module).__name__
    children = [(n, type(m).__name__) for n, m in module.named_children() if list(m.parameters())]
    if not children:
        return DP_NO_SUB_MODULE.format(model=name)
    listed = ", ".join(f"{n} ({t})" for n, t in children[:6]) + (", ..." if len(children) > 6 else "")
    return DP_NO_SUCH_NET.format(attr=attr, model=name, listed=listed, first=children[0][0])


def unwrap_net(module: nn.Module, attr: str = "net") -> None:
    """Remove the shadow installed by :func:`wrap_net` (no-op when there is none)."""
    if isinstance(module.__dict__.get(attr), NetDataParallel):
        del module.__dict__[attr]


def _reduce_per_replica(tensor: Tensor, reduce_op: Any) -> Tensor:
    op = reduce_op.lower() if isinstance(reduce_op, str) else reduce_op
    if op in ("mean", "avg", None) or op == ReduceOp.AVG:
        return tensor.float().mean().to(tensor.dtype)
    if op == "sum" or op == ReduceOp.SUM:
        return tensor.sum()
    if op == "max" or op == ReduceOp.MAX:
        return tensor.max()
    if op == "min" or op == ReduceOp.MIN:
        return tensor.min()
    raise ValueError(f"strategy 'dp' cannot reduce with reduce_op={reduce_op!r}")


class DataParallelStrategy(OneProcessStrategy):
    """DataParallel over ``lightning_module.<net_attr>`` in one process; root device = first GPU.

    The step methods, logging, metrics, loss and optimizer run on the main thread on the first GPU
    with the gathered outputs, so the loss equals single-device training on the same batch and
    ``bf16-mixed``/``16-mixed`` (GradScaler) behave as on one device. Rank 0 of a world of 1:
    ``scale_lr_by_world_size`` does not scale (the global batch is ``batch_size`` as on one GPU).

    Args:
        accelerator: Set by the Trainer.
        parallel_devices: Set by the Trainer from ``devices``.
        checkpoint_io: Checkpoint plugin.
        precision_plugin: Set by the Trainer from ``precision``.
        net_attr: Name of the LightningModule attribute holding the network to parallelise.
    """

    strategy_name = "dp"

    def __init__(
        self,
        accelerator: pl.accelerators.Accelerator | None = None,
        parallel_devices: list[torch.device] | None = None,
        checkpoint_io: CheckpointIO | None = None,
        precision_plugin: Precision | None = None,
        net_attr: str = "net",
    ) -> None:
        super().__init__(
            accelerator=accelerator,
            parallel_devices=parallel_devices,
            cluster_environment=None,
            checkpoint_io=checkpoint_io,
            precision_plugin=precision_plugin,
        )
        self.net_attr = net_attr

    # ---- one process: rank 0 of 1 ---------------------------------------------------------
    @property
    @override
    def root_device(self) -> torch.device:
        if not self.parallel_devices:
            return torch.device("cpu")
        return self.parallel_devices[0]

    @property
    @override
    def global_rank(self) -> int:
        return 0

    @property
    @override
    def local_rank(self) -> int:
        return 0

    @property
    @override
    def node_rank(self) -> int:
        return 0

    @property
    @override
    def world_size(self) -> int:
        return 1

    @property
    def is_distributed(self) -> bool:
        """Not distributed: one process, so no DistributedSampler and no ``sync_dist`` collectives."""
        return False

    @property
    @override
    def distributed_sampler_kwargs(self) -> None:
        return None

    @property
    def uses_data_parallel(self) -> bool:
        """Whether the net is wrapped in DataParallel (CUDA devices); else it is plain single-device."""
        return self.root_device.type == "cuda"

    @override
    def check_devices(self) -> None:
        # called once the Trainer has set accelerator and devices: refuse what dp cannot do, early
        devices = self.parallel_devices or []
        if len(devices) > 1 and any(d.type != "cuda" for d in devices):
            kind = devices[0].type
            raise LitGpuError(
                f"strategy 'dp' splits each batch across CUDA GPUs, but got {len(devices)} {kind} devices; "
                f"on {kind} use devices: 1 (same as single-device), or strategy: ddp for {len(devices)} "
                f"processes (--trainer.strategy ddp --trainer.devices {len(devices)})"
            )

    # ---- model ------------------------------------------------------------------------------
    @override
    def model_to_device(self) -> None:
        assert self.model is not None
        self.model.to(self.root_device)

    @override
    def setup_net(self, model: nn.Module) -> nn.Module:
        module = self.lightning_module
        if self.uses_data_parallel and module is not None:
            wrap_net(module, self.net_attr, device_ids=[d.index or 0 for d in self.parallel_devices or []])
        return model

    @override
    def teardown(self) -> None:
        if self.lightning_module is not None:
            unwrap_net(self.lightning_module, self.net_attr)
        super().teardown()

    # ---- collectives: one process ---------------------------------------------------------
    @override
    def reduce(self, tensor: Any, group: Any | None = None, reduce_op: Any = "mean") -> Any:
        """Return scalars unchanged (the step already saw the whole batch); reduce vectors.

        A net that returns a scalar per replica (e.g. its own loss) comes back from DataParallel's
        gather as a vector with one entry per GPU; ``reduce`` combines it with ``reduce_op``.
        """
        if isinstance(tensor, Tensor) and tensor.dim() > 0:
            return _reduce_per_replica(tensor, reduce_op)
        return tensor

    @override
    def all_gather(self, tensor: Tensor, group: Any | None = None, sync_grads: bool = False) -> Tensor:
        return tensor

    @override
    def barrier(self, *args: Any, **kwargs: Any) -> None:
        pass

    @override
    def broadcast(self, obj: TBroadcast, src: int = 0) -> TBroadcast:
        return obj

    @override
    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:
        return decision

    @classmethod
    @override
    def register_strategies(cls, strategy_registry: Any) -> None:
        register_strategy(cls.strategy_name, cls, cls.__doc__.splitlines()[0], strategy_registry)


def register() -> None:
    """Register ``"dp"`` in Lightning's StrategyRegistry (idempotent)."""
    register_strategy(
        DataParallelStrategy.strategy_name, DataParallelStrategy, DataParallelStrategy.__doc__.splitlines()[0]
    )
