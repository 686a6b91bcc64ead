"""A class in the config too big to build: one line naming its config key (lit_gpu.cli.too_big)."""

from __future__ import annotations

from torch import nn

from lit_gpu.cli.too_big import explain_build_failure
from lit_gpu.translate import explain

CONFIG = {
    "model": {
        "class_path": "lit_gpu.modules.RegressionModule",
        "init_args": {"net": {"class_path": "mypkg.Wide", "init_args": {"width": 10**10}}},
    },
    "data": {"class_path": "lit_gpu.data.SyntheticRegressionDataModule", "init_args": {}},
}


class Wide(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.layer = nn.Linear(width, width)


def _wrapped_build_error() -> BaseException:
    """What jsonargparse raises when a class's ``__init__`` failed: its own error, from the real one."""
    try:
        try:
            Wide(10**10)  # more than 2**63 bytes: torch refuses before allocating anything
        except RuntimeError as inner:
            raise ValueError("Does not validate against any of the Union subtypes") from inner
    except ValueError as outer:
        return outer
    raise AssertionError("Wide(10**10) was built")


def test_the_class_being_built_is_named_by_its_config_key():
    line = explain_build_failure(_wrapped_build_error(), CONFIG)
    assert line is not None and line.startswith(
        "model.init_args.net: mypkg.Wide(width=10000000000) asks for over 9.2 EB (a tensor of shape "
        "(10000000000, 10000000000)) while it is built, more than this machine's "
    )
    assert line.endswith(
        "make it smaller (model.init_args.net.init_args.* on the command line or in your config)"
    )


def test_other_failures_and_unknown_classes_are_not_explained():
    assert explain_build_failure(ValueError("some other mistake"), CONFIG) is None
    assert explain_build_failure(_wrapped_build_error(), {"model": {"class_path": "x.Other"}}) is None


def test_the_allocators_refusal_elsewhere_is_still_one_line():
    """Outside the build (a data module's setup), the translator says what was asked, with no key."""
    err = RuntimeError(
        "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you tried "
        "to allocate 40000000000000 bytes. Error code 12 (Cannot allocate memory)"
    )
    line = explain(err)
    assert line is not None and line.startswith(
        "the host could not allocate 40.0 TB, more than this machine's"
    )
