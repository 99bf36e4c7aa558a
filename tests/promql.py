"""A PromQL evaluator for the subset the Grafana dashboard uses, over scrapes taken by a test.

What Prometheus does with the dashboard's queries, close enough to check that they add up when
several processes export the same families: each scraped sample carries the ``instance`` it came
from (as Prometheus labels it); an instant selector reads the last scrape, ``rate`` and ``increase``
the first and the last; aggregations ``sum|max|min|avg|count [by (labels)] (expr)``; a scalar on the
right of ``*``, ``/`` or ``==`` (a filter). Grafana's template variables (``$migration``, ``$queue``)
stand for "All" (``.*``).
"""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

Labels = tuple[tuple[str, str], ...]


@dataclass
class Scrapes:
    """Scrape rounds: (time, [(name, labels with ``instance``, value)])."""

    rounds: list[tuple[float, list[tuple[str, dict[str, str], float]]]] = field(default_factory=list)

    def add(self, t: float, texts: dict[str, str]) -> None:
        """One round: the exposition text of each instance."""
        samples = []
        for instance, text in texts.items():
            for fam in text_string_to_metric_families(text):
                for s in fam.samples:
                    samples.append((s.name, {**s.labels, "instance": instance}, float(s.value)))
        self.rounds.append((t, samples))


def scrape_text(port: int) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()


def _balanced(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if depth < 0:
            return False
    return depth == 0


def _matchers(text: str) -> list[Callable[[dict[str, str]], bool]]:
    out = []
    for name, op, value in re.findall(r'(\w+)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"', text or ""):
        value = value.replace("$migration", ".*").replace("$queue", ".*")
        if op == "=":
            out.append(lambda ls, n=name, v=value: ls.get(n, "") == v)
        elif op == "!=":
            out.append(lambda ls, n=name, v=value: ls.get(n, "") != v)
        elif op == "=~":
            out.append(lambda ls, n=name, v=value: re.fullmatch(v, ls.get(n, "")) is not None)
        else:
            out.append(lambda ls, n=name, v=value: re.fullmatch(v, ls.get(n, "")) is None)
    return out


def _key(labels: dict[str, str]) -> Labels:
    return tuple(sorted(labels.items()))


def _select(samples: list, name: str, ms: list) -> dict[Labels, float]:
    return {_key(ls): v for n, ls, v in samples if n == name and all(m(ls) for m in ms)}


def evaluate(expr: str, scrapes: Scrapes) -> dict[Labels, float]:
    """The instant vector ``expr`` evaluates to at the last scrape: {labels: value}."""
    expr = expr.strip()
    m = re.fullmatch(r"(.+?)\s*(==|\*|/)\s*([0-9.]+)", expr, re.S)
    if m and _balanced(m.group(1)):
        left, op, k = evaluate(m.group(1), scrapes), m.group(2), float(m.group(3))
        if op == "==":
            return {ls: v for ls, v in left.items() if v == k}
        return {ls: (v * k if op == "*" else v / k) for ls, v in left.items()}
    m = re.fullmatch(r"(sum|max|min|avg|count)\s*(?:by\s*\(([^)]*)\))?\s*\((.*)\)", expr, re.S)
    if m and _balanced(m.group(3)):
        agg, by = m.group(1), [x.strip() for x in (m.group(2) or "").split(",") if x.strip()]
        groups: dict[Labels, list[float]] = {}
        for ls, v in evaluate(m.group(3), scrapes).items():
            d = dict(ls)
            groups.setdefault(tuple((k, d.get(k, "")) for k in by), []).append(v)
        fn = {"sum": sum, "max": max, "min": min, "count": len, "avg": lambda xs: sum(xs) / len(xs)}[agg]
        return {k: float(fn(vs)) for k, vs in groups.items()}
    m = re.fullmatch(r"(rate|increase)\(\s*(\w+)\s*(?:\{(.*)\})?\s*\[\w+\]\s*\)", expr, re.S)
    if m:
        (t1, first), (t2, last) = scrapes.rounds[0], scrapes.rounds[-1]
        ms = _matchers(m.group(3))
        a, b = _select(first, m.group(2), ms), _select(last, m.group(2), ms)
        span = max(t2 - t1, 1e-9)
        return {k: ((b[k] - a[k]) / span if m.group(1) == "rate" else b[k] - a[k]) for k in b if k in a}
    m = re.fullmatch(r"(\w+)\s*(?:\{(.*)\})?", expr, re.S)
    if m:
        return _select(scrapes.rounds[-1][1], m.group(1), _matchers(m.group(2)))
    raise ValueError(f"not in the subset this evaluator reads: {expr!r}")


def single(result: dict[Labels, float], **labels: str) -> float:
    """The value of the one series of ``result`` that has ``labels``."""
    hits = [v for ls, v in result.items() if all(dict(ls).get(k) == v2 for k, v2 in labels.items())]
    assert len(hits) == 1, (labels, result)
    return hits[0]
