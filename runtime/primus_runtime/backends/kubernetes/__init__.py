"""Kubernetes backend: an AM pod that creates executor pods (see ``settings``)."""
