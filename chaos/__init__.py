"""Fault injection, workloads, histories and checkers (Jepsen-style). Arrives with the chaos issue.
"""
