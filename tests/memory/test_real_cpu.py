"""Peak allocated bytes of real CPU training steps vs simdl (cluster ``cpu-local``).

Measured side: :mod:`simdl.memory.reference` (``torch.profiler`` with profile_memory:
every CPU allocation and free of the step, on top of the live parameters, buffers and
optimizer state). simdl side: ``simdl.predict(..., cluster="cpu-local")``'s tensor peak
(no 512-byte rounding on the CPU device; per-tensor optimizer kernels, as PyTorch
picks on CPU). TOLERANCE 5%: the goal is 3%; real CPU kernels (oneDNN) and gloo's
collectives allocate a little beyond what the meta-device trace records. The 2-rank FSDP2
step takes the lowest of three steps' peaks per rank (see ``reference._fsdp_worker``: gloo's
background thread occasionally keeps a unit-sized buffer alive a little longer).
"""

from __future__ import annotations

import pytest

import simdl

pytestmark = pytest.mark.torch
TOLERANCE = 0.05


@pytest.mark.parametrize("model,dataset,batch,optimizer", [
    ("mnist_cnn", "mnist", 32, "momentum"),
    pytest.param("resnet18", "cifar10", 32, "adam", marks=pytest.mark.slow),
])
def test_single_process_step(model, dataset, batch, optimizer):
    from simdl.memory.reference import real_single_step
    from simdl.workload.library import load_workload

    t = load_workload(model, dataset=dataset)
    measured = real_single_step(model, t.input_shape, t.num_classes, batch, optimizer)
    r = simdl.predict(model=model, strategy="ddp", gpus=1, cluster="cpu-local", dataset=dataset,
                      batch_size=batch, optimizer=optimizer)
    error = r.peak_tensor_bytes / measured - 1
    print(f"{model} b={batch} {optimizer}: measured {measured:,.0f} B, simdl {r.peak_tensor_bytes:,.0f} B, {error:+.2%}")
    assert abs(error) <= TOLERANCE


@pytest.mark.torchrun
@pytest.mark.slow
def test_two_rank_fsdp2_gloo_step():
    from simdl.memory.reference import real_fsdp_step
    from simdl.strategies.fsdp_units import fsdp_units
    from simdl.workload.library import load_workload

    t = load_workload("mnist_cnn", dataset="mnist")
    units = [u.name for u in fsdp_units(t, "block").units[1:]]
    peaks = real_fsdp_step("mnist_cnn", t.input_shape, t.num_classes, 32, units, world=2)
    r = simdl.predict(model="mnist_cnn", strategy="fsdp", gpus=2, cluster="cpu-local", dataset="mnist", batch_size=32)
    error = r.peak_tensor_bytes / max(peaks) - 1
    print(f"mnist_cnn FSDP2 x2 gloo: measured {max(peaks):,.0f} B per rank, simdl {r.peak_tensor_bytes:,.0f} B, {error:+.2%}")
    assert abs(error) <= TOLERANCE
