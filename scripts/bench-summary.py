#!/usr/bin/env python3
"""Every candidate of ours per layer beside cuDNN's best exact, from a `bench --json` file:
`scripts/bench-summary.py FILE` (what an A/B of variants reads)."""
import json, sys

doc = json.load(open(sys.argv[1]))
for layer in doc["repeats"][-1]:
    cands = layer["candidates"]
    p50 = lambda c: c["timing"]["p50"] if c.get("timing") else float("nan")
    best = cands[layer["best_exact"]] if layer.get("best_exact") is not None else None
    best_ms = p50(best) if best else float("nan")
    ours = sorted(cands[: layer["ours"]], key=p50)
    floor = layer["min_bytes"] / 4.3e12 * 1e3
    print(f"{layer['label']}: floor {floor:.4f} ms, cuDNN exact {best_ms:.4f} ({best['name'] if best else '-'})")
    for c in ours:
        print(f"    {c['name']:28s} {p50(c):.4f} ms  {best_ms / p50(c):5.2f}x  {floor / p50(c) * 100:5.1f}% HBM  viol {c['violations']}")
