"""Data plane tests."""
