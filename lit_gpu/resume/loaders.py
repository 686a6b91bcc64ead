"""Training loaders that resume at the exact sample, on any number of processes and any batch size.

:class:`ResumableDataLoader` (real workers) and :class:`TensorLoader` (index slicing of in-memory tensors),
and the checks of the loader settings every data module takes.

The state of a training loader is *global*: the epoch, the seed of that epoch's permutation, and
how many samples of it the whole job has consumed (its *position*). It is not a per-rank batch
count: only global rank 0 writes the checkpoint, and a resume may run on another number of
processes or with another batch size. Lightning (>= 2.2) stores ``state_dict()`` of the object
``train_dataloader()`` returns in the checkpoint (fit loop, ``combined_loader``) and hands it back
to ``load_state_dict()`` on resume; the loaders here implement both.

Order and sharding, identical for :class:`ResumableDataLoader` and
:class:`TensorLoader`:

* epoch ``e``'s order is ``randperm(N)`` seeded by ``(seed, e)`` (``arange(N)`` unshuffled);
* from position ``p`` on, the remaining ``N - p`` positions are padded by wrapping around (or
  trimmed with ``drop_last``) to a multiple of the world size ``W``, and rank ``r`` takes
  positions ``p + r, p + r + W, ...``. A global batch (all ranks' batch ``j``) is therefore the
  contiguous range ``[p + j*B*W, p + (j+1)*B*W)`` of the order, whatever ``W`` and ``B`` are, which
  is what makes a resume on another world size with the same global batch ``B*W`` equivalent.

Random per-sample work (augmentations) is seeded per sample from ``(seed, epoch, position)``, in
the worker or in the main process (then without touching the main process's random streams), so
it does not depend on which worker, which rank, or which batch size fetched the sample.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from lightning.pytorch.utilities.rank_zero import rank_zero_warn
from torch.utils.data import DataLoader, Dataset, DistributedSampler, get_worker_info

from lit_gpu import messages
from lit_gpu.devices import on_cuda
from lit_gpu.errors import LitGpuError
from lit_gpu.explain import host_memory_bytes, human_bytes

# ---- the global position, ResumableDataLoader -----------------------------------------------------

_MASK64 = (1 << 64) - 1
STATE_VERSION = 1


_POSITION_KEYS = ("epoch", "position", "seed", "shuffle")


def position_contract() -> list[Any]:
    """What a saved loader state must be: a dict, and where it is one of ours (it has ``num_items``), a
    :meth:`GlobalPosition.state_dict` with its position inside the epoch."""
    from lit_gpu.checkpoints import contracts as c
    from lit_gpu.resume.plain import LOADER_STATES, saved_replay_problem

    ours = c.fields(
        {
            "version": c.integer(0, 2**31),
            "epoch": c.integer(0, 2**62),
            "position": c.integer(0, 2**62),
            "seed": c.integer(-(2**63), 2**64 - 1),
            "shuffle": c.boolean(),
            "num_items": c.integer(0, 2**62),
        },
        required=_POSITION_KEYS,
    )

    def fits(state: Any) -> str | None:
        if not isinstance(state, dict):
            return ""
        if "replay_state" in state:  # a plain DataLoader made replayable (lit_gpu.resume.plain)
            return saved_replay_problem(state)
        if "num_items" not in state:
            return None  # another loader's state: not restored by lit_gpu
        if (problem := ours.problem(state)) is not None:
            return problem
        if state["position"] > state["num_items"]:
            return f"position {state['position']} past the epoch's {state['num_items']} samples"
        return None

    where = (*LOADER_STATES, c.EACH)
    spec = c.checked(
        "a loader state (a dict; lit_gpu's: epoch, position <= num_items, int seed; or a replay state)", fits
    )
    return [c.Contract(where, spec, owner="the train loader")]


def epoch_order(n: int, *, seed: int, epoch: int, shuffle: bool) -> torch.Tensor:
    """The order of epoch ``epoch``: a permutation of ``range(n)`` seeded by ``(seed, epoch)``."""
    if not shuffle:
        return torch.arange(n)
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(n, generator=generator)


def shard_positions(n: int, *, start: int, rank: int, world_size: int, drop_last: bool) -> torch.Tensor:
    """Positions (into the epoch order) that ``rank`` takes from global position ``start`` on.

    The remaining ``n - start`` positions are padded by wrapping around to the epoch's first
    positions (as ``DistributedSampler`` pads) or, with ``drop_last``, trimmed, so that every rank
    gets the same count; rank ``r`` takes every ``world_size``-th position starting at ``start + r``.
    Padded positions are returned unwrapped (``>= n``); take them modulo ``n``.
    """
    return torch.arange(start, start + _shard_total(n, start, world_size, drop_last))[rank::world_size]


def _shard_total(n: int, start: int, world_size: int, drop_last: bool) -> int:
    remaining = max(0, n - start)
    per_rank = remaining // world_size if drop_last else -(-remaining // world_size)
    return per_rank * world_size


def sample_seeds(seed: int, epoch: int, positions: torch.Tensor) -> list[int]:
    """A 63-bit seed for the sample at each of ``positions`` of epoch ``epoch``: splitmix64 of ``(seed, epoch,
    position)``, in numpy's uint64 arithmetic (which wraps modulo 2**64)."""
    base = np.uint64((seed * 0x9E3779B97F4A7C15 + epoch * 0xBF58476D1CE4E5B9) & _MASK64)
    x = base + positions.numpy().astype(np.uint64)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return ((x ^ (x >> np.uint64(31))) >> np.uint64(1)).tolist()


def _seed_all(seed: int) -> None:
    torch.default_generator.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed & 0xFFFFFFFF)


class SeededSamples(Dataset):
    """Wraps a map-style dataset: ``self[(index, seed)]`` is ``dataset[index]`` fetched under ``seed``.

    In a DataLoader worker the worker's torch / numpy / Python RNGs are seeded with ``seed`` before
    the fetch. In the main process (``num_workers=0``) the same happens inside a fork of those RNG
    states, which are put back afterwards: fetching never shifts the main process's random streams
    (dropout), so results do not depend on ``num_workers``.
    """

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, key: tuple[int, int]) -> Any:
        return self.__getitems__([key])[0]

    def __getitems__(self, keys: list[tuple[int, int]]) -> list[Any]:
        """A batch of samples (the DataLoader's batched fetch), each under its own seed.

        A dataset with ``getitems_seeded(indices, seeds)`` fetches the batch at once and takes each
        sample's randomness from its seed itself (no global RNG is seeded or touched).
        """
        batched = getattr(self.dataset, "getitems_seeded", None)
        if batched is not None:
            return batched([index for index, _ in keys], [seed for _, seed in keys])
        if get_worker_info() is not None:
            return [self._fetch(index, seed) for index, seed in keys]
        saved = torch.get_rng_state(), np.random.get_state(), random.getstate()
        try:
            return [self._fetch(index, seed) for index, seed in keys]
        finally:
            torch.set_rng_state(saved[0])
            np.random.set_state(saved[1])
            random.setstate(saved[2])

    def _fetch(self, index: int, seed: int) -> Any:
        _seed_all(seed)
        return self.dataset[index]


class GlobalPosition:
    """Epoch, permutation seed and global position of a training loader; shared state logic.

    ``start`` is where the current pass over the epoch begins (a restored position, else 0);
    ``position`` is how many samples of the epoch's order the whole job has consumed.
    """

    num_items: int
    seed: int
    shuffle: bool
    drop_last_shards: bool
    rank: int
    world_size: int

    def _init_position(self) -> None:
        self.epoch = 0
        self.start = 0
        self.position = 0
        self.restored_mid_epoch = False
        self._yielded = 0  # batches handed out in the current pass
        self._batch_size = 1

    def set_epoch(self, epoch: int) -> None:
        """Select epoch ``epoch``'s order; a new epoch starts at its first sample."""
        if epoch != self.epoch:
            self.start = self.position = self._yielded = 0
            self.restored_mid_epoch = False
        self.epoch = epoch

    @property
    def yielded_batches(self) -> int:
        """Batches handed out in the current pass (trained on or in flight)."""
        return self._yielded

    def order(self) -> torch.Tensor:
        """The current epoch's order (all ranks agree on it)."""
        return epoch_order(self.num_items, seed=self.seed, epoch=self.epoch, shuffle=self.shuffle)

    def positions(self, start: int | None = None) -> torch.Tensor:
        """This rank's positions from ``start`` (default: the current pass's start), unwrapped."""
        return shard_positions(
            self.num_items,
            start=self.start if start is None else start,
            rank=self.rank,
            world_size=self.world_size,
            drop_last=self.drop_last_shards,
        )

    def shard_size(self, start: int = 0) -> int:
        """Samples this rank takes from global position ``start`` to the end of the epoch."""
        return _shard_total(self.num_items, start, self.world_size, self.drop_last_shards) // self.world_size

    def _position_after(self, batches: int) -> int:
        return min(self.start + batches * self._batch_size * self.world_size, self.num_items)

    def _advance(self, batches: int, batch_size: int) -> None:
        """Record that every rank has been handed ``batches`` batches of this pass."""
        self._yielded, self._batch_size = batches, batch_size
        self.position = self._position_after(batches)

    def _finish_pass(self) -> None:
        """A pass ran to its end: a new pass over the same epoch starts from its first sample."""
        self.start = self.position = self._yielded = 0
        self.restored_mid_epoch = False

    def state_without(self, in_flight: int) -> dict[str, Any]:
        """The state with the last ``in_flight`` handed-out batches not consumed (never trained on)."""
        state = self.state_dict()
        if in_flight > 0:
            state["position"] = self._position_after(max(0, self._yielded - in_flight))
        return state

    def state_dict(self) -> dict[str, Any]:
        """Global state: the epoch, its permutation seed, and the samples the job consumed in it."""
        return {
            "version": STATE_VERSION,
            "epoch": self.epoch,
            "position": self.position,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "num_items": self.num_items,
        }

    def restore_contract(self, pl_module: Any = None) -> list[Any]:
        """What :meth:`load_state_dict` expects (:func:`position_contract`)."""
        return position_contract()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue at the saved sample of the saved epoch's order (on any world size / batch size)."""
        if state.get("num_items") != self.num_items:
            rank_zero_warn(  # the values come from the checkpoint: one escaped line
                messages.one_line(
                    f"lit-gpu: the checkpoint's data position (epoch {state.get('epoch')}, sample "
                    f"{state.get('position')} of {state.get('num_items')}) does not fit this data "
                    f"({self.num_items} samples); the epoch restarts from its first sample"
                )
            )
            return
        self.epoch = int(state["epoch"])
        self.seed = int(state["seed"])
        self.shuffle = bool(state["shuffle"])
        self.start = self.position = int(state["position"])
        self.restored_mid_epoch = 0 < self.position < self.num_items


class ResumableSampler(GlobalPosition, DistributedSampler):
    """This rank's share of the epoch order from the current position, as ``(index, seed)`` keys.

    A ``DistributedSampler`` subclass so that Lightning never swaps in its own under DDP; it owns
    the sharding. ``len()`` is this rank's full-epoch share (Lightning counts an epoch's steps with
    it); a pass that starts mid-epoch yields only the remainder. The keys are meant for
    :class:`SeededSamples`.
    """

    def __init__(
        self,
        dataset: Dataset,
        *,
        rank: int = 0,
        world_size: int = 1,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
    ) -> None:
        super().__init__(
            dataset, num_replicas=world_size, rank=rank, shuffle=shuffle, seed=seed, drop_last=drop_last
        )
        self.num_items = len(dataset)  # type: ignore[arg-type]
        self.world_size = world_size
        self.drop_last_shards = drop_last
        self._init_position()

    def __len__(self) -> int:
        return self.shard_size(0)

    def __iter__(self) -> Iterator[tuple[int, int]]:  # type: ignore[override]
        positions = self.positions()
        indices = self.order()[positions % self.num_items].tolist()
        # the keys made for the whole pass at once: the DataLoader's batching then takes them at C speed
        yield from zip(indices, sample_seeds(self.seed, self.epoch, positions), strict=True)


class ResumableDataLoader(DataLoader):
    """A ``DataLoader`` (real workers, pinned memory) whose state is the job's global sample position.

    ``batch_size`` per process; ``seed`` of the permutations (a new one each epoch with ``shuffle``) and of
    the per-sample random streams; this process's global ``rank`` of ``world_size``; ``drop_last`` trims the
    epoch's tail to a multiple of the world size and drops the incomplete last batch; other ``DataLoader``
    arguments (``num_workers``, ``pin_memory``, ``persistent_workers``, ``prefetch_factor``...) as given.
    """

    def __init__(
        self,
        dataset: Dataset,
        *,
        batch_size: int,
        shuffle: bool = True,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        drop_last: bool = False,
        **kwargs: Any,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        sampler = ResumableSampler(
            dataset, rank=rank, world_size=world_size, shuffle=shuffle, seed=seed, drop_last=drop_last
        )
        # a private generator: creating an iterator draws the workers' base seed from it, not from
        # the global torch RNG, so starting an epoch (or resuming) never shifts dropout's stream
        kwargs.setdefault("generator", torch.Generator().manual_seed(seed))
        super().__init__(
            SeededSamples(dataset), batch_size=batch_size, sampler=sampler, drop_last=drop_last, **kwargs
        )

    @property
    def position_state(self) -> GlobalPosition:
        """The sampler, which holds the epoch / seed / position state."""
        return self.sampler  # type: ignore[return-value]

    def remaining_batches(self) -> int:
        """Batches this rank yields from the current position to the end of the epoch."""
        state = self.position_state
        return batches_for(state.shard_size(state.start), self.batch_size, self.drop_last)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        state = self.position_state
        for batches, batch in enumerate(super().__iter__(), start=1):
            # handed out = consumed: a checkpoint written after this step counts this batch
            state._advance(batches, self.batch_size)  # type: ignore[arg-type]
            yield batch
        state._finish_pass()

    def state_dict(self) -> dict[str, Any]:
        """See :meth:`GlobalPosition.state_dict`."""
        return self.position_state.state_dict()

    def restore_contract(self, pl_module: Any = None) -> list[Any]:
        """See :meth:`GlobalPosition.restore_contract`."""
        return position_contract()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """See :meth:`GlobalPosition.load_state_dict`."""
        self.position_state.load_state_dict(state)


def batches_for(samples: int, batch_size: int, drop_last: bool) -> int:
    """Batches of ``batch_size`` that ``samples`` samples make."""
    return samples // batch_size if drop_last else math.ceil(samples / batch_size)


# ---- TensorLoader: batches by index slicing of in-memory tensors (no workers, no collate) ---------------
class TensorLoader(GlobalPosition):
    """An iterable "dataloader" over tensors that share their first dimension (no workers, no collate).

    Epoch ``e``'s order and rank ``r``'s shard are :class:`GlobalPosition`'s; batches are index-selects on
    the stored tensors, which stay where they are (CPU or GPU). Lightning swaps samplers of torch
    ``DataLoader`` objects only, so it leaves this one alone under DDP; its per-epoch
    ``loader.sampler.set_epoch(epoch)`` reaches the loader itself (``sampler``). Arguments as
    :class:`ResumableDataLoader`'s, ``*tensors`` of equal length ``N`` in place of a dataset.
    """

    def __init__(
        self,
        *tensors: torch.Tensor,
        batch_size: int,
        shuffle: bool = False,
        drop_last: bool = False,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        if not tensors:
            raise ValueError("TensorLoader needs at least one tensor")
        n = len(tensors[0])
        if any(len(t) != n for t in tensors):
            raise ValueError(f"all tensors must have the same length, got {[len(t) for t in tensors]}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
        self.tensors = tensors
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.drop_last_shards = drop_last
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.num_items = n
        self._init_position()

    #: Lightning's loader checks read ``batch_sampler``; batching is built in here.
    batch_sampler = None

    @property
    def sampler(self) -> TensorLoader:
        """Itself, so that Lightning's per-epoch ``loader.sampler.set_epoch(epoch)`` reaches it."""
        return self

    @property
    def position_state(self) -> TensorLoader:
        """Itself: the object holding the epoch / seed / position state."""
        return self

    @property
    def num_samples(self) -> int:
        """Samples this rank sees per epoch (before ``drop_last`` trims the last batch)."""
        return self.shard_size(0)

    def indices(self, start: int = 0) -> torch.Tensor:
        """This rank's sample indices for the current epoch from global position ``start``, in batch order."""
        return self.order()[self.positions(start) % self.num_items]

    def remaining_batches(self) -> int:
        """Batches this rank yields from the current position to the end of the epoch."""
        return batches_for(self.shard_size(self.start), self.batch_size, self.drop_last)

    def __len__(self) -> int:
        return batches_for(self.num_samples, self.batch_size, self.drop_last)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, ...]]:
        start = self.start
        count = self.remaining_batches()
        b = self.batch_size
        if not self.shuffle and self.world_size == 1:
            for i in range(count):  # plain slices: views, no copy
                lo = start + i * b
                batch = tuple([t[lo : lo + b] for t in self.tensors])  # a list: no generator frames
                self._advance(i + 1, b)  # handed out = consumed (a checkpoint after this step counts it)
                yield batch
        else:
            idx = self.indices(start).to(self.tensors[0].device)
            for i in range(count):
                batch_idx = idx[i * b : (i + 1) * b]
                batch = tuple([t.index_select(0, batch_idx) for t in self.tensors])
                self._advance(i + 1, b)
                yield batch
        self._finish_pass()


# ---- the loader settings every data module takes: a bad value is one line, not a traceback -----------
def _bad(name: str, rule: str, value: object, example: str) -> LitGpuError:
    return LitGpuError(messages.BAD_DATA_SETTING.format(name=name, rule=rule, value=value, example=example))


def _integer(value: object, minimum: int) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and value >= minimum


def check_loader_args(batch_size: int, num_workers: int) -> None:
    """Raise :class:`LitGpuError` for ``batch_size < 1`` or ``num_workers < 0`` (DataLoader's ValueErrors)."""
    if not _integer(batch_size, 1):
        raise _bad("batch_size", "a positive integer", batch_size, "e.g. 64")
    if not _integer(num_workers, 0):
        example = "0 (load in the main process) or the number of worker processes"
        raise _bad("num_workers", "0 or more", num_workers, example)


def check_counts(**counts: tuple[object, int]) -> None:
    """Raise :class:`LitGpuError` for a size that is not an integer ``>= minimum`` (``name=(value, min)``):
    ``out_features: null`` or ``num_samples: -5`` in a config would otherwise fail deep inside torch."""
    for name, (value, minimum) in counts.items():
        if not _integer(value, minimum):
            rule = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
            raise _bad(name, rule, value, "e.g. 10")


def check_number(name: str, value: object, minimum: float = 0.0) -> None:
    """Raise :class:`LitGpuError` for a setting that is not a finite number ``>= minimum``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not minimum <= value < float("inf"):
        raise _bad(name, f"a finite number >= {minimum:g}", value, "e.g. 0.05")


DATA_TOO_BIG = (
    "{settings}: the data's tensors would need {needs}, more than this machine's {have} of memory; "
    "make data.{largest} smaller (--data.{largest}, or {largest}: in your config)"
)


def check_fits_in_memory(sizes: dict[str, int], needs: int) -> None:
    """Refuse data sizes whose tensors (``needs`` bytes) cannot fit in this machine's memory at all, before
    anything is allocated (else torch's traceback, or a kill while filling them); ``sizes`` are the settings
    that decide ``needs``, the largest named as the one to change."""
    have = host_memory_bytes()
    if have is None or needs <= have:
        return
    settings = ", ".join(f"data.{name}={value}" for name, value in sizes.items())
    largest = max(sizes, key=lambda name: sizes[name])
    needs_text, have_text = human_bytes(needs), human_bytes(have)
    raise LitGpuError(
        DATA_TOO_BIG.format(settings=settings, needs=needs_text, have=have_text, largest=largest)
    )


# ---- what a data module reads of its trainer (none attached: one process, no GPU) ---------------------
def rank_and_world(trainer: Any) -> tuple[int, int]:
    """``(global_rank, world_size)`` of ``trainer``; ``(0, 1)`` without one."""
    return (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)


def use_pin_memory(pin_memory: bool | None, trainer: Any) -> bool:
    """``pin_memory`` as set, or (``None``) whether ``trainer`` trains on CUDA."""
    return pin_memory if pin_memory is not None else on_cuda(trainer)
