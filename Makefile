# mqlease -- build, test, demo and benchmark.
#
#   make          build build/mqlease/core.so for Lua 5.4 and build/mqlease-devbroker
#   make luajit   build build/luajit/mqlease/core.so for LuaJIT 2.1 (OpenResty)
#   make check    the server-free tier: C tests (spec/c) and Lua unit specs (spec/unit), in seconds
#   make test     install what is missing, run `make check` and each fuzz target for 10 s,
#                 start RocketMQ + Redis, run the specs
#                 (a sanitizer build: AddressSanitizer + UndefinedBehaviorSanitizer)
#   make demo     the dev broker + Redis + two workers, one killed mid-task (BROKER=rocketmq: real one)
#   make bench    the benchmark against the official Java client (table in README)
#   make soak     SOAK_N (default 1,000,000) messages through mqlease.run on the dev broker: the
#                 RSS curve and the lease tables back to zero (not part of make test)
#   make proto    regenerate proto/gen from proto/*.proto
#   make deps     install the Debian packages the build and the tests need
#   make fuzz     run every libFuzzer target in spec/fuzz for FUZZ_SECONDS each (default 60)
#
# make test SPEC=spec/roundtrip_spec.lua runs one file.

LUA        ?= lua5.4
LUA_INC    ?= /usr/include/lua5.4
CC         ?= cc
BUILD      ?= build
CFLAGS_WARN = -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes
CFLAGS_BASE = -std=gnu11 -fPIC -g -D_GNU_SOURCE -Isrc -Iproto/gen -I$(LUA_INC)
OPT        ?= -O2
LIBS        = -lgrpc -lgpr -lprotobuf-c -lhiredis -lcrypto -lz -lpthread

# The Lua binding: the only files that include lua.h.
BINDING_SRC = src/lmqlease.c src/lmql_push.c src/lmql_redis.c src/lmql_signals.c
CORE_SRC = src/mql_util.c src/mql_events.c src/mql_lease.c src/mql_codec.c src/mql_body.c src/mql_inbound.c \
           src/mql_call.c src/mql_metrics.c src/mql_client.c src/mql_session.c src/mql_receive.c \
           src/mql_renew.c src/mql_pace.c src/mql_backoff.c src/mql_auto.c src/mql_release.c src/mql_producer.c src/mql_shutdown.c \
           src/mql_redis.c src/mql_redis_link.c src/mql_redis_cluster.c $(BINDING_SRC)
GEN_SRC  = proto/gen/apache/rocketmq/v2/definition.pb-c.c \
           proto/gen/apache/rocketmq/v2/service.pb-c.c \
           proto/gen/google/protobuf/duration.pb-c.c \
           proto/gen/google/protobuf/timestamp.pb-c.c
HEADERS  = $(wildcard src/*.h) $(GEN_SRC:.c=.h)

# Debian 12 packages: build, tests (busted, redis, RocketMQ via Java + Maven, the Node peer, nginx
# with its Lua module). LuaJIT is OpenResty's branch (luajit2): Debian's nginx Lua module needs
# lua-resty-core, which conflicts with the plain luajit packages.
# DEB_CLI: what the mqlease command needs (flags, the /metrics listener) and luarocks.
DEB_BUILD = gcc make pkg-config lua5.4 liblua5.4-dev luajit2 libluajit2-5.1-dev libgrpc-dev libprotobuf-c-dev \
            protobuf-c-compiler libprotobuf-dev libhiredis-dev libssl-dev zlib1g-dev $(DEB_CLI)
DEB_CLI   = lua-argparse lua-socket luarocks
# libFuzzer's runtime is only a Recommends of Debian's clang, hence named.
DEB_FUZZ  = clang libclang-rt-14-dev
DEB_TEST  = lua-busted lua-cjson lua-cqueues redis-server java=openjdk-17-jdk-headless mvn=maven \
            node=nodejs npm=npm nginx libnginx-mod-http-lua

.PHONY: all core devbroker luajit sanitize deps deps-build deps-test deps-fuzz proto check test demo bench soak \
        clean fuzz fuzz-build

all: core

core: $(BUILD)/mqlease/core.so $(BUILD)/mqlease-devbroker

$(BUILD)/mqlease/core.so: $(CORE_SRC) $(GEN_SRC) $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CFLAGS_WARN) $(OPT) $(CFLAGS) -shared -o $@ $(CORE_SRC) $(GEN_SRC) $(LIBS) $(LDFLAGS)

# The same core for LuaJIT 2.1 (OpenResty's VM); the specs load it in a short second pass.
LUAJIT_INC ?= /usr/include/luajit-2.1
luajit: $(BUILD)/luajit/mqlease/core.so

$(BUILD)/luajit/mqlease/core.so: $(CORE_SRC) $(GEN_SRC) $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(subst $(LUA_INC),$(LUAJIT_INC),$(CFLAGS_BASE)) $(CFLAGS_WARN) $(OPT) $(CFLAGS) -shared -o $@ $(CORE_SRC) $(GEN_SRC) $(LIBS) $(LDFLAGS)

# The dev broker: its own files plus the core's codec and helpers.
DEVBROKER_SRC = src/devbroker/dv_main.c src/devbroker/dv_server.c src/devbroker/dv_call.c \
                src/devbroker/dv_handlers.c src/devbroker/dv_store.c \
                src/devbroker/dv_control.c src/devbroker/dv_command.c src/devbroker/dv_wire.c \
                src/mql_codec.c src/mql_util.c src/mql_events.c
devbroker: $(BUILD)/mqlease-devbroker

$(BUILD)/mqlease-devbroker: $(DEVBROKER_SRC) $(GEN_SRC) $(HEADERS) $(wildcard src/devbroker/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) -Isrc/devbroker $(CFLAGS_WARN) $(OPT) $(CFLAGS) -o $@ $(DEVBROKER_SRC) $(GEN_SRC) -lgrpc -lgpr -lprotobuf-c -lcrypto -lz -lpthread $(LDFLAGS)

# The test build: same sources, sanitizers on, loaded into a stock lua5.4 with libasan preloaded.
SAN_FLAGS = -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
sanitize: $(BUILD)/san/mqlease/core.so $(BUILD)/san/mqlease-devbroker

$(BUILD)/san/mqlease/core.so: $(CORE_SRC) $(GEN_SRC) $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CFLAGS_WARN) $(SAN_FLAGS) -shared -o $@ $(CORE_SRC) $(GEN_SRC) $(LIBS)

# The dev broker with the same sanitizers; spec/support/devbroker.lua prefers it when built.
$(BUILD)/san/mqlease-devbroker: $(DEVBROKER_SRC) $(GEN_SRC) $(HEADERS) $(wildcard src/devbroker/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) -Isrc/devbroker $(CFLAGS_WARN) $(SAN_FLAGS) -o $@ $(DEVBROKER_SRC) $(GEN_SRC) -lgrpc -lgpr -lprotobuf-c -lcrypto -lz -lpthread

proto:
	@command -v protoc-c >/dev/null || { echo "protoc-c missing: apt-get install -y protobuf-c-compiler libprotobuf-dev"; exit 1; }
	rm -rf proto/gen && mkdir -p proto/gen
	protoc-c -I proto -I /usr/include --c_out=proto/gen \
	  proto/apache/rocketmq/v2/definition.proto proto/apache/rocketmq/v2/service.proto \
	  /usr/include/google/protobuf/duration.proto /usr/include/google/protobuf/timestamp.proto

deps: deps-build deps-test deps-fuzz
deps-build:
	@sh spec/support/deps.sh $(DEB_BUILD)
deps-test:
	@sh spec/support/deps.sh $(DEB_TEST)
deps-fuzz:
	@sh spec/support/deps.sh $(DEB_FUZZ)

# The server-free tier: each spec/c/*_test.c is a program linked against the core (no Lua,
# sanitizers on); spec/unit holds busted specs that need no broker and no Redis.
C_TESTS   = $(patsubst spec/c/%.c,$(BUILD)/check/%,$(wildcard spec/c/*_test.c))
CHECK_SRC = $(filter-out $(BINDING_SRC),$(CORE_SRC)) $(GEN_SRC)
# The core is compiled once into a static library; each test links against it.
CHECK_LIB = $(BUILD)/check/libmql-check.a
CHECK_OBJ = $(patsubst %.c,$(BUILD)/check/obj/%.o,$(CHECK_SRC))

$(BUILD)/check/obj/%.o: %.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CFLAGS_WARN) $(SAN_FLAGS) -c -o $@ $<

$(CHECK_LIB): $(CHECK_OBJ)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/check/%: spec/c/%.c spec/c/mql_test.h $(CHECK_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) -Ispec/c $(CFLAGS_WARN) $(SAN_FLAGS) -o $@ $< $(CHECK_LIB) $(LIBS)

# spec/c/dv_*_test.c test the dev broker's pure parts (no grpc server) the same way.
DV_CHECK_SRC = src/devbroker/dv_command.c src/devbroker/dv_store.c src/devbroker/dv_wire.c
$(BUILD)/check/dv_%: spec/c/dv_%.c spec/c/mql_test.h $(CHECK_LIB) $(DV_CHECK_SRC) $(wildcard src/devbroker/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) -Ispec/c -Isrc/devbroker $(CFLAGS_WARN) $(SAN_FLAGS) -o $@ $< $(DV_CHECK_SRC) $(CHECK_LIB) $(LIBS) -lz

check: $(C_TESTS) sanitize luajit
	@bash spec/support/run-check.sh $(C_TESTS)

# Fuzzing: spec/fuzz/mql_*_fuzz.c link the core (without the Lua binding),
# spec/fuzz/dv_*_fuzz.c the dev broker (without its main); each defines
# LLVMFuzzerTestOneInput. Every target runs FUZZ_SECONDS from a copy of its seed
# corpus spec/fuzz/corpus/<name>/ (the repo's corpus is never written) and any
# crash, leak or sanitizer report fails the run. `make test` runs each briefly.
FUZZ_SECONDS      ?= 60
TEST_FUZZ_SECONDS ?= 10
# make test replays the corpus and then fuzzes from a fixed seed, so CI is not a
# lottery; `make fuzz` (FUZZ_SEED unset) explores from a new seed each run.
FUZZ_SEED         ?=
TEST_FUZZ_SEED    ?= 1
FUZZ_CC     ?= clang
FUZZ_FLAGS   = -g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
FUZZ_CORE    = $(filter-out $(BINDING_SRC),$(CORE_SRC)) $(GEN_SRC)
FUZZ_DV      = $(filter-out src/devbroker/dv_main.c,$(DEVBROKER_SRC)) $(GEN_SRC)
FUZZ_TARGETS = $(patsubst spec/fuzz/%.c,$(BUILD)/fuzz/%,$(wildcard spec/fuzz/mql_*_fuzz.c spec/fuzz/dv_*_fuzz.c \
                 spec/fuzz/lmql_*_fuzz.c))

$(BUILD)/fuzz/mql_%_fuzz: spec/fuzz/mql_%_fuzz.c $(FUZZ_CORE) $(HEADERS)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(CFLAGS_BASE) -Wall -Wextra $(FUZZ_FLAGS) -o $@ $< $(FUZZ_CORE) $(LIBS)

$(BUILD)/fuzz/dv_%_fuzz: spec/fuzz/dv_%_fuzz.c $(FUZZ_DV) $(HEADERS) $(wildcard src/devbroker/*.h)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(CFLAGS_BASE) -Isrc/devbroker -Wall -Wextra $(FUZZ_FLAGS) -o $@ $< $(FUZZ_DV) $(LIBS)

# lmql_*: what reaches Lua -- the core plus the binding, in a Lua 5.4 state.
$(BUILD)/fuzz/lmql_%_fuzz: spec/fuzz/lmql_%_fuzz.c $(FUZZ_CORE) $(BINDING_SRC) $(HEADERS)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(CFLAGS_BASE) -Wall -Wextra $(FUZZ_FLAGS) -o $@ $< $(FUZZ_CORE) $(BINDING_SRC) $(LIBS) -llua5.4

fuzz-build: deps-fuzz $(FUZZ_TARGETS)

fuzz: fuzz-build
	@FUZZ_SEED=$(FUZZ_SEED) bash spec/support/run-fuzz.sh $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# SPEC selects spec files (default: all, plus a LuaJIT pass); the servers are always stopped.
SPEC ?=
test: deps
	@$(MAKE) --no-print-directory core sanitize luajit
	@$(MAKE) --no-print-directory check
	@$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=$(TEST_FUZZ_SECONDS) FUZZ_SEED=$(TEST_FUZZ_SEED)
	@bash spec/support/run-specs.sh $(SPEC)

# The demo needs no JVM unless BROKER=rocketmq (rocketmq.sh then says what to install).
BROKER ?= devbroker
demo: deps-build
	@sh spec/support/deps.sh redis-server
	@$(MAKE) --no-print-directory core
	@BROKER=$(BROKER) bash examples/demo.sh

bench: deps
	@$(MAKE) --no-print-directory core
	@bash bench/run.sh

# The optimised build and dev broker: the soak measures memory, not sanitizers.
SOAK_N ?= 1000000
soak: core
	@MQLEASE_DEVBROKER=$(BUILD)/mqlease-devbroker $(LUA) bench/soak.lua $(SOAK_N)

clean:
	rm -rf $(BUILD)
