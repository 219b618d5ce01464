"""Container health check: a broker is healthy once registered with the controller quorum
(``GET /health`` answers 200); a controller-only node once its controller HTTP answers.

A secure cluster (``FLUX_SECURITY__INTERNAL_TLS=true``) serves both over HTTPS: the check
verifies the node's certificate against the cluster CA (``FLUX_SECURITY__SSL_CAFILE``); both
paths are open without a login."""

import os
import ssl
import sys
import urllib.request

roles = os.environ.get("FLUX_NODE__ROLES", "broker,controller")
secure = os.environ.get("FLUX_SECURITY__INTERNAL_TLS", "false").strip().lower() == "true"
scheme = "https" if secure else "http"
context = None
if secure:
    context = ssl.create_default_context(cafile=os.environ.get("FLUX_SECURITY__SSL_CAFILE") or None)
if "broker" in roles:
    url = f"{scheme}://127.0.0.1:{os.environ.get('FLUX_BROKER__HTTP_PORT', '8080')}/health"
else:
    port = os.environ.get("FLUX_CONTROLLER__HTTP_PORT", "9094")
    url = f"{scheme}://127.0.0.1:{port}/controller/status"
try:
    with urllib.request.urlopen(url, timeout=2, context=context) as answer:
        sys.exit(0 if answer.status == 200 else 1)
except Exception as error:  # noqa: BLE001 - any failure means unhealthy
    print(f"unhealthy: {url}: {error}")
    sys.exit(1)
