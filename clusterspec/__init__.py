"""Plain descriptions of a cluster and a workload, and the importers that read them from real files.

- `clusterspec.spec`: ClusterSpec (nodes, topology domains, queues with quotas) and Trace (jobs), frozen
  dataclasses with no behaviour.
- `clusterspec.importers`: the Philly and Alibaba openb inventories and traces (`load_cluster`,
  `load_trace` resolve the shipped files under data/) and `clusterspec.importers.topology`, the topology
  formats (Slurm, Volcano HyperNode, Kueue, Kubernetes labels, ibnetdiscover, topograph) in and out.

The bottom of the one-way stairs (docs/architecture.md): the simulator (`scheduler.sim`) and the platform
(`gpuplatform`) both read these; this package imports neither, nor Django or Celery, so reading a CSV
costs only the standard library (and PyYAML for the YAML topology formats).
"""
