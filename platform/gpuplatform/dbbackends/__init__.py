"""Database backends of the platform (settings.DATABASES picks them)."""
