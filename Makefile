# Thin wrappers: everything lives in dev.py, which needs only Python 3.11.
.PHONY: run test lint bench

run:
	python3 dev.py run

test:
	python3 dev.py test $(ARGS)

lint:
	python3 dev.py lint $(STEPS)

bench:
	python3 dev.py bench $(ARGS)
