"""Root conftest: points pytest-ditar at the project's config. Nothing more."""
from pathlib import Path


def pytest_ditar_config_path(config):
    return str(Path(__file__).parent / "config" / "autoresearch.json")
