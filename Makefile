# The two commands: `make test` and `make demo`. Each sets everything up idempotently on a fresh
# Debian bookworm machine (as root): R from Debian, the Python venv .venv, the R package.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
APT_PKGS := r-base-core r-base-dev r-cran-reticulate r-cran-testthat r-cran-mice r-cran-survey \
            r-cran-rmarkdown r-cran-jsonlite r-cran-knitr pandoc chromium openjdk-17-jre-headless
export RETICULATE_PYTHON := $(CURDIR)/.venv/bin/python
export DPSYNTH_SHARED_TESTS := $(CURDIR)/shared_tests

.PHONY: setup apt venv rpkg test test-python test-r demo bench clean

setup: apt venv rpkg

apt:
	@if dpkg -s $(APT_PKGS) >/dev/null 2>&1; then echo "apt: R, pandoc and Java already installed"; else \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(APT_PKGS); fi

# torch first, from the local CPU build (an unpinned torch would pull a multi-GB CUDA build);
# the spark extra (pyspark, run on the Java from apt) so that the Spark backend's tests run too
$(VENV)/.installed: pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	@$(PY) -c "import torch" 2>/dev/null || $(VENV)/bin/pip install -q torch==2.13.0
	$(VENV)/bin/pip install -q -e ".[test,spark]"
	@touch $@

venv: apt $(VENV)/.installed

rpkg: venv
	@R CMD INSTALL --no-test-load rpkg > $(VENV)/rpkg-install.log 2>&1 || (cat $(VENV)/rpkg-install.log; exit 1)
	@echo "R package dpsynthr installed"

test-python: venv
	$(PY) -m pytest -q

test-r: rpkg
	Rscript -e 'testthat::test_dir("rpkg/tests/testthat", package = "dpsynthr", load_package = "installed", stop_on_failure = TRUE)'

test: setup
	$(MAKE) --no-print-directory test-python
	$(MAKE) --no-print-directory test-r
	$(MAKE) --no-print-directory check-r

# R CMD check of the built dpsynthr tarball, outside the source tree (tests, examples and the vignette
# run against .venv through RETICULATE_PYTHON); fails on any ERROR or WARNING. Log: .venv/rcheck/check.log
RCHECK := $(CURDIR)/.venv/rcheck
.PHONY: check-r
check-r: rpkg
	@rm -rf $(RCHECK) && mkdir -p $(RCHECK)
	@cd $(RCHECK) && R CMD build $(CURDIR)/rpkg > build.log 2>&1 || (cat build.log; exit 1)
	@cd $(RCHECK) && R CMD check --no-manual dpsynthr_*.tar.gz > check.log 2>&1; \
	  status=$$(grep '^Status:' check.log | tail -1); \
	  echo "R CMD check: $${status:-no status} (log: $(RCHECK)/check.log)"; \
	  if [ -z "$$status" ] || echo "$$status" | grep -qE 'ERROR|WARNING'; then cat check.log; exit 1; fi

demo: setup
	$(VENV)/bin/dpsynth demo --out demo-output

bench: venv
	@for f in bench/[!_]*.py; do echo "== $$f"; $(PY) $$f; done

clean:
	rm -rf demo-output .venv/.installed
