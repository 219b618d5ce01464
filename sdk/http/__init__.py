"""The HTTP API from Python: ``AsyncHttpPublisher`` / ``HttpPublisher`` publish each message
straight to its partition's leader (``publisher``), routed by ``GET /cluster`` (``routing``)."""

from flux.sdk.http.publisher import AsyncHttpPublisher, HttpPublisher, Published
from flux.sdk.http.routing import ClusterView, partition_of

__all__ = ["AsyncHttpPublisher", "ClusterView", "HttpPublisher", "Published", "partition_of"]
