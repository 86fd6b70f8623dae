"""Primus links (see the provider issue)."""
