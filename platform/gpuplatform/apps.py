from django.apps import AppConfig


class GpuPlatformConfig(AppConfig):
    name = "gpuplatform"
    verbose_name = "GPU platform"
    default_auto_field = "django.db.models.BigAutoField"
