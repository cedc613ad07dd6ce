-- gen-option-docs.lua --check | --write -- the option tables of the docs, from their one source.
--
--   lua5.4 spec/support/gen-option-docs.lua --write    rewrite the generated sections
--   lua5.4 spec/support/gen-option-docs.lua --check    exit 1, naming each section that differs
--                                                      (`make check` runs this)
--
-- Every option is written once: the library's in lua/mqlease/config.lua (kind, default, range,
-- unit and doc), the command's flags in lua/mqlease/cli/options.lua (which takes a library
-- option's text from config.lua, as `mqlease run --help` shows it). This script writes the
-- tables of docs/api.md and docs/cli.md between marker comments:
--
--   <!-- options:consumer begin -->  ...  <!-- options:consumer end -->
--
-- Sections: consumer, producer, run (api.md); cli-run, cli-send, cli-peek, cli-recall, cli-connect,
-- cli-env (cli.md). A table's rows follow the order of the options in config.lua and of the
-- command's flags in options.lua. Text outside the markers is left as it is. Run from the
-- repository root.

package.path = "lua/?.lua;lua/?/init.lua;" .. package.path

local config = require "mqlease.config"
local options = require "mqlease.cli.options"

local concat, format = table.concat, string.format

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

-- A table cell: one line, its pipes escaped.
local function cell(s)
  return (tostring(s or ""):gsub("\n", " "):gsub("|", "\\|"))
end

local function row(cells)
  local out = {}
  for i, c in ipairs(cells) do out[i] = cell(c) end
  return "| " .. concat(out, " | ") .. " |"
end

-- ------------------------------------------------------------------ order

-- config.lua's text with every string literal and comment blanked, so that only the
-- table constructors' own keys are left to find.
local function code_only(src)
  local out, i, n = {}, 1, #src
  while i <= n do
    local c = src:sub(i, i)
    if c == '"' or c == "'" then
      local j = i + 1
      while j <= n and src:sub(j, j) ~= c do
        if src:sub(j, j) == "\\" then j = j + 1 end
        j = j + 1
      end
      out[#out + 1] = c .. (" "):rep(j - i - 1) .. c
      i = j + 1
    elseif src:sub(i, i + 1) == "--" then
      local j = src:find("\n", i, true) or n + 1
      out[#out + 1] = (" "):rep(j - i)
      i = j
    else
      out[#out + 1] = c
      i = i + 1
    end
  end
  return concat(out)
end

local CONFIG_CODE = code_only(read("lua/mqlease/config.lua"))

-- The options of config[section] in the order config.lua writes them.
local function config_order(section)
  local specs = config[section]
  local first = CONFIG_CODE:find("_M." .. section .. " = {", 1, true)
  assert(first, "config.lua: no _M." .. section)
  local last = CONFIG_CODE:find("\n}", first, true)
  local block = CONFIG_CODE:sub(first, last)
  local names, seen = {}, {}
  for name in block:gmatch("([%a_][%w_]*) = ") do
    if specs[name] and not seen[name] then
      seen[name] = true
      names[#names + 1] = name
    end
  end
  for name in pairs(specs) do
    assert(seen[name], "config.lua: option " .. section .. "." .. name .. " not found in its table's text")
  end
  return names
end

-- ------------------------------------------------------------------ values

local function number(v)
  if v == math.floor(v) and math.abs(v) < 2 ^ 53 then return format("%d", v) end
  return tostring(v)
end

local BYTE_UNITS = { { 2 ^ 40, "TiB" }, { 2 ^ 30, "GiB" }, { 2 ^ 20, "MiB" }, { 2 ^ 10, "KiB" } }

local function amount(v, unit)
  if unit == "bytes" then
    for _, u in ipairs(BYTE_UNITS) do
      if v >= u[1] and v % u[1] == 0 then return number(v / u[1]) .. " " .. u[2] end
    end
    return number(v) .. (v == 1 and " byte" or " bytes")
  elseif unit == "s" then
    if v >= 86400 and v % 86400 == 0 then return number(v / 86400) .. " days" end
    return number(v) .. " s"
  end
  return number(v)
end

-- "1 – 43200 s", "1 s – 7 days", "1 KiB – 2 GiB", "1 – 32".
local function span(min, max, unit)
  local lo, hi = amount(min, unit), amount(max, unit)
  local tail = unit and (" " .. (unit == "bytes" and "bytes" or unit)) or ""
  if unit and lo:sub(-#tail) == tail and hi:sub(-#tail) == tail then
    return lo:sub(1, -#tail - 1) .. " – " .. hi
  end
  return lo .. " – " .. hi
end

local function default_of(spec)
  if spec.required then return "required" end
  if spec.default_doc then return spec.default_doc end
  local v = spec.default
  if v == nil then return "nil" end
  if type(v) == "string" then return "`\"" .. v .. "\"`" end
  if type(v) == "boolean" then return "`" .. tostring(v) .. "`" end
  if spec.unit == "bytes" then return amount(v, "bytes") end
  return number(v)
end

local function auto_default()
  local parts = {}
  for _, k in ipairs({ "min", "max", "margin", "start" }) do
    parts[#parts + 1] = k .. "=" .. number(config.AUTO_FIELDS[k].default)
  end
  return "`{" .. concat(parts, ", ") .. "}`"
end

local function auto_range()
  local f = config.AUTO_FIELDS
  return format("`min`, `max`, `start`: %s; `margin`: %s", span(f.min.min, f.min.max, "s"),
    span(f.margin.min, f.margin.max))
end

local function range_of(spec)
  if spec.range_doc then return spec.range_doc end
  local kind = spec.kind
  if kind == "number" or kind == "integer" then
    return span(spec.min, spec.max, spec.unit)
  elseif kind == "name" then
    return format("letters, digits, `%%`, `|`, `_`, `-`; at most %d", spec.max_len)
  elseif kind == "enum" then
    return "`" .. concat(spec.values, "`, `") .. "`"
  elseif kind == "invisible" then
    return span(spec.min, spec.max, spec.unit) .. ", or `\"auto\"`"
  elseif kind == "auto_invisible" then
    return auto_range()
  elseif kind == "tls" then
    return "`true`, `false` or a table"
  elseif kind == "strings" then
    return "array of strings"
  elseif kind == "delay" then
    return "0 – 43200 s, or `fn(attempt)`"
  elseif kind == "function" then
    return "function"
  end
  return ""
end

-- ------------------------------------------------------------------ sections

local function library_table(section, only)
  local specs = config[section]
  local lines = { "| option | default | range | meaning |", "|---|---|---|---|" }
  for _, name in ipairs(config_order(section)) do
    local spec = specs[name]
    if not only or only(name, spec) then
      local default = spec.kind == "auto_invisible" and auto_default() or default_of(spec)
      lines[#lines + 1] = row({ "`" .. name .. "`", default, range_of(spec), spec.doc or "" })
    end
  end
  return concat(lines, "\n")
end

local CONNECT = {}
for _, k in ipairs(options.CONNECT) do CONNECT[k] = true end

local function flag_name(key, d)
  local arg = d.arg and (" " .. d.arg) or ""
  local long = "`--" .. key .. arg .. "`"
  if d.short then return "`" .. d.short .. arg .. "`, " .. long end
  return long
end

-- The library option a flag stands for, if any.
local function lib_spec(d)
  return d.lib and config[d.lib[1]][d.lib[2]]
end

local function flag_row(key)
  local d = options.DEFS[key]
  local lib = lib_spec(d)
  local default
  if d.required then default = "required"
  elseif d.kind == "flag" then default = ""
  elseif d.default then
    default = (d.kind == "number" or d.kind == "integer") and d.default or ("`" .. d.default .. "`")
  elseif lib and (lib.default ~= nil or lib.default_doc) then default = default_of(lib)
  else default = "" end
  local range
  if lib then range = range_of(lib)
  elseif d.range then range = span(d.range.min, d.range.max, d.kind == "number" and "s" or nil)
  elseif d.kind == "choice" then range = "`" .. concat(d.values, "`, `") .. "`"
  elseif d.kind == "hostport" then range = "`HOST:PORT`"
  else range = "" end
  local env = d.env and ("`" .. options.env_name(key) .. "`") or ""
  return row({ flag_name(key, d), env, default, range, options.help_text(key, true) })
end

local FLAG_HEAD = "| flag | variable | default | range | meaning |\n|---|---|---|---|---|"

local function command_table(name)
  local c = options.find_command(name)
  local lines = { FLAG_HEAD }
  for _, key in ipairs(c.options) do
    if not CONNECT[key] then lines[#lines + 1] = flag_row(key) end
  end
  return concat(lines, "\n")
end

local function connect_table()
  local lines = { FLAG_HEAD }
  for _, key in ipairs(options.CONNECT) do lines[#lines + 1] = flag_row(key) end
  return concat(lines, "\n")
end

-- Every MQLEASE_* variable the command reads, in the order of the commands' flags.
local function env_list()
  local names, seen = {}, {}
  for _, c in ipairs(options.COMMANDS) do
    for _, key in ipairs(c.options or {}) do
      if options.DEFS[key].env and not seen[key] then
        seen[key] = true
        names[#names + 1] = "`" .. options.env_name(key) .. "`"
      end
    end
  end
  names[#names + 1] = "`MQLEASE_SECRET_KEY` (the secret key itself)"
  return "The variables: " .. concat(names, ", ") .. "."
end

local SECTIONS = {
  { file = "docs/api.md", name = "consumer", make = function() return library_table("consumer") end },
  { file = "docs/api.md", name = "producer", make = function()
      -- the producer's own options; the connection options are the consumer's
      return library_table("producer", function(k, spec) return config.consumer[k] ~= spec end)
    end },
  { file = "docs/api.md", name = "run", make = function() return library_table("run") end },
  { file = "docs/cli.md", name = "cli-run", make = function() return command_table("run") end },
  { file = "docs/cli.md", name = "cli-send", make = function() return command_table("send") end },
  { file = "docs/cli.md", name = "cli-peek", make = function() return command_table("peek") end },
  { file = "docs/cli.md", name = "cli-recall", make = function() return command_table("recall") end },
  { file = "docs/cli.md", name = "cli-connect", make = connect_table },
  { file = "docs/cli.md", name = "cli-env", make = env_list },
}

-- ------------------------------------------------------------------ main

local mode = arg[1]
if mode ~= "--check" and mode ~= "--write" then
  io.stderr:write("usage: lua5.4 spec/support/gen-option-docs.lua --check | --write\n")
  os.exit(2)
end

local texts, changed, order = {}, {}, {}
local failed = false
for _, s in ipairs(SECTIONS) do
  if not texts[s.file] then
    texts[s.file] = read(s.file)
    order[#order + 1] = s.file
  end
  local text = texts[s.file]
  local begin_mark = "<!-- options:" .. s.name .. " begin -->\n"
  local end_mark = "\n<!-- options:" .. s.name .. " end -->"
  local b = text:find(begin_mark, 1, true)
  local e = b and text:find(end_mark, b, true)
  if not b or not e then
    io.stderr:write(format("%s: no section options:%s (the markers %s and %s)\n", s.file, s.name,
      begin_mark:sub(1, -2), end_mark:sub(2)))
    failed = true
  else
    local old = text:sub(b + #begin_mark, e - 1)
    local new = s.make()
    if old ~= new then
      if mode == "--check" then
        io.stderr:write(format("%s: section options:%s differs from its source (%s); run: "
          .. "lua5.4 spec/support/gen-option-docs.lua --write\n", s.file, s.name,
          s.name:match("^cli") and "lua/mqlease/cli/options.lua, lua/mqlease/config.lua"
            or "lua/mqlease/config.lua"))
        failed = true
      else
        texts[s.file] = text:sub(1, b + #begin_mark - 1) .. new .. text:sub(e)
        changed[s.file] = true
      end
    end
  end
end

if mode == "--write" then
  for _, file in ipairs(order) do
    if changed[file] then
      local f = assert(io.open(file, "wb"))
      f:write(texts[file])
      f:close()
      print("wrote " .. file)
    end
  end
end
if mode == "--check" and not failed then
  print(("gen-option-docs: %d option sections in step with their sources"):format(#SECTIONS))
end
os.exit(failed and 1 or 0)
