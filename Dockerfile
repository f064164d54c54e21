# One image for web (gunicorn), Celery worker and Celery beat: docker-compose.yml picks the command.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    DJANGO_SETTINGS_MODULE=gpuplatform.settings \
    # Run from the source tree (templates/, data/ and static files are found relative to it).
    PYTHONPATH=/app/platform:/app

WORKDIR /app
RUN useradd --create-home --uid 1000 app

# Dependencies first (cached while only the code changes), then the project itself.
COPY pyproject.toml README.md ./
COPY platform ./platform
COPY scheduler ./scheduler
COPY clusterspec ./clusterspec
COPY frontend ./frontend
RUN pip install .
COPY . .
# Static files (including plotly.js's strict bundle, frontend/static/vendor/) collected once, served by WhiteNoise.
RUN SECRET_KEY=collectstatic-only python manage.py collectstatic --noinput -v 0 \
    && chown -R app:app /app
USER app

EXPOSE 8000
# --max-requests recycles a worker after ~1000 requests (jitter spreads the restarts): memory a large
# request grew never stays; --timeout bounds a stuck request.
CMD ["gunicorn", "gpuplatform.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "3", "--max-requests", "1000", "--max-requests-jitter", "100", "--timeout", "30", "--access-logfile", "-"]
