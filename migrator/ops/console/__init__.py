"""The operator console: a read-only web page over the fleet, its migrations and rebalances.

``migrator console`` serves it (:mod:`migrator.ops.console.app`, FastAPI and
uvicorn). The page (``static/``: plain HTML, JS and CSS, charts drawn as inline
SVG, nothing fetched from elsewhere) polls JSON endpoints that return what the
operator commands return: ``/api/status`` and ``/api/status/{id}`` are
``migrator status [ID] --json``, ``/api/rebalances`` is the rebalance status,
``/api/plan`` is ``migrator rebalance --dry-run --json`` on the cached
measurement. :mod:`migrator.ops.console.data` assembles the fleet view and
keeps the per-shard measurement (bytes, rows, writes/s) fresh in the background.
"""
