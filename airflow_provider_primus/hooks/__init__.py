"""Primus hooks (see the provider issue)."""
