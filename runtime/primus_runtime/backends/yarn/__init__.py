"""YARN backend: the AM runs inside a YARN application started through skein.

Submitting (``YarnClusterClient.submit``, where the CLI or Airflow runs):

- the runtime bundle and each role's files are uploaded to HDFS once per content hash
  (``<store>/bundles``, ``<store>/files``), so resubmitting the same job uploads nothing;
- skein starts an application whose master script is the Primus AM and which has one skein
  service per role, with no instance: the AM asks for each executor container itself;
- the spec and the job token go to ``<store>/jobs/<app_id>/`` (the token mode 600), where the
  AM also publishes its address (``am.json``) and mirrors its status (``status.json``).

``<store>`` is ``/user/<user>/.primus`` on the cluster's default filesystem. After submitting,
nothing here needs skein's Java driver: status, listing and kill use the ResourceManager's
REST API and WebHDFS; logs come from the NodeManagers' REST API.

Inside the AM, ``YarnExecutorBackend`` asks skein for a container per executor
(``add_container`` with the executor's environment), watches container states, and maps their
ends to the failover engine's events (exit code, preemption, lost node).
"""
