# The README's two commands are `make run` and `make test`; everything else builds on `make setup`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test

.PHONY: setup run test test-fast lint bench fuzz soak system-deps clean

setup: $(STAMP)

$(STAMP): requirements.txt pyproject.toml setup.py broker/records/_records.c
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q -r requirements.txt
	$(PIP) install -q --no-deps -e .
	touch $@

$(TEST_STAMP): $(STAMP) requirements-test.txt
	$(PIP) install -q -r requirements-test.txt
	touch $@

# Debian packages the tests drive: kcat (compat tests), chromium (the console's browser
# tests, through Playwright) and Java 17 (Spark, for the pipelines). Installed only where missing.
system-deps:
	@missing=""; command -v kcat >/dev/null 2>&1 || missing="$$missing kcat"; \
	  command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	  command -v java >/dev/null 2>&1 || missing="$$missing openjdk-17-jre-headless"; \
	  command -v nft >/dev/null 2>&1 || missing="$$missing nftables"; \
	  if [ -n "$$missing" ]; then echo "installing$$missing (Debian packages)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; fi

run: setup
	$(PY) -m control.launch

# PostgreSQL and Redis are real: the local ones, or throwaway ones started where none answers.
test: $(TEST_STAMP) system-deps
	bash tests/services.sh up
	status=0; $(PY) -m pytest -p no:cacheprovider -n 2 --dist loadfile || status=$$?; bash tests/services.sh down; exit $$status

lint: $(TEST_STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

bench: $(TEST_STAMP)
	$(PY) -m bench

# A longer fuzz session than the one in make test (tests/fuzz): more examples per API version,
# and a table of what was tried. FJORD_FUZZ_EXAMPLES / FJORD_FUZZ_BROKER_EXAMPLES override.
fuzz: $(TEST_STAMP)
	FJORD_FUZZ_EXAMPLES=$${FJORD_FUZZ_EXAMPLES:-300} \
	FJORD_FUZZ_BROKER_EXAMPLES=$${FJORD_FUZZ_BROKER_EXAMPLES:-20} FJORD_FUZZ_REPORT=1 \
	$(PY) -m pytest -p no:cacheprovider -o timeout=3600 tests/fuzz

# The chaos tests at length: make test runs a short version of each; FJORD_SOAK=1 makes them
# kill more often for longer (tests/compat/test_parallel_rebalance_crash.py: 30 kills a run;
# tests/pipelines/test_eos_pipeline_crash.py: 8 random kills of the Spark pipeline;
# tests/cluster/test_cluster_faults.py: each cluster fault 5 times).
soak: $(TEST_STAMP)
	bash tests/services.sh up
	status=0; FJORD_SOAK=1 $(PY) -m pytest -p no:cacheprovider -o timeout=3600 \
	  tests/compat/test_parallel_rebalance_crash.py tests/compat/test_eos_copy.py \
	  tests/pipelines/test_eos_pipeline_crash.py tests/cluster/test_cluster_faults.py \
	  || status=$$?; \
	  bash tests/services.sh down; exit $$status

clean:
	rm -rf var .pytest_cache
