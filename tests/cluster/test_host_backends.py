"""Device kind and host backends (simdl.hosts): the device file's ``kind`` decides, never its name."""

from __future__ import annotations

import pytest
import yaml

from simdl.cluster import allocate
from simdl.cluster.spec import GPU_DIR, gpu_names, load_gpu
from simdl.errors import SimdlError
from simdl.hosts import host_for
from simdl.hosts.cpu_glibc import GlibcCpuHost
from simdl.hosts.cuda import CudaHost


def test_every_shipped_device_file_states_its_kind():
    for name in gpu_names():
        raw = yaml.safe_load((GPU_DIR / f"{name}.yaml").read_text())
        assert raw.get("kind") in ("cuda", "cpu"), name
        assert load_gpu(name).kind == raw["kind"]


def _variant(tmp_path, base: str, name: str, kind) -> str:
    raw = yaml.safe_load((GPU_DIR / f"{base}.yaml").read_text())
    raw.update(name=name, kind=kind)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def test_the_kind_decides_not_the_file_name(tmp_path):
    assert not load_gpu(_variant(tmp_path, "cpu", "cpu-looking-gpu", "cuda")).is_cpu
    assert load_gpu(_variant(tmp_path, "A10G", "accelerator-x", "cpu")).is_cpu


def test_an_unknown_kind_is_a_one_line_error(tmp_path):
    with pytest.raises(SimdlError, match=r"kind = 'tpu'; accepted: cuda, cpu") as e:
        load_gpu(_variant(tmp_path, "A10G", "x", "tpu"))
    assert "\n" not in str(e.value)


def test_each_kind_gets_its_backend():
    gpu = host_for(allocate("a100-80gb-nvlink", 4))
    cpu = host_for(allocate("lab/profiles/cpu-epyc-zen4.yaml", 2))
    assert isinstance(gpu, CudaHost) and isinstance(cpu, GlibcCpuHost)
    assert (gpu.collectives_block(), gpu.foreach_optimizer(), gpu.mapped_threshold()) == (False, True, None)
    assert cpu.collectives_block() and not cpu.foreach_optimizer() and cpu.mapped_threshold() > 0
    # Gradients that reach the trim threshold fault in again on glibc, never on CUDA.
    big = [cpu.mapped_threshold() / 2] * 64
    assert cpu.refault_limit(big) == cpu.mapped_threshold() and gpu.refault_limit(big) == 0.0
    assert cpu.refault_limit([1.0]) == 0.0
    assert cpu.refault_notes(5e8) and gpu.refault_notes(5e8) == ()
    assert host_for(allocate("cpu-local", 2)).shares_cores() and not gpu.shares_cores()
