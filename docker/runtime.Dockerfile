# The Primus runtime image: the AM (python -m primus_runtime.am) and the executor
# (python -m primus_runtime.executor) without Airflow. A job's image builds FROM it and adds the
# trainer's framework:
#   docker build -f docker/runtime.Dockerfile -t primus-runtime:VERSION .
#   FROM primus-runtime:VERSION
#   RUN pip install --no-cache-dir torch==...
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /opt/primus
COPY pyproject.toml README.md ./
COPY runtime ./runtime
COPY airflow_provider_primus ./airflow_provider_primus
# The project without its dependencies (they include Airflow), then only what the AM needs (the
# versions the project is tested with). Not the kubernetes package: the AM talks to the API server
# through its own aiohttp client (backends/kubernetes/api.py), which keeps the image small and the
# package's import off every AM start.
RUN pip install --no-deps . \
 && pip install pydantic==2.14.4 aiohttp==3.14.5 PyYAML==6.0.4 uvloop==0.23.0 fsspec==2026.9.0 \
                prometheus-client==0.26.0

RUN useradd --create-home --uid 1000 primus
USER 1000
WORKDIR /home/primus
CMD ["python", "-m", "primus_runtime.am", "--help"]
