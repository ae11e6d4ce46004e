"""Trace one training step of a model and write its workload table (needs torch).

The model runs on the **meta device**: every tensor has a shape and a dtype but no
memory and no data, so ConvNeXt-Large at 224x224 traces in seconds on a laptop. The
step is ``cross_entropy(model(x), y).backward()`` with ``x`` not requiring grad, as
in real training (so the first layer computes no input gradient). Cross-entropy
rather than ``logits.sum()`` because it is what classification training runs: its
log-softmax saves a (batch x classes) tensor and adds kernels, both booked to the
root row ``""`` like every op outside a submodule.

How each column is obtained:

* Ops are seen by a ``TorchDispatchMode`` (below autograd, so one aten op = one
  kernel launch on a GPU, up to fusion) and booked to the innermost module running,
  kept by forward pre/post hooks on every module.
* FLOPs use ``torch.utils.flop_counter.flop_registry`` exactly as ``FlopCounterMode``
  does (same formulas, same ``func.decompose()`` fallback for unregistered ops), so
  the totals agree with it (tests/workload/test_workload_flops.py) but for grouped
  convs (below).
* Backward ops are booked to the module call whose forward created the autograd node
  running them (``torch._C._current_autograd_node()``): each call's forward
  post-hook labels, in ``node.metadata``, the not-yet-labelled nodes reachable from its
  outputs that were created during the call (autograd ``sequence_nr`` at least the
  one at its pre-hook). Inner hooks fire first, so a parent keeps only what its own
  forward did (residual adds, flattens, DenseNet's concatenations). Gradient
  accumulation for a tensor used twice runs inside the consumer's node and is booked
  there. Nodes no call created (the loss) go to the root row.
* Input- vs weight-gradient FLOPs: ``convolution_backward`` is split by its
  ``output_mask`` [input, weight, bias], each part counted by the registry formula;
  the weight part is divided by ``groups`` (the registry overcounts grouped and
  depthwise convs by that factor; see ``_backward_flops``). This is the one place
  where the table departs from ``FlopCounterMode``. A backward
  ``mm``/``addmm``/``bmm`` is a weight gradient when its output has the shape (or transposed shape) of one of the module's parameters and none of its
  operands is a parameter (the input-gradient matmul multiplies by the weight, the
  weight-gradient one multiplies gradient by saved input); anything else is an input
  gradient (attention score/value gradients, fused-attention backward).
* Bytes read/written: sum of ``nbytes`` of the tensor inputs/outputs of each
  forward op that is not a view (views move no data). An upper bound on DRAM traffic
  with no cache reuse or fusion.
* Saved bytes: ``torch.autograd.graph.saved_tensors_hooks`` sees every tensor
  autograd keeps; counted once per storage (a ReLU saving the conv output it
  overwrote in place costs nothing more), parameters and buffers excluded, booked to
  the innermost module at pack time. The model input is counted when saved (the
  first conv keeps it for its weight gradient).
* Backward working bytes: for each backward op, the storages of its tensor inputs and
  outputs that are neither saved activations nor parameters/buffers and were made by
  the same row's backward (the gradients it reads and writes); the row keeps the largest
  over its ops.
* Kernels: number of non-view aten ops per call (metadata-only ops excluded). The
  root row also holds the loss and the ``ones_like`` that seeds ``backward()``.
* Row parameters: a module's own parameters on its first call, plus those of
  submodules that are never called (``MultiheadAttention.out_proj``), so the rows add
  up to ``param_count`` (see ``Tracer.adopt_uncalled``).

Each column is measured at two batch sizes and split into ``per_sample`` and
``fixed`` parts (``v(b) = per_sample * b + fixed``). Batch >= 2 because BatchNorm in
train mode rejects a single value per channel (batch 1 at 1x1 spatial).

Attention: on meta, ``F.scaled_dot_product_attention`` falls back to the math path
(it materialises and saves the full attention matrix). A GPU training in float32 uses
the memory-efficient kernel instead (flash needs fp16/bf16), so :func:`gpu_attention`
routes it to ``aten._scaled_dot_product_efficient_attention`` during the trace; its
FLOPs use the registry's fused-attention formulas (which count the score
recomputation in backward).
"""

from __future__ import annotations

import contextlib
import datetime
import gzip
import json
import os
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import _disable_current_modes

from ..errors import SimdlError
from .inputs import describe, is_image, sample_batch
from .table import SCALED_COLUMNS, SCHEMA
from .tracer import Row, Tracer, tensors
from .zoo import build_adapted

aten = torch.ops.aten


@contextlib.contextmanager
def gpu_attention(any_device: bool = False):
    """Run ``F.scaled_dot_product_attention`` on meta as CUDA float32 training would.

    ``nn.MultiheadAttention`` calls the name ``scaled_dot_product_attention`` in
    ``torch.nn.functional`` (multi_head_attention_forward), so patching it there for
    the trace is enough. The memory-efficient kernel is what SDPA picks on CUDA for
    float32 (aten/src/ATen/native/transformers/cuda/sdp_utils.cpp: flash attention
    requires fp16/bf16). Only meta tensors are rerouted unless ``any_device`` (for
    FakeTensorMode, whose fake CPU tensors run the meta kernels anyway).
    """
    original = F.scaled_dot_product_attention

    def efficient(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        if (query.device.type != "meta" and not any_device) or enable_gqa:
            return original(query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)
        needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
        return aten._scaled_dot_product_efficient_attention(
            query, key, value, attn_mask, needs_grad, dropout_p, is_causal, scale=scale
        )[0]

    F.scaled_dot_product_attention = efficient
    try:
        yield
    finally:
        F.scaled_dot_product_attention = original


def _trace(
    model: torch.nn.Module, input_shape: tuple[int, ...], num_classes: int, batch: int, vocab: int | None = None
) -> tuple[list[Row], str]:
    """One forward+backward on meta at ``batch``; returns the rows and the loss used."""
    for p in model.parameters():
        p.grad = None  # a fresh step: no gradient accumulation kernels
    tracer = Tracer(model)
    handles = []
    for m in model.modules():
        handles.append(m.register_forward_pre_hook(tracer.pre_hook, with_kwargs=True))
        handles.append(m.register_forward_hook(tracer.post_hook, with_kwargs=True))
    x = sample_batch(batch, tuple(input_shape), vocab)
    try:
        with gpu_attention(), tracer:
            with torch.autograd.graph.saved_tensors_hooks(tracer.pack, lambda t: t):
                out = model(x)
                # Logits over the classes, or over the vocabulary (a language model's next token).
                labels = next((n for n in (num_classes, vocab) if n and _has_logits(out, batch, n)), None)
                if labels is not None:
                    # (batch, labels), or (batch, ..., labels) for a label per position:
                    # cross-entropy over every position.
                    loss_kind = "cross_entropy" if labels == num_classes else "cross_entropy over the vocabulary"
                    with _disable_current_modes():  # the labels come with the batch: not traced
                        y = torch.zeros(out.shape[:-1], dtype=torch.long, device="meta")
                    loss = F.cross_entropy(out if out.dim() == 2 else out.reshape(-1, labels), y.reshape(-1))
                else:  # a factory model without (batch, classes) logits
                    loss_kind = "sum"
                    loss = _sum_loss(tensors(out))
            del out
            tracer.adopt_uncalled()
            loss.backward()
    finally:
        for h in handles:
            h.remove()
    if not tracer.rows or tracer.rows[0].module is not model:
        raise SimdlError("model trace did not start with the root module's forward")
    return tracer.rows, loss_kind


def _sum_loss(outputs: list[torch.Tensor]) -> torch.Tensor:
    """The sum of every output tensor's elements, as Python's ``sum`` adds them (so the same
    ops are traced); an output that holds no tensor has no loss to take."""
    loss = sum(t.float().sum() for t in outputs)
    if not isinstance(loss, torch.Tensor):
        raise SimdlError("the model's output holds no tensor; accepted: a model returning tensors")
    return loss


def _has_logits(out: Any, batch: int, num_classes: int) -> bool:
    return (
        isinstance(out, torch.Tensor)
        and out.dim() >= 2
        and out.shape[0] == batch
        and out.shape[-1] == num_classes
        and out.is_floating_point()
    )


def _number(x: float) -> float | int:
    """Integers stay integers; others keep 6 decimals so regenerated files diff cleanly."""
    return int(x) if float(x).is_integer() else round(float(x), 6)


def extract(
    model_spec: str,
    input_shape: tuple[int, ...],
    num_classes: int,
    dataset: str = "",
    batches: tuple[int, int] = (2, 4),
    vocab: int | None = None,
) -> dict[str, Any]:
    """Trace ``model_spec`` and return its workload table as a schema-1 dict.

    ``vocab``: the inputs are int64 token ids below it (simdl.workload.inputs), not float32.
    """
    b1, b2 = (int(b) for b in batches)
    if not 2 <= b1 < b2:
        raise SimdlError(f"batches must be two sizes 2 <= b1 < b2, got {batches}")
    model, note, shape = build_adapted(model_spec, tuple(input_shape), int(num_classes), vocab=vocab)
    rows1, loss_kind = _trace(model, shape, num_classes, b1, vocab)
    rows2, _ = _trace(model, shape, num_classes, b2, vocab)
    sig1 = [(r.name, r.type) for r in rows1]
    if sig1 != [(r.name, r.type) for r in rows2]:
        raise SimdlError(f"{model_spec}: module calls differ between batch {b1} and {b2}")
    out_rows = []
    for r1, r2 in zip(rows1, rows2):
        row: dict[str, Any] = {"name": r1.name, "type": r1.type, "params": r1.params, "param_bytes": r1.param_bytes}
        for c in SCALED_COLUMNS:
            per = (r2.v[c] - r1.v[c]) / (b2 - b1)
            row[c] = _number(per)
            row[c + "_fixed"] = _number(r1.v[c] - b1 * per)
        row["fwd_kernels"] = r1.v["fwd_kernels"]
        row["bwd_kernels"] = r1.v["bwd_kernels"]
        # Zero columns are left out (WorkloadTable.from_dict reads them as 0): this
        # halves the file and its parse time, which sweeps pay on every first load.
        out_rows.append({k: x for k, x in row.items() if x != 0 or k in ("name", "type")})
    params = list(model.named_parameters())
    owner: dict[int, str] = {}
    for n, m in model.named_modules():
        for p in m.parameters(recurse=False):
            owner.setdefault(id(p), n)
    import torchvision

    return {
        "schema": SCHEMA,
        "model": model_spec,
        "dataset": dataset,
        "input_shape": list(shape),
        "num_classes": int(num_classes),
        "dtype": "float32",
        "adaptation": note,
        "extracted_with": {
            "torch": torch.__version__.split("+")[0],
            "torchvision": torchvision.__version__.split("+")[0],
            "batches": [b1, b2],
            "date": datetime.date.today().isoformat(),
            "device": "meta",
            "loss": loss_kind,
            "attention": "memory-efficient SDPA (CUDA float32 choice)",
            # Images need no word (float32 CxHxW, the shipped tables); other inputs say theirs.
            **({} if is_image(tuple(shape), vocab) else {"input": describe(tuple(shape), vocab)}),
            **({"vocab_size": int(vocab)} if vocab is not None else {}),
        },
        "param_count": sum(p.numel() for _, p in params),
        "param_bytes": sum(p.numel() * p.element_size() for _, p in params),
        "buffer_bytes": sum(b.numel() * b.element_size() for b in model.buffers()),
        "params": [{"name": n, "module": owner[id(p)], "numel": p.numel()} for n, p in params],
        "modules": [
            {"name": n, "type": type(m).__name__, "params": sum(p.numel() for p in m.parameters(recurse=False))}
            for n, m in model.named_modules()
        ],
        "rows": out_rows,
    }


def save_table(table: dict[str, Any], path: str | os.PathLike) -> Path:
    """Write ``table`` as gzip JSON, byte-identical when the content is (gzip mtime 0)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(table, separators=(",", ":"))
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as f:
        f.write(text.encode("utf-8"))
    os.replace(tmp, path)  # atomic: concurrent readers never see half a file
    return path
