# SPDX-License-Identifier: Apache-2.0
"""Numbers as people read them, shared by the CLI and `zerolayer top`."""


def number(n: float) -> str:
    """Thousands separated; one decimal only when there is a fraction."""
    return f"{n:,.0f}" if float(n).is_integer() else f"{n:,.1f}"
