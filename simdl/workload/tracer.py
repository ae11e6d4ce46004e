"""The dispatch mode that books every aten op of one traced training step to a row, one row
per module call (:func:`simdl.workload.extract.extract` runs it; its docstring says how each
column is obtained). Needs torch.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry

from .table import SCALED_COLUMNS

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
_COLUMNS = SCALED_COLUMNS + ("fwd_kernels", "bwd_kernels", "fwd_live_max")
_LABEL = "simdl_row"  # key in autograd node.metadata


def tensors(obj: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(obj)[0] if isinstance(t, torch.Tensor)]


def _storage_key(t: torch.Tensor) -> StorageWeakRef:
    # StorageWeakRef compares by the StorageImpl pointer, which meta tensors have too;
    # views share it with their base. (torch/multiprocessing/reductions.py)
    return StorageWeakRef(t.untyped_storage())


class Row:
    __slots__ = ("name", "type", "module", "params", "param_bytes", "v")

    def __init__(self, name: str, module: torch.nn.Module, first_call: bool):
        self.name = name
        self.type = type(module).__name__
        self.module = module
        own = list(module.parameters(recurse=False)) if first_call else []
        self.params = sum(p.numel() for p in own)
        self.param_bytes = sum(p.numel() * p.element_size() for p in own)
        self.v = dict.fromkeys(_COLUMNS, 0)


class Tracer(TorchDispatchMode):
    """Books every aten op of one training step to a row (one row per module call)."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model
        self.names = {m: n for n, m in model.named_modules()}
        self.rows: list[Row] = []
        self.stack: list[int] = []  # row indices of the module calls running now
        self.starts: list[int] = []  # first autograd sequence_nr of each running call
        self.keep: list[Any] = []  # keeps nodes/storages alive so ids stay unique
        self.called: set[torch.nn.Module] = set()
        self.saved: set[StorageWeakRef] = set()
        self.exclude = {_storage_key(t) for t in model.parameters()}
        self.exclude |= {_storage_key(t) for t in model.buffers()}
        self.param_storages = {_storage_key(p) for p in model.parameters()}
        self.shapes: dict[torch.nn.Module, set[tuple[int, ...]]] = {}
        self.bwd_owner: dict[StorageWeakRef, int] = {}  # storage made in backward -> its row
        # Storages each running row's own forward ops made (row index -> key -> bytes).
        self.fwd_made: dict[int, dict[StorageWeakRef, int]] = {}
        self._decomposable: dict[Any, bool] = {}

    # -- module hooks ----------------------------------------------------------------
    def pre_hook(self, module, args, kwargs):
        row = Row(self.names[module], module, module not in self.called)
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
        made = self.fwd_made.pop(index, {})
        end = sum(n for k, n in made.items() if not k.expired())
        row.v["fwd_working_bytes"] = max(0, row.v["fwd_live_max"] - end)
        seen: set[int] = set()
        for t in tensors(output):
            if id(t) not in seen:
                seen.add(id(t))
                row.v["output_bytes"] += t.nbytes
        # Label the autograd nodes this call created and no inner call claimed. The
        # walk goes through inner calls' nodes (a parent's op may sit between two
        # children, e.g. ConvNeXt's layer_scale multiply before stochastic depth) and
        # stops at nodes created before the call. AccumulateGrad nodes (parameter
        # leaves, sequence_nr UINT64_MAX) go to the first call that reaches them.
        todo = [t.grad_fn for t in tensors(output) if t.grad_fn is not None]
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
            self._decomposable[func] = dk in func.py_kernels or torch._C._dispatch_has_kernel_for_dispatch_key(
                func.name(), dk
            )
        return self._decomposable[func]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        packet = func._overloadpacket
        # Same fallback as FlopCounterMode (torch/utils/flop_counter.py,
        # _FlopCounterMode.__torch_dispatch__): unregistered ops with a composite
        # kernel are decomposed so their matmuls are counted.
        if packet not in flop_registry and func is not torch.ops.prim.device.default and self._can_decompose(func):
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
            v["read_bytes"] += sum(t.nbytes for t in tensors((args, kwargs)))
            v["write_bytes"] += sum(t.nbytes for t in tensors(out))
            self._forward_live(self.stack[-1] if self.stack else 0, v, out)
            if packet in flop_registry:
                v["fwd_flops"] += flop_registry[packet](*args, **kwargs, out_val=out)
        else:
            row = self.rows[node.metadata.get(_LABEL, 0)]
            row.v["bwd_kernels"] += 1
            ws = self._working_bytes(node.metadata.get(_LABEL, 0), args, kwargs, out)
            if ws > row.v["bwd_working_bytes"]:
                row.v["bwd_working_bytes"] = ws
            if packet in flop_registry:
                self._backward_flops(row, func, packet, args, kwargs, out)
        return out

    def _forward_live(self, index: int, v: dict, out) -> None:
        """Track the bytes of the storages row ``index``'s forward made that are still alive
        after this op (Python frees a temporary when its last reference goes), and keep their
        largest sum in ``fwd_live_max``."""
        made = self.fwd_made.setdefault(index, {})
        for t in tensors(out):
            key = _storage_key(t)
            if key not in self.exclude and key not in made:
                made[key] = t.untyped_storage().nbytes()
        live = sum(n for k, n in made.items() if not k.expired())
        if live > v["fwd_live_max"]:
            v["fwd_live_max"] = live

    def _working_bytes(self, index: int, args, kwargs, out) -> int:
        """Bytes of the gradients one backward op of row ``index`` reads and writes that the
        row's own backward made: the storages of its tensor inputs and outputs that are
        neither saved activations nor parameters or buffers, and were created by an op of
        this row (each storage once; an in-place op's output is its input). Gradients
        arriving from other rows (the output gradient, a skip path's) are left out: the
        memory timeline holds those already."""
        for t in tensors(out):
            key = _storage_key(t)
            if key not in self.saved and key not in self.exclude:
                self.bwd_owner[key] = index
        seen: set[StorageWeakRef] = set()
        total = 0
        for t in tensors((args, kwargs, out)):
            key = _storage_key(t)
            if key in seen or self.bwd_owner.get(key) != index or key in self.saved or key in self.exclude:
                continue
            seen.add(key)
            total += t.untyped_storage().nbytes()
        return total

    def _backward_flops(self, row, func, packet, args, kwargs, out) -> None:
        formula = flop_registry[packet]
        v = row.v
        if packet is aten.convolution_backward:
            # Schema: (grad_output, input, weight, bias_sizes, stride, padding,
            # dilation, transposed, output_padding, groups, output_mask).
            mask = list(args[10])
            if mask[0]:
                v["bwd_input_flops"] += formula(*args[:10], [True, False, False], **kwargs, out_val=out)
            if mask[1]:
                # The registry's weight-gradient term frames it as a conv with batch and
                # channels swapped, which loses the group division: it is `groups` times
                # too big for grouped/depthwise convs (fixed upstream in pytorch/pytorch
                # PR #183405, not in torch 2.14). Divided here so it equals the forward.
                v["bwd_weight_flops"] += formula(*args[:10], [False, True, False], **kwargs, out_val=out) // args[9]
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
        return not any(_storage_key(t) in self.param_storages for t in tensors(args))

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
        first_row: dict[torch.nn.Module, int] = {}
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
