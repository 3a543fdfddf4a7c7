# SPDX-License-Identifier: Apache-2.0
# The development loops; CONTRIBUTING.md says when to run which.
#
#   make unit     the tests not marked root, as any user, in a venv of its own
#   make lint     ruff and mypy, in that venv (what CI runs first)
#   make test     the whole suite on this machine's kernel: the README's test
#                 command (provisions first; as root)
#   make matrix   the kernel conformance suite in VMs, the smoke selection on
#                 CI's kernels (vagrant/vm/matrix.sh; as root)
#   make demo     provision, then `zerolayer demo` (as root)
#   make vagrant-check  the Vagrantfile booted under libvirt, the demo and the
#                 smoke tests in it, all removed after (vagrant/check.sh; as root)
#   make man      the man pages from docs/commands/, into MANDIR
#
# unit and lint need no root and no apt: pip installs the package (editable)
# and its test and lint extras from PyPI into VENV.
# Variables: VENV (.venv), PYTEST_ARGS, KERNELS (CI's: those
# vagrant/vm/kernels marks ci),
# MATRIX_ARGS (--smoke KERNELS), MANDIR (build/man).

VENV ?= .venv
PYTHON := $(VENV)/bin/python
PYTEST_ARGS ?=
KERNELS ?= $(shell bash -c '. vagrant/vm/lib.sh && kernel_names ci')
MATRIX_ARGS ?= --smoke $(KERNELS)
MANDIR ?= build/man

.PHONY: unit lint test matrix demo man venv vagrant-check

venv: $(VENV)/.installed

# Made again when the package's metadata changes.
$(VENV)/.installed: pyproject.toml setup.py
	python3 -m venv $(VENV)
	$(PYTHON) -m pip install --quiet --disable-pip-version-check --editable '.[test,lint]'
	touch $@

unit: venv
	$(PYTHON) -m pytest -q -m "not root" $(PYTEST_ARGS)

lint: venv
	$(PYTHON) -m ruff check .
	$(PYTHON) -m mypy

test:
	bash vagrant/provision.sh test $(PYTEST_ARGS)

matrix:
	bash vagrant/vm/matrix.sh $(MATRIX_ARGS)

demo:
	bash vagrant/provision.sh demo

vagrant-check:
	bash vagrant/check.sh

man:
	python3 docs/build_man.py $(MANDIR)
