# Two commands for a new user on a fresh machine:
#   make run    set up .venv and run the main job (doctor + terminal tour of the "tpu" device)
#   make test   set up .venv with the test dependencies (and .venv-torchtpu with the real
#               torch-tpu, for the contract tests) and run every test
VENV ?= .venv
PYTEST_ARGS ?=

.PHONY: run test lint bench

run:
	VENV=$(VENV) scripts/setup.sh hf
	$(VENV)/bin/tpu-lab doctor
	$(VENV)/bin/tpu-lab tour

test:
	VENV=$(VENV) scripts/setup.sh dev
	scripts/setup_torchtpu_env.sh
	$(VENV)/bin/ruff check .
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS)

bench:
	VENV=$(VENV) scripts/setup.sh dev
	$(VENV)/bin/python benchmarks/run_all.py
