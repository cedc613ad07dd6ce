# mqlease -- build, check and install. The rest lives in mk/:
#   mk/deps.mk    make deps: the Debian packages the build and the tests need
#   mk/test.mk    make test (check + fuzz + the specs against RocketMQ and Redis), make fuzz
#   mk/demo.mk    make demo
#   mk/bench.mk   make bench, make soak
#   mk/deps.sh, mk/rocketmq.sh (and mk/rocketmq/)   the scripts they run: the Debian packages
#                 checked, a real RocketMQ on loopback (the specs, make demo BROKER=rocketmq, make bench)
#
#   make              build/mqlease/core.so for Lua 5.4 and build/mqlease-devbroker
#   make luajit       build/luajit/mqlease/core.so for LuaJIT 2.1 (OpenResty)
#   make check        the server-free tier: C tests (spec/c), the layer, doc-link and option-table
#                     checks (spec/support/gen-option-docs.lua --write regenerates the tables) and
#                     the Lua unit specs (spec/unit) on a sanitizer build, in seconds; needs no LuaJIT
#   make check-luajit the unit specs again on LuaJIT 2.1
#   make install      PREFIX=/usr/local: the core, the Lua modules, the command, the dev broker
#   make proto        regenerate proto/gen from proto/*.proto
#
# src/ is grouped by concern, and each folder is compiled seeing only the headers it may use:
#   src/core/      util, events, metrics, backoff, absl      sees core
#   src/lease/     lease table, pacing, auto invisible,      sees core, lease (grpc byte buffers
#                  body, inbound decoding, codec              only: spec/support/check-layers.sh)
#   src/rocketmq/  the RocketMQ client, in layers (the map   sees core, lease, rocketmq
#                  is at the top of mql_base.h): client
#                  (the API, the thread) over the stages
#                  session, receive, renew, release, change,
#                  producer, over base (their floor), over
#                  call; shutdown uses only the API. No
#                  include cycle, and each function is
#                  named by its file (check-layers.sh)
#   src/redis/     the Redis client: link, cluster, scripts  sees core, redis
#   src/lua/       the Lua binding (lmqlease.c, lmql_*.c,    sees everything, and lua.h
#                  lmql_compat.h): the only files that see
#                  lua.h
#   src/devbroker/ the dev broker (a program of its own)      sees core, lease, devbroker

LUA        ?= lua5.4
LUA_INC    ?= /usr/include/lua5.4
LUAJIT_INC ?= /usr/include/luajit-2.1
CC         ?= cc
BUILD      ?= build
PREFIX     ?= /usr/local
OPT        ?= -O2
CFLAGS_WARN = -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes
CFLAGS_BASE = -std=gnu11 -fPIC -g -D_GNU_SOURCE
SAN_FLAGS   = -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined

# Libraries come from pkg-config; the fallback lets `make deps` run before they are installed.
PKGS     = grpc libprotobuf-c hiredis libcrypto zlib
PKG_LIBS := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
LIBS      = $(or $(PKG_LIBS),-lgrpc -lgpr -lprotobuf-c -lhiredis -lcrypto -lz) -lpthread

# Which headers each folder sees (see the table above).
INC_gen       = -Iproto/gen
INC_core      = -Isrc/core $(INC_gen)
INC_lease     = $(INC_core) -Isrc/lease
INC_rocketmq  = $(INC_lease) -Isrc/rocketmq
INC_redis     = $(INC_core) -Isrc/redis
INC_lua       = $(INC_rocketmq) -Isrc/redis -Isrc/lua
INC_devbroker = $(INC_lease) -Isrc/devbroker
# src/X/file.c -> X (proto/gen/... -> gen)
folder_of = $(word 2,$(subst /, ,$(1)))
inc_of    = $(INC_$(call folder_of,$(1)))

CORE_SRC     = $(wildcard src/core/*.c)
LEASE_SRC    = $(wildcard src/lease/*.c)
ROCKETMQ_SRC = $(wildcard src/rocketmq/*.c)
REDIS_SRC    = $(wildcard src/redis/*.c)
BINDING_SRC  = $(wildcard src/lua/*.c)
GEN_SRC      = proto/gen/apache/rocketmq/v2/definition.pb-c.c \
               proto/gen/apache/rocketmq/v2/service.pb-c.c \
               proto/gen/google/protobuf/duration.pb-c.c \
               proto/gen/google/protobuf/timestamp.pb-c.c
# Everything but the binding: what the C tests and the fuzzers link.
LIB_SRC      = $(CORE_SRC) $(LEASE_SRC) $(ROCKETMQ_SRC) $(REDIS_SRC) $(GEN_SRC)
MODULE_SRC   = $(LIB_SRC) $(BINDING_SRC)
DEVBROKER_SRC = $(wildcard src/devbroker/*.c) src/lease/mql_codec.c src/core/mql_util.c \
                src/core/mql_absl.c \
                src/core/mql_events.c $(GEN_SRC)
HEADERS      = $(wildcard src/*/*.h) $(GEN_SRC:.c=.h)

.PHONY: all core luajit sanitize check check-luajit install uninstall proto clean

all: core
core: $(BUILD)/mqlease/core.so $(BUILD)/mqlease-devbroker
luajit: $(BUILD)/luajit/mqlease/core.so
sanitize: $(BUILD)/san/mqlease/core.so $(BUILD)/san/mqlease-devbroker

# Objects, one tree per flavour: rel (-O2), san (ASan + UBSan, the tests' build), jit (the
# binding against LuaJIT's lua.h; everything else is shared with rel).
objs = $(patsubst %.c,$(BUILD)/obj/$(1)/%.o,$(2))
lua_inc_rel = -I$(LUA_INC)
lua_inc_san = -I$(LUA_INC)
lua_inc_jit = -I$(LUAJIT_INC)
define flavour
$(BUILD)/obj/$(1)/%.o: %.c $(HEADERS)
	@mkdir -p $$(dir $$@)
	$$(CC) $(CFLAGS_BASE) $(PKG_CFLAGS) $$(call inc_of,$$<) $$(if $$(filter lua,$$(call folder_of,$$<)),$(lua_inc_$(1))) \
	  $(CFLAGS_WARN) $(2) $$(CFLAGS) -c -o $$@ $$<
endef
$(eval $(call flavour,rel,$(OPT)))
$(eval $(call flavour,san,$(SAN_FLAGS)))
$(eval $(call flavour,jit,$(OPT)))

$(BUILD)/mqlease/core.so: $(call objs,rel,$(MODULE_SRC))
	@mkdir -p $(dir $@)
	$(CC) -shared -o $@ $^ $(LIBS) $(LDFLAGS)

$(BUILD)/luajit/mqlease/core.so: $(call objs,rel,$(LIB_SRC)) $(call objs,jit,$(BINDING_SRC))
	@mkdir -p $(dir $@)
	$(CC) -shared -o $@ $^ $(LIBS) $(LDFLAGS)

$(BUILD)/san/mqlease/core.so: $(call objs,san,$(MODULE_SRC))
	@mkdir -p $(dir $@)
	$(CC) $(SAN_FLAGS) -shared -o $@ $^ $(LIBS)

$(BUILD)/mqlease-devbroker: $(call objs,rel,$(DEVBROKER_SRC))
	$(CC) -o $@ $^ $(LIBS) $(LDFLAGS)

# The dev broker with the same sanitizers; spec/support/devbroker.lua prefers it when built.
$(BUILD)/san/mqlease-devbroker: $(call objs,san,$(DEVBROKER_SRC))
	@mkdir -p $(dir $@)
	$(CC) $(SAN_FLAGS) -o $@ $^ $(LIBS)

# The server-free tier: each spec/c/*_test.c is a program linked against the core (no Lua,
# sanitizers on); spec/c/dv_*_test.c test the dev broker's pure parts the same way;
# spec/unit holds busted specs that need no broker and no Redis.
C_TESTS   = $(patsubst spec/c/%.c,$(BUILD)/check/%,$(wildcard spec/c/*_test.c))
INC_TESTS = $(INC_rocketmq) -Isrc/redis -Isrc/devbroker -Ispec/c
CHECK_LIB = $(BUILD)/check/libmql-check.a
DV_CHECK_SRC = src/devbroker/dv_command.c src/devbroker/dv_store.c src/devbroker/dv_wire.c

$(CHECK_LIB): $(call objs,san,$(LIB_SRC))
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/check/%: spec/c/%.c $(wildcard spec/c/*.h) $(CHECK_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(PKG_CFLAGS) $(INC_TESTS) $(CFLAGS_WARN) $(SAN_FLAGS) -o $@ $< $(CHECK_LIB) $(LIBS)

$(BUILD)/check/dv_%: spec/c/dv_%.c spec/c/mql_test.h $(CHECK_LIB) $(call objs,san,$(DV_CHECK_SRC))
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(PKG_CFLAGS) $(INC_TESTS) $(CFLAGS_WARN) $(SAN_FLAGS) -o $@ $< \
	  $(call objs,san,$(DV_CHECK_SRC)) $(CHECK_LIB) $(LIBS)

# spec/c/lmql_*_test.c test the binding (its conversions to Lua values, its clients) on a Lua 5.4
# state of their own.
LMQL_CHECK_SRC = $(BINDING_SRC)
$(BUILD)/check/lmql_%: spec/c/lmql_%.c $(wildcard spec/c/*.h) $(CHECK_LIB) $(call objs,san,$(LMQL_CHECK_SRC))
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(PKG_CFLAGS) $(INC_TESTS) -Isrc/lua -I$(LUA_INC) $(CFLAGS_WARN) $(SAN_FLAGS) \
	  -o $@ $< $(call objs,san,$(LMQL_CHECK_SRC)) $(CHECK_LIB) $(LIBS) -l$(LUA)

check: $(C_TESTS) sanitize
	@bash spec/support/check-layers.sh
	@$(LUA) spec/support/check-links.lua
	@$(LUA) spec/support/gen-option-docs.lua --check
	@bash spec/support/run-check.sh $(C_TESTS)

check-luajit: luajit
	@bash spec/support/run-check.sh --luajit

# Installs what luarocks installs, for those who build with make: the module for Lua 5.4, the
# Lua files, the command and the dev broker.
LUA_LMOD ?= $(PREFIX)/share/lua/5.4
LUA_CMOD ?= $(PREFIX)/lib/lua/5.4
install: core
	install -d $(DESTDIR)$(LUA_CMOD)/mqlease $(DESTDIR)$(PREFIX)/bin
	install -m 755 $(BUILD)/mqlease/core.so $(DESTDIR)$(LUA_CMOD)/mqlease/core.so
	cd lua && find mqlease -name '*.lua' -exec install -D -m 644 {} $(DESTDIR)$(LUA_LMOD)/{} \;
	install -m 755 bin/mqlease $(DESTDIR)$(PREFIX)/bin/mqlease
	install -m 755 $(BUILD)/mqlease-devbroker $(DESTDIR)$(PREFIX)/bin/mqlease-devbroker

uninstall:
	rm -rf $(DESTDIR)$(LUA_CMOD)/mqlease $(DESTDIR)$(LUA_LMOD)/mqlease
	rm -f $(DESTDIR)$(PREFIX)/bin/mqlease $(DESTDIR)$(PREFIX)/bin/mqlease-devbroker

proto:
	@command -v protoc-c >/dev/null || { echo "protoc-c missing: apt-get install -y protobuf-c-compiler libprotobuf-dev"; exit 1; }
	rm -rf proto/gen && mkdir -p proto/gen
	protoc-c -I proto -I /usr/include --c_out=proto/gen \
	  proto/apache/rocketmq/v2/definition.proto proto/apache/rocketmq/v2/service.proto \
	  /usr/include/google/protobuf/duration.proto /usr/include/google/protobuf/timestamp.proto

clean:
	rm -rf $(BUILD)

include mk/deps.mk mk/test.mk mk/demo.mk mk/bench.mk
