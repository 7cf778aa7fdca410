#!/usr/bin/env python3
"""Per layer, our fastest time in each of several `bench --json` files side by side, with the
ratio of each file to the first and cuDNN's best of the class from the first:
`scripts/ab-summary.py [--variants REGEX] NAME=FILE NAME=FILE...` (an A/B of two builds, run
alternately). With --variants, a row per layer and each of our variants whose name matches.
The last lines: each ratio column's median and range."""
import argparse, json, re, statistics

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--variants", help="compare our variants whose name matches this regex one by one")
parser.add_argument("runs", nargs="+", metavar="NAME=FILE")
args = parser.parse_args()
runs = [arg.split("=", 1) for arg in args.runs]
p50 = lambda c: c["timing"]["p50"] if c.get("timing") else float("nan")
times, cudnn = {}, {}
for name, path in runs:
    for layer in json.load(open(path))["repeats"][-1]:
        ours = layer["candidates"][: layer["ours"]]
        best = {k: p50(layer["candidates"][layer[f"best_{k}"]]) for k in ("exact", "fast") if layer.get(f"best_{k}") is not None}
        if args.variants:
            rows = [((layer["label"], c["name"]), p50(c), c["class"]) for c in ours if re.search(args.variants, c["name"])]
        else:
            fastest = min(ours, key=p50)
            rows = [((layer["label"],), p50(fastest), fastest["class"])]
        for key, ms, math in rows:
            times.setdefault(key, {})[name] = ms
            cudnn.setdefault(key, best.get(math, float("nan")))
names = [name for name, _ in runs]
key_columns = ["layer", "variant"] if args.variants else ["layer"]
header = key_columns + [f"{n} ms" for n in names] + [f"{n} / {names[0]}" for n in names[1:]] + ["cuDNN ms (the class's best)"]
print("| " + " | ".join(header) + " |")
print("|" + " --- |" * len(key_columns) + " ---: |" * (len(header) - len(key_columns)))
for key, row in times.items():
    ms = [row.get(n, float("nan")) for n in names]
    cells = [*key, *(f"{m:.4f}" for m in ms), *(f"{m / ms[0]:.3f}" for m in ms[1:]), f"{cudnn[key]:.4f}"]
    print("| " + " | ".join(cells) + " |")
for n in names[1:]:
    ratios = sorted(r[n] / r[names[0]] for r in times.values() if n in r and names[0] in r and r[names[0]] > 0)
    if ratios:
        print(f"{n} / {names[0]}: median {statistics.median(ratios):.3f} ({ratios[0]:.3f}-{ratios[-1]:.3f}) over {len(ratios)} rows")
