# SPDX-License-Identifier: Apache-2.0
"""Root per test, not per session: a test marked `root` (or a module with
`pytestmark = pytest.mark.root`) loads BPF programs, makes namespaces or
changes links, and is skipped with a reason when the suite runs as an
ordinary user. The rest (codec, judge, profiles, fake-root tuning) runs as
anyone: tests/test_unprivileged.py proves it on every run."""

import os

import pytest

NEEDS_ROOT = "needs root (CAP_BPF, CAP_NET_ADMIN): run `bash vagrant/provision.sh test` as root"


def pytest_configure(config):
    config.addinivalue_line("markers", "root: the test needs root (tests/support/root_marker.py)")


def pytest_runtest_setup(item):
    if item.get_closest_marker("root") and os.geteuid() != 0:
        pytest.skip(NEEDS_ROOT)
