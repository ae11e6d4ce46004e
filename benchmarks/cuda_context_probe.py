"""Probe: what a CUDA process's device memory holds beyond the caching allocator.

    python benchmarks/cuda_context_probe.py [-o OUT.json]

In one fresh process it reads NVML's memory info (v1 ``used``; v2 ``used`` and ``reserved``
where the driver has them), ``nvidia-smi --query-gpu=memory.used,memory.reserved``,
``torch.cuda.mem_get_info`` and ``torch.cuda.memory_reserved`` at each stage: before CUDA
is initialised, after ``torch.cuda.init()``, after the first tensor, after a cuBLAS GEMM
(fp32 and bf16), after a cuDNN convolution forward and backward (fp32 and bf16), and after
``empty_cache``. Each stage's "beyond the allocator" is NVML used minus the allocator's
reserved bytes, which is what simdl's device total must add to its replayed reserved memory
(simdl.memory.device). Without CUDA it prints one line and exits 0.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys


def _nvml() -> dict:
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        m = pynvml.nvmlDeviceGetMemoryInfo(h)
        out = {"v1_total": m.total, "v1_used": m.used, "v1_free": m.free}
        try:
            m2 = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
            out.update(v2_total=m2.total, v2_used=m2.used, v2_reserved=m2.reserved, v2_free=m2.free)
        except Exception as e:  # older driver or binding: v1 only
            out["v2_error"] = f"{type(e).__name__}: {e}"
        return out
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"}


def _smi() -> dict:
    q = "memory.total,memory.used,memory.reserved,memory.free"
    try:
        text = subprocess.run(
            ["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader,nounits", "-i", "0"],
            capture_output=True,
            text=True,
            timeout=20,
        ).stdout.strip()
        return dict(zip(q.split(","), (float(x) for x in text.split(","))))  # MiB
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("-o", "--output")
    a = ap.parse_args(argv)
    stages: list[dict] = [{"stage": "before CUDA init", "nvml": _nvml(), "smi": _smi()}]
    import torch

    if not torch.cuda.is_available():
        print("cuda_context_probe: no CUDA device; nothing measured")
        return 0

    def stage(name: str) -> None:
        torch.cuda.synchronize()
        free, total = torch.cuda.mem_get_info()
        rec = {
            "stage": name,
            "nvml": _nvml(),
            "smi": _smi(),
            "mem_get_info_free": free,
            "mem_get_info_total": total,
            "allocator_reserved": torch.cuda.memory_reserved(),
            "allocator_allocated": torch.cuda.memory_allocated(),
        }
        n = rec["nvml"]
        if "v1_used" in n:
            rec["v1_used_minus_reserved_MiB"] = (n["v1_used"] - rec["allocator_reserved"]) / 2**20
        if "v2_used" in n:
            rec["v2_used_minus_reserved_MiB"] = (n["v2_used"] - rec["allocator_reserved"]) / 2**20
        stages.append(rec)
        print(json.dumps({k: v for k, v in rec.items() if k != "nvml"}), flush=True)

    torch.cuda.init()
    stage("after torch.cuda.init()")
    x = torch.ones(1, device="cuda")
    stage("after the first tensor")
    for dt in (torch.float32, torch.bfloat16):
        a_ = torch.randn(1024, 1024, device="cuda", dtype=dt)
        (a_ @ a_).sum().item()
        stage(f"after a cuBLAS GEMM ({dt})")
    for dt in (torch.float32, torch.bfloat16):
        conv = torch.nn.Conv2d(64, 64, 3, padding=1).cuda().to(dt)
        inp = torch.randn(32, 64, 56, 56, device="cuda", dtype=dt, requires_grad=True)
        conv(inp).sum().backward()
        stage(f"after a cuDNN convolution forward and backward ({dt})")
        del conv, inp
    del x
    torch.cuda.empty_cache()
    stage("after empty_cache")
    out = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "device": torch.cuda.get_device_name(0),
        "stages": stages,
    }
    if a.output:
        with open(a.output, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
