"""The side-by-side bench refuses a sitting it cannot compare (hack/bench_kueue_scenario.py):
Kueue's runner ending early (last round: after 34 s with 2,013 of 10,000 Workloads recorded,
and ratios printed anyway), its recorder short of the Workloads created, minimalkueue dying,
serve dying. The file is written marked void, the logs are kept, the run fails; the summary
(hack/bench_kueue_summary.py) leaves void files out of its medians and says so."""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

Obj = dict[str, Any]
HACK = Path(__file__).resolve().parent.parent / "hack"


def _module(name: str) -> ModuleType:
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, HACK / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


bench = _module("bench_kueue_scenario")
summary = _module("bench_kueue_summary")
# The runner's log lines the detection reads (Kueue's runner, zap's development format).
STOPPED = "INFO\tRun command\tmain.go:279\tStop the command\n"
ENDED = 'INFO\tRun command\tmain.go:352\tCmd ended\t{"stats": {"wallMs": 1}}\n'


def end(**changes: Any) -> Any:
    whole = {
        "code": 0,
        "expected": 10_000,
        "created": 10_000,
        "recorded": 10_000,
        "finished": 10_000,
        "minimal_died": False,
    }
    return bench.RunnerEnd(**{**whole, **changes})


def test_a_whole_sitting_is_not_void() -> None:
    assert bench.void_reasons(end()) == []


def test_the_runner_that_stopped_after_34_seconds_is_void() -> None:
    """Last round's case: exit code 0, 2,013 Workloads recorded of 10,000."""
    reasons = bench.void_reasons(end(created=2_013, recorded=2_013, finished=0))
    assert "the runner's recorder has 2013 of the 10000 Workloads" in reasons[0]
    assert "2013 of the 10000 Workloads were created" in reasons[1]
    assert "0 of the 10000 Workloads finished" in reasons[2]


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"code": 1}, "exited with code 1"),
        ({"minimal_died": True}, "minimalkueue ended before the runner stopped it"),
        ({"recorded": None}, "wrote no wlStates.csv"),
        ({"recorded": 9_999}, "recorder has 9999 of the 10000"),
        ({"created": 10_005}, "recorder's 10000 Workloads are short of the 10005 created"),
        ({"finished": 9_990}, "9990 of the 10000 Workloads finished"),
    ],
)
def test_each_sign_of_an_early_end_makes_the_sitting_void(changes: Obj, reason: str) -> None:
    reasons = bench.void_reasons(end(**changes))
    assert reasons and reason in reasons[0]  # first (a recorder short is short of both)


def test_minimalkueue_died_when_it_ended_without_the_runner_stopping_it() -> None:
    assert not bench.minimalkueue_died("start\n" + STOPPED + ENDED)
    assert bench.minimalkueue_died("start\n" + ENDED + STOPPED)  # stopped after it had ended
    assert bench.minimalkueue_died("start\n" + ENDED)
    assert not bench.minimalkueue_died("start\n")  # still running when the log was read


def _csv(path: Path, rows: list[tuple[str, int, int]]) -> Path:
    lines = ["id,class name,namespace,name,ms to admitted,ms to finish,num evictions"]
    lines += [f"{i},small,ns,{name},{tta},{ttf},0" for i, (name, tta, ttf) in enumerate(rows)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_runner_end_reads_the_csv_the_check_and_the_log(tmp_path: Path) -> None:
    checker = bench.Checker()
    checker.seen = {"ns/a", "ns/b", "ns/c"}
    # b's Finished event was dropped by the recorder (0 ms to finish); the check saw it.
    checker.finished = {"ns/b"}
    rows = [("a", 10, 300), ("b", 20, 0), ("c", 30, 0)]
    got = bench.runner_end(0, 3, checker, _csv(tmp_path / "wl.csv", rows), STOPPED + ENDED)
    assert got == end(expected=3, created=3, recorded=3, finished=2)
    assert bench.void_reasons(got) == ["2 of the 3 Workloads finished"]
    missing = bench.runner_end(1, 3, checker, tmp_path / "none.csv", ENDED)
    assert missing.recorded is None and missing.minimal_died and missing.finished == 1
    timed_out = bench.runner_end(143, 3, checker, tmp_path / "none.csv", ENDED, timed_out=True)
    assert not timed_out.minimal_died  # killed by the bench, not dead on its own


def test_expected_workloads_counts_the_generator_config() -> None:
    config = {
        "cohorts": [
            {
                "count": 2,
                "queuesSets": [
                    {"count": 6, "workloadsSets": [{"count": 120}, {"count": 34}]},
                    {"count": 1, "workloadsSets": [{"count": 5}]},
                ],
            }
        ]
    }
    assert bench.expected_workloads(config) == 2 * (6 * 154 + 5)


def test_keep_logs_gzips_the_sittings_logs_outside_the_repository(tmp_path: Path) -> None:
    sitting = tmp_path / "sitting"
    (sitting / "kueue").mkdir(parents=True)
    (sitting / "kueue-runner.log").write_text("runner\n")
    (sitting / "kueue" / "minimalkueue.err.log").write_text("minimal\n")
    (sitting / "kueue" / "summary.yaml").write_text("not a log\n")
    kept = bench.keep_logs("tas-c1-50-100-X", bench.sitting_logs(sitting), tmp_path / "logs")
    assert kept == tmp_path / "logs" / "tas-c1-50-100-X"
    assert sorted(p.name for p in kept.iterdir()) == [
        "kueue-runner.log.gz",
        "minimalkueue.err.log.gz",
    ]  # serve.log absent: serve's side was not run
    assert gzip.decompress((kept / "kueue-runner.log.gz").read_bytes()) == b"runner\n"


# --- the sitting: a void side writes its file marked void and keeps the logs -----------------


def _args(tmp_path: Path) -> argparse.Namespace:
    return argparse.Namespace(
        kueue=True,
        kueue_dir=tmp_path,
        timeout=60.0,
        churn=0.0,
        churn_interval=1.0,
        racks=10,
        nodes_per_rack=64,
        pods_per_node=0,
        results=tmp_path / "results",
    )


@pytest.fixture
def quick(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The sitting without its slow parts; the logs go to tmp_path/logs."""
    monkeypatch.setattr(bench, "speed_marker", lambda: 0.0)
    monkeypatch.setattr(bench, "commit", lambda: "abc")
    original = bench.keep_logs
    monkeypatch.setattr(
        bench, "keep_logs", lambda stem, files: original(stem, files, tmp_path / "logs")
    )
    return tmp_path


def test_a_void_kueue_side_writes_a_void_file_keeps_the_logs_and_skips_serve(
    quick: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def kueue_side(kueue: Path, directory: Path, *_: Any) -> Obj:
        (directory / "kueue-runner.log").write_text("Cmd ended\n")
        return {"void": ["the runner's recorder has 2013 of the 10000 Workloads"]}

    def topogate_side(*_: Any) -> Obj:
        raise AssertionError("serve's side ran after a void Kueue side")

    monkeypatch.setattr(bench, "kueue_side", kueue_side)
    monkeypatch.setattr(bench, "topogate_side", topogate_side)
    result = bench.sitting(_args(quick), (50, 100), bench.TAS, "v0.17.0", 1, 1.0)
    assert result["void"] == "Kueue's side: the runner's recorder has 2013 of the 10000 Workloads"
    assert "ratios" not in result and result["topogate"] is None
    (written,) = (quick / "results").iterdir()
    data = json.loads(written.read_text())
    assert data["void"] == result["void"]
    assert data["logs"] == str(quick / "logs" / written.stem)
    assert (quick / "logs" / written.stem / "kueue-runner.log.gz").is_file()
    assert "the sitting is void" in capsys.readouterr().err


def test_serve_dying_makes_the_sitting_void_with_its_log(
    quick: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def topogate_side(directory: Path, *_: Any) -> Obj:
        (directory / "serve.log").write_text("Traceback\n")
        raise bench.ControllerStopped("the controller stopped during the scenario: exit code 1")

    monkeypatch.setattr(bench, "topogate_side", topogate_side)
    args = _args(quick)
    args.kueue = False
    result = bench.sitting(args, (50, 100), bench.TAS, "v0.17.0", 1, 1.0)
    assert result["void"].startswith("serve's side: the controller stopped")
    assert (Path(result["logs"]) / "serve.log.gz").is_file()


def test_a_violation_keeps_the_logs(quick: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def topogate_side(directory: Path, *_: Any) -> Obj:
        (directory / "serve.log").write_text("serve\n")
        return {"invariants": {"violations": ["ns/w: cohort c uses ...; held by 1: ns/w"]}}

    monkeypatch.setattr(bench, "topogate_side", topogate_side)
    monkeypatch.setattr(bench, "report", lambda *_: None)
    args = _args(quick)
    args.kueue = False
    result = bench.sitting(args, (50, 100), bench.TAS, "v0.17.0", 1, 1.0)
    assert "void" not in result and bench.violations(result) == 1
    assert (Path(result["logs"]) / "serve.log.gz").is_file()


def test_a_whole_sitting_keeps_no_logs(quick: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench, "topogate_side", lambda *_: {"invariants": {"violations": []}})
    monkeypatch.setattr(bench, "report", lambda *_: None)
    args = _args(quick)
    args.kueue = False
    result = bench.sitting(args, (50, 100), bench.TAS, "v0.17.0", 1, 1.0)
    assert "void" not in result and "logs" not in result
    assert not (quick / "logs").exists()


# --- the summary ----------------------------------------------------------------------------


def sitting_file(directory: Path, started: str, cpu: float, **extra: Any) -> None:
    side = {
        "cpu": cpu,
        "rss": 200.0,
        "api_requests": {"POST workloads": 10},
        "classes": {"small-required-rack": {"mean": cpu * 100}},
        "invariants": {"violations": []},
    }
    data = {
        "scenario": "tas-c1",
        "budget": [50, 100],
        "started": started,
        "workloads": 10,
        "uptime_before": "load average: 1.00",
        "topogate": side,
        "kueue": None,
        **extra,
    }
    (directory / f"tas-c1-50-100-{started}.json").write_text(json.dumps(data))


def test_the_summary_leaves_void_files_out_of_the_medians_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sitting_file(tmp_path, "20261127T01", 10.0)
    sitting_file(tmp_path, "20261127T02", 20.0)
    sitting_file(tmp_path, "20261127T03", 999.0, void="Kueue's side: exited with code 1")
    # From before the bench marked them: Kueue's recorder short of the scenario's Workloads.
    kueue = {
        "cpu": 1.0,
        "rss": 100.0,
        "api_requests": {},
        "classes": {"small-required-rack": {"mean": 5.0, "n": 4}},
        "invariants": {"violations": []},
    }
    sitting_file(tmp_path, "20261127T04", 888.0, kueue=kueue)
    whole, void = summary.load(tmp_path, 3)
    key = ("tas-c1", "50/100")
    assert [r["_file"] for r in whole[key]] == [
        "tas-c1-50-100-20261127T01.json",
        "tas-c1-50-100-20261127T02.json",
    ]
    assert [r["_void"] for r in void[key]] == [
        "Kueue's side: exited with code 1",
        "Kueue's recorder has 4 of the 10 Workloads (its runner stopped early)",
    ]
    summary.summarise(key, whole[key], None, void[key])
    out = capsys.readouterr().out
    assert "tas-c1-50-100-20261127T03.json: void, left out of the medians" in out
    assert "serve CPU s 15.0 (10.0-20.0)" in out  # not 999 or 888


def test_the_summary_of_only_void_sittings_says_there_is_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sitting_file(tmp_path, "20261127T03", 999.0, void="serve's side: exit code 1", topogate=None)
    whole, void = summary.load(tmp_path, 3)
    assert whole == {}
    summary.summarise(("tas-c1", "50/100"), [], None, void[("tas-c1", "50/100")])
    assert "no whole sitting" in capsys.readouterr().out
