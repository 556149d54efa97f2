"""Prometheus exposition shared by brokers and consumers: Gazette's metric names, served over HTTP.

Each broker and consumer keeps its own CollectorRegistry (several run in one process under
LocalCluster) and serves it at http://host:port/metrics in Prometheus' text format 0.0.4, which is
what Gazette's promhttp handler serves. Imports the standard library and prometheus_client only.

prometheus_client exposes every counter as `<name>_total`; a few Gazette counters are named
`..._totals` (gazette_journal_server_started_totals). `exposition` renders the counters listed in
EXACT_COUNTER_NAMES under their Gazette name, still typed `counter`, so Gazette's dashboards and
alerts read ours unchanged.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry, generate_latest

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"  # Prometheus' text format, as Gazette serves it

# Counters whose Gazette name does not end in "_total" (prometheus_client would add it).
EXACT_COUNTER_NAMES = ("gazette_journal_server_started_totals", "gazette_journal_server_completed_totals")
_RENAMES = {f"{name}_total": name for name in EXACT_COUNTER_NAMES}


def _rename(line: str) -> str:
    """`line` of the text format with a renamed family's `<name>_total` put back to `<name>`."""
    if line.startswith("# "):  # "# HELP <name> ..." and "# TYPE <name> counter"
        parts = line.split(" ", 3)
        if len(parts) >= 3 and parts[2] in _RENAMES:
            parts[2] = _RENAMES[parts[2]]
            return " ".join(parts)
        return line
    end = len(line)
    for stop in ("{", " "):
        at = line.find(stop)
        if at != -1:
            end = min(end, at)
    name = line[:end]
    return _RENAMES[name] + line[end:] if name in _RENAMES else line


def exposition(registry: CollectorRegistry) -> bytes:
    """The registry in Prometheus' text format 0.0.4, with Gazette's exact counter names."""
    text = generate_latest(registry).decode()
    return "\n".join(_rename(line) for line in text.split("\n")).encode()


class MetricsServer:
    """An HTTP server of `registry` at /metrics on a thread of its own; `port` is the bound port."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int = 0) -> None:
        handler = type("MetricsHandler", (_Handler,), {"registry": registry})
        self._httpd = ThreadingHTTPServer((host, port), handler)
        self._httpd.daemon_threads = True
        self.port: int = self._httpd.server_address[1]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name=f"metrics :{self.port}", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        """Stops serving and frees the port; idempotent."""
        if self._thread.is_alive():
            self._httpd.shutdown()
            self._thread.join()
        self._httpd.server_close()


class _Handler(BaseHTTPRequestHandler):
    registry: CollectorRegistry

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        if urlsplit(self.path).path not in ("/metrics", "/"):
            self.send_error(404, "metrics are at /metrics")
            return
        body = exposition(self.registry)
        self.send_response(200)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        """Scrapes are not logged (one line per scrape would flood a member's log)."""
