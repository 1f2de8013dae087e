"""config/grafana/topogate-dashboard.json queries only metrics and labels serve's registry has,
and shows every metric it has."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from prometheus_client.metrics import MetricWrapperBase

from topogate.metrics import Metrics

DASHBOARD = (
    Path(__file__).resolve().parent.parent / "config" / "grafana" / "topogate-dashboard.json"
)
SUFFIXES = {
    "counter": ["_total", "_created"],
    "gauge": [""],
    "histogram": ["_bucket", "_sum", "_count", "_created"],
}
NAME = re.compile(r"\btopogate_[a-z_]+\b")
# `by (a, b)` / `without (a)`, and `{a="x", b=~"y"}` selectors right after a metric name.
GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")
SELECTOR = re.compile(r"\b(topogate_[a-z_]+)\{([^}]*)\}")
LABEL_VALUES = re.compile(r"label_values\((topogate_[a-z_]+),\s*([a-z_]+)\)")


def registry() -> dict[str, set[str]]:
    """Every sample name serve exposes -> its labels (histogram buckets add `le`)."""
    metrics = Metrics()
    samples: dict[str, set[str]] = {}
    for collector in vars(metrics).values():
        if not isinstance(collector, MetricWrapperBase):
            continue
        family = next(iter(collector.describe()))
        labels = set(collector._labelnames)
        for suffix in SUFFIXES[family.type]:
            samples[family.name + suffix] = labels | ({"le"} if suffix == "_bucket" else set())
    return samples


def queries(dashboard: dict[str, Any]) -> list[str]:
    found = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            found.append(variable["query"]["query"])
    return found


def test_every_queried_metric_and_label_exists() -> None:
    samples = registry()
    assert "topogate_admission_wait_seconds_bucket" in samples  # the registry is read
    dashboard = json.loads(DASHBOARD.read_text())
    used: set[str] = set()
    for query in queries(dashboard):
        names = set(NAME.findall(query))
        assert names, f"a query of no topogate metric: {query}"
        unknown = names - samples.keys()
        assert not unknown, f"{query}: serve exposes no {sorted(unknown)}"
        used |= names
        known_labels = set().union(*(samples[n] for n in names))
        for group in GROUPING.findall(query):
            for label in filter(None, (g.strip() for g in group.split(","))):
                assert label in known_labels, f"{query}: no label {label!r} on {sorted(names)}"
        for name, selector in SELECTOR.findall(query):
            for label in re.findall(r"([a-z_]+)\s*=~?", selector):
                assert label in samples[name], f"{query}: {name} has no label {label!r}"
        for name, label in LABEL_VALUES.findall(query):
            assert label in samples[name], f"{query}: {name} has no label {label!r}"
    # Each of serve's metrics is on the dashboard (a new one needs a panel).
    shown = {re.sub(r"_(total|bucket|sum|count|created)$", "", n) for n in used}
    families = {re.sub(r"_(total|bucket|sum|count|created)$", "", n) for n in samples}
    assert families <= shown, sorted(families - shown)


def test_the_dashboard_is_importable() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"datasource", "cluster_queue"} <= variables
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert set(panel["gridPos"]) == {"x", "y", "w", "h"}
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
