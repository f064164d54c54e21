"""`platform/` is a source root, never a package: `import platform` must stay the standard library."""
import sysconfig
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_platform_is_the_standard_library():
    import platform

    assert platform.python_version().count(".") == 2
    location = Path(platform.__file__).resolve()
    assert location.is_relative_to(Path(sysconfig.get_paths()["stdlib"]).resolve())
    assert not location.is_relative_to(REPO)


def test_platform_source_root_has_no_init():
    assert not (REPO / "platform" / "__init__.py").exists()


def test_uuid_and_django_still_import():
    import uuid

    import django

    assert uuid.uuid4().version == 4 and django.VERSION[:2] == (5, 2)


def test_test_module_basenames_are_unique():
    """Test folders are not packages (rootdir-relative imports): two modules with one basename make the whole
    run fail at collection, although each folder passes alone."""
    seen: dict[str, Path] = {}
    for path in sorted((REPO / "tests").rglob("test_*.py")):
        assert path.name not in seen, f"{path.relative_to(REPO)} and {seen[path.name].relative_to(REPO)} share a name"
        seen[path.name] = path
