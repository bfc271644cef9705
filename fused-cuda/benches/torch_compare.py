#!/usr/bin/env python3
"""PyTorch baselines for the fused-cuda bench (issue 5), on the first GPU.

Measures, with CUDA events (median of batches, per call):
  - F16 GEMV y = W·x, W 4096 × 14336 (torch.matmul), weights rotated over
    copies that together exceed 240 MB (4x the H200's L2), as cuda-bench does;
  - SiLU · mul + add on 14336-element f32 vectors (three element-wise ops);
  - an F16 FFN decode layer, d = 4096, ff = 11008, one token:
    out = W_down · (silu(W_gate·h) ⊙ (W_up·h)) + h, layers rotated likewise;
each eager and replayed as a CUDA graph (torch.cuda.CUDAGraph) holding the
same sequence of calls. Prints a markdown table in µs per call (per layer);
cuda-bench prints the fused-cuda side in the same units.

Usage: python3 fused-cuda/benches/torch_compare.py   (needs torch with CUDA)
"""

import statistics

import torch
import torch.nn.functional as F

ROTATE_BYTES = 240_000_000
BATCHES = 25


def time_per_call(fn, calls, batches=BATCHES, warm=3):
    """Median over batches of (event time of `calls` calls of fn(i)) / calls, µs."""
    samples = []
    i = 0
    for b in range(batches + warm):
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn(i)
            i += 1
        stop.record()
        stop.synchronize()
        if b >= warm:
            samples.append(start.elapsed_time(stop) * 1e3 / calls)
    return statistics.median(samples)


def time_graph(fn, calls, batches=BATCHES, warm=3):
    """The same, with the `calls` calls captured once in a CUDA graph and replayed."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i in range(calls):  # warm-up outside the capture (lazy init)
            fn(i)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(calls):
            fn(i)
    return time_per_call(lambda _: graph.replay(), 1, batches, warm) / calls


def copies_for(nbytes):
    return max(2, -(-ROTATE_BYTES // nbytes))


def main():
    torch.manual_seed(0)
    dev = torch.device("cuda")
    print(f"# PyTorch {torch.__version__} on {torch.cuda.get_device_name(0)} "
          f"(CUDA {torch.version.cuda})\n")
    rows = []

    # F16 GEMV 4096 x 14336.
    m, k = 4096, 14336
    n = copies_for(m * k * 2)
    ws = [torch.randn(m, k, device=dev, dtype=torch.float16) for _ in range(n)]
    x = torch.randn(k, device=dev, dtype=torch.float16)
    y = torch.empty(m, device=dev, dtype=torch.float16)

    def gemv(i):
        torch.matmul(ws[i % n], x, out=y)

    moved = m * k * 2 + (k + m) * 2
    for name, t in [("eager", time_per_call(gemv, 2 * n)), ("graph", time_graph(gemv, 2 * n))]:
        rows.append((f"F16 GEMV {m} x {k} ({n} weight copies)", name, t, moved / t / 1e3))
    del ws

    # SiLU * mul + add on 14336 f32.
    e = 14336
    a, b, c = (torch.randn(e, device=dev) for _ in range(3))
    out = torch.empty(e, device=dev)

    def ew(_):
        torch.add(F.silu(a) * b, c, out=out)

    for name, t in [("eager", time_per_call(ew, 50)), ("graph", time_graph(ew, 50))]:
        rows.append((f"silu(a)*b + c, {e} f32 (3 kernels)", name, t, 4 * e * 4 / t / 1e3))

    # F16 FFN decode layer.
    d, ff = 4096, 11008
    layer_bytes = 3 * d * ff * 2
    n = copies_for(layer_bytes)
    layers = [tuple(torch.randn(r, cc, device=dev, dtype=torch.float16) * 0.02
                    for r, cc in [(ff, d), (ff, d), (d, ff)]) for _ in range(n)]
    h = torch.randn(1, d, device=dev, dtype=torch.float16)

    def ffn(i):
        g, u, dn = layers[i % n]
        return F.linear(F.silu(F.linear(h, g)) * F.linear(h, u), dn) + h

    for name, t in [("eager", time_per_call(ffn, 2 * n)), ("graph", time_graph(ffn, 2 * n))]:
        rows.append((f"F16 FFN layer d={d} ff={ff}, residual ({n} layer copies)", name, t,
                     layer_bytes / t / 1e3))

    print("| PyTorch | mode | µs/call (median) | GB/s (weights, or bytes in+out) |")
    print("| --- | --- | ---: | ---: |")
    for what, mode, t, gbs in rows:
        print(f"| {what} | {mode} | {t:.1f} | {gbs:.0f} |")


if __name__ == "__main__":
    main()
