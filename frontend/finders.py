"""A static-files finder that serves plotly.js from the installed plotly package, as vendor/plotly.min.js.

The pages must work offline (no CDN), and the plotly Python package already ships the exact plotly.js
its figures are made for. This finder exposes only that one file, so runserver, WhiteNoise (with
WHITENOISE_USE_FINDERS) and collectstatic all find it without a copy kept in the repository.
"""
from __future__ import annotations

import os
from pathlib import Path

from django.contrib.staticfiles.finders import BaseFinder
from django.core.files.storage import FileSystemStorage

PLOTLY_STATIC_PATH = "vendor/plotly.min.js"


def plotly_js_dir() -> Path:
    import plotly

    return Path(plotly.__file__).resolve().parent / "package_data"


class PlotlyJsFinder(BaseFinder):
    prefix = "vendor"
    filename = "plotly.min.js"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.storage = FileSystemStorage(location=str(plotly_js_dir()))
        self.storage.prefix = self.prefix

    def check(self, **kwargs):
        from django.core.checks import Error

        if not (plotly_js_dir() / self.filename).is_file():
            return [Error("plotly.min.js not found in the plotly package", id="frontend.E001")]
        return []

    def find(self, path, find_all=False, **kwargs):
        # Django 5.2 renamed `all` to `find_all`; accept both.
        find_all = find_all or kwargs.get("all", False)
        if path.replace(os.sep, "/") != PLOTLY_STATIC_PATH:
            return [] if find_all else None
        full = str(plotly_js_dir() / self.filename)
        return [full] if find_all else full

    def list(self, ignore_patterns):
        yield self.filename, self.storage
