# SPDX-License-Identifier: Apache-2.0
"""The suite's fixtures and hooks live in plugin modules beside the tests,
shared through pytest_plugins rather than imported by name."""

pytest_plugins = ["root_marker", "capabilities", "lab_fixtures", "tuning_fixtures", "core_fixtures"]
