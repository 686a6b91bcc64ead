"""``lit_gpu.errors``: each known failure becomes its one-line answer from ``lit_gpu.messages``."""

from __future__ import annotations

import pickle
import zipfile

import pytest
import torch
from torch import nn

from lit_gpu import messages
from lit_gpu.errors import LitGpuError
from lit_gpu.explain import (
    DATALOADER_WORKER_DIED,
    DATASET_RAISED_IN_WORKER,
    MONITOR_NOT_LOGGED,
    NET_INPUT_FIX,
    NET_INPUT_FIX_IMAGES,
    OUT_OF_MEMORY,
    TRANSLATORS,
    explain,
    net_input_mismatch,
)


def _load_error(target: nn.Module, state: dict) -> RuntimeError:
    with pytest.raises(RuntimeError) as info:
        target.load_state_dict(state)
    return info.value


def test_lit_gpu_error_is_its_own_message():
    assert (
        explain(LitGpuError("data_dir missing; pass --data.data_dir"))
        == "data_dir missing; pass --data.data_dir"
    )


def test_cuda_oom_gives_next_steps_with_the_allocation():
    err = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.78 GiB total)")
    line = explain(err)
    assert line == OUT_OF_MEMORY.format(
        what="training", detail=" (tried to allocate 2.00 GiB)", half="<half the current value>"
    )


def test_state_dict_mismatch_lists_the_keys():
    err = _load_error(nn.Linear(2, 3), {"weight": torch.zeros(4, 2), "extra": torch.zeros(1)})
    line = explain(err)
    assert line is not None and line.startswith("the checkpoint does not fit Linear: ")
    assert "1 missing (bias)" in line and "1 unexpected (extra)" in line
    assert "weight: checkpoint (4, 2) vs model (3, 2)" in line


def test_dead_dataloader_worker_names_shared_memory():
    err = RuntimeError("DataLoader worker (pid 4242) is killed by signal: Killed. ")
    assert explain(err) == DATALOADER_WORKER_DIED.format(
        reason="DataLoader worker (pid 4242) is killed by signal: Killed."
    )


def test_dead_worker_reported_in_the_middle_of_a_save_is_still_found():
    """torch raises it from its SIGCHLD handler wherever the main process is: seen in a checkpoint save."""
    died = RuntimeError("DataLoader worker (pid 7836) is killed by signal: Killed. ")
    try:
        try:
            raise died
        finally:  # the zip writer's clean-up fails in turn
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 13952 vs 13904")
    except RuntimeError as err:
        line = explain(err)
    assert line == DATALOADER_WORKER_DIED.format(
        reason="DataLoader worker (pid 7836) is killed by signal: Killed."
    )


def test_truncated_checkpoint_from_torch_load(tmp_path):
    path = tmp_path / "trunc.ckpt"
    torch.save({"w": torch.zeros(64)}, path)
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(RuntimeError) as info:
        torch.load(path, weights_only=True)
    line = explain(info.value)
    assert line is not None and line.startswith("the checkpoint is corrupt or truncated (")


@pytest.mark.parametrize(
    "err", [EOFError("Ran out of input"), zipfile.BadZipFile("bad"), pickle.UnpicklingError("x")]
)
def test_truncated_pickles_are_corrupt_checkpoints(err):
    assert explain(err) == messages.CORRUPT_CHECKPOINT.format(
        what="the checkpoint", reason=messages.first_line(err)
    )


def test_gpu_checkpoint_on_a_cpu_machine():
    err = RuntimeError(
        "Attempting to deserialize object on a CUDA device but torch.cuda.is_available() is False."
    )
    assert explain(err) == messages.SAVED_ON_GPU.format(what="the checkpoint")


def test_dataset_error_in_a_worker_keeps_the_dataset_reason():
    err = ValueError(
        "Caught ValueError in DataLoader worker process 0.\nTraceback ...\nValueError: bad sample 7\n"
    )
    assert explain(err) == DATASET_RAISED_IN_WORKER.format(
        kind="ValueError", reason="ValueError: bad sample 7"
    )


class _Payload:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_weights_only_refusal_of_a_pickle_payload_is_one_line(tmp_path):
    marker = tmp_path / "marker"
    torch.save({"x": _Payload(str(marker))}, tmp_path / "evil.ckpt")
    with pytest.raises(pickle.UnpicklingError) as info:  # torch's wall, as Lightning's own loads raise it
        torch.load(tmp_path / "evil.ckpt", weights_only=True)
    message = explain(info.value)
    assert message and "\n" not in message and "holds pickled Python objects" in message
    assert "--weights_only false" in message and not marker.exists()


def test_unknown_errors_keep_their_traceback():
    assert explain(KeyError("lit_gpu bug")) is None
    assert all(translate(KeyError("x")) is None for translate in TRANSLATORS)


def test_first_line_falls_back_to_the_type_name():
    assert messages.first_line(ValueError("one\ntwo")) == "one"
    assert messages.first_line(ValueError("")) == "ValueError"


def _forward_error(net: nn.Module, inputs: torch.Tensor) -> RuntimeError:
    with pytest.raises(RuntimeError) as info:
        net(inputs)
    return info.value


def test_a_batch_that_does_not_fit_the_first_linear_names_net_shape_and_expectation():
    from lit_gpu.nets import SimpleModel

    net, images = SimpleModel(in_features=10), torch.zeros(4, 1, 28, 28)
    line = net_input_mismatch(net, images, _forward_error(net, images))
    assert line is not None and line.startswith("the net SimpleModel does not fit the data")
    assert "batch of shape (4, 1, 28, 28)" in line and "fc: Linear, in_features=10" in line
    assert "(B, 10)" in line and "mat1 and mat2 shapes cannot be multiplied" in line
    assert line.endswith(NET_INPUT_FIX_IMAGES)
    flat = torch.zeros(4, 7)
    assert net_input_mismatch(net, flat, _forward_error(net, flat)).endswith(NET_INPUT_FIX)


def test_a_batch_with_the_wrong_channels_for_the_first_conv():
    net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU())
    gray = torch.zeros(2, 1, 28, 28)
    line = net_input_mismatch(net, gray, _forward_error(net, gray))
    assert line is not None and "0: Conv2d, in_channels=3" in line and "(B, 3, H, W)" in line


def test_shape_errors_deeper_than_the_first_layer_and_other_errors_keep_their_traceback():
    net = nn.Sequential(nn.Linear(10, 5), nn.Linear(6, 2))  # a bug inside the net, not the data
    batch = torch.zeros(3, 10)
    assert net_input_mismatch(net, batch, _forward_error(net, batch)) is None
    assert net_input_mismatch(net, batch, RuntimeError("CUDA error: device-side assert")) is None


def test_a_lit_gpu_error_wrapped_by_another_exception_is_still_one_line():
    try:
        try:
            raise LitGpuError("data.batch_size must be a positive integer, got 0")
        except LitGpuError as inner:
            raise ValueError("Does not validate against any of the Union subtypes") from inner
    except ValueError as outer:
        assert explain(outer) == "data.batch_size must be a positive integer, got 0"
    assert explain(ValueError("plain")) is None


def test_a_monitor_the_model_never_logs_lists_what_it_logs():
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    err = MisconfigurationException(
        "`ModelCheckpoint(monitor='val/accc')` could not find the monitored key in the returned metrics: "
        "['train/loss', 'val/loss', 'epoch', 'step']. HINT: Did you call `log('val/accc', value)`?"
    )
    assert explain(err) == MONITOR_NOT_LOGGED.format(monitor="val/accc", logged="train/loss, val/loss")
    assert explain(RuntimeError(str(err))) is None  # only Lightning's own configuration error


def test_only_lightnings_own_trainer_argument_errors_become_one_line():
    from lit_gpu.explain import trainer_argument_error

    # same text, raised outside Lightning's trainer/loops: a lit_gpu or user bug, keeps its traceback
    assert trainer_argument_error(ValueError("`val_check_interval` (5000) must be <= 4")) is None
