"""Fixtures for the Slurm backend tests: the platform's small cluster (teams, queues) plus Slurm nodes."""
from tests.platform.conftest import alpha, cluster, submit  # noqa: F401 - fixtures
