# SPDX-License-Identifier: Apache-2.0
"""each_core: a test using it runs once on each core of pyxdp.xsk
(pyxdp/xsk/core.py), the pure numpy path and the compiled one, so both
are held to the same reference. The compiled run fails, not skips, where
the extension was not built: an install with gcc and python3-dev builds it."""

import pytest

from pyxdp.xsk import core


@pytest.fixture(params=["pure", "compiled"])
def each_core(request):
    with core.use(request.param):
        yield request.param
