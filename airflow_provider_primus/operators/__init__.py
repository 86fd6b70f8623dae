"""Primus operators (see the provider issue)."""
