"""Primus sensors (see the provider issue)."""
