#!/usr/bin/env python3
"""Per layer, our fastest time in each of several `bench --json` files side by side, with the
ratio of each file to the first and cuDNN's best exact time from the first:
`scripts/ab-summary.py NAME=FILE NAME=FILE...` (an A/B of two builds, run alternately)."""
import json, sys

runs = [arg.split("=", 1) for arg in sys.argv[1:]]
p50 = lambda c: c["timing"]["p50"] if c.get("timing") else float("nan")
times, cudnn = {}, {}
for name, path in runs:
    for layer in json.load(open(path))["repeats"][-1]:
        times.setdefault(layer["label"], {})[name] = min(map(p50, layer["candidates"][: layer["ours"]]))
        if layer.get("best_exact") is not None:
            cudnn.setdefault(layer["label"], p50(layer["candidates"][layer["best_exact"]]))
names = [name for name, _ in runs]
print("| layer | " + " | ".join(f"{n} ms" for n in names) + " | " + " | ".join(f"{n} / {names[0]}" for n in names[1:]) + " | cuDNN exact ms |")
print("| --- |" + " ---: |" * (2 * len(names)))
for label, row in times.items():
    ms = [row.get(n, float("nan")) for n in names]
    ratios = [m / ms[0] for m in ms[1:]]
    print(f"| {label} | " + " | ".join(f"{m:.4f}" for m in ms) + " | " + " | ".join(f"{r:.3f}" for r in ratios) + f" | {cudnn.get(label, float('nan')):.4f} |")
