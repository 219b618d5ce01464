"""The web console: every broker's HTTP server serves it at ``/ui`` (docs/console.md).

- ``server``: the routes mounted on the broker's HTTP server: the page (``/ui/``), its
  static assets (``/ui/static/``: the application script, the style sheet and the vendored
  chart library with its licence) and ``/ui/events``, a Server-Sent Events stream of live
  figures (high watermarks, committed offsets and lag of the topics and groups a page shows,
  the cluster's health) from which the page draws its live charts.
- ``static/``: a single-page application in plain JavaScript (no build step, no Node
  toolchain); it reads and changes the cluster only through the broker's HTTP API
  (``/cluster``, ``/topics``, ``/groups``, ``/subscriptions``, the schema registry's
  ``/schemas``; docs/http-api.md), the same
  endpoints any other client uses, so it sees what they see and is refused what they are.
"""

from .server import Console

__all__ = ["Console"]
