-- The install README promises: `luarocks make` into a tree builds the C core,
-- installs the Lua modules and the `mqlease` command, and both work from
-- outside the checkout -- for Lua 5.4, and for LuaJIT 2.1 the way OpenResty
-- users install (--lua-version=5.1 with LuaJIT's headers and interpreter).
local env = require "support.env"

local function quote(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

-- Runs a shell command without the sanitizer runtime the specs preload;
-- returns its exit code and its output (stdout and stderr).
local function run(cmd)
  local p = assert(io.popen(("env -u LD_PRELOAD sh -c %s 2>&1; echo \"rc=$?\""):format(quote(cmd))))
  local out = p:read("a")
  p:close()
  local rc = tonumber(out:match("rc=(%d+)\n$"))
  return rc, out:gsub("rc=%d+\n$", "")
end

-- The rockspec as a table (a rockspec is Lua assignments).
local function load_rockspec(path)
  local t = {}
  local chunk = assert(loadfile(path, "t", t))
  chunk()
  return t
end

local SCM = "rockspec/mqlease-scm-1.rockspec"
-- luarocks' make backend runs make, which reads MAKEFLAGS: build with every core, as
-- a user's `make -j` would (each install compiles the whole core)
local JOBS = "MAKEFLAGS=-j$(nproc 2>/dev/null || echo 2) "
local RELEASE = "rockspec/mqlease-0.1.0-1.rockspec"

describe("the luarocks install", function()
  local tmp
  setup(function()
    assert.equal(0, (run("command -v luarocks >/dev/null")), "luarocks is missing: make deps installs it")
    tmp = assert(io.popen("mktemp -d /tmp/mqlease-install.XXXXXX")):read("l")
    -- a copy: luarocks' builtin backend leaves its objects beside the sources
    local rc, out = run(("mkdir -p %s/src && cp -r Makefile mk src proto lua bin rockspec examples %s/src/"):format(tmp, tmp))
    assert.equal(0, rc, out)
  end)
  teardown(function()
    if tmp then os.execute("rm -rf " .. quote(tmp)) end
  end)

  it("has rockspecs with the project's repository, identical build tables, every Lua module, the command and the dev broker", function()
    local scm, release = load_rockspec(SCM), load_rockspec(RELEASE)
    assert.equal("git+https://github.com/mqlease/mqlease.git", scm.source.url)
    assert.equal(scm.source.url, release.source.url)
    assert.equal("v" .. release.version:match("^(.-)%-%d+$"), release.source.tag)
    assert.same(scm.build, release.build)
    assert.same(scm.dependencies, release.dependencies)
    assert.same({ "linux" }, scm.supported_platforms)
    assert.matches("OpenSSL >= 3", scm.description.detailed, 1, true)
    -- the library's users install nothing for the command
    assert.same({ "lua >= 5.1, < 5.5" }, scm.dependencies)

    -- make builds the core and the dev broker (the Makefile's own source lists)
    assert.equal("make", scm.build.type)
    assert.equal("core", scm.build.build_target)
    local build = scm.build.build_variables.BUILD
    assert.equal(build .. "/mqlease/core.so", scm.build.install.lib["mqlease.core"])
    assert.equal(build .. "/mqlease-devbroker", scm.build.install.bin["mqlease-devbroker"])
    assert.equal("bin/mqlease", scm.build.install.bin.mqlease)

    local listed = {}
    for _, file in pairs(scm.build.install.lua) do listed[file] = true end
    local p = assert(io.popen("find lua -name '*.lua'"))
    for file in p:lines() do assert.is_true(listed[file] == true, file .. " is not in " .. SCM) end
    p:close()
  end)

  it("installs for Lua 5.4: the module loads from outside the checkout and the command works", function()
    local tree = tmp .. "/tree54"
    local rc, out = run(("cd %s/src && " .. JOBS .. "luarocks --lua-version=5.4 --tree %s make --deps-mode=none %s")
      :format(tmp, tree, SCM))
    assert.equal(0, rc, out)
    local paths = ("eval \"$(luarocks --lua-version=5.4 --tree %s path)\" && cd /"):format(tree)

    rc, out = run(paths .. [[ && lua5.4 -e 'local m = require "mqlease"
      io.write(m._VERSION, " ", package.searchpath("mqlease.core", package.cpath), " ",
        package.searchpath("mqlease.cli", package.path))']])
    assert.equal(0, rc, out)
    local version, core, cli = out:match("^(%S+) (%S+) (%S+)$")
    assert.equal(require("mqlease")._VERSION, version)
    assert.equal(tree .. "/lib/lua/5.4/mqlease/core.so", core)
    -- (build.install.lua installs module a.b as a/b.lua: mqlease/cli/init.lua becomes mqlease/cli.lua)
    assert.equal(tree .. "/share/lua/5.4/mqlease/cli.lua", cli)

    rc, out = run(paths .. " && " .. tree .. "/bin/mqlease --help")
    assert.equal(0, rc, out)
    assert.matches("Usage: mqlease", out, 1, true)
    rc, out = run(paths .. " && " .. tree .. "/bin/mqlease run --help")
    assert.equal(0, rc, out)
    assert.matches("Usage: mqlease run", out, 1, true)

    -- the dev broker is installed beside the command, and `mqlease devbroker` runs it
    local bin_paths = paths .. (" && PATH=%s/bin:$PATH"):format(tree)
    rc, out = run(bin_paths .. " && command -v mqlease-devbroker")
    assert.equal(0, rc, out)
    assert.equal(tree .. "/bin/mqlease-devbroker\n", out)
    rc, out = run(bin_paths .. " && mqlease devbroker --no-such-flag")
    assert.are_not.equal(0, rc)
    assert.matches("usage: mqlease-devbroker", out, 1, true)

    -- a real send through the installed command: the C core works
    local topic = env.topic("install")
    rc, out = run(("%s && echo hello | %s/bin/mqlease send --quiet --endpoints %s --topic %s")
      :format(paths, tree, env.endpoints, topic))
    assert.equal(0, rc, out)
    assert.matches("^%x+\n$", out)

    -- an example runs as a user copies it: from another directory, mqlease found on the tree's paths
    rc, out = run(("%s && lua5.4 %s/src/examples/producer/send.lua %s %s"):format(paths, tmp, env.endpoints, topic))
    assert.equal(0, rc, out)
    assert.matches("^sent\t%x+\n$", out)
  end)

  it("installs for LuaJIT 2.1 with --lua-version=5.1, LuaJIT's headers and interpreter", function()
    assert.equal(0, (run("command -v luajit >/dev/null")), "luajit is missing: make deps installs it")
    -- the layout of OpenResty's /usr/local/openresty/luajit, from Debian's luajit
    local lua_dir = tmp .. "/luajit"
    -- (headers where pkg-config says: Debian's luajit and OpenResty's luajit2 agree on it)
    local rc, out = run(("mkdir -p %s/bin %s/include && ln -s \"$(command -v luajit)\" %s/bin/luajit"
      .. " && ln -s \"$(pkg-config --variable=includedir luajit || echo /usr/include/luajit-2.1)\""
      .. " %s/include/luajit-2.1"):format(lua_dir, lua_dir, lua_dir, lua_dir))
    assert.equal(0, rc, out)
    local tree = tmp .. "/tree51"
    local flags = ("--lua-dir=%s --lua-version=5.1 --tree %s"):format(lua_dir, tree)
    rc, out = run(("cd %s/src && find . -name '*.o' -delete && " .. JOBS .. "luarocks %s make --deps-mode=none %s LUA_INCDIR=%s/include/luajit-2.1")
      :format(tmp, flags, SCM, lua_dir))
    assert.equal(0, rc, out)
    local paths = ("eval \"$(luarocks %s path)\" && cd /"):format(flags)

    rc, out = run(paths .. [[ && luajit -e 'local m = require "mqlease"
      io.write(jit.version, " ", package.searchpath("mqlease.core", package.cpath))']])
    assert.equal(0, rc, out)
    assert.matches("^LuaJIT 2%.1", out)
    assert.matches(tree .. "/lib/lua/5.1/mqlease/core.so", out, 1, true)

    -- the command runs under LuaJIT and reaches the core: an unreachable proxy is UNAVAILABLE
    assert.matches("luajit", env.read(tree .. "/bin/mqlease"), 1, true)
    rc, out = run(paths .. " && " .. tree .. "/bin/mqlease send --endpoints 127.0.0.1:1 --topic t hello")
    assert.equal(1, rc, out)
    assert.matches("(UNAVAILABLE)", out, 1, true)
  end)
end)
