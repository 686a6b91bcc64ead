"""Every private upstream name lit_gpu reaches is declared in one table (``lit_gpu/upstream.py``): by
the feature that reaches it, with the module that reaches it among the feature's users, and pinned by a test.

A lint over the declaration, wherever the code sits (a shim may move next to its user: the table says who
may reach what, not a folder): the source's syntax tree against ``FEATURES``, and lit_gpu's classes at run
time against upstream's private members.
"""

from __future__ import annotations

import importlib
import inspect

import pytest

from lit_gpu.upstream import FEATURES, FIT_PRIVATE_NAMES
from tests.helpers.paths import REPO_ROOT
from tests.helpers.private_names import (
    METACLASS_SET,
    UPSTREAM,
    allowed_names,
    defined_names,
    feature_names,
    is_user,
    modules,
    names_in,
    private,
    reaches,
)

#: private names lit_gpu's own classes define (not upstream's), read on an object that is not ``self``
LIT_GPU_OWN = {
    "_seen": "fastpath/hooks.py's hook dispatch: the callback list it has seen",
    "_seen_len": "fastpath/hooks.py's hook dispatch: that list's length",
    "_restore": "fastpath/hooks.py's fit patches: undo what they set on a fit's objects",
    "_forward_batch": "LitModule's forward on a batch (lit_gpu/modules/base.py), which the capture calls",
    "_record_step": "LitModule's per-step record (lit_gpu/modules/base.py), which the lean step calls",
}


def _undeclared() -> dict[str, list[str]]:
    paths = modules()
    defined = defined_names(list(paths.values()))
    allowed = allowed_names()
    found: dict[str, list[str]] = {}
    for module, path in paths.items():
        for hit in reaches(path, defined):
            names = [n for n in names_in(hit) if n not in LIT_GPU_OWN and n not in allowed.get(module, set())]
            if names:
                found.setdefault(str(path.relative_to(REPO_ROOT)), []).append(hit)
    return found


def test_every_private_upstream_name_reached_is_declared_for_the_module_that_reaches_it():
    assert _undeclared() == {}, (
        "declare it in lit_gpu/upstream.py: the feature that reaches it, with this module in its users"
    )


@pytest.mark.parametrize(
    "source",
    [
        "x = trainer._signal_connector",
        "from lightning.fabric.strategies import _StrategyRegistry",
        "import torch.utils.data._utils",
        "x = getattr(trainer, '_logger_connector', None)",
        "x = state['_batches_that_stepped']",
        "x = hparams.pop('_instantiator', None)",
        "class C(ModelCheckpoint):\n    def f(self):\n        return self._last_time_checked",
    ],
)
def test_the_scan_finds_each_kind_of_reach(tmp_path, source):
    path = tmp_path / "m.py"
    path.write_text(source + "\n")
    assert reaches(path, {}), source


def test_every_declared_user_is_a_module_that_reaches_a_name_of_its_feature():
    """No stale user: each module a feature lists exists and reaches (or overrides) a name of the feature."""
    paths = modules()
    defined = defined_names(list(paths.values()))
    stale = []
    for name, feature in FEATURES.items():
        names = feature_names(feature, FIT_PRIVATE_NAMES if name == "fast path" else ())
        for user in feature.users:
            users = [m for m in paths if is_user(m, (user,))]
            used = {n for m in users for hit in reaches(paths[m], defined) for n in names_in(hit)}
            used |= {n for m in users for ns in defined_names([paths[m]]).values() for n in ns}  # overrides
            if not users or not used & names:
                stale.append(f"{name}: {user}")
    assert stale == []


def test_every_feature_is_pinned_by_tests_that_exist():
    missing = []
    for name, feature in FEATURES.items():
        if not feature.pins:
            missing.append(f"{name}: no pin")
        for pin in feature.pins:
            path, _, test = pin.partition("::")
            source = REPO_ROOT / "tests" / path
            if not source.is_file() or f"def {test}(" not in source.read_text():
                missing.append(f"{name}: {pin}")
    assert missing == []


def test_every_pin_test_is_named_by_a_feature():
    """No orphan pin: each ``@pins`` test in tests/unit/test_upstream_pins.py pins a feature of the table."""
    import re

    text = (REPO_ROOT / "tests" / "unit" / "test_upstream_pins.py").read_text()
    pinned = {pin.partition("::")[2] for feature in FEATURES.values() for pin in feature.pins}
    tests = re.findall(r"^@pins\([^)]*\)\ndef (test_\w+)", text, re.MULTILINE)
    assert tests, "the scan finds no pin: it is broken"
    assert [t for t in tests if t not in pinned] == []


def test_a_class_overrides_a_private_upstream_member_only_where_the_table_declares_it():
    """At run time: a private name a lit_gpu class defines that one of its upstream bases has too (an
    override of a protected hook) is declared for that class's module."""
    allowed = allowed_names()
    found = []
    for module_name, path in modules().items():
        if path.stem == "__main__" or "completion_flags" in module_name:
            continue
        module = importlib.import_module(module_name)
        for cls in vars(module).values():
            if not inspect.isclass(cls) or cls.__module__ != module.__name__:
                continue
            upstream_bases = [b for b in cls.__mro__[1:] if b.__module__.split(".")[0] in UPSTREAM]
            for name in vars(cls):
                if (
                    private(name)
                    and name not in METACLASS_SET
                    and any(hasattr(b, name) for b in upstream_bases)
                    and name not in allowed.get(module_name, set())
                ):
                    found.append(f"{cls.__module__}.{cls.__qualname__}.{name}")
    assert found == []


def test_the_own_names_are_lit_gpu_s():
    defined = set().union(*defined_names(list(modules().values())).values())
    assert set(LIT_GPU_OWN) <= defined


def _listed(text: str) -> dict[str, bool]:
    """The "Gated features (...): a; b*; ..." list in ``text``: each key, and whether it keeps a promise."""
    flat = " ".join(text.split())
    listed = flat.split("Gated features (", 1)[1].split("): ", 1)[1].split(".", 1)[0]
    return {item.rstrip("*"): item.endswith("*") for item in listed.split("; ")}


def test_the_docs_and_the_table_s_docstring_list_the_gate_s_features():
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

    from lit_gpu.upstream import VERIFIED_UP_TO

    with open(REPO_ROOT / "pyproject.toml", "rb") as f:
        deps = [Requirement(d) for d in tomllib.load(f)["project"]["dependencies"]]
    (spec,) = [d.specifier for d in deps if d.name == "lightning"]
    assert {s.operator for s in spec} == {">="}  # no upper bound: the gate's rule decides past it
    (low,) = [Version(s.version) for s in spec]
    assert low <= Version(VERIFIED_UP_TO) and Version(__version__) in spec


def test_an_earlier_release_s_digest_is_accepted_for_its_function_alone(monkeypatch):
    """A digest in EARLIER (a release in pyproject.toml's range that differs outside what lit_gpu mirrors) is
    accepted for its function; any other source still is not."""
    from lit_gpu import upstream as gate
    from lit_gpu.upstream import DIGESTS, EARLIER

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
