"""The executor: standard library only (it runs on nodes with nothing but Python 3.9+)."""
