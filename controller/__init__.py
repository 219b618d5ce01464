"""The metadata quorum (Raft via pysyncobj): records, state machine, broker sessions, leader
election. Arrives with the controller issue.
"""
