"""`fluxctl`, the command line (click): `fluxctl node start`, `fluxctl cluster
up|status|down|kill|restart`.
"""
