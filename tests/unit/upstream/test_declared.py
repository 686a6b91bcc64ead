"""Every private upstream name the room reaches is declared by a feature of the gate's table: the room's
source (its syntax tree) against ``features.FEATURES``."""

from __future__ import annotations

from lit_gpu.upstream.features import FEATURES
from lit_gpu.upstream.gate import FIT_PRIVATE_NAMES
from tests.helpers.paths import REPO_ROOT
from tests.helpers.private_names import defined_names, files_inside, files_outside, names_in, reaches

#: private names lit_gpu's own classes define (not upstream's), read on an object that is not ``self``
ROOM_OWN = {
    "_seen": "upstream/hooks.py's hook dispatch: the callback list it has seen",
    "_seen_len": "upstream/hooks.py's hook dispatch: that list's length",
    "_restore": "upstream/hooks.py's fit patches: undo what they set on a fit's objects",
    "_forward_batch": "LitModule's forward on a batch (lit_gpu/modules/base.py), which the capture calls",
    "_record_step": "LitModule's per-step record (lit_gpu/modules/base.py), which the lean step calls",
}


def _declared() -> set[str]:
    names: set[str] = set()
    for feature in FEATURES.values():
        for where in (*feature.mirrored, *feature.private):
            module, _, qualname = where.partition(":")
            names.update(p for p in (*module.split("."), *qualname.split(".")) if p.startswith("_"))
        names.update(feature.keys)
    for path in FIT_PRIVATE_NAMES:  # the fast path's, checked on each fit's trainer
        names.update(path.split("."))
    return names


def _used() -> dict[str, list[str]]:
    defined = defined_names(files_inside())
    used: dict[str, list[str]] = {}
    for path in files_inside():
        for hit in reaches(path, defined):
            for name in names_in(hit):
                used.setdefault(name, []).append(f"{path.relative_to(REPO_ROOT)}:{hit.split(':')[0]}")
    return used


def test_every_private_upstream_name_the_room_reaches_is_declared_by_a_feature():
    declared = _declared() | set(ROOM_OWN)
    undeclared = {name: where for name, where in _used().items() if name not in declared}
    assert undeclared == {}, "declare it in lit_gpu/upstream/features.py (the feature that reaches it)"


def test_the_own_names_are_lit_gpu_s():
    defined = set().union(*defined_names(files_inside() + files_outside()).values())
    assert set(ROOM_OWN) <= defined
