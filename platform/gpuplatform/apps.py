from django.apps import AppConfig
from django.contrib.admin.apps import AdminConfig as DjangoAdminConfig


class AdminConfig(DjangoAdminConfig):
    """django.contrib.admin with login.AdminSite as its site (the sign-in redirect the pages use)."""

    default_site = "gpuplatform.login.AdminSite"


class GpuPlatformConfig(AppConfig):
    name = "gpuplatform"
    verbose_name = "GPU platform"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from .api.serializers.fields import (make_choices_listed, make_numbers_and_booleans_strict,
                                             make_strings_strict, make_text_fields_strict)
        from .diagnosis.tables import connect_invalidation, load_shipped

        make_strings_strict()  # {"reason": 5} is a 400, never the text "5" (strict CharField)
        make_numbers_and_booleans_strict()  # {"tasks": "2"}, {"preemptible": "yes"} are 400s in a JSON body
        make_choices_listed()  # {"numa": "maybe"} says what the choices are
        make_text_fields_strict()  # no control / bidi characters, no text of only white space (trial 21, F13)

        load_shipped()  # the diagnosis and health rule tables are read (and checked) once, at start
        connect_invalidation()  # a saved or deleted admin rule reloads the cached tables

        from .services.tenancy import connect_user_delete_guard

        connect_user_delete_guard()  # an account deleted by any path keeps every team's last admin (services.delete_user)
