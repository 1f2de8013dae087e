"""Compare topogate's TopologyAssignment encoder with Kueue's own, byte for byte.

Builds a small Go program against a Kueue checkout (``pkg/util/tas.V1Beta2From``, default
feature gates), feeds it random assignments (several hostname schemes, shared and clashing
prefixes, the 1,000-slice back-off) and the ``bench_assignment_size.py`` gangs, and compares
its JSON with ``api.topology_assignment.encode``. Needs Go and Kueue's modules in the module
cache (``GOPROXY=off``: nothing is downloaded).

    .venv/bin/python hack/check_kueue_encoder.py --kueue-src /work/kueue-src [--cases 3000]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from topogate.api.constants import HOSTNAME_LABEL
from topogate.api.topology_assignment import AssignedDomain, encode

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_assignment_size as bench

DRIVER = """package main

import (
\t"bufio"
\t"encoding/json"
\t"os"

\t"sigs.k8s.io/kueue/pkg/util/tas"
)

// One {"levels", "domains"} per input line; Kueue's v1beta2 encoding per output line.
func main() {
\tin := bufio.NewScanner(os.Stdin)
\tin.Buffer(make([]byte, 1<<20), 1<<30)
\tout := bufio.NewWriter(os.Stdout)
\tdefer out.Flush()
\tfor in.Scan() {
\t\tvar assignment tas.TopologyAssignment
\t\tif err := json.Unmarshal(in.Bytes(), &assignment); err != nil {
\t\t\tpanic(err)
\t\t}
\t\tencoded, err := json.Marshal(tas.V1Beta2From(&assignment))
\t\tif err != nil {
\t\t\tpanic(err)
\t\t}
\t\tout.Write(append(encoded, '\\n'))
\t}
}
"""


def build(kueue_src: Path, work: Path) -> Path:
    go_version = re.search(r"^go (\S+)$", (kueue_src / "go.mod").read_text(), re.M)
    (work / "main.go").write_text(DRIVER)
    (work / "go.mod").write_text(
        f"module kueueref\n\ngo {go_version.group(1) if go_version else '1.24'}\n\n"
        f"require sigs.k8s.io/kueue v0.0.0\n\nreplace sigs.k8s.io/kueue => {kueue_src}\n"
    )
    (work / "go.sum").write_text((kueue_src / "go.sum").read_text())
    env = {"GOFLAGS": "-mod=mod", "GOPROXY": "off"}
    subprocess.run(["go", "build", "-o", "ref", "."], cwd=work, check=True, env=_env(env))
    return work / "ref"


def _env(extra: dict[str, str]) -> dict[str, str]:
    return {**os.environ, **extra}


def _word(rnd: random.Random, longest: int) -> str:
    return "".join(rnd.choice("ab-.0") for _ in range(rnd.randint(0, longest)))


def _host(rnd: random.Random, scheme: int) -> str:
    if scheme == 0:
        return f"gke-c-pool-{rnd.randrange(5)}-{rnd.randrange(3):08x}-{rnd.randrange(4096):04x}"
    if scheme == 1:
        return f"ip-10-{rnd.randrange(3)}-{rnd.randrange(255)}-{rnd.randrange(255)}.internal"
    if scheme == 2:
        return f"aks-pool{rnd.randrange(3)}-1234-vmss{rnd.randrange(99999):06d}"
    if scheme == 3:
        return f"{_word(rnd, 3)}-{_word(rnd, 3)}-{_word(rnd, 4)}"
    return _word(rnd, 8)


def cases(count: int, seed: int) -> Iterator[tuple[list[str], list[AssignedDomain]]]:
    rnd = random.Random(seed)
    for _ in range(count):
        levels = rnd.choice([[HOSTNAME_LABEL], ["b", HOSTNAME_LABEL], ["b", "r"], ["a", "b", "c"]])
        scheme, found = rnd.randrange(5), {}
        for _ in range(rnd.choice([1, 2, 3, 4, 8, 20, rnd.randint(1, 300)])):
            host = _host(rnd, scheme if rnd.random() < 0.9 else rnd.randrange(5))
            values = (*(_word(rnd, 6) for _ in levels[:-1]), host)
            found[values] = rnd.choice([1, 1, 2, rnd.randint(1, 9)])
        domains = [AssignedDomain(v, n) for v, n in found.items()]
        if rnd.random() < 0.5:
            domains.sort(key=lambda d: d.values)
        yield levels, domains
    for pools in (900, 1000, 1100):  # around the 1,000-slice limit
        yield (
            [HOSTNAME_LABEL],
            [AssignedDomain((f"p{i % pools}-q{i % 7}-n{i}",), 1) for i in range(2500)],
        )
    for name in bench.SCHEMES.values():
        yield [HOSTNAME_LABEL], bench.gang(name(100_000), 10_000)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kueue-src", type=Path, required=True)
    parser.add_argument("--cases", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        ref = build(args.kueue_src.resolve(), Path(work))
        inputs, expected = [], []
        for levels, domains in cases(args.cases, args.seed):
            wire = [{"Values": list(d.values), "Count": d.count} for d in domains]
            inputs.append(json.dumps({"Levels": levels, "Domains": wire}))
            mine = encode(levels, domains)
            if not mine["slices"]:
                del mine["slices"]  # Go's omitempty
            expected.append(json.dumps(mine, separators=(",", ":")))
        done = subprocess.run(
            [str(ref)], input="\n".join(inputs) + "\n", capture_output=True, text=True, check=True
        )
    theirs = done.stdout.splitlines()
    differ = [i for i, (a, b) in enumerate(zip(expected, theirs, strict=True)) if a != b]
    print(f"{len(expected)} assignments, {len(differ)} differ from Kueue's encoder")
    for i in differ[:3]:
        print(f"  input    {inputs[i][:300]}")
        print(f"  topogate {expected[i][:300]}")
        print(f"  kueue    {theirs[i][:300]}")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
