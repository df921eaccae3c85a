# podcode: set-up, demo, tests and benchmarks. Every target installs what it needs.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: setup system-packages demo test test-fast bench lint code-server screenshots clean

CLIENT := vscode_config/extension/lib/languageclient.js

setup: $(STAMP) code-server $(CLIENT)

# Debian packages: chromium for the browser tests, libkrb5-dev for code-server's native module.
system-packages:
	@scripts/system-packages.sh

$(STAMP): pyproject.toml
	$(MAKE) system-packages
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# PyTorch's CPU build, for the torchrun tests (gloo); the exact pin keeps CUDA wheels out.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test,flyte,flyte2,ray,ssh,lsp]' --config-settings editable_mode=compat
	# JupyterLab's jupyter-events brings jsonschema's format-nongpl extra, whose rfc3987-syntax
	# builds a grammar whenever jsonschema is imported: 1.4 s of CPU in every process that
	# imports ray (each Ray worker), two thirds of its import. No test checks IRI formats.
	$(PY) -m pip uninstall -q -y rfc3987-syntax
	touch $(STAMP)

# The companion's language client (vscode-languageclient, pinned in its package-lock.json),
# bundled into one file at build time: a session downloads nothing.
$(CLIENT): vscode_config/extension-client/package-lock.json vscode_config/extension-client/entry.js
	scripts/build-companion-client.sh

# A real code-server in the shared cache (outside the checkout), through podcode's own installer.
code-server: $(STAMP)
	$(PY) -m server_bootstrap.install

demo: setup
	$(PY) examples/demo.py

test: setup
	$(PY) -m pytest -q -p no:cacheprovider

test-fast: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider -m "not codeserver and not browser and not slow"

# Every figure, then docs/performance.md and its chart from benchmarks/results.json.
bench: setup
	$(PY) benchmarks/run.py; status=$$?; $(PY) benchmarks/report.py && exit $$status

# The pictures in docs/: taken by the browser tests (into artifacts/), then copied.
SCREENSHOTS := debugger-postmortem.png status-bar.png warning-email.png notebook-figure.png
screenshots: setup
	$(PY) -m pytest -q -p no:cacheprovider tests/test_debugger_browser.py \
		tests/test_codeserver_browser.py tests/test_mail_browser.py tests/test_notebook_browser.py
	mkdir -p docs/images
	cp $(addprefix artifacts/,$(SCREENSHOTS)) docs/images/

lint: $(STAMP)
	$(VENV)/bin/ruff check interactive server_bootstrap vscode_config tests benchmarks examples
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) build *.egg-info artifacts
