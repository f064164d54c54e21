"""Federation (issue #22, DESIGN section 15, docs/federation.md): many clusters, one front door.

- manager.py   the manager's write services (member clusters, federated jobs, cancel)
- dispatch.py  the manager's round: sync members, move a lost member's jobs, withdraw, dispatch
- client.py    the manager's HTTP client for one member
- worker_api.py the worker's endpoints for the manager's scoped service account
- api.py, urls.py, views.py, admin.py, tasks.py  REST, the /federation/ page, the admin, the Celery task
- secrets.py   member tokens encrypted at rest
The policy (filter and score clusters) is scheduler.core.federation.
"""
