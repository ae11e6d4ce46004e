"""Scratch memory of a CPU convolution's backward: measured against simdl's rule.

simdl (simdl/memory/timeline.py, cluster key ``memory.conv_backward_scratch``) holds,
during each convolution's backward and beside its results (input and weight gradient),
``max(input + output gradient, weight gradient)`` bytes of scratch: oneDNN reorders the
activations, or works on a weight-sized gradient buffer when the weight is the larger
(deep layers at small spatial size). This script measures it: one Conv2d, batch 32,
fp32, one thread; torch.profiler's allocations inside ``aten::convolution_backward``,
their peak minus what is still live when the op returns (its results).

Run: ``python benchmarks/conv_backward_scratch.py`` (a few seconds).
"""

from __future__ import annotations

MiB = 2**20
# (in channels, out channels, kernel, stride, input height = width)
CASES = [
    (32, 64, 3, 1, 26),
    (64, 64, 3, 1, 32),
    (64, 128, 1, 1, 16),
    (256, 256, 3, 1, 8),
    (128, 128, 3, 1, 16),
    (256, 256, 3, 1, 5),
    (256, 256, 3, 1, 6),
    (256, 256, 3, 1, 7),
    (128, 128, 3, 1, 4),
    (128, 128, 3, 1, 5),
    (512, 512, 3, 1, 1),
    (512, 512, 3, 1, 2),
    (512, 512, 3, 1, 4),
    (512, 512, 3, 1, 8),
    (256, 512, 3, 2, 4),
    (512, 512, 1, 1, 1),
    (1024, 1024, 1, 1, 2),
    (64, 128, 3, 2, 32),
]


def measure(cin: int, cout: int, k: int, s: int, hw: int, batch: int = 32) -> tuple[float, float, float, float]:
    """(scratch, input bytes, output-gradient bytes, weight bytes) of one backward."""
    import torch
    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile

    conv = torch.nn.Conv2d(cin, cout, k, stride=s, padding=k // 2, bias=False)
    x = torch.randn(batch, cin, hw, hw, requires_grad=True)
    conv(x).backward(
        torch.ones(1).expand(batch, cout, (hw + 2 * (k // 2) - k) // s + 1, (hw + 2 * (k // 2) - k) // s + 1)
    )  # warm-up
    conv.weight.grad = x.grad = None
    y = conv(x)
    g = torch.randn_like(y)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        y.backward(g)
    op, events = None, []
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        n = stack.pop()
        stack.extend(n.children)
        if n.name == "aten::convolution_backward":
            op = (n.start_time_ns, n.end_time_ns)
        if n.typed[0] == _EventType.Allocation:
            events.append((n.start_time_ns, n.typed[1].alloc_size))
    live = peak = 0
    for t, size in sorted(events):
        if op[0] <= t <= op[1]:
            live += size
            peak = max(peak, live)
    return float(peak - live), float(x.numel() * 4), float(g.numel() * 4), float(conv.weight.numel() * 4)


def main() -> None:
    import torch

    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, one thread, batch 32, fp32")
    print(f"{'convolution':<28}{'measured':>10}{'simdl':>10}{'error':>9}   input+dY   weight  (MiB)")
    errs = []
    for cin, cout, k, s, hw in CASES:
        scratch, x, dy, w = measure(cin, cout, k, s, hw)
        rule = max(x + dy, w)
        errs.append(rule / scratch - 1)
        name = f"{cin}->{cout} k{k} s{s} {hw}x{hw}"
        print(
            f"{name:<28}{scratch / MiB:>10.2f}{rule / MiB:>10.2f}{errs[-1]:>+9.1%}   {(x + dy) / MiB:8.2f} {w / MiB:8.2f}"
        )
    within = sum(abs(e) <= 0.01 for e in errs)
    print(f"{within}/{len(errs)} within 1%; max |error| {max(map(abs, errs)):.1%}")


if __name__ == "__main__":
    main()
