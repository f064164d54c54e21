"""Render the tables of benchmarks/RESULTS.md from benchmarks/results/*_<mode>.json.

    python benchmarks/render.py [full|quick]     # prints Markdown to stdout
"""
from __future__ import annotations

import json
import sys

import _common as C


def load(name: str, mode: str):
    path = C.RESULTS_DIR / f"{name}_{mode}.json"
    return json.loads(path.read_text()) if path.exists() else None


def ms(s: float) -> str:
    return f"{s * 1000:.0f}"


def cycle_scale(r) -> str:
    out = []
    h = r["headline"]
    out.append("| world | GPUs | pending | running | busy GPUs | engine median / p90 (s) | open / allocate / preempt / metrics (ms) | binds |")
    out.append("| --- | --- | --- | --- | --- | --- | --- | --- |")

    def row(label, c):
        w, p = c["world"], c["phases"]
        return (f"| {label} | {w['gpus']:,} | {w['pending']:,} | {w['running']:,} | {w['used_gpus']:,} | "
                f"{c['wall']['median']:.3f} / {c['wall']['p90']:.3f} | {ms(p['open'])} / {ms(p['allocate'])} / "
                f"{ms(p['preempt'])} / {ms(p['metrics'])} | {c['binds']:,} |")

    out.append(row("headline", h))
    if "saturated" in r:
        out.append(row("saturated", r["saturated"]))
    out.append("")
    out.append("Curve over cluster size (10,000 pending; running jobs scaled with the cluster):")
    out.append("")
    out.append("| GPUs | nodes | running | engine median (s) | allocate (ms) | binds |")
    out.append("| --- | --- | --- | --- | --- | --- |")
    for c in r["curve_gpus"]:
        w = c["world"]
        out.append(f"| {w['gpus']:,} | {w['nodes']:,} | {w['running']:,} | {c['wall']['median']:.3f} | "
                   f"{ms(c['phases']['allocate'])} | {c['binds']:,} |")
    out.append("")
    out.append("Curve over pending jobs (20,160 GPUs, 5,000 running):")
    out.append("")
    out.append("| pending | pending GPUs | engine median (s) | open / allocate / preempt (ms) | binds |")
    out.append("| --- | --- | --- | --- | --- |")
    for c in r["curve_pending"]:
        w, p = c["world"], c["phases"]
        out.append(f"| {w['pending']:,} | {w['pending_gpus']:,} | {c['wall']['median']:.3f} | {ms(p['open'])} / "
                   f"{ms(p['allocate'])} / {ms(p['preempt'])} | {c['binds']:,} |")
    e = r.get("end_to_end", {})
    if "runs" in e:
        out.append("")
        w = e.get("world", h["world"])
        out.append(f"End to end with PostgreSQL ({w['gpus']:,} GPUs, {w['pending']:,} pending, {w['running']:,} running; "
                   f"load: cluster {e['load_seconds']['cluster']:.1f} s, jobs {e['load_seconds']['jobs']:.1f} s):")
        out.append("")
        out.append("| run | total (s) | snapshot read | engine | apply + commit | binds |")
        out.append("| --- | --- | --- | --- | --- | --- |")
        for i, x in enumerate(e["runs"], 1):
            out.append(f"| {i} | {x['total']:.2f} | {x['snapshot']:.2f} | {x['engine']:.2f} | {x['apply']:.2f} | {x['binds']:,} |")
    out.append("")
    out.append(f"Peak RSS of the process (all worlds, the 50k-pending one included): {r['peak_rss_mib']:.0f} MiB; "
               f"after the headline cycles: {h['peak_rss_mib']:.0f} MiB.")
    return "\n".join(out)


def bind(r) -> str:
    s = r["split_seconds"]
    return (f"{r['tasks_bound']:,} tasks ({r['jobs']:,} jobs x {r['tasks_per_job']}) on {r['gpus']:,} GPUs in "
            f"{len(r['cycles'])} cycle(s): {r['wall_seconds']:.2f} s = snapshot {s['snapshot']:.2f} + engine "
            f"{s['engine']:.2f} + apply/commit {s['apply']:.2f} -> **{r['tasks_per_second']:,.0f} tasks/s**")


def main(argv) -> None:
    mode = argv[0] if argv else "full"
    r = load("cycle_scale", mode)
    if r:
        print("### cycle_scale\n")
        print(cycle_scale(r))
    r = load("bind_throughput", mode)
    if r and "cycles" in r:
        print("\n### bind_throughput\n")
        print(bind(r))
    r = load("baselines", mode)
    if r:
        print("\n### baselines\n")
        print(r["table"])
        for k, v in r["results"].items():
            print(f"\n{k} largest runnable, tier 2, daily: {v['largest_runnable_daily_tier2']}")
            print(f"{k} largest runnable, top, daily: {v['largest_runnable_daily_top']}")
    r = load("optimum_gap", mode)
    if r:
        print("\n### optimum_gap\n")
        print(f"{r['gap_full']} {r['gap_no_backfill']} {r.get('by_family')} all optimal {r['all_optimal']}")
        for x in r["snapshots"]:
            print(f"| {x['family']} | {x['nodes']} | {x['free_gpus']} | {x['jobs']} | {x['optimum']} ({x['status']}, "
                  f"bound {x['bound']:.0f}) | {x['ours_full']} | {x['gap_full']:.2%} | {x['solve_seconds']:.1f} |")
    r = load("openb_fgd", mode)
    if r:
        print("\n### openb_fgd\n")
        print(r["table"])
        for k, v in r["results"].items():
            print(f"{k}: pods {v['pods']}, failed {v['failed']}, cycles {v['cycles']}, wall {v['wall_seconds']:.0f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
