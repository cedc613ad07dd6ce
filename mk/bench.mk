# make bench: every part of the benchmark, with the official Java client (bench/all.sh; tables in
#   bench/README.md).
# make soak: SOAK_N (default 1,000,000) messages through mqlease.run on the dev broker: the RSS
#   curve and the lease tables back to zero (not part of make test).
.PHONY: bench soak

bench: deps
	@$(MAKE) --no-print-directory core
	@bash bench/all.sh

# The optimised build and dev broker: the soak measures memory, not sanitizers.
SOAK_N ?= 1000000
soak: core
	@MQLEASE_DEVBROKER=$(BUILD)/mqlease-devbroker $(LUA) bench/soak.lua $(SOAK_N)
