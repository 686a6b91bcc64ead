"""lit_gpu.checkpoints.build: class_path specs from files are checked before any import or call."""

from __future__ import annotations

import inspect
import sys
import textwrap
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from jsonargparse import Namespace
from lightning.pytorch.cli import LightningCLI
from torch import nn

from lit_gpu.checkpoints import build as build_policy
from lit_gpu.checkpoints import build as safe_build
from lit_gpu.checkpoints.build import UnsafeBuildError, build, check, is_true_subclass
from lit_gpu.cli import LitGpuCLI
from lit_gpu.errors import LitGpuError
from lit_gpu.nets import SimpleModel
from lit_gpu.run.store import resolve_ckpt_path
from tests.helpers.paths import CONFIGS

HERE = __name__  # trusted below by the user's LIT_GPU_TRUST_MODULES (being imported trusts nothing)
# packages the kind checks below point at: trusted by the "user", so that the kind check is what refuses
USER_TRUSTED = "tests,os,subprocess,functools,builtins"


@pytest.fixture(autouse=True)
def _user_trusts_the_gadget_packages(monkeypatch):
    monkeypatch.setenv(safe_build.TRUST_ENV, USER_TRUSTED)


# ---- test classes (gadgets an attacker might point at, and legitimate nested nets) ---------------
class Touching(nn.Module):
    """Writes ``marker`` when constructed: proves whether anything was called."""

    def __init__(self, marker: str, inner: nn.Module | None = None, extra: Any = None) -> None:
        super().__init__()
        Path(marker).write_text("called")
        self.inner = inner


class Stack(nn.Module):
    """A net built from nested specs: a list of modules and an optimizer factory."""

    def __init__(
        self,
        layers: list[nn.Module],
        opt: Callable[..., torch.optim.Optimizer] | None = None,
        named: dict[str, nn.Module] | None = None,
    ) -> None:
        super().__init__()
        self.layers = nn.Sequential(*layers)
        self.opt = opt
        self.named = nn.ModuleDict(named or {})


class _LyingMeta(type):
    """A metaclass that claims nn.Module ancestry and runs code when its class is called."""

    marker: str = ""

    @property
    def __mro__(cls):  # noqa: PLW3201
        return (cls, nn.Module, object)

    def __call__(cls, *args, **kwargs):
        Path(_LyingMeta.marker).write_text("called")
        return super().__call__(*args, **kwargs)


class Liar(metaclass=_LyingMeta):
    """Not an nn.Module, however its metaclass answers."""


def spec(class_path: str, **init_args: Any) -> dict[str, Any]:
    return {"class_path": class_path, "init_args": init_args}


def _refused(exc: pytest.ExceptionInfo, *needles: str) -> str:
    message = str(exc.value)
    assert "\n" not in message and "nothing was run" in message, message
    for needle in needles:
        assert needle in message, message
    return message


# ---- the happy path --------------------------------------------------------------------------------
def test_builds_a_trusted_net_with_plain_args():
    net = build(spec("lit_gpu.nets.SimpleModel", in_features=3, out_features=2), source="x.ckpt")
    assert isinstance(net, SimpleModel) and net.fc.weight.shape == (2, 3)


def test_builds_nested_specs_that_fit_their_annotations():
    net = build(
        spec(
            f"{HERE}.Stack",
            layers=[spec("torch.nn.Linear", in_features=4, out_features=3), spec("torch.nn.ReLU")],
            opt=spec("torch.optim.SGD", lr=0.5),
            named={"head": spec("torch.nn.Linear", in_features=3, out_features=1)},
        )
    )
    assert isinstance(net.layers[0], nn.Linear) and isinstance(net.layers[1], nn.ReLU)
    assert isinstance(net.named["head"], nn.Linear)
    optimizer = net.opt(net.parameters())  # Callable[..., Optimizer] -> a partial of the checked class
    assert isinstance(optimizer, torch.optim.SGD) and optimizer.param_groups[0]["lr"] == 0.5


# ---- attack vectors: refused, one line, nothing called --------------------------------------------
@pytest.mark.parametrize(
    "make_spec, needle",
    [
        (lambda m: spec("os.system", command=f"touch {m}"), "'os.system' is a builtin_function_or_method"),
        (lambda m: spec("subprocess.Popen", args=["touch", m]), "'subprocess.Popen' is a class but not"),
        (lambda m: spec("builtins.eval", source=f"open({m!r}, 'w')"), "not a class"),
        (lambda m: spec("builtins.exec", source=f"open({m!r}, 'w')"), "not a class"),
        (lambda m: spec("functools.partial", func="os.system"), "'functools.partial' is a class but not"),
        (lambda m: spec("os.path.join", a=m), "not a class"),
        (lambda m: spec("lit_gpu.__main__.main"), "dunder"),
        (lambda m: spec("torch.nn.Linear.__init__.__globals__"), "dunder"),
        (lambda m: spec("os.system; touch x"), "not a 'package.module.Class' path"),
        (lambda m: {"class_path": ["os", "system"]}, "must be a 'package.module.Class' string"),
        (lambda m: spec(f"{HERE}.Liar"), "is a class but not a subclass of torch.nn.Module"),
    ],
)
def test_non_module_callables_are_refused(make_spec, needle, tmp_path):
    marker = tmp_path / "marker"
    _LyingMeta.marker = str(marker)
    with pytest.raises(UnsafeBuildError) as exc:
        build(make_spec(str(marker)), nn.Module, source="evil.ckpt", key="lit_gpu_net")
    _refused(exc, needle, "evil.ckpt: refusing to build lit_gpu_net")
    assert not marker.exists()


def test_metaclass_cannot_fake_the_mro():
    assert nn.Module in inspect.getmro(Liar)  # what a naive MRO check would believe
    assert not is_true_subclass(Liar, nn.Module)
    assert is_true_subclass(SimpleModel, nn.Module) and not is_true_subclass(SimpleModel(), nn.Module)


@pytest.mark.parametrize(
    "nested, where, needle",
    [  # the outer class is legitimate and would touch the marker if it were called before the check
        ({"inner": spec("subprocess.Popen", args=["touch", "{m}"])}, "init_args.inner", "subprocess.Popen"),
        ({"extra": spec("torch.nn.ReLU")}, "init_args.extra", "typed Any"),
        ({"inner": spec(f"{HERE}.Touching", marker="{m}", extra=spec("os.system"))}, "extra", "typed Any"),
        ({"inner": {"class_path": "torch.nn.ReLU", "init_args": {"x": {1, 2}}}}, "inner", "no parameter"),
        ({"extra": {"nested": [spec("os.system", command="touch {m}")]}}, "extra.nested.0", "typed"),
        ({"extra": object()}, "init_args.extra", "plain data only"),
        ({"bogus": 1}, "lit_gpu_net", "has no parameter 'bogus'"),
        ({"inner": "subprocess.Popen"}, "init_args.inner", "the string 'subprocess.Popen' fills"),
    ],
)
def test_nested_specs_are_checked_before_the_outer_call(nested, where, needle, tmp_path):
    marker = tmp_path / "marker"

    def fill(value: Any) -> Any:
        if isinstance(value, str):
            return value.replace("{m}", str(marker))
        if isinstance(value, dict):
            return {k: fill(v) for k, v in value.items()}
        if isinstance(value, list):
            return [fill(v) for v in value]
        return value

    with pytest.raises(UnsafeBuildError) as exc:
        build(fill(spec(f"{HERE}.Touching", marker=str(marker), **nested)), source="f", key="lit_gpu_net")
    _refused(exc, where, needle)
    assert not marker.exists()


def test_strings_stay_strings_only_where_a_loader_would_not_import_them():
    assert not build_policy.imports_strings(str | nn.Module) and not build_policy.imports_strings(int)
    assert not build_policy.imports_strings(Any) and not build_policy.imports_strings(list[str])
    assert build_policy.imports_strings(Callable[..., torch.optim.Optimizer])
    assert build_policy.imports_strings(nn.Module | None) and build_policy.imports_strings(type[nn.Module])
    with pytest.raises(UnsafeBuildError) as exc:
        build(spec(f"{HERE}.Stack", layers=[], opt="torch.optim.SGD"))
    _refused(exc, "init_args.opt: the string 'torch.optim.SGD'")


def test_list_elements_must_fit_the_annotation(tmp_path):
    bad = spec(f"{HERE}.Stack", layers=[spec("torch.nn.ReLU"), spec("subprocess.Popen", args=["true"])])
    with pytest.raises(UnsafeBuildError) as exc:
        build(bad)
    _refused(exc, "init_args.layers.1", "not a subclass of torch.nn.Module")
    with pytest.raises(UnsafeBuildError) as exc:
        build(spec(f"{HERE}.Stack", layers=[], opt=spec("torch.nn.ReLU")))
    _refused(exc, "not a subclass of torch.optim.Optimizer")


# ---- the import policy -----------------------------------------------------------------------------
@pytest.fixture
def side_effect_module(tmp_path, monkeypatch) -> tuple[str, Path]:
    """A module on sys.path whose import writes a marker and which defines an nn.Module ``Net``."""
    name = f"evil_{uuid.uuid4().hex[:8]}"
    marker = tmp_path / "imported"
    (tmp_path / "pkgs").mkdir()
    (tmp_path / "pkgs" / f"{name}.py").write_text(
        textwrap.dedent(
            f"""
            from pathlib import Path
            from torch import nn
            Path({str(marker)!r}).write_text("imported")

            class Net(nn.Module):
                def __init__(self, width: int = 2) -> None:
                    super().__init__()
                    self.fc = nn.Linear(width, width)
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path / "pkgs"))
    monkeypatch.delenv(safe_build.TRUST_ENV, raising=False)
    yield name, marker
    sys.modules.pop(name, None)


def test_untrusted_module_is_not_imported(side_effect_module):
    name, marker = side_effect_module
    with pytest.raises(UnsafeBuildError) as exc:
        check(spec(f"{name}.Net"), source="evil.ckpt", key="lit_gpu_net")
    _refused(exc, f"importing '{name}'", "is not a trusted package", f"--trust_module {name}")
    assert not marker.exists() and name not in sys.modules


def test_trust_modules_and_env_var_allow_a_user_package(side_effect_module, monkeypatch):
    name, marker = side_effect_module
    net = build(spec(f"{name}.Net", width=3), trust_modules=[name])
    assert marker.exists() and net.fc.weight.shape == (3, 3)
    sys.modules.pop(name)
    marker.unlink()
    monkeypatch.setenv(safe_build.TRUST_ENV, f"somethingelse, {name}")
    assert check(spec(f"{name}.Net")).__name__ == "Net" and marker.exists()


def test_missing_package_and_missing_class_say_so():
    with pytest.raises(UnsafeBuildError) as exc:
        check(spec("no_such_pkg_xyz.Net"))
    _refused(exc, "'no_such_pkg_xyz' is not installed", "PYTHONPATH")
    with pytest.raises(UnsafeBuildError) as exc:
        check(spec("lit_gpu.nets.SimpelModel"))
    _refused(exc, "has no class 'SimpelModel'")
    with pytest.raises(UnsafeBuildError) as exc:
        check(spec("lit_gpu.nets.nope.Net"))
    _refused(exc, "cannot be imported")


def test_private_modules_of_trusted_packages_are_not_imported():
    module = "torch.testing._internal.common_utils"  # test helpers that act on import
    assert module not in sys.modules
    with pytest.raises(UnsafeBuildError) as exc:
        check(spec(f"{module}.TestCase"))
    _refused(exc, "private module")
    assert module not in sys.modules


def test_already_imported_modules_are_looked_up_not_reimported(monkeypatch):
    calls = []
    monkeypatch.setattr(build_policy.importlib, "import_module", lambda *a: calls.append(a))
    assert check(spec("lit_gpu.nets.SimpleModel")) is SimpleModel
    assert check(spec(f"{HERE}.Stack")) is Stack
    assert calls == []


def test_being_imported_already_trusts_nothing(monkeypatch):
    """Vector 6: torchmetrics is in sys.modules (Lightning imports it); its LPIPS downloads when built."""
    monkeypatch.delenv(safe_build.TRUST_ENV)
    import torchmetrics  # noqa: F401

    for class_path, root in [
        ("torchmetrics.image.lpip.LearnedPerceptualImagePatchSimilarity", "torchmetrics"),
        (f"{HERE}.Stack", "tests"),
    ]:
        assert class_path.rsplit(".", 1)[0] in sys.modules
        with pytest.raises(UnsafeBuildError) as exc:
            check(spec(class_path))
        _refused(exc, f"{root!r} is not a trusted package", f"LIT_GPU_TRUST_MODULES={root}")
    assert check(spec(f"{HERE}.Stack", layers=[]), trust_modules=["tests"]) is Stack


@pytest.mark.parametrize(
    "class_path",
    ["lightning.pytorch.demos.mnist_datamodule.MNISTDataModule", "torchvision.models.ResNet", "torch.hub.x"],
)
def test_modules_of_trusted_packages_that_download_stay_refused(class_path, monkeypatch):
    monkeypatch.delenv(safe_build.TRUST_ENV)
    with pytest.raises(UnsafeBuildError) as exc:
        check(spec(class_path), (nn.Module, safe_build.lightning_base("data")))
    _refused(exc, "download data or weights when built")


def test_lightning_bases():
    assert check(spec("lit_gpu.modules.RegressionModule"), safe_build.lightning_base("model"))
    with pytest.raises(UnsafeBuildError) as exc:
        check(spec("lit_gpu.nets.SimpleModel"), safe_build.lightning_base("data"))
    _refused(exc, "not a subclass of lightning.pytorch.LightningDataModule")


# ---- pickle payloads and --ckpt_path ---------------------------------------------------------------
def test_unset_weights_only_becomes_true_for_urls():
    config = Namespace(subcommand="test", test=Namespace(ckpt_path="https://x/y.ckpt", weights_only=None))
    assert resolve_ckpt_path(config) is None  # a URL is Lightning's to read
    assert config.test.weights_only is True
    config.test.weights_only = False  # the user's explicit choice stays
    resolve_ckpt_path(config)
    assert config.test.weights_only is False


class _Stop(Exception):
    def __init__(self, config: Namespace) -> None:
        self.config = config


def _stop_before_instantiation(cls: type[LightningCLI]) -> type[LightningCLI]:
    class Probe(cls):
        def before_instantiate_classes(self) -> None:
            raise _Stop(self.config)

    return Probe


@pytest.fixture
def hparams_ckpt(tmp_path) -> Callable[[str], str]:
    def make(class_path: str) -> str:
        path = tmp_path / f"{class_path.rsplit('.', 1)[-1]}.ckpt"
        hparams = {
            "_class_path": class_path,
            "scheduler_interval": "step",
            "_instantiator": "lightning.pytorch.cli.instantiate_module",
        }
        torch.save({"state_dict": {}, "hyper_parameters": hparams}, path)
        return str(path)

    return make


SIMPLE_TEST = ["test", "--config", str(CONFIGS / "simple.yaml"), "--config", str(CONFIGS / "debug.yaml")]


def test_litgpucli_keeps_the_config_and_refuses_another_class(hparams_ckpt, monkeypatch):
    """LitGpuCLI._parse_ckpt_path (Lightning's, pinned in test_upstream_pins.py, lets the file decide)."""
    monkeypatch.setattr(sys, "argv", ["lit-gpu"])
    assert "_parse_ckpt_path" in vars(LitGpuCLI.__mro__[1])  # lightning_cli.CLIHooks
    same = hparams_ckpt("lit_gpu.modules.RegressionModule")
    with pytest.raises(_Stop) as stop:
        _stop_before_instantiation(LitGpuCLI)(args=[*SIMPLE_TEST, "--ckpt_path", same])
    ours = stop.value.config.test
    assert ours.model.class_path == "lit_gpu.modules.RegressionModule"
    assert ours.model.init_args.scheduler_interval == "epoch"  # the config's value, not the checkpoint's
    assert ours.weights_only is True
    alias = hparams_ckpt("lit_gpu.modules.regression.RegressionModule")  # same class, another path
    with pytest.raises(_Stop):
        _stop_before_instantiation(LitGpuCLI)(args=[*SIMPLE_TEST, "--ckpt_path", alias])

    other = hparams_ckpt("lit_gpu.modules.ClassificationModule")
    with pytest.raises(LitGpuError) as exc:
        _stop_before_instantiation(LitGpuCLI)(args=[*SIMPLE_TEST, "--ckpt_path", other])
    message = str(exc.value)
    assert "saved from the model class lit_gpu.modules.ClassificationModule" in message
    assert "the config builds lit_gpu.modules.RegressionModule" in message


# ---- hyper-parameters for Lightning's loader (LitModule.load_from_checkpoint) -----------------------
class Loose(nn.Module):
    """Stands in for a LightningModule with an untyped and a module-or-name parameter."""

    def __init__(self, extra: Any = None, act: nn.Module | str = "relu", width: int = 2) -> None:
        super().__init__()


def _hparams_ckpt(tmp_path: Path, **hparams: Any) -> Path:
    path = tmp_path / "h.ckpt"
    hparams["_instantiator"] = "lightning.pytorch.cli.instantiate_module"
    torch.save({"state_dict": {}, "hyper_parameters": hparams}, path)
    return path


@pytest.mark.parametrize(
    "hparams, needle",
    [
        ({"extra": '{"class_path": "subprocess.Popen", "init_args": {"args": ["true"]}}'}, "init_args.extra"),
        ({"extra": "[{class_path: os.system}]"}, "init_args.extra.0"),
        ({"act": "subprocess.Popen"}, "the string 'subprocess.Popen' fills a parameter typed"),
        ({"act": {"class_path": "subprocess.Popen"}}, "not a subclass of torch.nn.Module"),
        ({"_class_path": "subprocess.Popen"}, "not a subclass of"),
    ],
)
def test_check_hparams_models_what_jsonargparse_would_resolve(hparams, needle, tmp_path):
    with pytest.raises(UnsafeBuildError) as exc:
        safe_build.check_hparams(Loose, _hparams_ckpt(tmp_path, **hparams))
    _refused(exc, needle)


def test_check_hparams_accepts_plain_values_and_what_the_caller_passes(tmp_path):
    ckpt = _hparams_ckpt(tmp_path, extra="hello: world", width=3, renamed_long_ago=1)
    safe_build.check_hparams(Loose, ckpt)  # plain YAML in a string, an unknown (dropped) name
    safe_build.check_hparams(Loose, _hparams_ckpt(tmp_path, act="subprocess.Popen"), passed=["act"])
    plain = tmp_path / "plain.ckpt"  # saved outside the CLI: Lightning calls cls(**hparams), no resolution
    torch.save({"state_dict": {}, "hyper_parameters": {"act": "subprocess.Popen"}}, plain)
    safe_build.check_hparams(Loose, plain)
    with open(_hparams_ckpt(tmp_path, act="os.system"), "rb") as f:  # read, then rewound for Lightning
        with pytest.raises(UnsafeBuildError):
            safe_build.check_hparams(Loose, f)
        assert f.tell() == 0 and torch.load(f, weights_only=True)["hyper_parameters"]["act"] == "os.system"


def test_shared_containers_are_checked_within_a_budget_of_values():
    from lit_gpu.checkpoints.build import MAX_VALUES, UnsafeBuildError, check

    shared: list = []
    for _ in range(40):  # 2**40 paths through 40 lists: a walk per path would never end
        shared = [shared, shared]
    spec = {"class_path": "torch.nn.Identity", "init_args": {"x": shared}}
    with pytest.raises(UnsafeBuildError, match=f"more than {MAX_VALUES} values"):
        check(spec)
    small = [1, 2]
    check({"class_path": "torch.nn.Identity", "init_args": {"x": [small, small]}})
