# SPDX-License-Identifier: Apache-2.0
"""The development loop: the checkout runs as the installed package does."""

import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_python_m_pyxdp_runs_the_checkout_from_the_repository_root():
    """From the root, the checkout shadows the installed package, so it must
    be whole: its C sources and tuning profiles included."""
    probe = ("import pyxdp, pyxdp.bpf, pyxdp.tuning.profile as p; "
             "print(pyxdp.__file__); print(pyxdp.bpf.SOURCE_DIR); print(p.load('inf2').name)")
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    package, sources, profile = done.stdout.split()
    assert package == os.path.join(REPO, "pyxdp", "__init__.py")
    assert os.path.isfile(os.path.join(sources, "xdp_token.bpf.c"))
    assert profile == "inf2"
    done = subprocess.run([sys.executable, "-m", "pyxdp", "--version"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("zerolayer, version"), done.stderr


def test_the_cli_starts_without_the_heavy_libraries():
    """Every command is registered at start, so a command module that
    imports numpy, scapy or matplotlib at the top makes `zerolayer
    status` pay for them (numpy alone: about 50 ms here). They are imported
    inside the commands that use them."""
    probe = ("import sys, pyxdp.cli; pyxdp.cli._register(); "
             "print(' '.join(m for m in ('numpy', 'scapy', 'matplotlib', 'psutil') "
             "if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == []


def test_every_package_is_shipped_by_a_plain_install():
    """pyproject.toml lists the packages (a plain `pip install .`, as the VM
    images and the container do, ships only those): each one there is."""
    import pathlib
    import tomllib

    root = pathlib.Path(REPO, "pyxdp")  # the checkout's: the installed one has only what shipped
    # os.walk, not rglob: in a checkout pyxdp/tuning and pyxdp/bpf are symlinks.
    found = {".".join(pathlib.Path(d).relative_to(root.parent).parts)
             for d, _, files in os.walk(root, followlinks=True)
             if "__init__.py" in files and "__pycache__" not in d}
    with open(root.parent / "pyproject.toml", "rb") as f:
        listed = set(tomllib.load(f)["tool"]["setuptools"]["packages"])
    assert found == listed
