"""Primus triggers (see the provider issue)."""
