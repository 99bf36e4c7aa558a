"""The Grafana dashboard queries only metrics the code exports, and shows every one of them."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client.metrics import MetricWrapperBase

from migrator.ops.metrics import MigrationCollector
from migrator.queue import metrics as queue_metrics

DASHBOARD = Path(__file__).resolve().parents[3] / "dashboards" / "grafana" / "migrator.json"

#: PromQL words that are not metric names (operators and modifiers)
KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left", "group_right",
            "inf", "nan"}
#: sample names of a family, by its type
SUFFIXES = {"counter": ("_total", "_created"), "gauge": ("",), "histogram": ("_bucket", "_count", "_sum", "_created"),
            "summary": ("", "_count", "_sum", "_created"), "info": ("_info",), "stateset": ("",), "untyped": ("",)}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', '""', expr)  # strings (label values, regexes)
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # range and subquery windows
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)  # label lists
    names = set()
    for m in re.finditer(r"(?<![\w:.])([A-Za-z_:][\w:]*)(\s*\()?", text):
        word, call = m.group(1), m.group(2)
        if call or word.lower() in KEYWORDS:
            continue  # a function or an aggregation, or an operator
        names.add(word)
    return names


def queries(dash: dict) -> list[str]:
    """Every PromQL expression of the dashboard: panel targets, annotations, template variables."""
    out = []

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("expr"), str):
                out.append(node["expr"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(dash["panels"])
    walk(dash.get("annotations", {}))
    for var in dash["templating"]["list"]:
        if var["type"] == "query":
            q = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            m = re.fullmatch(r"label_values\((.*),\s*\w+\)", q)
            assert m, q
            out.append(m.group(1))
    return out


def exported() -> dict[str, str]:
    """{sample name: family} of every metric the migrator and the queue service export."""
    families = list(MigrationCollector(None).describe())
    for obj in vars(queue_metrics).values():
        if isinstance(obj, MetricWrapperBase):
            families.extend(obj.describe())
    return {f.name + suffix: f.name for f in families for suffix in SUFFIXES[f.type]}


def test_the_parser_finds_metric_names():
    assert metric_names('sum by (queue, state) (rate(q_total{queue=~"a|b"}[1m])) * 60') == {"q_total"}
    assert metric_names("max(x) / on (a) group_left (b) y offset 5m > bool 0") == {"x", "y"}
    assert metric_names('histogram_quantile(0.9, sum by (le) (rate(h_bucket{l="by (x)"}[5m])))') == {"h_bucket"}
    assert metric_names("changes(e[1h]) > 0 and z") == {"e", "z"}


def test_every_query_names_an_exported_metric():
    dash = json.loads(DASHBOARD.read_text())
    names = exported()
    assert "migrator_copy_rows_total" in names and "queue_lease_expirations_total" in names
    exprs = queries(dash)
    assert len(exprs) >= 20
    for expr in exprs:
        used = metric_names(expr)
        assert used, f"no metric in {expr!r}"
        unknown = used - set(names)
        assert not unknown, f"{expr!r} queries {sorted(unknown)}, which nothing exports"


def test_every_exported_family_is_on_the_dashboard():
    dash = json.loads(DASHBOARD.read_text())
    names = exported()
    shown = {names[n] for expr in queries(dash) for n in metric_names(expr)}
    assert shown == set(names.values()), sorted(set(names.values()) - shown)


def test_panels_are_well_formed():
    dash = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for p in dash["panels"]:
        if p["type"] == "row":
            continue
        assert p["targets"] and p["datasource"]["uid"] == "${datasource}", p["title"]
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24, p["title"]
