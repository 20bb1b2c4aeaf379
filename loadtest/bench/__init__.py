"""The benchmark: fleet beside PostgreSQL's own limit and beside the peers, in one run on one server.

.venv/bin/python -m loadtest.bench [--quick] [--only SECTION,...] [--json FILE]
"""
