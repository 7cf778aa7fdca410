#!/usr/bin/env python3
"""Per channels-last depthwise layer of a `bench --all-variants --json` file, one line: cuDNN's
best exact, the fastest channels-last walk and the fastest patches variant of ours, and the
patch's time over the walk's: `scripts/depthwise-nhwc.py FILE`."""
import json, sys

doc = json.load(open(sys.argv[1]))
print(f"{'layer':34s} {'cuDNN':>7s} {'walk':>24s} {'patches':>28s} {'p/w':>5s} {'vs cuDNN':>8s}")
for layer in doc["repeats"][-1]:
    cands = layer["candidates"]
    p50 = lambda c: c["timing"]["p50"] if c.get("timing") else float("inf")
    best = cands[layer["best_exact"]] if layer.get("best_exact") is not None else None
    ours = cands[: layer["ours"]]
    fastest = lambda prefix: min((c for c in ours if c["name"].startswith(prefix)), key=p50, default=None)
    walk, patch = fastest("nhwc_k"), fastest("nhwc_patch")
    if not (best and walk and patch):
        continue
    top = min(p50(walk), p50(patch))
    print(f"{layer['label']:34s} {p50(best):7.4f} {walk['name']:>16s} {p50(walk):7.4f} {patch['name']:>20s} "
          f"{p50(patch):7.4f} {p50(patch) / p50(walk):5.2f} {p50(best) / top:7.2f}x")
