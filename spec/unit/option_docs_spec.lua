-- Every option is written once, in mqlease.config: the command's help and the
-- docs' option tables are made from it (spec/support/gen-option-docs.lua).
local config = require "mqlease.config"
local options = require "mqlease.cli.options"

-- A shell command's output and "rc=N"; without the sanitizer's LD_PRELOAD of
-- make check, under which cp and mkdir exit 1.
local function run(cmd)
  local p = io.popen("unset LD_PRELOAD; " .. cmd .. " 2>&1; echo \"rc=$?\"")
  local out = p:read("a")
  p:close()
  return out
end

local function sh_quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

describe("option docs", function()
  it("gives every library option a doc", function()
    for _, section in ipairs({ "consumer", "producer", "run" }) do
      for name, spec in pairs(config[section]) do
        assert.is_string(spec.doc, section .. "." .. name)
      end
    end
  end)

  it("shows config.lua's doc of a library option in mqlease run --help, links and backticks dropped", function()
    local ok, r = options.parse({ "run", "--help" }, {})
    assert.is_true(ok)
    local help = r.help:gsub("%s+", " ")
    -- the doc names the proxy's minimum in backticks and links auto_invisible
    assert.matches("its minInvisibleTimeMillsForRecv (10 s", help, 1, true)
    assert.not_matches("`", help, 1, true)
    assert.not_matches("](", help, 1, true)
    assert.equal(options.help_text("grace"), config.run.grace.doc)
  end)

  it("finds the tables in step with their sources, and names a section that is not", function()
    assert.matches("rc=0", run("lua5.4 spec/support/gen-option-docs.lua --check"), 1, true)
    -- a copy of the tree whose config.lua says something else about 'batch'
    local dir = os.tmpname()
    os.remove(dir)
    assert.matches("rc=0", run(("mkdir -p %s/spec/support && cp -r lua docs %s/ && cp spec/support/gen-option-docs.lua %s/spec/support/")
      :format(sh_quote(dir), sh_quote(dir), sh_quote(dir))), 1, true)
    local path = dir .. "/lua/mqlease/config.lua"
    local f = assert(io.open(path, "rb"))
    local text = f:read("a")
    f:close()
    local changed, n = text:gsub("messages per receive %(the proxy caps it at 32%)", "messages per receive", 1)
    assert.equal(1, n)
    f = assert(io.open(path, "wb"))
    f:write(changed)
    f:close()
    local out = run(("cd %s && lua5.4 spec/support/gen-option-docs.lua --check"):format(sh_quote(dir)))
    assert.matches("docs/api.md: section options:consumer differs", out, 1, true)
    assert.matches("lua5.4 spec/support/gen-option-docs.lua --write", out, 1, true)
    assert.matches("rc=1", out, 1, true)
    out = run(("cd %s && lua5.4 spec/support/gen-option-docs.lua --write && lua5.4 spec/support/gen-option-docs.lua --check")
      :format(sh_quote(dir)))
    assert.matches("rc=0", out, 1, true)
    run("rm -rf " .. sh_quote(dir))
  end)
end)
