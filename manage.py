#!/usr/bin/env python
"""Django's command-line utility for the GPU platform control plane."""
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
# platform/ is a source root (never a package): put it on the path so `gpuplatform` imports.
for entry in (str(ROOT / "platform"), str(ROOT)):
    if entry not in sys.path:
        sys.path.insert(0, entry)


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuplatform.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
