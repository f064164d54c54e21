"""Content negotiation of the API: DRF's, except that a `?format=` naming no renderer of the view (or given
more than once) is a 400 naming `format`, like any other bad query parameter, instead of DRF's 404."""
from rest_framework.exceptions import ValidationError
from rest_framework.negotiation import DefaultContentNegotiation


class StrictFormatNegotiation(DefaultContentNegotiation):
    def select_renderer(self, request, renderers, format_suffix=None):
        name = self.settings.URL_FORMAT_OVERRIDE
        if name and len(request.query_params.getlist(name)) > 1:
            raise ValidationError({name: ["given more than once: send it once"]})
        return super().select_renderer(request, renderers, format_suffix)

    def filter_renderers(self, renderers, format):
        kept = [r for r in renderers if r.format == format]
        if not kept:
            formats = ", ".join(sorted({r.format for r in renderers if r.format}))
            raise ValidationError({self.settings.URL_FORMAT_OVERRIDE or "format": [f"must be one of {formats}"]})
        return kept
