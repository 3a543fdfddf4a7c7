# SPDX-License-Identifier: Apache-2.0
"""The one exception type the CLI turns into a one-line message and exit 1."""


class ZerolayerError(Exception):
    """An expected failure. The message is one line that says what to do."""
