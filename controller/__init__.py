"""The metadata quorum: records, the immutable metadata image and its deltas, pure request
handlers (placement, fencing and leader election, ISR changes, topics and configs), the
pysyncobj-backed Raft quorum behind ``MetadataQuorum``, and the controller HTTP service.
"""
