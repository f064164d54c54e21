from django.apps import AppConfig


class GpuPlatformConfig(AppConfig):
    name = "gpuplatform"
    verbose_name = "GPU platform"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from .api.serializers.fields import make_strings_strict
        from .diagnosis.tables import connect_invalidation, load_shipped

        make_strings_strict()  # {"reason": 5} is a 400, never the text "5" (strict CharField)

        load_shipped()  # the diagnosis and health rule tables are read (and checked) once, at start
        connect_invalidation()  # a saved or deleted admin rule reloads the cached tables
