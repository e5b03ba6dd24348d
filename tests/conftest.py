"""pytest's hooks; the helpers the tests import are in helpers.py."""

from __future__ import annotations

from helpers import gpu_skip_or_fail


def pytest_runtest_setup(item):
    gpu_skip_or_fail(item)
