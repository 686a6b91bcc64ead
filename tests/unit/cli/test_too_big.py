"""A class in the config too big to build: one line naming its config key (lit_gpu.cli.errors)."""

from __future__ import annotations

from torch import nn

from lit_gpu.cli.errors import explain_build_failure
from lit_gpu.explain import explain

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


def _build_error(cls: type, **init_args) -> BaseException:
    try:
        try:
            cls(**init_args)
        except (RuntimeError, TypeError, ValueError) as inner:
            raise ValueError("Does not validate against any of the Union subtypes") from inner
    except ValueError as outer:
        return outer
    raise AssertionError("built")


def test_a_null_for_a_size_and_a_negative_size_name_the_key():
    from lit_gpu.nets import FooNet, SimpleModel

    def config(class_path: str, init_args: dict) -> dict:
        return {"model": {"init_args": {"net": {"class_path": class_path, "init_args": init_args}}}}

    null = explain_build_failure(
        _build_error(FooNet, neural_num=3, layers=None), config("lit_gpu.nets.FooNet", {"layers": None})
    )
    assert null == (
        "model.init_args.net.init_args.layers: null, but lit_gpu.nets.FooNet needs a value of type int "
        "there; set a value (on the command line or in your config)"
    )
    negative = explain_build_failure(
        _build_error(SimpleModel, in_features=-1),
        config("lit_gpu.nets.SimpleModel", {"in_features": -1, "out_features": 10}),
    )
    assert negative is not None and negative.startswith(
        "model.init_args.net: lit_gpu.nets.SimpleModel(in_features=-1, out_features=10) cannot be built "
        "(Trying to create tensor with negative dimension -1"
    )


def test_an_error_of_lit_gpus_own_code_is_not_blamed_on_the_config():
    """A class raising from its own code (not torch's) with no null argument keeps its traceback."""

    class Buggy(nn.Module):
        def __init__(self, width: int) -> None:
            super().__init__()
            raise TypeError("a bug")

    err = _build_error(Buggy, width=3)
    assert (
        explain_build_failure(err, {"model": {"class_path": "here.Buggy", "init_args": {"width": 3}}}) is None
    )
