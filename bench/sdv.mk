# SDV baselines for bench/synth_adult.py, in their own venv so SDV never enters Veil's install.
# Use: make -f bench/sdv.mk bench-sdv   (or `include bench/sdv.mk` from the Makefile)
SDV_VENV := .venv-sdv

.PHONY: bench-sdv bench-sdv-venv

$(SDV_VENV)/.installed:
	test -x $(SDV_VENV)/bin/python || python3 -m venv $(SDV_VENV)
	# torch first: the CPU build on this machine's disk (an unpinned torch pulls a CUDA build)
	$(SDV_VENV)/bin/python -m pip install --quiet "torch==2.13.0"
	$(SDV_VENV)/bin/python -m pip install --quiet "sdv>=1.15,<3"
	touch $@

bench-sdv-venv: $(SDV_VENV)/.installed

bench-sdv: bench-sdv-venv
	test -x .venv/bin/python || $(MAKE) install
	.venv/bin/python -m bench.synth_adult --ablation
