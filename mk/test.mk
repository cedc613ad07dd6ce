# make test: install what is missing (make deps), build, run the server-free tier (make check and
# its LuaJIT pass), fuzz each target for 10 s, then start RocketMQ + Redis and run the specs
# (spec/integration, spec/regress) on the sanitizer build. make test SPEC=FILE... runs only those.
#
# make fuzz: every libFuzzer target in spec/fuzz for FUZZ_SECONDS each (default 60).
# spec/fuzz/mql_*_fuzz.c link the core (without the Lua binding), spec/fuzz/dv_*_fuzz.c the dev
# broker (without its main), spec/fuzz/lmql_*_fuzz.c the core plus the binding in a Lua 5.4
# state; each defines LLVMFuzzerTestOneInput. Every target runs from a copy of its seed corpus
# spec/fuzz/corpus/<name>/ (the repo's corpus is never written) and any crash, leak or sanitizer
# report fails the run. make test replays the corpus and then fuzzes from a fixed seed, so CI is
# not a lottery; make fuzz (FUZZ_SEED unset) explores from a new seed each run.
FUZZ_SECONDS      ?= 60
TEST_FUZZ_SECONDS ?= 10
FUZZ_SEED         ?=
TEST_FUZZ_SEED    ?= 1
FUZZ_CC     ?= clang
FUZZ_FLAGS   = -g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
FUZZ_INC     = $(INC_rocketmq) -Isrc/redis -Isrc/devbroker -Isrc/lua -I$(LUA_INC)
FUZZ_DV      = $(filter-out src/devbroker/dv_main.c,$(DEVBROKER_SRC))
FUZZ_TARGETS = $(patsubst spec/fuzz/%.c,$(BUILD)/fuzz/%,$(wildcard spec/fuzz/mql_*_fuzz.c spec/fuzz/dv_*_fuzz.c \
                 spec/fuzz/lmql_*_fuzz.c))

$(BUILD)/fuzz/mql_%_fuzz: spec/fuzz/mql_%_fuzz.c $(LIB_SRC) $(HEADERS)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(CFLAGS_BASE) $(PKG_CFLAGS) $(FUZZ_INC) -Wall -Wextra $(FUZZ_FLAGS) -o $@ $< $(LIB_SRC) $(LIBS)

$(BUILD)/fuzz/dv_%_fuzz: spec/fuzz/dv_%_fuzz.c $(FUZZ_DV) $(HEADERS)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(CFLAGS_BASE) $(PKG_CFLAGS) $(FUZZ_INC) -Wall -Wextra $(FUZZ_FLAGS) -o $@ $< $(FUZZ_DV) $(LIBS)

$(BUILD)/fuzz/lmql_%_fuzz: spec/fuzz/lmql_%_fuzz.c $(MODULE_SRC) $(HEADERS)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(CFLAGS_BASE) $(PKG_CFLAGS) $(FUZZ_INC) -Wall -Wextra $(FUZZ_FLAGS) -o $@ $< $(MODULE_SRC) $(LIBS) -llua5.4

.PHONY: test fuzz fuzz-build
fuzz-build: deps-fuzz $(FUZZ_TARGETS)

fuzz: fuzz-build
	@FUZZ_SEED=$(FUZZ_SEED) bash spec/support/run-fuzz.sh $(FUZZ_SECONDS) $(FUZZ_TARGETS)

SPEC ?=
# the builds use every core (the fuzz targets each compile the whole core)
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
test: deps
	@$(MAKE) --no-print-directory -j$(JOBS) core sanitize luajit
	@$(MAKE) --no-print-directory -j$(JOBS) check
	@$(MAKE) --no-print-directory check-luajit
	@$(MAKE) --no-print-directory -j$(JOBS) fuzz-build
	@$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=$(TEST_FUZZ_SECONDS) FUZZ_SEED=$(TEST_FUZZ_SEED)
	@bash spec/support/run-specs.sh $(SPEC)
