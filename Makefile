# Two entry points for a fresh machine (see README):  make demo   and   make test
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: setup demo demo-local test lint bench clean peers

$(VENV)/.installed: pyproject.toml setup.py
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[dev,spark]"
	touch $@

setup: $(VENV)/.installed

## Apache Flink for `cep-gpu bench --peers flink` (about 850 MB), in a venv of its own: in .venv
## it would downgrade pyarrow, numpy, pandas and py4j. CI installs it; elsewhere it is opt-in.
FLINK_VENV ?= .venv-flink
$(FLINK_VENV)/.installed: pyproject.toml
	python3 -m venv $(FLINK_VENV)
	$(FLINK_VENV)/bin/python -m pip install -q "apache-flink>=2.0,<3"
	touch $@

peers: $(FLINK_VENV)/.installed

## the main job: the museum pipeline on Spark in local mode (no cluster, no GPU needed)
demo: setup
	$(PY) examples/museum_spark.py --events 200000 --out out/museum_spark

## the same detection in one process, without Spark
demo-local: setup
	$(PY) examples/museum_demo.py --out out/museum

## the whole test suite (what CI runs)
test: setup
	@if [ -n "$$CI" ]; then $(MAKE) peers || echo "make peers failed: tests/test_peers.py skips its Flink tests"; fi
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -n 2 --timeout=600 $(PYTEST_ARGS)

lint: setup
	$(VENV)/bin/ruff check .

## kernel micro-benchmarks (pytest-benchmark; not part of `make test`)
bench: setup
	$(PY) -m pytest bench --benchmark-only

clean:
	rm -rf $(VENV) $(FLINK_VENV) build *.egg-info out
