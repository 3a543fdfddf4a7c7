#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Print the archive's current version of a package in each given suite.

    kernel_index.py CACHE_DIR PACKAGE URI SUITE [URI SUITE ...]

One line per suite, ``SUITE PACKAGE VERSION[,VERSION...]`` (``-`` when the
suite has none). image.sh puts these lines in an image's cache key, so a
Debian kernel update rebuilds that image. Each suite's ``main/binary-amd64``
index is kept in CACHE_DIR and fetched again only when the mirror says it
changed (If-Modified-Since), so a run with nothing new costs one small request
per suite. Exit 3, with one line on stderr, when a mirror cannot be read.
"""

from __future__ import annotations

import email.utils
import lzma
import os
import re
import sys
import urllib.error
import urllib.request
from pathlib import Path

TIMEOUT_S = 20


def fetch_index(cache: Path, uri: str, suite: str) -> bytes:
    """The suite's Packages index (decompressed), refreshed only if changed."""
    url = f"{uri.rstrip('/')}/dists/{suite}/main/binary-amd64/Packages.xz"
    local = cache / (re.sub(r"[^A-Za-z0-9.-]+", "_", url) + ".xz")
    request = urllib.request.Request(url)
    if local.exists():
        request.add_header("If-Modified-Since", email.utils.formatdate(local.stat().st_mtime, usegmt=True))
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            data = response.read()
            modified = response.headers.get("Last-Modified")
    except urllib.error.HTTPError as err:
        if err.code != 304:
            raise
    else:
        tmp = local.with_suffix(".tmp")
        tmp.write_bytes(data)
        if modified:
            stamp = email.utils.parsedate_to_datetime(modified).timestamp()
            os.utime(tmp, (stamp, stamp))
        tmp.replace(local)
    return lzma.decompress(local.read_bytes())


def versions(index: bytes, package: str) -> list[str]:
    """Every Version of PACKAGE in a Packages index, as listed."""
    found = []
    for stanza in index.decode("utf-8", "replace").split("\n\n"):
        fields = dict(re.findall(r"^([A-Za-z-]+): (.*)$", stanza, re.M))
        if fields.get("Package") == package and "Version" in fields:
            found.append(fields["Version"])
    return found


def main(argv: list[str]) -> int:
    if len(argv) < 5 or len(argv) % 2 == 0:
        print("usage: kernel_index.py CACHE_DIR PACKAGE URI SUITE [URI SUITE ...]", file=sys.stderr)
        return 2
    cache, package = Path(argv[1]), argv[2]
    cache.mkdir(parents=True, exist_ok=True)
    for uri, suite in zip(argv[3::2], argv[4::2]):
        try:
            found = versions(fetch_index(cache, uri, suite), package)
        except (OSError, lzma.LZMAError, ValueError) as err:
            print(f"cannot read the {suite} index at {uri}: {err}", file=sys.stderr)
            return 3
        print(suite, package, ",".join(found) or "-")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
