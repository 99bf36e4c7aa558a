"""Where a command's output goes: human lines, one JSON document, or JSON lines.

Runs in the operator's ``migrator`` process. One rule for every command:

- without ``--json``: human lines on stdout. A command that follows a migration (``split``, ``move``,
  ``move-partition``, ``rebalance`` with ``--yes``, ``status ID --watch``) draws a live view when stdout
  is a terminal, and otherwise prints one line per event (:class:`~migrator.ops.watch.Event`: a phase
  change, a catch-up pass, a cutover attempt and its reason, the next try, a batch), flushed as it
  happens, so a log file or a pipe holds the run as it goes;
- ``--json``: exactly one JSON document on stdout, when the command ends; the human lines (and the
  events) go to stderr;
- ``--json --follow`` (commands that follow progress): JSON lines on stdout, one per event as it happens,
  the last one the result (``{"event": "result", "data": ...}``); the human lines go to stderr.

Errors are one line on stderr whatever the mode (:mod:`migrator.cli.failures`).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from migrator.ops.watch import Event


def dumps(doc: Any, *, indent: int | None = 2) -> str:
    return json.dumps(doc, indent=indent, default=str)


def print_json(doc: Any) -> None:
    """The one JSON document of a ``--json`` command, on stdout."""
    print(dumps(doc), flush=True)


class Report:
    """The output of one command run, as ``--json`` and ``--follow`` chose (see the module doc)."""

    def __init__(self, as_json: bool = False, follow: bool = False):
        self.as_json = as_json
        self.follow = as_json and follow

    @property
    def live(self) -> bool:
        """Draw a live view: human output on a terminal."""
        return not self.as_json and sys.stdout.isatty()

    def say(self, text: str) -> None:
        """A human line: stdout, or stderr when stdout carries JSON."""
        print(text, file=sys.stderr if self.as_json else sys.stdout, flush=True)

    def event(self, ev: Event) -> None:
        """One event, as it happens: a line on stdout (stderr under ``--json``), or a JSON line."""
        if self.follow:
            print(dumps(ev.as_dict(), indent=None), flush=True)
        else:
            print(ev.line(), file=sys.stderr if self.as_json else sys.stdout, flush=True)

    def line(self, kind: str, data: Any) -> None:
        """With ``--follow``: a JSON line that is not an event of a migration (the plan); else nothing."""
        if self.follow:
            print(dumps({"event": kind, "data": data}, indent=None), flush=True)

    def document(self, doc: Any) -> None:
        """The command's result: the JSON document (the last JSON line with ``--follow``); nothing without
        ``--json`` (the human lines said it)."""
        if self.follow:
            self.line("result", doc)
        elif self.as_json:
            print_json(doc)
