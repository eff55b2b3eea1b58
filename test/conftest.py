"""Shared test setup: pytest puts this directory on sys.path, so test modules can import the
helpers beside it (gradcheck.py, recursion_limit.py)."""
