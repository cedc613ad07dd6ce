# make demo [BROKER=rocketmq]: the dev broker (no JVM needed) or a real RocketMQ on loopback, a
#   redis-server and two workers, one killed mid-task (examples/demo/).
# make bench: the benchmark against the official Java client (tables in bench/README.md).
# make soak: SOAK_N (default 1,000,000) messages through mqlease.run on the dev broker: the RSS
#   curve and the lease tables back to zero (not part of make test).
.PHONY: demo bench soak

BROKER ?= devbroker
demo: deps-build
	@sh spec/support/deps.sh redis-server
	@$(MAKE) --no-print-directory core
	@BROKER=$(BROKER) bash examples/demo/demo.sh

bench: deps
	@$(MAKE) --no-print-directory core
	@bash bench/run.sh

# The optimised build and dev broker: the soak measures memory, not sanitizers.
SOAK_N ?= 1000000
soak: core
	@MQLEASE_DEVBROKER=$(BUILD)/mqlease-devbroker $(LUA) bench/soak.lua $(SOAK_N)
