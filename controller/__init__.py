"""The metadata quorum: records, the immutable metadata image and its deltas, pure request
handlers (placement, fencing and leader election, ISR changes, topics and configs), the
pysyncobj-backed Raft quorum behind ``MetadataQuorum``, changes of the quorum's voters
(``membership``: the pure decisions; ``quorum_changes``: the active controller's side), and
the controller HTTP service.
"""
