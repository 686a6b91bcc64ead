"""The route a call takes through lit_gpu's rooms, recorded as it runs (issue 48's measure, by the code).

A *room* is a package of lit_gpu a route can stay in: ``cli``, ``run``, ``files``, ``runs``, ``io``...
(``lit_gpu.run.store`` and ``lit_gpu.run.layout`` are one room, ``run``). A *stay* is a stretch of the
route spent in one room; entering a room the route already left is a *return*; a call from a room into a
room above it in the import layers (``files`` -> ``run``, ``run`` -> ``cli``) is a *climb* back up. An
*entry* is a call into another room; a *re-entry* is a call into a room the route had entered and left
(none of its frames still running): a return to a room already left, not the unwinding of the calls.

The leaves every room uses, and that call nothing of lit_gpu back, are not rooms: the text door
(``lit_gpu.messages``), the error type (``lit_gpu.errors``) and ``lit_gpu.upstream``
(one-line accessors of Lightning's private names); time spent there counts to the room that called them, and
:class:`Route` checks that they are leaves indeed (a leaf that calls into a room fails the recording).
Code outside lit_gpu (torch, pathlib) also counts to the room that called it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

#: packages that are leaves of every route (see the module docstring)
LEAVES = ("messages", "errors", "upstream")
#: the import layers, highest first: a call from a lower room into a higher one is a climb back up
LAYERS = ("commands", "cli", "run", "checkpoints", "files", "textfiles")


def room_of(module: str | None) -> str | None:
    """The room of a module (``lit_gpu.run.store`` -> ``run``); ``None`` outside lit_gpu."""
    if not module or not (module == "lit_gpu" or module.startswith("lit_gpu.")):
        return None
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "lit_gpu"


@dataclass
class Route:
    """The stays of a recorded route, in order, and the climbs back up."""

    stays: list[str] = field(default_factory=list)
    climbs: list[str] = field(default_factory=list)
    leaf_calls: list[str] = field(default_factory=list)  # a leaf that called into a room: none expected
    entries: list[str] = field(default_factory=list)  # the rooms called into, in order
    reentries: list[str] = field(default_factory=list)  # calls into a room already left: "from -> to (fn)"

    @property
    def rooms(self) -> list[str]:
        """The rooms in the order first entered."""
        return list(dict.fromkeys(self.stays))

    @property
    def returns(self) -> int:
        """Entries into a room the route had already left."""
        return len(self.stays) - len(self.rooms)

    def count(self, room: str) -> int:
        """How many stays were in ``room``."""
        return self.stays.count(room)

    def describe(self) -> str:
        """``cli > run > files > run > cli (5 stays, 3 rooms, 2 returns, 0 climbs)``."""
        return (
            f"{' > '.join(self.stays)} ({len(self.stays)} stays, {len(self.rooms)} rooms, "
            f"{self.returns} returns, {len(self.climbs)} climbs)"
        )


@contextmanager
def recorded() -> Iterator[Route]:
    """Record the route of what runs inside the ``with`` (this thread), from the first room entered."""
    route = Route()
    stack: list[str | None] = []  # the room of each frame (None: outside lit_gpu, a leaf: its name)

    def current() -> str | None:
        for room in reversed(stack):
            if room is not None and room not in LEAVES:
                return room
        return None

    def enter(room: str) -> None:
        if not route.stays or route.stays[-1] != room:
            route.stays.append(room)

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            room = room_of(frame.f_globals.get("__name__"))
            here = current()
            caller_leaf = next((r for r in reversed(stack) if r is not None), None)
            if room is not None and room not in LEAVES:
                if caller_leaf in LEAVES:
                    route.leaf_calls.append(f"{caller_leaf} -> {room}")
                if here is not None and here != room and _layer(room) < _layer(here):
                    route.climbs.append(f"{here} -> {room} ({frame.f_code.co_qualname})")
                if here != room:
                    if room in route.entries and room not in stack:
                        route.reentries.append(f"{here} -> {room} ({frame.f_code.co_qualname})")
                    route.entries.append(room)
                enter(room)
            stack.append(room)
        elif event == "return" and stack:
            stack.pop()
            back = current()
            if back is not None:
                enter(back)

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield route
    finally:
        sys.setprofile(previous)


def _layer(room: str) -> int:
    return LAYERS.index(room) if room in LAYERS else len(LAYERS)
