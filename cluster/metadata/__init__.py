"""Following the controller: the broker's registration, heartbeats and metadata image, and its
client of the controller HTTP API.

``lifecycle`` (``BrokerLifecycle``: registration, heartbeats, fencing, metadata catch-up),
``controller_client`` (``ControllerClient``: find the active controller, follow leader hints,
retry within a deadline).
"""
