# SPDX-License-Identifier: Apache-2.0
"""Which names can be an interface's or a named network namespace's,
checked where a file or an option gives one, before it is joined into a
path (/sys/class/net/NAME, /run/netns/NAME, the pin tree's ns:NAME) or
sent to the kernel."""

IFNAMSIZ = 16  # with its terminating NUL
_NEVER = set('/:"\\')  # a path separator, the pin tree's ns: separator, quotes


def problem(name: str, interface: bool = True) -> str | None:
    """Why NAME cannot be an interface's name (a network namespace's when
    not INTERFACE), as one clause that names it, or None. As the kernel's
    dev_valid_name: not empty, `.` or `..`, no `/`, `:` or white space;
    and no control character, quote or backslash either."""
    what = "interface" if interface else "network namespace"
    if name in ("", ".", ".."):
        return f"{name!r} is not a valid {what} name"
    bad = next((c for c in name if c in _NEVER or c.isspace() or ord(c) < 32 or ord(c) == 127),
               None)
    if bad is not None:
        return f"{name!r} is not a valid {what} name: it has {bad!r}"
    if interface and len(name.encode()) >= IFNAMSIZ:
        return f"{name!r} is longer than {IFNAMSIZ - 1} bytes, which no interface name is"
    return None
