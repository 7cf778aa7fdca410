#!/usr/bin/env python3
"""Every timed candidate per row of a `bench cgemm --json` file, fastest first, beside cuBLAS's
best: `scripts/cgemm-variants.py FILE [ROW...]` (what an A/B of cgemm variants reads; FILE may be
gzipped)."""
import gzip, json, sys

path, rows = sys.argv[1], set(sys.argv[2:])
doc = json.load(gzip.open(path) if path.endswith(".gz") else open(path))
for row in doc["rows"]:
    if rows and row["label"] not in rows:
        continue
    cands = row["candidates"]
    p50 = lambda c: c["timing"]["p50"] if c.get("timing") else float("nan")
    # candidates[0] is ours, then `references` cuBLAS and cuBLASLt results, then the variants.
    refs = cands[1 : 1 + row["references"]]
    best = min(refs, key=p50) if refs else None
    floor = row["min_bytes"] / 4.3e12 * 1e3
    print(f"{row['label']}: floor {floor:.4f} ms, chosen {row['variant']}, "
          f"cuBLAS best {p50(best):.4f} ({best['name']})" if best else f"{row['label']}: no reference")
    for c in sorted([cands[0]] + cands[1 + row["references"]:], key=p50):
        speedup = p50(best) / p50(c) if best else float("nan")
        name = f"{c['name']} ({row['variant']})" if c is cands[0] else c["name"]
        print(f"    {name:44s} {p50(c):.4f} ms  {speedup:5.2f}x  {floor / p50(c) * 100:5.1f}% HBM  viol {c['violations']}")
