#!/usr/bin/env python3
"""The README's table of a grouped-suite run, from a `bench --json` file:
`scripts/bench-table.py FILE` prints one markdown row per layer (our direct kernel where the run
timed one, 3xTF32 and TF32 as the cost model chose them, or the fastest of each where the run
timed every variant, cuDNN's best of each class, the floor, and the planner's choice in each
class), then the medians and ranges the README quotes."""
import json, statistics, sys

HBM_BYTES_PER_S = 4.3e12
TF32_FLOPS_PER_S = 495e12

doc = json.load(open(sys.argv[1]))
layers = doc["repeats"][-1]
p50 = lambda c: c["timing"]["p50"]


def short(name):
    """A candidate's name as the tables write it."""
    for prefix, label in (("direct_fwd_", "direct "), ("depthwise_fwd_", "depthwise "), ("igemm_", "")):
        if name.startswith(prefix):
            return label + name[len(prefix):]
    for prefix in ("cudnn-legacy:", "cudnn:"):
        if name.startswith(prefix):
            return "cuDNN " + name[len(prefix):].split("_k")[0]
    return name.split("_k")[0] if name.startswith("eng") else name


def precision(name):
    return "3xtf32" if name.startswith("3xtf32") else "tf32" if name.startswith("tf32") else "direct"


with_direct = any(precision(c["name"]) == "direct" and not c["name"].startswith("fft")
                  for l in layers for c in l["candidates"][: l["ours"]])
head = ["layer", "floor ms"] + (["direct ms"] if with_direct else []) + [
    "3xTF32 ms", "TF32 ms", "cuDNN exact ms", "cuDNN fast ms", "TF32 / floor", "3xTF32 vs exact",
    "TF32 vs fast", "exact plan", "vs cuDNN exact", "fast plan", "vs cuDNN fast"]
print("| " + " | ".join(head) + " |")
print("| --- | " + " | ".join("---" if h.endswith("plan") else "---:" for h in head[1:]) + " |")
ratios = {k: [] for k in ("x3", "tf", "exact_plan", "fast_plan", "floor")}
for l in layers:
    c = l["candidates"]
    # The fastest of each precision: one candidate each, or every variant where the run timed
    # them all (as the bench's own table takes them).
    ours = {}
    for x in c[: l["ours"]]:
        if not x["name"].startswith("fft"):
            key = precision(x["name"])
            ours[key] = min(ours.get(key, float("inf")), p50(x))
    exact, fast = c[l["best_exact"]], c[l["best_fast"]]
    # Runs that time variants (`ab`) plan nothing.
    plan_exact, plan_fast = (c[i] for i in l["plans"]) if l.get("plans") else (None, None)
    floor = max(l["min_bytes"] / HBM_BYTES_PER_S, l["flops"] / TF32_FLOPS_PER_S) * 1e3
    x3, tf = ours["3xtf32"], ours["tf32"]
    ratios["x3"].append(p50(exact) / x3)
    ratios["tf"].append(p50(fast) / tf)
    if plan_exact:
        ratios["exact_plan"].append(p50(exact) / p50(plan_exact))
        ratios["fast_plan"].append(p50(fast) / p50(plan_fast))
    ratios["floor"].append(tf / floor)
    row = [l["label"], f"{floor:.3f}"] + ([f"{ours['direct']:.3f}"] if with_direct else []) + [
        f"{x3:.3f}", f"{tf:.3f}", f"{p50(exact):.3f} ({short(exact['name'])})",
        f"{p50(fast):.3f} ({short(fast['name'])})", f"{tf / floor:.1f}", f"{p50(exact) / x3:.2f}x",
        f"{p50(fast) / tf:.2f}x"] + ([
        short(plan_exact["name"]), f"{p50(exact) / p50(plan_exact):.2f}x",
        short(plan_fast["name"]), f"{p50(fast) / p50(plan_fast):.2f}x"] if plan_exact else ["-"] * 4)
    print("| " + " | ".join(row) + " |")
print()
run = doc["run"]
print(f"commit {run['commit']}, cuDNN {run['cudnn']}, seed {run['seed']}, {len(layers)} layers")
for key, what in (("x3", "3xTF32 vs cuDNN exact"), ("tf", "TF32 vs cuDNN fast"),
                  ("exact_plan", "exact plans vs cuDNN exact"), ("fast_plan", "fast plans vs cuDNN fast")):
    r = ratios[key]
    if not r:
        continue
    print(f"{what}: median {statistics.median(r):.2f}x ({min(r):.2f}-{max(r):.2f}x), "
          f"{sum(v < 1 for v in r)} below 1x, {sum(v < 1.5 for v in r)} below 1.5x")
f = ratios["floor"]
print(f"TF32 / floor: median {statistics.median(f):.1f}, within 2.5x on {sum(v <= 2.5 for v in f)} of {len(f)}")
