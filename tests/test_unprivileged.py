# SPDX-License-Identifier: Apache-2.0
"""Root is needed per test, not per session: everything not marked `root`
(the codec, the judge, profiles, the fake-root tuning runs, the package's
house rules) passes as an ordinary user. Proved here by running exactly
those tests as `nobody`, on a copy of the repository that user may read
(without .git: the few tests that read the history are left to the rest
of the suite)."""

import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

import pytest

pytestmark = pytest.mark.root  # it switches to nobody, which takes root

NOBODY = 65534
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_unprivileged_tests_pass_as_nobody():
    # Not tmp_path: pytest keeps that under a directory only root may enter.
    with tempfile.TemporaryDirectory(prefix="zl-unprivileged-") as where:
        done = _run_as_nobody(pathlib.Path(where))
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    passed = int(re.search(r"(\d+) passed", summary).group(1))
    assert passed >= 50, summary  # the pure tests really ran, not a handful
    assert "skipped" not in summary, done.stdout[-1500:]  # nothing left out for want of root


def _run_as_nobody(copy: pathlib.Path) -> subprocess.CompletedProcess:
    copy = copy / "zerolayer"
    shutil.copytree(REPO, copy, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", "build", "*.egg-info", "__pycache__", ".hypothesis", ".pytest_cache",
        ".venv"))  # make unit's venv
    for path in [copy.parent, copy, *copy.rglob("*")]:
        os.chown(path, NOBODY, NOBODY)
    return subprocess.run(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
         "--inh-caps=-all", sys.executable, "-P", "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "-m", "not root and not history"],
        cwd=copy, env={"PATH": os.environ["PATH"], "HOME": str(copy)},
        capture_output=True, text=True, timeout=240,
    )
