"""The side-by-side bench's sittings summarised: per scenario and client budget, the median of
the sittings (hack/bench_kueue_scenario.py's JSON files) with their spread (min-max), and
the live means against the zero-latency bound when hack/bench_kueue_bound.py wrote one for the
scenario; prints figures.

    .venv/bin/python hack/bench_kueue_summary.py [--last 3] [hack/results/issue25-bench]

A figure quoted from here is "median of N sittings (min-max)" of the newest ``--last`` whole
sittings of each scenario and budget. A void sitting (its file's "void" says why; a file
written before the bench marked them is void when Kueue's recorder has fewer Workloads than the
scenario makes) is left out of the medians and listed as such.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "hack/results/issue25-bench"
CLASSES = [
    f"{size}-{kind}-rack"
    for size in ("small", "medium", "large")
    for kind in ("required", "preferred", "balanced")
]


def spread(values: list[float], fmt: str = "{:.2f}") -> str:
    if not values:
        return "-"
    median = fmt.format(statistics.median(values))
    if len(values) == 1:
        return f"{median} (1 sitting)"
    return f"{median} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def void_of(data: dict[str, Any]) -> str | None:
    """Why a sitting's file is void (None: it is whole)."""
    if data.get("void"):
        return str(data["void"])
    if data.get("topogate") is None:
        return "no serve side"
    rows = (data.get("kueue") or {}).get("classes") or {}
    if rows and all("n" in row for row in rows.values()):
        # A file from before the bench refused such sittings: Kueue's recorder short.
        recorded = sum(int(row["n"]) for row in rows.values())
        if recorded < data["workloads"]:
            return (
                f"Kueue's recorder has {recorded} of the {data['workloads']} Workloads "
                "(its runner stopped early)"
            )
    return None


Groups = dict[tuple[str, str], list[dict[str, Any]]]  # (scenario, budget) -> sittings


def load(directory: Path, last: int) -> tuple[Groups, Groups]:
    """Per scenario and budget: the newest ``last`` whole sittings, and every void one."""
    groups: Groups = defaultdict(list)
    void: Groups = defaultdict(list)
    for path in sorted([*directory.glob("tas-*.json"), *directory.glob("large-scale-*.json")]):
        data = json.loads(path.read_text())
        data["_file"] = path.name
        key = (data["scenario"], "/".join(map(str, data["budget"])))
        data["_void"] = void_of(data)
        (void if data["_void"] else groups)[key].append(data)
    whole = {key: sorted(runs, key=lambda r: r["started"])[-last:] for key, runs in groups.items()}
    return whole, dict(void)


def bound_of(directory: Path, scenario: str) -> dict[str, float] | None:
    path = directory / f"bound-{scenario}.json"
    if not path.exists():
        return None
    return {cls: float(row["mean"]) for cls, row in json.loads(path.read_text())["classes"].items()}


def summarise(
    key: tuple[str, str],
    runs: list[dict[str, Any]],
    bound: dict[str, float] | None,
    void: list[dict[str, Any]] | None = None,
) -> None:
    scenario, budget = key
    sides = [r for r in runs if r.get("kueue")]
    print(f"== {scenario}, client budget {budget} on both sides: {len(runs)} sittings")
    for run in void or []:
        print(f"   {run['_file']}: void, left out of the medians: {run['_void']}")
    if not runs:
        print("   no whole sitting")
        return
    for run in runs:
        violations = len(run["topogate"]["invariants"]["violations"])
        if run.get("kueue"):
            violations += len(run["kueue"]["invariants"]["violations"])
        print(f"   {run['_file']}: {run['uptime_before']}; invariant violations {violations}")

    def each(among: list[dict[str, Any]], *path: str) -> list[float]:
        """The figure at ``path`` in each sitting that has it."""
        out = []
        for run in among:
            value: Any = run
            try:
                for part in path:
                    value = value[part]
                if not math.isnan(float(value)):  # a figure the sitting could not take
                    out.append(float(value))
            except (KeyError, TypeError):
                continue
        return out

    def requests(among: list[dict[str, Any]], side: str) -> list[float]:
        return [float(sum(r[side]["api_requests"].values())) for r in among]

    print(
        "   serve CPU s "
        + spread(each(runs, "topogate", "cpu"), "{:.1f}")
        + ", peak RSS MB "
        + spread(each(runs, "topogate", "rss"), "{:.0f}")
        + ", API requests "
        + spread(requests(runs, "topogate"), "{:.0f}")
    )
    if sides:
        print(
            "   Kueue CPU s "
            + spread(each(sides, "kueue", "cpu"), "{:.1f}")
            + ", peak RSS MB "
            + spread(each(sides, "kueue", "rss"), "{:.0f}")
            + ", API requests "
            + spread(requests(sides, "kueue"), "{:.0f}")
            + ", dropped workload events "
            + spread(each(sides, "kueue", "dropped_workload_events"), "{:.0f}")
        )
        for name, label in (
            ("cpu", "controller CPU"),
            ("apiserver_cpu", "API server CPU"),
            ("api_requests", "API requests"),
            ("rss", "peak RSS"),
        ):
            print(f"   ratio topogate/Kueue {label}: " + spread(each(sides, "ratios", name)))
    header = f"   {'class':24} {'serve mean ms':>22}"
    if sides:
        header += f" {'Kueue mean ms':>22} {'ratio':>18}"
    if bound:
        header += f" {'bound ms':>9} {'serve/bound':>12}"
        if sides:
            # bound / Kueue: the lowest topogate/Kueue ratio any controller could reach with
            # these quotas, to read a target ratio against.
            header += f" {'Kueue/bound':>12} {'best ratio':>11}"
    print(header)
    # tas's classes in their order; another scenario's (large-scale) as its files name them.
    named = [c for c in CLASSES if c in runs[-1]["topogate"]["classes"]]
    for cls in named or list(runs[-1]["topogate"]["classes"]):
        ours = each(runs, "topogate", "classes", cls, "mean")
        if not ours:
            continue
        line = f"   {cls:24} {spread(ours, '{:.0f}'):>22}"
        if sides:
            theirs = each(sides, "kueue", "classes", cls, "mean")
            ratio = each(sides, "ratios", "classes", cls)
            line += f" {spread(theirs, '{:.0f}'):>22} {spread(ratio):>18}"
        if bound and cls in bound:
            line += f" {bound[cls]:9.0f} {statistics.median(ours) / max(bound[cls], 1):12.1f}"
            if sides and theirs:
                kueue_median = statistics.median(theirs)
                line += f" {kueue_median / max(bound[cls], 1):12.1f}"
                line += f" {bound[cls] / max(kueue_median, 1):11.2f}"
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path, nargs="?", default=RESULTS)
    parser.add_argument("--last", type=int, default=3, help="the newest N sittings of each")
    args = parser.parse_args()
    groups, void = load(args.directory, args.last)
    if not groups and not void:
        raise SystemExit(f"no sittings in {args.directory}")
    for key in sorted({*groups, *void}):
        summarise(key, groups.get(key, []), bound_of(args.directory, key[0]), void.get(key))


if __name__ == "__main__":
    main()
