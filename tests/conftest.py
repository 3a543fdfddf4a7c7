# SPDX-License-Identifier: Apache-2.0
"""The suite's fixtures and hooks live in plugin modules in tests/support,
shared through pytest_plugins rather than imported by name."""

pytest_plugins = [
    "support.root_marker", "support.capabilities", "support.lab_fixtures",
    "support.tuning_fixtures", "support.core_fixtures", "support.listen_runner",
    "support.signals",
]
