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
* Kernels: number of non-view aten ops per call (metadata-only ops excluded). The
  root row also holds the loss and the ``ones_like`` that seeds ``backward()``.
* Row parameters: a module's own parameters on its first call, plus those of
  submodules that are never called (``MultiheadAttention.out_proj``), so the rows add
  up to ``param_count`` (see ``_Tracer.adopt_uncalled``).

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
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry

from ..errors import SimdlError
from .table import SCHEMA, SCALED_COLUMNS
from .inputs import describe, is_image, sample_batch
from .zoo import build_adapted

aten = torch.ops.aten

# Ops that only make a tensor descriptor (no kernel, no data moved) although their
# schema does not mark them as views.
_METADATA_OPS = {
    aten._unsafe_view.default,
    aten.empty.memory_format,
    aten.empty_like.default,
    aten.empty_strided.default,
    aten.new_empty.default,
    aten.new_empty_strided.default,
    aten.lift_fresh.default,
    aten.detach.default,
    aten.size.default,
    aten.stride.default,
    aten.numel.default,
    aten.dim.default,
    aten.is_contiguous.default,
    aten.sym_size.int,
    aten.sym_stride.int,
    aten.sym_numel.default,
    aten.sym_storage_offset.default,
    aten.storage_offset.default,
}
_MATMULS = {aten.mm, aten.addmm, aten.bmm, aten.baddbmm}
_COLUMNS = SCALED_COLUMNS + ("fwd_kernels", "bwd_kernels")
_LABEL = "simdl_row"  # key in autograd node.metadata


def _tensors(obj: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(obj)[0] if isinstance(t, torch.Tensor)]


def _storage_key(t: torch.Tensor) -> StorageWeakRef:
    # StorageWeakRef compares by the StorageImpl pointer, which meta tensors have too;
    # views share it with their base. (torch/multiprocessing/reductions.py)
    return StorageWeakRef(t.untyped_storage())


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

    def efficient(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                  scale=None, enable_gqa=False):
        if (query.device.type != "meta" and not any_device) or enable_gqa:
            return original(query, key, value, attn_mask, dropout_p, is_causal,
                            scale=scale, enable_gqa=enable_gqa)
        needs_grad = torch.is_grad_enabled() and any(
            t.requires_grad for t in (query, key, value))
        return aten._scaled_dot_product_efficient_attention(
            query, key, value, attn_mask, needs_grad, dropout_p, is_causal, scale=scale)[0]

    F.scaled_dot_product_attention = efficient
    try:
        yield
    finally:
        F.scaled_dot_product_attention = original


class _Row:
    __slots__ = ("name", "type", "module", "params", "param_bytes", "v")

    def __init__(self, name: str, module: torch.nn.Module, first_call: bool):
        self.name = name
        self.type = type(module).__name__
        self.module = module
        own = list(module.parameters(recurse=False)) if first_call else []
        self.params = sum(p.numel() for p in own)
        self.param_bytes = sum(p.numel() * p.element_size() for p in own)
        self.v = dict.fromkeys(_COLUMNS, 0)


class _Tracer(TorchDispatchMode):
    """Books every aten op of one training step to a row (one row per module call)."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model
        self.names = {m: n for n, m in model.named_modules()}
        self.rows: list[_Row] = []
        self.stack: list[int] = []  # row indices of the module calls running now
        self.starts: list[int] = []  # first autograd sequence_nr of each running call
        self.keep: list[Any] = []  # keeps nodes/storages alive so ids stay unique
        self.called: set[torch.nn.Module] = set()
        self.saved: set[StorageWeakRef] = set()
        self.exclude = {_storage_key(t) for t in model.parameters()}
        self.exclude |= {_storage_key(t) for t in model.buffers()}
        self.param_storages = {_storage_key(p) for p in model.parameters()}
        self.shapes: dict[torch.nn.Module, set[tuple[int, ...]]] = {}
        self._decomposable: dict[Any, bool] = {}

    # -- module hooks ----------------------------------------------------------------
    def pre_hook(self, module, args, kwargs):
        row = _Row(self.names[module], module, module not in self.called)
        self.called.add(module)
        self.rows.append(row)
        self.stack.append(len(self.rows) - 1)
        # Autograd nodes are numbered in creation order (Node::sequence_nr,
        # torch/csrc/autograd/function.h); this call creates those from here on.
        self.starts.append(torch._C._autograd._get_sequence_nr())

    def post_hook(self, module, args, kwargs, output):
        index = self.stack.pop()
        start = self.starts.pop()
        row = self.rows[index]
        seen: set[int] = set()
        for t in _tensors(output):
            if id(t) not in seen:
                seen.add(id(t))
                row.v["output_bytes"] += t.nbytes
        # Label the autograd nodes this call created and no inner call claimed. The
        # walk goes through inner calls' nodes (a parent's op may sit between two
        # children, e.g. ConvNeXt's layer_scale multiply before stochastic depth) and
        # stops at nodes created before the call. AccumulateGrad nodes (parameter
        # leaves, sequence_nr UINT64_MAX) go to the first call that reaches them.
        todo = [t.grad_fn for t in _tensors(output) if t.grad_fn is not None]
        visited: set[int] = set()
        while todo:
            node = todo.pop()
            if node is None or id(node) in visited:
                continue
            visited.add(id(node))
            self.keep.append(node)
            if not hasattr(node, "variable"):  # AccumulateGrad exposes .variable
                if node._sequence_nr() < start:
                    continue
                todo.extend(n for n, _ in node.next_functions)
            if _LABEL not in node.metadata:
                node.metadata[_LABEL] = index

    # -- saved tensors -----------------------------------------------------------------
    def pack(self, t: torch.Tensor) -> torch.Tensor:
        key = _storage_key(t)
        if key not in self.exclude and key not in self.saved:
            self.saved.add(key)
            self.keep.append(t)
            row = self.rows[self.stack[-1]] if self.stack else self.rows[0]
            row.v["saved_bytes"] += t.untyped_storage().nbytes()
        return t

    # -- ops ----------------------------------------------------------------------------
    def _can_decompose(self, func) -> bool:
        if func not in self._decomposable:
            dk = torch._C.DispatchKey.CompositeImplicitAutograd
            self._decomposable[func] = (
                dk in func.py_kernels
                or torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), dk))
        return self._decomposable[func]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        packet = func._overloadpacket
        # Same fallback as FlopCounterMode (torch/utils/flop_counter.py,
        # _FlopCounterMode.__torch_dispatch__): unregistered ops with a composite
        # kernel are decomposed so their matmuls are counted.
        if packet not in flop_registry and func is not torch.ops.prim.device.default \
                and self._can_decompose(func):
            with self:
                r = func.decompose(*args, **kwargs)
            if r is not NotImplemented:
                return r
        out = func(*args, **kwargs)
        if func.is_view or func in _METADATA_OPS:
            return out
        node = torch._C._current_autograd_node()
        if node is None:  # forward (or outside the model: loss)
            row = self.rows[self.stack[-1]] if self.stack else self.rows[0]
            v = row.v
            v["fwd_kernels"] += 1
            v["read_bytes"] += sum(t.nbytes for t in _tensors((args, kwargs)))
            v["write_bytes"] += sum(t.nbytes for t in _tensors(out))
            if packet in flop_registry:
                v["fwd_flops"] += flop_registry[packet](*args, **kwargs, out_val=out)
        else:
            row = self.rows[node.metadata.get(_LABEL, 0)]
            row.v["bwd_kernels"] += 1
            if packet in flop_registry:
                self._backward_flops(row, func, packet, args, kwargs, out)
        return out

    def _backward_flops(self, row, func, packet, args, kwargs, out) -> None:
        formula = flop_registry[packet]
        v = row.v
        if packet is aten.convolution_backward:
            # Schema: (grad_output, input, weight, bias_sizes, stride, padding,
            # dilation, transposed, output_padding, groups, output_mask).
            mask = list(args[10])
            if mask[0]:
                v["bwd_input_flops"] += formula(*args[:10], [True, False, False], **kwargs,
                                                out_val=out)
            if mask[1]:
                # The registry's weight-gradient term frames it as a conv with batch and
                # channels swapped, which loses the group division: it is `groups` times
                # too big for grouped/depthwise convs (fixed upstream in pytorch/pytorch
                # PR #183405, not in torch 2.14). Divided here so it equals the forward.
                v["bwd_weight_flops"] += formula(*args[:10], [False, True, False], **kwargs,
                                                 out_val=out) // args[9]
            return
        flops = formula(*args, **kwargs, out_val=out)
        if packet in _MATMULS and self._is_weight_grad(row.module, args, out):
            v["bwd_weight_flops"] += flops
        else:
            v["bwd_input_flops"] += flops

    def _is_weight_grad(self, module, args, out) -> bool:
        shape = tuple(out.shape)
        shapes = self.shapes.get(module, set())
        if shape not in shapes and shape[::-1] not in shapes:
            return False
        return not any(_storage_key(t) in self.param_storages for t in _tensors(args))

    # -- after forward ------------------------------------------------------------------
    def adopt_uncalled(self) -> None:
        """Give parameters of modules never called to their nearest called ancestor.

        Some modules hold weights their parent uses functionally:
        ``nn.MultiheadAttention`` calls ``F.linear`` on ``out_proj.weight``
        (torch/nn/functional.py, multi_head_attention_forward), so ``out_proj`` never
        runs. Its parameters go to the first row of the ancestor, which keeps
        ``sum(row params) == param_count`` and lets backward matmuls on them count as
        weight gradients of that ancestor.
        """
        first_row = {}
        for i, row in enumerate(self.rows):
            first_row.setdefault(row.module, i)
        for name, m in self.model.named_modules():
            own = list(m.parameters(recurse=False))
            self.shapes.setdefault(m, set()).update(tuple(p.shape) for p in own)
            if m in self.called or not own:
                continue
            parts = name.split(".")
            for k in range(len(parts) - 1, -1, -1):
                ancestor = self.model.get_submodule(".".join(parts[:k]))
                if ancestor in self.called:
                    row = self.rows[first_row[ancestor]]
                    row.params += sum(p.numel() for p in own)
                    row.param_bytes += sum(p.numel() * p.element_size() for p in own)
                    self.shapes.setdefault(ancestor, set()).update(tuple(p.shape) for p in own)
                    break


def _trace(model: torch.nn.Module, input_shape: tuple[int, ...], num_classes: int,
           batch: int, vocab: int | None = None) -> tuple[list[_Row], str]:
    """One forward+backward on meta at ``batch``; returns the rows and the loss used."""
    for p in model.parameters():
        p.grad = None  # a fresh step: no gradient accumulation kernels
    tracer = _Tracer(model)
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
                    loss = sum(t.float().sum() for t in _tensors(out))
            del out
            tracer.adopt_uncalled()
            loss.backward()
    finally:
        for h in handles:
            h.remove()
    if not tracer.rows or tracer.rows[0].module is not model:
        raise SimdlError("model trace did not start with the root module's forward")
    return tracer.rows, loss_kind


def _has_logits(out: Any, batch: int, num_classes: int) -> bool:
    return (isinstance(out, torch.Tensor) and out.dim() >= 2 and out.shape[0] == batch
            and out.shape[-1] == num_classes and out.is_floating_point())


def _number(x: float) -> float | int:
    """Integers stay integers; others keep 6 decimals so regenerated files diff cleanly."""
    return int(x) if float(x).is_integer() else round(float(x), 6)


def extract(model_spec: str, input_shape: tuple[int, ...], num_classes: int,
            dataset: str = "", batches: tuple[int, int] = (2, 4), vocab: int | None = None) -> dict[str, Any]:
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
        row: dict[str, Any] = {"name": r1.name, "type": r1.type,
                               "params": r1.params, "param_bytes": r1.param_bytes}
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
            {"name": n, "type": type(m).__name__,
             "params": sum(p.numel() for p in m.parameters(recurse=False))}
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
    with open(tmp, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw,
                                               mtime=0, compresslevel=9) as f:
        f.write(text.encode("utf-8"))
    os.replace(tmp, path)  # atomic: concurrent readers never see half a file
    return path
