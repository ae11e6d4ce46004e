"""The optimizer step as a memory-bound task: bytes streamed and kernels launched.

Counted from PyTorch's foreach implementations (torch/optim/sgd.py _multi_tensor_sgd,
torch/optim/adam.py _multi_tensor_adam; default on CUDA since PyTorch 2.0), with each
class's default weight decay (0 for SGD and Adam, 1e-2 for AdamW): each
``torch._foreach_*`` call reads and writes whole parameter-sized tensor lists.

  sgd       add_(p, g)                                   read 2, write 1  -> 3 passes
  momentum  mul_(buf); add_(buf, g); add_(p, buf)        read 5, write 3  -> 8 passes
  adam      lerp_(m, g); mul_(v); addcmul_(v, g, g);     read 11, write 7 -> 18 passes
            sqrt(v) -> d; div_(d); add_(d, eps); addcdiv_(p, m, d, step_size)
  adamw     mul_(p, 1 - lr * wd), then adam's calls     read 12, write 8 -> 20 passes

Adam's calls are those of the default ``capturable=False`` branch, where the bias-corrected
step size is a list of Python scalars handed to ``addcdiv_`` (no pass of its own).

AdamW is Adam with ``decoupled_weight_decay=True`` (torch/optim/adamw.py, torch 2.14);
_multi_tensor_adam then scales the parameters in place before the moments are updated
(``torch._foreach_mul_(device_params, 1 - lr * weight_decay)``), one call more.
The per-tensor ``step`` counters are scalars and are not counted.

``lamb`` is apex.optimizers.FusedLAMB with its defaults (apex/optimizers/fused_lamb.py,
csrc/multi_tensor_lamb.cu; weight_decay 0.01, so stage 1 reads the parameters): five
multi-tensor kernels, no torch.optim class. CUDA only: refused on CPU ranks and servers.

  lamb      l2norm(g) (the global gradient norm)          read 7, write 3  -> 13 passes
            l2norm(p) per tensor; stage 1: g, p, m, v -> m, v and the update written into g;
            l2norm(update) per tensor; stage 2: p, update -> p

A pass is one parameter-sized tensor read or written once (4 bytes per element in fp32).
"""

from __future__ import annotations

import math

from ..errors import SimdlError
from .plan import COMPUTE, Task

PASSES = {"sgd": 3, "momentum": 8, "adam": 18, "adamw": 20, "lamb": 13}
FOREACH_CALLS = {"sgd": 1, "momentum": 3, "adam": 7, "adamw": 8, "lamb": 5}
# Optimizers that exist only as CUDA kernels (apex): no CPU rank or parameter server runs them.
CUDA_ONLY = {"lamb": "apex.optimizers.FusedLAMB"}

# aten/src/ATen/native/cuda/MultiTensorApply.cuh: depth_to_max_tensors = {110, 64, 48, 36, 30}
# tensors per launch for 1..5 tensor lists; the calls above use 2-3 lists, so 48 is typical.
FOREACH_TENSORS_PER_LAUNCH = 48


def optimizer_task(
    optimizer: str,
    local_param_bytes: float,
    n_tensors: int,
    deps: tuple[int, ...],
    *,
    foreach: bool = True,
) -> Task:
    """The optimizer step over ``local_param_bytes`` of fp32 parameters in ``n_tensors`` tensors.

    ``foreach=False`` is PyTorch's choice on CPU tensors (torch/optim/optimizer.py,
    _default_to_fused_or_foreach: foreach only for CUDA tensors), where each call loops
    over the tensors one kernel at a time.
    """
    if not foreach:
        check_runs_on_cpu(optimizer)
    calls = FOREACH_CALLS[optimizer]
    per_call = math.ceil(n_tensors / FOREACH_TENSORS_PER_LAUNCH) if foreach else n_tensors
    return Task(
        name=f"optimizer:{optimizer}",
        stream=COMPUTE,
        phase="opt",
        deps=deps,
        bytes=PASSES[optimizer] * local_param_bytes,
        kernels=calls * max(per_call, 1),
    )


def uses_foreach(cluster) -> bool:
    """Whether the optimizer takes the foreach path on this host (simdl.hosts; see optimizer_task)."""
    from ..hosts import host_for

    return host_for(cluster).foreach_optimizer()


def check_runs_on_cpu(optimizer: str) -> None:
    """Refuse an optimizer that has no CPU implementation (a CPU rank, a parameter server)."""
    if optimizer in CUDA_ONLY:
        accepted = ", ".join(k for k in PASSES if k not in CUDA_ONLY)
        raise SimdlError(
            f"optimizer {optimizer!r} ({CUDA_ONLY[optimizer]}) runs on CUDA GPUs only, not on CPU "
            f"ranks or a parameter server; accepted here: {accepted}"
        )


def host_update_bytes(optimizer: str, param_bytes: float) -> float:
    """Bytes a parameter server's CPU update streams (per-tensor torch.optim, same passes)."""
    check_runs_on_cpu(optimizer)
    return PASSES[optimizer] * param_bytes
