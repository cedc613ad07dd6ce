# make demo [BROKER=rocketmq]: the dev broker (no JVM needed) or a real RocketMQ on loopback, a
#   redis-server and two workers, one killed mid-task (examples/demo/).
.PHONY: demo

BROKER ?= devbroker
demo: deps-build
	@sh mk/deps.sh redis-server
	@$(MAKE) --no-print-directory core
	@BROKER=$(BROKER) bash examples/demo/demo.sh
