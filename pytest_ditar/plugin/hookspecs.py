"""Hooks a project's conftest.py can implement."""
import pytest


@pytest.hookspec(firstresult=True)
def pytest_ditar_config_path(config: pytest.Config) -> str | None:
    """Return the pytest-ditar config path (a root conftest.py uses this to point the plugin)."""
