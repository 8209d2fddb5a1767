"""Fixtures shared by the theory tests."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _one_blas_thread():
    """On a loaded 2-core machine tiny BLAS calls stall in thread hand-offs; one thread avoids it."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # the checks do not depend on it, only their speed does
        yield
        return
    with threadpool_limits(1):
        yield
