from django.urls import path

from . import views, views_dashboards as dash, views_jobs, views_utilization

app_name = "frontend"
urlpatterns = [
    path("", views.cluster, name="home"),
    path("cluster/", views.cluster, name="cluster"),
    path("cluster/metrics.json", views.cluster_metrics, name="cluster-metrics"),
    path("topology/", dash.topology, name="topology"),
    path("topology.json", dash.topology_json, name="topology-json"),
    path("queues/", dash.queues_page, name="queues"),
    path("queues/data.json", dash.queues_json, name="queues-json"),
    path("fragmentation/", dash.fragmentation_page, name="fragmentation"),
    path("fragmentation/data.json", dash.fragmentation_json, name="fragmentation-json"),
    path("fragmentation/move/", views_jobs.fragmentation_move, name="fragmentation-move"),
    path("queueing/", dash.queueing_page, name="queueing"),
    path("queueing/data.json", dash.queueing_json, name="queueing-json"),
    path("failures/", dash.failures_page, name="failures"),
    path("failures/data.json", dash.failures_json, name="failures-json"),
    path("nodes/", views.node_list, name="node-list"),
    path("utilization/", views_utilization.utilization_page, name="utilization"),
    path("utilization/data.json", views_utilization.utilization_json, name="utilization-json"),
    path("jobs/", views.job_list, name="job-list"),
    path("jobs/new/", views_jobs.job_new, name="job-new"),
    path("jobs/new/estimate/", views_jobs.job_estimate, name="job-estimate"),
    path("jobs/<int:pk>/", views.job_detail, name="job-detail"),
    path("jobs/<int:pk>/cancel/", views_jobs.job_cancel, name="job-cancel"),
    path("docs/", dash.doc_page, name="docs"),
    path("docs/<slug:name>/", dash.doc_page, name="doc"),
    path("healthz", views.healthz, name="healthz"),
    path("readyz", views.readyz, name="readyz"),
]
