"""Every private upstream name the room reaches is declared by a feature of the gate's table: the room's
source (its syntax tree) against ``features.FEATURES``."""

from __future__ import annotations

from lit_gpu.upstream.table import FEATURES, FIT_PRIVATE_NAMES
from tests.helpers.paths import REPO_ROOT
from tests.helpers.private_names import defined_names, files_inside, files_outside, names_in, reaches

#: private names lit_gpu's own classes define (not upstream's), read on an object that is not ``self``
ROOM_OWN = {
    "_seen": "fastpath/hooks.py's hook dispatch: the callback list it has seen",
    "_seen_len": "fastpath/hooks.py's hook dispatch: that list's length",
    "_restore": "fastpath/hooks.py's fit patches: undo what they set on a fit's objects",
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
    assert undeclared == {}, "declare it in lit_gpu/upstream/table.py (the feature that reaches it)"


def test_the_own_names_are_lit_gpu_s():
    defined = set().union(*defined_names(files_inside() + files_outside()).values())
    assert set(ROOM_OWN) <= defined


def _listed(text: str) -> dict[str, bool]:
    """The "Gated features (...): a; b*; ..." list in ``text``: each key, and whether it keeps a promise."""
    flat = " ".join(text.split())
    listed = flat.split("Gated features (", 1)[1].split("): ", 1)[1].split(".", 1)[0]
    return {item.rstrip("*"): item.endswith("*") for item in listed.split("; ")}


def test_the_docs_and_the_room_s_docstring_list_the_gate_s_features():
    import lit_gpu.upstream

    table = {name: feature.promise is not None for name, feature in FEATURES.items()}
    assert _listed((REPO_ROOT / "docs" / "architecture.md").read_text()) == table
    assert _listed(lit_gpu.upstream.__doc__ or "") == table


def test_pyproject_s_lightning_range_leaves_a_newer_release_to_the_gate():
    """One constant says how new a Lightning is verified (the gate's); pyproject.toml has the lower bound
    only, so a newer release installs and every feature stands aside (or says it cannot)."""
    import tomllib
    from lightning import __version__
    from packaging.requirements import Requirement
    from packaging.version import Version

    from lit_gpu.upstream.gate import VERIFIED_UP_TO

    with open(REPO_ROOT / "pyproject.toml", "rb") as f:
        deps = [Requirement(d) for d in tomllib.load(f)["project"]["dependencies"]]
    (spec,) = [d.specifier for d in deps if d.name == "lightning"]
    assert {s.operator for s in spec} == {">="}  # no upper bound: the gate's rule decides past it
    (low,) = [Version(s.version) for s in spec]
    assert low <= Version(VERIFIED_UP_TO) and Version(__version__) in spec


def test_an_earlier_release_s_digest_is_accepted_for_its_function_alone(monkeypatch):
    """A digest in EARLIER (a release in pyproject.toml's range that differs outside what lit_gpu mirrors) is
    accepted for its function; any other source still is not."""
    from lit_gpu.upstream import gate
    from lit_gpu.upstream.table import DIGESTS, EARLIER

    assert set(EARLIER) <= set(DIGESTS)  # only functions lit_gpu mirrors
    for where, releases in EARLIER.items():
        for digest in releases.values():
            monkeypatch.setattr(gate, "digest", lambda fn, d=digest: d)
            assert gate._mirrored_problem(where) is None
        monkeypatch.setattr(gate, "digest", lambda fn: "0" * 16)
        assert "differs from the code lit_gpu mirrors" in gate._mirrored_problem(where)
        other = next(w for w in DIGESTS if w not in EARLIER)
        monkeypatch.setattr(gate, "digest", lambda fn, d=next(iter(releases.values())): d)
        assert gate._mirrored_problem(other) is not None  # not another function's
