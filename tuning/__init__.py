# SPDX-License-Identifier: Apache-2.0
"""Host tuning engine: ordered profiles, dry run, snapshot and exact revert."""
