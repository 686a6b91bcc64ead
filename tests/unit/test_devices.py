"""GPU pick by free memory and ``precision: auto`` with a faked NVML (no GPU needed)."""

from __future__ import annotations

import pytest

from lit_gpu import devices
from lit_gpu.errors import LitGpuError
from tests.helpers.fake_nvml import FakeGpu, install


def _gpus(*free_gib: float, **kw) -> list[FakeGpu]:
    return [FakeGpu(free_gib=f, **kw) for f in free_gib]


@pytest.fixture(autouse=True)
def _no_visibility_env(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)


# ---- ranking ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("free", "n", "expected"),
    [
        ((10, 70, 30, 50), 1, [1]),
        ((10, 70, 30, 50), 2, [1, 3]),
        ((10, 70, 30, 50), 4, [1, 3, 2, 0]),
        ((40, 40, 80), 2, [2, 0]),  # ties keep CUDA order
    ],
)
def test_pick_free_gpus_orders_by_free_memory(monkeypatch, free, n, expected):
    fake = install(monkeypatch, _gpus(*free))
    assert devices.pick_free_gpus(n) == expected
    assert fake.inits == fake.shutdowns == 1  # NVML session closed again


def test_pick_free_gpus_maps_through_cuda_visible_devices(monkeypatch):
    install(monkeypatch, _gpus(10, 70, 30, 50))
    # CUDA sees physical 3 as cuda:0, physical 0 as cuda:1, physical 2 as cuda:2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,0,2")
    assert devices.pick_free_gpus(1) == [0]  # physical 3 (50 GiB), not physical 1 (hidden)
    assert devices.pick_free_gpus(3) == [0, 2, 1]


def test_cuda_visible_devices_accepts_uuid_entries_and_prefixes(monkeypatch):
    gpus = _gpus(10, 70, 30)
    gpus[0].uuid, gpus[1].uuid, gpus[2].uuid = "GPU-aaaa-1", "GPU-bbbb-2", "GPU-cccc-3"
    install(monkeypatch, gpus)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-cccc-3,GPU-aaaa")  # full UUID, unique prefix
    assert [g.index for g in devices.visible_gpus()] == [2, 0]
    assert devices.pick_free_gpus(2) == [0, 1]  # cuda:0 = physical 2 (30 GiB) > cuda:1 (10 GiB)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, [0, 1, 2, 3]),
        ("", []),
        ("-1", []),
        ("1,-1,2", [1]),  # CUDA stops at the first invalid entry
        ("2,9,0", [2]),  # index beyond the machine
        ("1,1,2", []),  # a repeated entry: no device at all (torch's _parse_visible_devices)
        ("0,1,", [0, 1]),  # the empty entry ends the list
        ("NoDevFiles", []),  # slurmd, CPU-only job
        ("1gpu2,2ampere", [1, 2]),  # strtoul
        ("1,GPU-000", [1]),  # an index list ends at a UUID
        ("GPU-ffff,0", []),  # unknown UUID
        (" 2 , 3 ", [2, 3]),
    ],
)
def test_parse_visible_devices_follows_cuda_rules(value, expected):
    gpus = [devices.GpuInfo(i, f"GPU-{i}{i}{i}", "x", 1, 1) for i in range(4)]
    assert devices.parse_visible_devices(value, gpus) == expected


def test_ambiguous_uuid_prefix_stops_the_list():
    gpus = [devices.GpuInfo(0, "GPU-ab12", "x", 1, 1), devices.GpuInfo(1, "GPU-ab34", "x", 1, 1)]
    assert devices.parse_visible_devices("GPU-ab", gpus) == []


def test_mig_entries_are_refused():
    gpus = [devices.GpuInfo(0, "GPU-1", "x", 1, 1)]
    with pytest.raises(LitGpuError, match="MIG"):
        devices.parse_visible_devices("MIG-12345", gpus)


# ---- errors -------------------------------------------------------------------------------------
def test_asking_for_more_gpus_than_visible_is_a_clear_error(monkeypatch):
    install(monkeypatch, _gpus(10, 20, 30))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    with pytest.raises(LitGpuError) as info:
        devices.pick_free_gpus(3)
    message = str(info.value)
    assert "free:3" in message and "only 2 are visible" in message and "CUDA_VISIBLE_DEVICES='0,1'" in message
    assert "\n" not in message


def test_no_visible_gpu_points_to_cpu(monkeypatch):
    install(monkeypatch, _gpus(10))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(LitGpuError, match=r"none is visible.*--config lit_gpu:trainer/cpu "):
        devices.pick_free_gpus(1)


def test_missing_driver_is_a_clear_error(monkeypatch):
    install(monkeypatch, [], fail_init=True)
    with pytest.raises(LitGpuError, match=r"free:2.*NVML is not available.*cpu"):
        devices.pick_free_gpus(2)


def test_zero_gpus_requested_is_refused(monkeypatch):
    install(monkeypatch, _gpus(10))
    with pytest.raises(LitGpuError, match="at least one"):
        devices.pick_free_gpus(0)


def test_mixed_models_without_pci_order_warn(monkeypatch):
    install(monkeypatch, [FakeGpu(name="A100", free_gib=5), FakeGpu(name="T4", free_gib=9)])
    with pytest.warns(UserWarning, match="CUDA_DEVICE_ORDER"):
        assert devices.pick_free_gpus(1) == [1]
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        devices.pick_free_gpus(1)


# ---- spelling -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "n"),
    [("free:2", 2), ("FREE:1", 1), (" free : 3 ", 3), ("auto", None), ("2", None), (2, None), ([0, 1], None)],
)
def test_parse_free_request(value, n):
    assert devices.parse_free_request(value) == n


def test_query_creates_no_cuda_context(monkeypatch):
    import torch

    install(monkeypatch, _gpus(5, 6))
    devices.pick_free_gpus(2)
    assert not torch.cuda.is_initialized()


# ---- precision: auto ----------------------------------------------------------------------------
def _cpuinfo(tmp_path, flags: str):
    path = tmp_path / "cpuinfo"
    path.write_text(
        f"processor\t: 0\nflags\t\t: fpu sse2 {flags}\n\nprocessor\t: 1\nflags\t\t: fpu {flags}\n"
    )
    return path


def test_cpu_has_bf16_reads_flags(tmp_path):
    assert devices.cpu_has_bf16(_cpuinfo(tmp_path, "avx512f avx512_bf16"))
    assert devices.cpu_has_bf16(_cpuinfo(tmp_path, "amx_tile amx_bf16"))
    assert not devices.cpu_has_bf16(_cpuinfo(tmp_path, "avx2 avx512f"))
    assert not devices.cpu_has_bf16(tmp_path / "missing")


@pytest.mark.parametrize(("has_bf16", "expected"), [(True, "bf16-mixed"), (False, "32-true")])
def test_auto_precision_on_cpu(monkeypatch, has_bf16, expected):
    monkeypatch.setattr(devices, "cpu_has_bf16", lambda: has_bf16)
    monkeypatch.setattr(devices, "CPU_BF16_IS_FASTER", True)
    assert devices.auto_precision("cpu") == expected
    monkeypatch.setattr(devices, "_cuda_available", lambda: False)
    assert devices.auto_precision("auto") == expected


def test_auto_precision_cpu_follows_the_measurement_switch(monkeypatch):
    monkeypatch.setattr(devices, "cpu_has_bf16", lambda: True)
    monkeypatch.setattr(devices, "CPU_BF16_IS_FASTER", False)
    assert devices.auto_precision("cpu") == "32-true"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("auto", [0, 1, 2]),
        (None, [0, 1, 2]),
        (-1, [0, 1, 2]),
        ("-1", [0, 1, 2]),
        (2, [0, 1]),
        (" 2 ", [0, 1]),  # a count, as for 2
        (9, [0, 1, 2]),  # more than present: the Trainer refuses it later, with its own error
        (0, []),
        ("1,", [1]),  # a list of one ordinal, not a count
        (" 0 , 2 ", [0, 2]),
        ("0,5", [0]),
        ([2, 0], [2, 0]),
        ([4], []),
    ],
)
def test_device_ordinals_reads_a_trainer_devices_value(value, expected):
    assert devices.device_ordinals(value, 3) == expected


@pytest.mark.parametrize(
    ("caps", "devices_flag", "expected"),
    [
        ([(8, 0), (9, 0)], "auto", "bf16-mixed"),
        ([(7, 0), (7, 5)], "auto", "16-mixed"),
        ([(8, 6), (7, 5)], "auto", "16-mixed"),  # one old GPU: the whole run falls back
        ([(8, 6), (7, 5)], 1, "bf16-mixed"),  # only cuda:0 is used
        ([(7, 5), (8, 6)], [1], "bf16-mixed"),
        ([(7, 5), (8, 6)], "0,1", "16-mixed"),
    ],
)
def test_auto_precision_on_gpus(monkeypatch, caps, devices_flag, expected):
    install(monkeypatch, [FakeGpu(capability=c) for c in caps])
    monkeypatch.setattr(devices, "_cuda_available", lambda: True)
    assert devices.auto_precision("gpu", devices_flag) == expected
    assert devices.auto_precision("auto", devices_flag) == expected


def test_auto_precision_other_accelerators_are_full_precision(monkeypatch):
    assert devices.auto_precision("mps") == "32-true"
