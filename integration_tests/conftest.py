"""Shared setup of the integration tests."""

import pytest


@pytest.fixture(autouse=True)
def _fresh_cache_dir(tmp_path_factory, monkeypatch):
    """An empty EMBER_CACHE_DIR for each test: what one test (or run) leaves on
    disk (graphs, remembered dynamic dims) must not change another's counts."""
    folder = tmp_path_factory.mktemp("ember-cache")
    monkeypatch.setenv("EMBER_CACHE_DIR", str(folder))
