# SPDX-License-Identifier: Apache-2.0
"""What the tests share and are not tests themselves: helpers imported by
name, and the plugin modules tests/conftest.py registers (fixtures, marks,
the capability report)."""
