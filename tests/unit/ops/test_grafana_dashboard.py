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


# -- the dashboard adds up when several processes export the same families ------------------------------

def _family_kinds() -> tuple[dict[str, tuple[str, tuple[str, ...]]], set[str]]:
    """{family: (type, label names)} of every exported family, and the families every exporter reads from
    one source (a migration's record, the jobs tables): one copy of those counts, not their sum."""
    from migrator.ops.metrics import families

    kinds = {f.name: (f.type, tuple(f._labelnames) if hasattr(f, "_labelnames") else ()) for f in families()}
    for obj in vars(queue_metrics).values():
        if isinstance(obj, MetricWrapperBase):
            kinds[obj._name] = (obj._type, tuple(obj._labelnames))
    shared = {f.name for f in families()} | {m._name for m in queue_metrics.READ_AT_SCRAPE}
    return kinds, shared


def _exposition(kinds: dict, step: int) -> str:
    """Every family with two series, values that grow with ``step`` (counters grow as they do)."""
    lines = []
    for name, (typ, labels) in sorted(kinds.items()):
        lines.append(f"# TYPE {name} {typ}")
        for i in (1, 2):
            values = {"migration": f"m-{i}", "phase": "copying", "queue": f"q{i}", "state": "NEW",
                      "partition": str(i), "result": "success"}
            lbl = ",".join(f'{k}="{values[k]}"' for k in labels)
            sample = name + ("_total" if typ == "counter" else "")
            value = 10 * i + (7 * i * step if typ == "counter" else step)
            lines.append(f"{sample}{{{lbl}}} {1.0 if name == 'migrator_migration_phase' else float(value)}")
    return "\n".join(lines) + "\n"


def test_two_exporters_add_up_on_every_panel():
    """Scraped from two processes that report the same values: every query over a family read from one
    source (a migration's record, the jobs tables) gives what one process gives; every query over a
    family each process counts itself gives the two added up. A `sum` over migration series would show
    each migration twice as fast as it goes."""
    from tests.promql import Scrapes, evaluate

    kinds, shared = _family_kinds()
    one, two = Scrapes(), Scrapes()
    for t, step in ((0.0, 0), (60.0, 1)):
        text = _exposition(kinds, step)
        one.add(t, {"a:9640": text})
        two.add(t, {"a:9640": text, "b:9640": text})
    dash = json.loads(DASHBOARD.read_text())
    checked = 0
    for panel in dash["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            fams = {exported()[n] for n in metric_names(expr)}
            alone, both = evaluate(expr, one), evaluate(expr, two)
            assert alone, (panel["title"], expr)
            if fams <= shared:
                assert both == alone, (panel["title"], expr, alone, both)
            else:
                assert not fams & shared, (panel["title"], expr)
                assert both == {k: 2 * v for k, v in alone.items()}, (panel["title"], expr, alone, both)
            checked += 1
    assert checked >= 20
