"""Entry point of the AM process: ``python -m primus_runtime.am JOB_DIR``."""

from .main import main

main()
