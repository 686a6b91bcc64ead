"""Exact mid-epoch resume for a module's own plain ``DataLoader``, without a change to its code.

A plain ``DataLoader`` over a map-style dataset with the default samplers (sequential, random with
or without a generator, distributed) draws every random number of an epoch's order when that epoch's
first batch is fetched: the workers' base seed (from ``generator`` or the global torch RNG) and the
permutation (from the sampler's generator, or a seed drawn from the global torch RNG). Its state is
therefore the states of those generators at that moment. On a resume mid-epoch, the loader puts them
back, builds the epoch's iterator as the interrupted run did, skips the batches the run trained on
(by index without workers; with workers by fetching them, so that each worker's random stream is where
it was), and gives the global torch RNG back the checkpoint's mid-epoch state.

lit_gpu makes a fit's plain training loaders replayable (:func:`make_replayable`) before Lightning
loads their saved states, and says on which step to resume at the fit's start
(:meth:`ReplayDataLoader.resume_at`): Lightning's own batch counter of the epoch, restored from the
checkpoint, is the number of batches to skip. A loader that cannot be replayed (an iterable dataset, a
custom sampler or loader class) is left as it is: :func:`why_not_replayable` names why.

A replay's generator states draw the saved order only around the saved loader: :func:`order_settings`
records each setting the order depends on (the dataset's length, batch size, ``drop_last``, the sampler and
its settings and seed, the loader's generator, ``num_workers``, ``persistent_workers``, the world size), and
:func:`changed_settings` names those that differ on resume.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import torch
from lightning.fabric.utilities.types import _Stateful
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    SequentialSampler,
)

# ---- the fit loop's train loaders and torch's DataLoader iterator (gated: lit_gpu.upstream) ---
# The fit loop's train loaders, before Lightning loads their saved states (Lightning internals, pinned).
#
# Lightning saves ``state_dict()`` of every train loader that has one and, on a resume, hands it back in
# ``_FitLoop.setup_data`` (``_load_combined_loader_states``, right after it built the loaders and before
# it creates their iterator). :func:`prepare_train_loaders` lets lit_gpu turn a module's plain loaders
# into stateful ones there (:func:`make_replayable`); it is an instance attribute on
# this fit's loop, removed by :func:`release_train_loaders`. Pinned by
# test_fit_loop__setup_data__load_combined_loader_states in tests/unit/test_upstream_pins.py.

_HOOK = "_load_combined_loader_states"


def prepare_train_loaders(
    fit_loop: Any, prepare: Callable[[list[Any]], Any], ours: Callable[[Any], bool] | None = None
) -> None:
    """Call ``prepare(loaders)`` on this fit's train loaders whenever Lightning is to load their states.

    Lightning loads the saved states only when its fit loop is ``restarting``, which it is not when the
    checkpoint's epoch counters say the epoch finished: a save at an epoch's end, and any save of a fit
    resumed from one (Lightning 2.6 leaves the next epoch's counters as they were). The loaders for which
    ``ours(loader)`` holds get their states then too (they tell an epoch's start from its middle themselves).
    """
    load = getattr(type(fit_loop), _HOOK).__get__(fit_loop)

    def prepared_then_loaded() -> None:
        combined = fit_loop._combined_loader
        if combined is not None:
            prepare(combined.flattened)
            states = fit_loop._combined_loader_states_to_load
            if states and ours is not None and not fit_loop.restarting:
                stateful = [ld for ld in combined.flattened if isinstance(ld, _Stateful)]
                pairs = zip(stateful, states, strict=True) if len(stateful) == len(states) else ()
                for loader, state in pairs:
                    if ours(loader):
                        loader.load_state_dict(state)
        load()

    setattr(fit_loop, _HOOK, prepared_then_loaded)


def release_train_loaders(fit_loop: Any) -> None:
    """Undo :func:`prepare_train_loaders` (the loop's own method again)."""
    vars(fit_loop).pop(_HOOK, None)


def train_loaders(trainer: Any) -> list[Any]:
    """This fit's train loaders as Lightning iterates them ([] before they are built)."""
    combined = trainer.fit_loop._combined_loader
    return [] if combined is None else list(combined.flattened)


def skip_batches(iterator: Any, batches: int, workers: int) -> None:
    """Advance a fresh DataLoader iterator by ``batches`` batches: by index without workers (torch's private
    ``_sampler_iter`` and ``_num_yielded``: nothing is loaded, and the main process's random streams are the
    checkpoint's anyway), by fetching with workers (each worker's random stream advances as it did)."""
    sampler_iter = getattr(iterator, "_sampler_iter", None)
    if workers == 0 and sampler_iter is not None and hasattr(iterator, "_num_yielded"):
        for _ in range(batches):
            next(sampler_iter)
        iterator._num_yielded += batches
        return
    for _ in range(batches):
        next(iterator)


class SeededIterators(DataLoader):
    """A ``DataLoader`` whose next iterator can draw its workers' base seed from a given generator state.

    torch's ``DataLoader`` makes each iterator in ``_get_iterator`` (private), which draws the workers' base
    seed from ``loader.generator`` or, without one, from the global torch RNG; a persistent-workers loader
    makes one iterator and resets it each epoch (``_iterator``, private). A resumed loader whose uninterrupted
    run had reset its iterator must not draw from the restored generators, and its workers must start from
    the base seed that run's workers had: :meth:`seed_next_iterator_from` gives it the generator state that
    seed was drawn from. Pinned by the replay tests (tests/unit/resume/test_replay.py).
    """

    _seed_from: bytes | None = None

    def seed_next_iterator_from(self, state: bytes | None) -> None:
        """The next iterator draws its base seed from a generator in ``state`` (``None``: as torch does)."""
        self._seed_from = state

    @property
    def has_iterator(self) -> bool:
        """Whether a persistent-workers iterator exists already (the next pass resets it, drawing nothing)."""
        return getattr(self, "_iterator", None) is not None

    def _get_iterator(self) -> Any:
        state, self._seed_from = self._seed_from, None
        make = super()._get_iterator
        if state is None:
            return make()
        import torch

        generator = torch.Generator()
        generator.set_state(torch.frombuffer(bytearray(state), dtype=torch.uint8))
        own = self.generator
        self.generator = generator
        try:
            return make()
        finally:
            self.generator = own


# ---- what the order depends on: recorded with the replay state, compared on resume --------------------
#: the recorded settings and the types each may have (the restored state's contract: nothing else is taken)
ORDER_KEYS: dict[str, tuple[type, ...]] = {
    "samples": (int,),
    "batch_size": (int, type(None)),
    "drop_last": (bool,),
    "sampler": (str,),
    "shuffle": (bool,),
    "replacement": (bool,),
    "sampler_seed": (int, type(None)),
    "loader_seed": (int, type(None)),
    "num_workers": (int,),
    "persistent_workers": (bool,),
    "world_size": (int,),
}
_INT_RANGE = (-(2**63), 2**64 - 1)  # a torch seed (initial_seed is unsigned 64-bit), a length, a count
_NAME_MAX = 200


def _seed(generator: torch.Generator | None) -> int | None:
    return None if generator is None else int(generator.initial_seed())


def _world_size(sampler: Any) -> int:
    if isinstance(sampler, DistributedSampler):
        return int(sampler.num_replicas)
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return int(torch.distributed.get_world_size())
    return 1


def order_settings(loader: DataLoader, sampler: Any) -> dict[str, Any]:
    """The settings of ``loader`` (whose index sampler is ``sampler``) that its sample order depends on."""
    batch_sampler = loader.batch_sampler
    random = isinstance(sampler, RandomSampler)
    if random:
        sampler_seed = _seed(sampler.generator)
    else:
        sampler_seed = int(sampler.seed) if isinstance(sampler, DistributedSampler) else None
    return {
        "samples": len(loader.dataset),  # type: ignore[arg-type]
        "batch_size": None if batch_sampler is None else int(batch_sampler.batch_size),  # type: ignore[attr-defined]
        "drop_last": bool(batch_sampler.drop_last) if batch_sampler is not None else False,  # type: ignore[attr-defined]
        "sampler": type(sampler).__name__,
        "shuffle": random or bool(getattr(sampler, "shuffle", False)),
        "replacement": bool(getattr(sampler, "replacement", False)),
        "sampler_seed": sampler_seed,
        "loader_seed": _seed(loader.generator),
        "num_workers": int(loader.num_workers),
        "persistent_workers": bool(loader.persistent_workers),
        "world_size": _world_size(sampler),
    }


def check_order_settings(settings: Any) -> str | None:
    """What is wrong with recorded ``settings`` read from a checkpoint (``None``: nothing)."""
    if not isinstance(settings, dict) or set(settings) != set(ORDER_KEYS):
        return "its loader settings are not the keys " + ", ".join(ORDER_KEYS)
    for key, types in ORDER_KEYS.items():
        value = settings[key]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            return f"its loader setting {key} is a {type(value).__name__}"
        low, high = _INT_RANGE
        if isinstance(value, int) and not isinstance(value, bool) and not low <= value <= high:
            return f"its loader setting {key} is out of range"
        if isinstance(value, str) and len(value) > _NAME_MAX:
            return f"its loader setting {key} is longer than {_NAME_MAX} characters"
    return None


def changed_settings(saved: dict[str, Any], now: dict[str, Any]) -> str | None:
    """``batch_size 8 -> 9, samples 64 -> 63``: the settings that differ (``None``: none does)."""
    from lit_gpu.messages import shown

    changes = [
        f"{key} {shown(saved[key], limit=60)} -> {shown(now[key], limit=60)}"
        for key in ORDER_KEYS
        if saved.get(key) != now.get(key)
    ]
    return ", ".join(changes) or None


# ---- the replay ------------------------------------------------------------------------------------
REPLAY_STATE_VERSION = 2
# The restored state (checked by check_replay_state before anything is set): "generators" at most 3 bytes
# (the global torch generator's state, the loader's generator's, the random sampler's: as many as the loader
# has, each as long as that generator's state; [] before its first epoch); "handed_out" the batches the saved
# pass had handed out (Lightning's count); "offset" the batch that pass began at (0, or where a resume that
# could not continue restarted it); "workers_seed" the state the persistent workers' base seed was drawn from
# (None without: b"" pickles as a call weights-only loading refuses); "made_iterator" whether the saved pass
# made its iterator (False: it reset the persistent one); "batches" the loader's length; "order" its
# order_settings. Bytes, not tensors: the loop state compares with ``==`` (Lightning's tests do) and loads
# weights-only. Version 1 (generators and batches only) is still read.
REPLAY_STATE_CONTRACT: dict[str, Any] = {
    "replay_state": (int, (1, REPLAY_STATE_VERSION)),
    "generators": (list, {"max_len": 3, "item": bytes}),
    "batches": (int, (0, 2**62)),
    "order": (dict, ORDER_KEYS),
    "handed_out": (int, (0, 2**62)),
    "offset": (int, (0, 2**62)),
    "workers_seed": (bytes, "None or one generator state"),
    "made_iterator": (bool, None),
}
_KEYS = {1: {"replay_state", "generators", "batches"}, 2: set(REPLAY_STATE_CONTRACT)}
#: where a checkpoint holds the train loaders' saved states (Lightning's fit loop)
LOADER_STATES = ("loops", "fit_loop", "state_dict", "combined_loader")
REPLAYABLE_SAMPLERS = (SequentialSampler, RandomSampler, DistributedSampler)


def _index_sampler(loader: DataLoader) -> Any:
    batch_sampler = loader.batch_sampler
    return batch_sampler.sampler if batch_sampler is not None else loader.sampler


def why_not_replayable(loader: Any) -> str | None:
    """Why ``loader`` cannot resume mid-epoch at its exact batch (``None``: it can)."""
    if isinstance(loader, ReplayDataLoader) or callable(getattr(loader, "load_state_dict", None)):
        return None  # replayable already, or it has its own state (Lightning saves and restores it)
    if type(loader) is not DataLoader:
        return f"it is a {type(loader).__name__}, not a plain DataLoader"
    if isinstance(loader.dataset, IterableDataset):
        return "its dataset is an IterableDataset"
    if loader.batch_sampler is not None and type(loader.batch_sampler) is not BatchSampler:
        return f"its batch sampler {type(loader.batch_sampler).__name__} has no state"
    sampler = _index_sampler(loader)
    if type(sampler) not in REPLAYABLE_SAMPLERS:
        return f"its sampler {type(sampler).__name__} has no state"
    return None


def seed_persistent_workers(loader: Any, seed: int) -> Any:
    """An evaluation loader with persistent workers draws their base seed once, when its iterator is made:
    in the uninterrupted run at the sanity check (Lightning isolates its draws) or the fit's first
    validation, in a resumed run at its first validation. From a generator of its own, seeded by ``seed``
    (kept in the checkpoint), that draw is the same in both and shifts no main-process stream (the next
    epoch's shuffle). Returns ``loader``."""
    persistent = isinstance(loader, DataLoader) and loader.persistent_workers and loader.num_workers > 0
    if persistent and loader.generator is None:
        loader.generator = torch.Generator().manual_seed(seed)
    return loader


def make_replayable(loaders: list[Any]) -> list[Any]:
    """The loaders of ``loaders`` that can be replayed become :class:`ReplayDataLoader` (in place)."""
    for loader in loaders:
        if type(loader) is DataLoader and why_not_replayable(loader) is None:
            loader.__class__ = ReplayDataLoader  # the same object: the module's hooks see their loader
            loader.reset_replay()
    return loaders


def _bytes_problem(value: Any, size: int) -> str | None:
    if not (isinstance(value, bytes) and len(value) == size):
        return f"a generator state is not {size} bytes"
    if not _valid_generator_state(value):
        return "a generator state that torch refuses (not a state a generator saved)"
    return None


def check_replay_state(state: Any, sizes: list[int]) -> str | None:
    """What is wrong with ``state`` for generators whose states have ``sizes`` bytes (``None``: nothing)."""
    version = state.get("replay_state") if isinstance(state, dict) else None
    if not isinstance(state, dict) or not {"replay_state", "generators", "batches"} <= set(state):
        return "not a replay state (keys replay_state, generators, batches)"
    if type(version) is not int or version not in _KEYS:  # a list or dict read from a file is unhashable
        return f"replay state version {version!r}, not {REPLAY_STATE_VERSION}"
    if set(state) != _KEYS[version]:
        return f"not a version {version} replay state (keys {', '.join(sorted(_KEYS[version]))})"
    batches = state["batches"]
    if not isinstance(batches, int) or isinstance(batches, bool) or not 0 <= batches <= 2**62:
        return "its batch count is not an integer in range"
    generators = state["generators"]
    if not isinstance(generators, list) or len(generators) not in (0, len(sizes)):
        return f"{len(sizes)} generator states expected"
    for value, size in zip(generators, sizes, strict=False):
        if (problem := _bytes_problem(value, size)) is not None:
            return problem
    if version == 1:
        return None
    for key in ("handed_out", "offset"):
        count = state[key]
        if not isinstance(count, int) or isinstance(count, bool) or not 0 <= count <= 2**62:
            return f"its {key} batch count is not an integer in range"
    seed = state["workers_seed"]
    if seed is not None and (problem := _bytes_problem(seed, sizes[0] if sizes else 0)) is not None:
        return problem.replace("a generator state", "the workers' seed state")
    if not isinstance(state["made_iterator"], bool):
        return "made_iterator is not a bool"
    return check_order_settings(state["order"])


def saved_replay_problem(state: dict[str, Any]) -> str | None:
    """:func:`check_replay_state` of a state read from a file, before any loader exists (the generators'
    lengths taken from the state itself, each bytes of at most 64 KiB)."""
    generators = state.get("generators")
    generators = generators if isinstance(generators, list) else []
    if any(not isinstance(g, bytes) or len(g) > 2**16 for g in generators):
        return "a generator state that is not bytes of at most 64 KiB"
    return check_replay_state(state, [len(g) for g in generators])


def _valid_generator_state(value: bytes) -> bool:
    """Whether torch's CPU generator takes ``value`` (the loader's generators are all CPU ones): bytes of
    the right length can hold an invalid Mersenne Twister state, refused only when a resume sets it."""
    try:
        torch.Generator().set_state(torch.frombuffer(bytearray(value), dtype=torch.uint8))
    except (RuntimeError, ValueError):
        return False
    return True


class ReplayDataLoader(SeededIterators):
    """A plain ``DataLoader`` that resumes mid-epoch at its exact batch (made by :func:`make_replayable`).

    It has no ``__init__`` of its own: an existing ``DataLoader`` becomes one, keeping all it has.
    """

    _pass_states: list[bytes] | None = None  # the generators' states at this pass's first fetch
    _saved_batches: int | None = None  # the loader's length in the run that saved the restored state
    _saved_order: dict[str, Any] | None = None  # the settings the saved order depended on (loader_order)
    _saved_handed_out: int = 0  # restored: the batches the saved pass had handed out
    _then: tuple[str, int] | None = None  # what the next pass does first: ("replay"|"finish", epoch batches)
    _saved_made: bool = True  # restored: whether the saved pass made its iterator
    _restored: bool = False  # a restored state waits for the next pass
    _skip: int = 0  # batches the next pass skips (a resume mid-epoch)
    _handed_out: int = 0  # batches of the epoch handed out by the current pass (skipped ones included)
    _offset: int = 0  # the epoch's batch the current pass began at (a resume that could not continue)
    _next_offset: int = 0  # the next pass's
    _saved_offset: int = 0  # restored: the saved pass's
    _made_iterator: bool = True  # the current pass made its iterator (not a persistent one's reset)
    _workers_seed: bytes | None = None  # the state the persistent workers' base seed was drawn from

    def reset_replay(self) -> None:
        """Forget any saved epoch (a loader that just became a :class:`ReplayDataLoader`)."""
        self._pass_states, self._skip, self._handed_out, self._saved_batches = None, 0, 0, None
        self._saved_order, self._saved_handed_out, self._saved_made, self._restored = None, 0, True, False
        self._then, self._offset, self._next_offset, self._saved_offset = None, 0, 0, 0
        self._made_iterator, self._workers_seed = True, None

    def _generators(self) -> list[torch.Generator]:
        generators = [torch.default_generator]
        if self.generator is not None:
            generators.append(self.generator)
        sampler = _index_sampler(self)
        if isinstance(sampler, RandomSampler) and sampler.generator is not None:
            generators.append(sampler.generator)
        return generators

    @property
    def batches_handed_out(self) -> int:
        """Batches of the current epoch handed out (trained on, or in flight), the skipped ones included."""
        return self._handed_out

    def changes(self) -> str | None:
        """What differs from the loader whose state was restored (``batch_size 8 -> 9``; ``None``: nothing,
        or no settings saved): its order is not the saved one, whatever the generators' states."""
        if self._saved_order is None:
            return None
        return changed_settings(self._saved_order, order_settings(self, _index_sampler(self)))

    def restarts_workers(self, batches: int) -> bool:
        """Whether a resume after ``batches`` batches of the epoch starts persistent workers that the
        uninterrupted run had started in an earlier epoch (their random streams then differ from its)."""
        if not (self._restored and self.persistent_workers and self.num_workers > 0):
            return False
        return not self._saved_made if batches else bool(self._workers_seed)

    def resume_at(self, batches: int, epoch_batches: int | None = None) -> str | None:
        """The next pass continues the saved epoch after its first ``batches`` batches of ``epoch_batches``
        (Lightning's count of the epoch; ``None``: the loader's length); all of them, or none: a new epoch.

        Returns why it cannot (``None``: it can): no saved state (a checkpoint written before its epoch's
        first fetch, or by a lit_gpu that saved none), a loader other than the saved one (:meth:`changes`),
        or an epoch of another length; the pass then starts at the epoch's first batch. At an epoch's start
        the saved pass's remaining draws from the loader's own generators are made first (the uninterrupted
        run made them as that pass went on), or, when it had started, the pass is redone from its start.
        """
        self._skip, self._then, self._next_offset = 0, None, 0
        epoch_batches = len(self) if epoch_batches is None else epoch_batches
        if batches and batches < epoch_batches:
            why = self._why_not_at(batches)
            if why is not None:
                self._next_offset = batches  # the loader restarts here: a later resume replays from here
                return why
            self._skip, self._then = batches - self._saved_offset, ("replay", 0)
            self._next_offset = self._saved_offset
        elif self._restored and self._pass_states is not None and self.changes() is None:
            if batches or self._saved_handed_out >= epoch_batches:  # the saved pass was over
                self._then = ("finish", max(0, epoch_batches - self._saved_offset))
            elif self._saved_handed_out:  # saved in its first step: redone from its start
                self._then, self._next_offset = ("replay", 0), self._saved_offset
        return None

    def _why_not_at(self, batches: int) -> str | None:
        if (changed := self.changes()) is not None:
            return f"it changed since the checkpoint: {changed}"
        if self._pass_states is None:
            return "the checkpoint holds no state of it"
        if self._saved_batches is not None and self._saved_batches != len(self):
            return f"its epoch had {self._saved_batches} batches, now {len(self)}"
        if batches < self._saved_offset:
            return f"its saved pass began at batch {self._saved_offset}"
        return None

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        return self._pass()  # a generator: nothing is drawn before the first fetch, as in a DataLoader

    def _set(self, generators: list[torch.Generator], states: list[bytes]) -> None:
        for generator, state in zip(generators, states, strict=True):
            generator.set_state(torch.frombuffer(bytearray(state), dtype=torch.uint8))

    def _finish_saved_pass(self, generators: list[torch.Generator], batches: int) -> None:
        """Draw what the saved pass of ``batches`` batches drew after its first fetch from the loader's own
        generators: the workers' base seed when it made its iterator, and the sampler's draws over the index
        batches its iterator asked for (Lightning takes ``batches``; torch's workers ask ``prefetch_factor``
        batches ahead each; a sampler asked past its end draws once more). The global generator is left as
        found."""
        live = torch.default_generator.get_state()
        self._set(generators, self._pass_states or [])
        if self._saved_made and self.generator is not None:
            torch.empty((), dtype=torch.int64).random_(generator=self.generator)
        ahead = (self.prefetch_factor or 0) * self.num_workers
        indices = iter(self.batch_sampler if self.batch_sampler is not None else self.sampler)
        for _ in itertools.islice(indices, batches + ahead):
            pass
        torch.default_generator.set_state(live)

    def _pass(self) -> Iterator[Any]:
        generators = self._generators()
        skip, self._skip = self._skip, 0
        (then, batches), self._then = self._then or (None, 0), None
        restored, self._restored = self._restored and self.changes() is None, False
        persistent = self.persistent_workers and self.num_workers > 0
        makes = not self.has_iterator  # torch makes an iterator unless a persistent one exists
        if then == "replay" and self._pass_states is not None:
            live = torch.default_generator.get_state()
            self._set(generators, self._pass_states)
            made = self._saved_made
            if makes and persistent and not made:  # the saved pass reset its iterator: no draw here
                self.seed_next_iterator_from(self._workers_seed)
            iterator = super().__iter__()
            skip_batches(iterator, skip, self.num_workers)
            torch.default_generator.set_state(live)  # the checkpoint's mid-epoch state
        else:
            if then == "finish":
                self._finish_saved_pass(generators, batches)
            made = makes or not persistent
            if restored and makes and persistent and self._workers_seed is not None:
                self.seed_next_iterator_from(self._workers_seed)  # the stopped run reset its iterator here
                made = False
            elif makes and persistent:
                seeding = self.generator if self.generator is not None else torch.default_generator
                self._workers_seed = bytes(seeding.get_state().numpy())
            self._pass_states = [bytes(generator.get_state().numpy()) for generator in generators]
            iterator = super().__iter__()
        offset, self._next_offset = self._next_offset, 0
        self._made_iterator, self._offset, self._handed_out = made, offset, offset + skip
        for batch in iterator:
            self._handed_out += 1
            yield batch

    def state_dict(self) -> dict[str, Any]:
        """The generators' states at the current epoch's first fetch (see :data:`REPLAY_STATE_CONTRACT`)."""
        return {
            "replay_state": REPLAY_STATE_VERSION,
            "generators": list(self._pass_states or []),
            "batches": len(self),
            "order": order_settings(self, _index_sampler(self)),
            "handed_out": self._saved_handed_out if self._restored else self._handed_out,
            "offset": self._saved_offset if self._restored else self._offset,
            "workers_seed": self._workers_seed if self.persistent_workers else None,
            "made_iterator": self._saved_made if self._restored else self._made_iterator,
        }

    def restore_contract(self, pl_module: Any = None) -> list[Any]:
        """What :meth:`load_state_dict` expects, checked before any restore (:func:`saved_replay_problem`)."""
        from lit_gpu.checkpoints import contracts as c

        def fits(state: Any) -> str | None:
            if not isinstance(state, dict) or "replay_state" not in state:
                return None  # another loader's state (lit_gpu.resume.loaders.position_contract checks it)
            return saved_replay_problem(state)

        spec = c.checked("a replay state (keys replay_state, generators, batches, ...)", fits)
        return [c.Contract((*LOADER_STATES, c.EACH), spec, owner="the train loader")]

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Keep the saved epoch's generator states; :meth:`resume_at` says how far the epoch had gone.

        A well-formed state of another loader (its sampler or generators changed, so its generator states do
        not fit this one) keeps only its settings: the resume names the change (:meth:`changes`).
        """
        problem = check_replay_state(state, [g.get_state().numel() for g in self._generators()])
        other = (
            problem is not None
            and isinstance(state, dict)
            and state.get("replay_state") == REPLAY_STATE_VERSION
            and saved_replay_problem(state) is None
            and changed_settings(state["order"], order_settings(self, _index_sampler(self))) is not None
        )
        if problem is not None and not other:
            from lit_gpu.errors import LitGpuError

            raise LitGpuError(
                f"the checkpoint's training-loader state is malformed ({problem}); it is corrupt or its "
                "train_dataloader() is not this one: resume from another checkpoint, or start afresh"
            )
        self._pass_states = None if other else list(state["generators"]) or None
        self._saved_batches = state["batches"]
        self._saved_order = state.get("order")  # None: a version-1 state (its batch count is compared)
        self._saved_handed_out = state.get("handed_out", state["batches"])
        self._saved_offset = state.get("offset", 0)
        self._workers_seed = state.get("workers_seed")
        self._saved_made = state.get("made_iterator", True)
        self._restored = True
