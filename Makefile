# Two entry points for people (README): `make demo` and `make test`.
# Everything else here is a building block of those two.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed
BIN := $(VENV)/bin

.PHONY: demo test test-long env lock lock-core216 sanity lint compat unit twin integration molecule bench soak clean

$(STAMP): requirements/requirements.txt requirements/constraints.txt requirements/core216.txt \
		requirements/constraints-core216.txt twin/pyproject.toml
	scripts/bootstrap "$(PYTHON)" "$(VENV)"
	@touch $@

env: $(STAMP)

## demo: canary upgrade of the built-in simulated GPU cluster; prints where the report is.
demo: $(STAMP)
	$(BIN)/python scripts/demo.py

## test: every test layer, in order (sanity, lint, compat, unit, integration, molecule).
test: $(STAMP)
	scripts/test all

sanity lint compat unit twin integration molecule: $(STAMP)
	scripts/test $@

## test-long: the tests marked long (scenarios of several stage runs, minutes each: the fault matrix, GitOps,
## OLM reinstall...), which make test leaves out to stay within its time (README, "Tests").
test-long: $(STAMP)
	scripts/test long

## bench: the benchmarks at their smaller sizes (docs/benchmarks.md has the larger runs).
bench: $(STAMP)
	$(BIN)/python -m bench.bench_audit --nodes 1000
	$(BIN)/python -m bench.bench_gpu_driver_rollout --nodes 100
	$(BIN)/python -m bench.bench_twin_scale --nodes 1000
	$(BIN)/python -m bench.bench_ofed_rollout --nodes 30 --parallel 3
	$(BIN)/python -m bench.bench_stage_cpu --rounds 1 --count

## soak: the full fault matrix (component groups x canary/promote/rollback x fault kinds) and 20 rollouts of 200
## nodes with random faults; writes docs/reliability.md. A subset: make soak SOAK_ARGS="--groups firmware --rollouts 0".
soak: $(STAMP)
	$(BIN)/python -m bench.soak $(SOAK_ARGS)

lock:
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv
	.lock-venv/bin/pip install -q -r requirements/requirements.txt
	{ echo '# Full pin set resolved from requirements.txt on Python 3.11 (make lock).'; \
	  .lock-venv/bin/pip freeze; } > requirements/constraints.txt
	rm -rf .lock-venv

# The pins of .venv-core216 (scripts/test compat); keep the versions constraints.txt
# has wherever ansible-core 2.16 allows them.
lock-core216:
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv
	grep -v -e '^ansible-core==' -e '^resolvelib==' requirements/constraints.txt > .lock-venv/main-pins.txt
	.lock-venv/bin/pip install -q -r requirements/core216.txt -c .lock-venv/main-pins.txt
	{ echo '# Full pin set of .venv-core216 resolved from requirements/core216.txt on Python 3.11 (make lock-core216);'; \
	  echo '# the versions of constraints.txt wherever ansible-core 2.16 allows them (it needs resolvelib<1.1.0).'; \
	  .lock-venv/bin/pip freeze; } > requirements/constraints-core216.txt
	rm -rf .lock-venv

clean:
	rm -rf .build tests/output
