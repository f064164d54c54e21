from django.urls import path

from . import views

app_name = "frontend"
urlpatterns = [
    path("", views.cluster, name="home"),
    path("cluster/", views.cluster, name="cluster"),
    path("cluster/metrics.json", views.cluster_metrics, name="cluster-metrics"),
    path("jobs/", views.job_list, name="job-list"),
    path("jobs/<int:pk>/", views.job_detail, name="job-detail"),
    path("healthz", views.healthz, name="healthz"),
]
