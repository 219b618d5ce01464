"""Consumer groups and committed offsets, stored in ``__consumer_offsets``.

``coordinator`` (``GroupCoordinator``: runs the groups this broker coordinates), ``state``
(``Group``: the classic group protocol as a pure state machine), ``offsets_records`` (the
records of ``__consumer_offsets``), ``offsets_client`` (``OffsetsClient``: committed offsets of
any group, from any broker).
"""
