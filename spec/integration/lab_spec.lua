-- mqlease lab: the command runs the shipped first-incident scenario and its
-- renewed twin on a dev broker it starts itself, and their figures tell the
-- incident apart from the fix; the HTML report it writes renders in a real
-- browser (Debian's chromium, headless) with its table and every plot.
local cjson = require "cjson"

-- The command as a user runs it from a checkout; the sanitizer runtime the
-- specs preload is not for it (it loads build/mqlease/core.so).
local CMD = "env -u LD_PRELOAD lua5.4 bin/mqlease"

local function shell_quote(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

local function read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local text = f:read("a")
  f:close()
  return text
end

local function run(cmd)
  local p = assert(io.popen(cmd .. "; echo \"rc=$?\""))
  local out = p:read("a")
  p:close()
  return tonumber(out:match("rc=(%d+)%s*$")), out
end

local function chromium()
  for _, name in ipairs({ "chromium", "chromium-browser" }) do
    local p = io.popen("command -v " .. name .. " 2>/dev/null")
    local path = p:read("l")
    p:close()
    if path and path ~= "" then return path end
  end
end

-- Width and height of a PNG (its IHDR chunk), or nil.
local function png_size(data)
  if not data or data:sub(1, 8) ~= "\137PNG\r\n\26\n" then return nil end
  return string.unpack(">I4I4", data, 17)
end

describe("mqlease lab on the dev broker", function()
  local dir = os.tmpname()
  os.remove(dir)
  os.execute("mkdir -p " .. dir)
  local html, json = dir .. "/report.html", dir .. "/report.json"
  local rc, out
  local by = {}

  setup(function()
    rc, out = run(("%s lab examples/lab/no_renewal.lua examples/lab/renewed.lua --html %s --json %s 2>%s/stderr")
      :format(CMD, shell_quote(html), shell_quote(json), dir))
    for line in (read(json) or ""):gmatch("[^\n]+") do
      local r = cjson.decode(line)
      by[r.scenario] = r
    end
  end)

  teardown(function()
    os.execute("rm -rf " .. shell_quote(dir))
  end)

  it("runs both scenarios and prints one column for each", function()
    assert.equal(0, rc, (read(dir .. "/stderr") or "") .. out)
    local header = out:match("^[^\n]+")
    assert.matches("no_renewal", header, 1, true)
    assert.matches("renewed", header, 1, true)
    assert.matches("\nduplicate business runs ", out, 1, true)
  end)

  it("shows the first incident without renewal: long tasks run twice", function()
    local r = assert(by.no_renewal, "no figures for no_renewal")
    assert.equal(600, r.sent)
    assert.is_true(r.duplicates > 0, "no duplicate runs")
    assert.is_true(r.expired_while_alive > 0, "no lease ran out under a handler")
    assert.equal(0, r.renewals)
    assert.equal(r.sent + r.duplicates, r.runs + r.lost + r.unfinished)
  end)

  it("shows the same workload with renewal: every message once, none lost", function()
    local r = assert(by.renewed, "no figures for renewed")
    assert.equal(600, r.sent)
    assert.equal(0, r.duplicates)
    assert.equal(0, r.lost)
    assert.equal(0, r.unfinished)
    assert.equal(r.sent, r.runs)
    assert.equal(0, r.expired_while_alive)
    assert.is_true(r.renewals > 0, "no renewal at all")
  end)

  it("writes an HTML report that a headless chromium renders with its table and plots", function()
    local browser = chromium()
    if not browser then
      pending("chromium is not installed (apt-get install -y chromium; make deps-test installs it): render check skipped")
      return
    end
    local page = assert(read(html), "no HTML report")
    local flags = "--headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1000,2600"
    -- the DOM the browser built: the table, each row of figures, and every plot
    local _, dom = run(("env -u LD_PRELOAD timeout 60 %s %s --dump-dom %s 2>/dev/null")
      :format(browser, flags, shell_quote("file://" .. html)))
    assert.truthy(dom:find('<table id="report">', 1, true), "no table in the rendered DOM")
    assert.truthy(dom:find("duplicate business runs", 1, true))
    local _, svgs = dom:gsub("<svg ", "")
    local _, written = page:gsub("<svg ", "")
    assert.equal(8, written)     -- four plots, two scenarios
    assert.equal(written, svgs)
    local _, lines = dom:gsub("<polyline ", "")
    assert.equal(8, lines)
    -- the picture: a blank page of the same size as the baseline
    local blank = dir .. "/blank.html"
    local f = assert(io.open(blank, "w"))
    f:write("<!DOCTYPE html><html><body></body></html>")
    f:close()
    local shot, empty = dir .. "/report.png", dir .. "/blank.png"
    run(("env -u LD_PRELOAD timeout 60 %s %s --screenshot=%s %s >/dev/null 2>&1"):format(browser, flags, shell_quote(shot), shell_quote("file://" .. html)))
    run(("env -u LD_PRELOAD timeout 60 %s %s --screenshot=%s %s >/dev/null 2>&1"):format(browser, flags, shell_quote(empty), shell_quote("file://" .. blank)))
    local png, base = read(shot), read(empty)
    local w, h = png_size(png)
    assert.equal(1000, w, "no screenshot of the report")
    assert.equal(2600, h)
    assert.is_true(#png > 5 * #base, ("the report's screenshot (%d bytes) is hardly more than a blank page's (%d)")
      :format(#png, #base))
  end)
end)
