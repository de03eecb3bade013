# Two commands for a new user on a fresh machine:
#   make run    set up .venv for the workshop (tpu_lab, the notebooks' extras) and run the main
#               job (doctor + terminal tour of the "tpu" device)
#   make test   set up .venv with the test dependencies (and .venv-torchtpu with the real
#               torch-tpu, for the contract tests), check the layers (lint-imports), build the
#               docs strictly, run every test
# and:
#   make lab        the teaching notebooks in JupyterLab, on 127.0.0.1, in the .venv make run
#                   made (nothing installed when it is complete)
#   make notebooks  re-execute the notebooks and store their outputs
#   make bench      every benchmark; the report in benchmarks/results/
#   make docs       the docs site, strict (a broken link fails it): open build/site/index.html
#   make images     the pictures of the README and the site, made again from the current code
VENV ?= .venv
PYTEST_ARGS ?=

.PHONY: run test lab notebooks bench docs images

run:
	VENV=$(VENV) scripts/setup.sh workshop
	$(VENV)/bin/tpu-lab doctor
	$(VENV)/bin/tpu-lab tour

test:
	VENV=$(VENV) scripts/setup.sh dev
	scripts/setup_torchtpu_env.sh
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/python scripts/docs.py
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS)

lab:
	VENV=$(VENV) scripts/setup.sh workshop
	$(VENV)/bin/jupyter lab --ip 127.0.0.1 --KernelManager.transport=ipc notebooks/

notebooks:
	VENV=$(VENV) scripts/setup.sh dev
	$(VENV)/bin/python scripts/notebooks.py run

bench:
	VENV=$(VENV) scripts/setup.sh dev
	$(VENV)/bin/python benchmarks/run_all.py

docs:
	VENV=$(VENV) scripts/setup.sh dev
	$(VENV)/bin/python scripts/docs.py

images:
	VENV=$(VENV) scripts/setup.sh dev
	$(VENV)/bin/python scripts/readme_images.py
