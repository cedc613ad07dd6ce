# make deps: the Debian 12 packages the build and the tests need (mk/deps.sh installs
# what is missing as root, or prints the exact apt-get command and stops).
#
# LuaJIT is OpenResty's branch (luajit2): Debian's nginx Lua module needs lua-resty-core, which
# conflicts with the plain luajit packages. DEB_CLI: what the mqlease command needs (flags, the
# /metrics listener, `mqlease lab`'s JSON) and luarocks. chromium: the lab spec renders the lab's
# HTML report headless. libFuzzer's runtime is only a Recommends of Debian's clang,
# hence named.
DEB_BUILD = gcc make pkg-config lua5.4 liblua5.4-dev luajit2 libluajit2-5.1-dev libgrpc-dev libprotobuf-c-dev \
            protobuf-c-compiler libprotobuf-dev libhiredis-dev libssl-dev zlib1g-dev $(DEB_CLI)
DEB_CLI   = lua-argparse lua-socket lua-cjson luarocks
DEB_FUZZ  = clang libclang-rt-14-dev
DEB_TEST  = lua-busted lua-cjson lua-cqueues redis-server java=openjdk-17-jdk-headless mvn=maven \
            node=nodejs npm=npm nginx libnginx-mod-http-lua chromium

.PHONY: deps deps-build deps-test deps-fuzz
deps: deps-build deps-test deps-fuzz
deps-build:
	@sh mk/deps.sh $(DEB_BUILD)
deps-test:
	@sh mk/deps.sh $(DEB_TEST)
deps-fuzz:
	@sh mk/deps.sh $(DEB_FUZZ)
