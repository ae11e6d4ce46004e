"""The device :mod:`validate.gpu_check` measures: which one, its software, its state.

CUDA device 0 when torch sees one, else the CPU. Versions (torch, CUDA, cuDNN, driver) and
the numerics flags a user gets by default (``torch.backends.cudnn.allow_tf32`` is True in
PyTorch, so fp32 convolutions may run on TF32 tensor cores; ``torch.backends.cuda.matmul.
allow_tf32`` is False) are recorded with every results file. The device's used memory,
clocks, power and temperature come from NVML through pynvml (the ``nvidia-ml-py``
package) when it imports, else from ``nvidia-smi --query-gpu``; neither: None, with why.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from typing import Any

SMI_FIELDS = (
    "memory.used",
    "memory.total",
    "clocks.sm",
    "clocks.mem",
    "clocks.max.sm",
    "clocks.max.mem",
    "power.draw",
    "temperature.gpu",
    "driver_version",
)


def pick_device(force_cpu: bool = False):
    import torch

    if not force_cpu and torch.cuda.is_available():
        torch.cuda.set_device(0)
        return torch.device("cuda", 0)
    return torch.device("cpu")


def device_name(device) -> str:
    import torch

    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def environment(device) -> dict[str, Any]:
    import torch
    import torchvision

    from simdl.cluster.host import cpu_model

    env: dict[str, Any] = {
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "python": platform.python_version(),
        "device": device_name(device),
        "cuda": torch.version.cuda,
        "cudnn": None,
        "hostname": platform.node(),
        "cpu_cores": os.cpu_count(),
        "cpu_model": cpu_model(),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update(
            cudnn=torch.backends.cudnn.version(),
            capability=list(torch.cuda.get_device_capability(device)),
            multiprocessors=props.multi_processor_count,
            total_memory_bytes=props.total_memory,
            flags={
                "cudnn.benchmark": torch.backends.cudnn.benchmark,
                "cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
                "cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
                "float32_matmul_precision": torch.get_float32_matmul_precision(),
            },
        )
        env["nvml"] = state(device)
    else:
        env["threads"] = torch.get_num_threads()
    return env


def state(device) -> dict[str, Any] | None:
    """Used memory, clocks, power and temperature of the device now."""
    if device.type != "cuda":
        return None
    got = _pynvml(device.index or 0)
    return got if got is not None else _smi(device.index or 0)


def _pynvml(index: int) -> dict[str, Any] | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(index)
        mem = pynvml.nvmlDeviceGetMemoryInfo(h)
        clock = pynvml.nvmlDeviceGetClockInfo
        max_clock = pynvml.nvmlDeviceGetMaxClockInfo
        out = {
            "source": "pynvml",
            "used_bytes": int(mem.used),
            "total_bytes": int(mem.total),
            **_nvml_v2(pynvml, h),
            "sm_clock_MHz": clock(h, pynvml.NVML_CLOCK_SM),
            "mem_clock_MHz": clock(h, pynvml.NVML_CLOCK_MEM),
            "max_sm_clock_MHz": max_clock(h, pynvml.NVML_CLOCK_SM),
            "max_mem_clock_MHz": max_clock(h, pynvml.NVML_CLOCK_MEM),
        }
        try:
            out["power_W"] = pynvml.nvmlDeviceGetPowerUsage(h) / 1e3
            out["temperature_C"] = pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)
        except pynvml.NVMLError:
            pass
        return out
    except Exception as e:  # noqa: BLE001 -- NVML missing or refused: fall back to nvidia-smi
        return {"source": "pynvml", "error": f"{type(e).__name__}: {e}", **(_smi(index) or {})}


def _nvml_v2(pynvml, handle) -> dict[str, Any]:
    """NVML v2's used and reserved memory (``nvmlMemory_v2_t``): v1's ``used`` counts the
    memory the driver and firmware reserve, v2 gives it apart, and nvidia-smi's memory.used
    is v2's used (NVML API reference, nvmlMemory_t and nvmlMemory_v2_t). Empty where the
    bindings or the driver have no v2."""
    v2 = getattr(pynvml, "nvmlMemory_v2", None)
    if v2 is None:
        return {}
    try:
        mem = pynvml.nvmlDeviceGetMemoryInfo(handle, version=v2)
    except Exception:  # noqa: BLE001 -- an older driver or binding: v1 only
        return {}
    return {"used_v2_bytes": int(mem.used), "reserved_v2_bytes": int(mem.reserved)}


def _smi(index: int) -> dict[str, Any] | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return {"source": None, "error": "neither pynvml nor nvidia-smi is available"}
    try:
        text = subprocess.run(
            [exe, f"--id={index}", f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"source": "nvidia-smi", "error": f"{type(e).__name__}: {e}"}
    vals = [v.strip() for v in text.split(",")]
    if len(vals) != len(SMI_FIELDS):
        return {"source": "nvidia-smi", "error": f"unexpected output {text[:200]!r}"}
    raw = dict(zip(SMI_FIELDS, vals))

    def num(k):
        try:
            return float(raw[k])
        except ValueError:
            return None

    mib = 2**20
    used, total = num("memory.used"), num("memory.total")
    return {
        "source": "nvidia-smi",
        "used_bytes": None if used is None else int(used * mib),
        "total_bytes": None if total is None else int(total * mib),
        "sm_clock_MHz": num("clocks.sm"),
        "mem_clock_MHz": num("clocks.mem"),
        "max_sm_clock_MHz": num("clocks.max.sm"),
        "max_mem_clock_MHz": num("clocks.max.mem"),
        "power_W": num("power.draw"),
        "temperature_C": num("temperature.gpu"),
        "driver": raw["driver_version"],
    }
