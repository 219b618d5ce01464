"""Container health check: a broker is healthy once registered with the controller quorum
(``GET /health`` answers 200); a controller-only node once its controller HTTP answers."""

import os
import sys
import urllib.request

roles = os.environ.get("FLUX_NODE__ROLES", "broker,controller")
if "broker" in roles:
    url = f"http://127.0.0.1:{os.environ.get('FLUX_BROKER__HTTP_PORT', '8080')}/health"
else:
    url = f"http://127.0.0.1:{os.environ.get('FLUX_CONTROLLER__HTTP_PORT', '9094')}/controller/status"
try:
    with urllib.request.urlopen(url, timeout=2) as answer:
        sys.exit(0 if answer.status == 200 else 1)
except Exception as error:  # noqa: BLE001 - any failure means unhealthy
    print(f"unhealthy: {url}: {error}")
    sys.exit(1)
