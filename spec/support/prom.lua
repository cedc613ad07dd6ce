-- A strict reader of the Prometheus text exposition format 0.0.4, as
-- mqlease.metrics.text, `mqlease run --metrics` and mqlease.ngx write it, for
-- the specs that check that text.
--
-- parse(text) raises, naming the line, on anything that is not one of:
--   # HELP <name> <text>          at most once per name
--   # TYPE <name> counter|gauge|histogram
--                                 once per name, before the family's samples
--   <name>[{<label>="<value>",...}] <value>
--                                 of the family whose TYPE came last (a
--                                 histogram's as <name>_bucket/_sum/_count);
--                                 label values escape only \\, \" and \n, no
--                                 label twice, no series twice; the value a
--                                 decimal number or +Inf
-- Blank lines, other comments, timestamps, -Inf and NaN are errors too: mqlease
-- writes none of them. Every histogram series must be whole: buckets with
-- increasing bounds and cumulative counts, ending in le="+Inf", whose count its
-- _count repeats, and a _sum.
--
-- It returns types (family name -> kind) and samples, in the text's order,
-- each { name =, labels = { name = unescaped value }, label_text = "{...}" as
-- written (or ""), value = number (+Inf as math.huge) }.
local prom = {}

local KINDS = { counter = true, gauge = true, histogram = true }
local NAME = "[%a_:][%w_:]*"
local UNESCAPE = { ["\\"] = "\\", ['"'] = '"', n = "\n" }

local function number(s)
  if s == "+Inf" then return math.huge end
  if s:match("^%-?%d+%.?%d*$") or s:match("^%-?%d+%.?%d*[eE][-+]?%d+$") then return tonumber(s) end
end

-- Reads the label set of line from its "{" at position i; returns the labels
-- and the position after the closing "}", or nil and why.
local function read_labels(line, i)
  local labels = {}
  i = i + 1
  while true do
    local name, after = line:match("^([%a_][%w_]*)=\"()", i)
    if not name then return nil, "a label that is not name=\"value\"" end
    if labels[name] then return nil, "label " .. name .. " twice" end
    local value = {}
    i = after
    while true do
      local c = line:sub(i, i)
      if c == "" then return nil, "an unclosed label value" end
      if c == '"' then break end
      if c == "\\" then
        c = UNESCAPE[line:sub(i + 1, i + 1)]
        if not c then return nil, "an escape other than \\\\, \\\" and \\n" end
        i = i + 1
      end
      value[#value + 1] = c
      i = i + 1
    end
    labels[name] = table.concat(value)
    local sep = line:sub(i + 1, i + 1)
    i = i + 2
    if sep == "}" then return labels, i end
    if sep ~= "," then return nil, "labels not separated by ','" end
  end
end

-- A label set, as one key (le included unless without_le).
local function series_key(labels, without_le)
  local parts = {}
  for k, v in pairs(labels) do
    if not (without_le and k == "le") then parts[#parts + 1] = ("%s=%q"):format(k, v) end
  end
  table.sort(parts)
  return table.concat(parts, ",")
end

-- Every series of every histogram family is whole (see the top).
local function check_histograms(types, samples)
  local series = {}
  for _, s in ipairs(samples) do
    if types[s.family] == "histogram" then
      local key = s.family .. "{" .. series_key(s.labels, true) .. "}"
      local h = series[key]
      if not h then
        h = { buckets = {} }
        series[key] = h
        series[#series + 1] = key
      end
      local suffix = s.name:sub(#s.family + 2)
      if suffix == "bucket" then
        local le = s.labels.le and number(s.labels.le)
        if not le then error(("prom: a bucket without a valid le: %s%s"):format(s.name, s.label_text), 0) end
        local last = h.buckets[#h.buckets]
        if last and not (le > last.le and s.value >= last.value) then
          error(("prom: buckets out of order or not cumulative at %s%s"):format(s.name, s.label_text), 0)
        end
        h.buckets[#h.buckets + 1] = { le = le, value = s.value }
      else
        if s.labels.le then error(("prom: le on %s%s"):format(s.name, s.label_text), 0) end
        h[suffix] = s.value
      end
    end
  end
  for _, key in ipairs(series) do
    local h = series[key]
    local last = h.buckets[#h.buckets]
    if not last or last.le ~= math.huge then error("prom: no le=\"+Inf\" bucket in " .. key, 0) end
    if h.count ~= last.value then
      error(("prom: %s: _count %s is not the +Inf bucket's %s"):format(key, tostring(h.count), last.value), 0)
    end
    if not h.sum then error("prom: no _sum in " .. key, 0) end
  end
end

function prom.parse(text)
  assert(type(text) == "string", "prom.parse: text must be a string")
  if text ~= "" and text:sub(-1) ~= "\n" then error("prom: the text does not end in a newline", 0) end
  local types, helps, samples, seen = {}, {}, {}, {}
  local current   -- the family whose TYPE came last
  local n = 0
  for line in text:gmatch("([^\n]*)\n") do
    n = n + 1
    local function bad(why)
      error(("prom: line %d, %s: %s"):format(n, why, line), 0)
    end
    if line == "" then
      bad("a blank line")
    elseif line:sub(1, 1) == "#" then
      local word, name, rest = line:match("^# (%u+) (" .. NAME .. ") (.+)$")
      if word == "HELP" then
        if helps[name] then bad("HELP twice for " .. name) end
        helps[name] = true
      elseif word == "TYPE" then
        if not KINDS[rest] then bad("not a counter, gauge or histogram") end
        if types[name] then bad("TYPE twice for " .. name) end
        types[name] = rest
        current = name
      else
        bad("not a HELP or TYPE line")
      end
    else
      local name, i = line:match("^(" .. NAME .. ")()")
      if not name then bad("not a sample line") end
      local labels, label_text = {}, ""
      if line:sub(i, i) == "{" then
        local got, after = read_labels(line, i)
        if not got then bad(after) end
        labels, label_text, i = got, line:sub(i, after - 1), after
      end
      local raw = line:match("^ (%S+)$", i)
      local value = raw and number(raw)
      if not value then bad("not a sample line (name, labels, one value)") end
      local family = name
      if types[name] == "histogram" then
        bad("a histogram's sample without _bucket, _sum or _count")
      elseif not types[name] then
        family = name:match("^(.*)_bucket$") or name:match("^(.*)_sum$") or name:match("^(.*)_count$")
        if not family or types[family] ~= "histogram" then bad("a sample without TYPE") end
      end
      if family ~= current then bad("a sample away from its family's TYPE") end
      if (labels.le ~= nil) ~= (name == family .. "_bucket") then
        bad("le on a sample that is not a bucket, or a bucket without le")
      end
      local series = name .. "{" .. series_key(labels) .. "}"
      if seen[series] then bad("a series given twice") end
      seen[series] = true
      samples[#samples + 1] = { name = name, family = family, labels = labels, label_text = label_text, value = value }
    end
  end
  check_histograms(types, samples)
  return types, samples
end

-- Whether sample s is of metric name and has the labels want: nil (any), a
-- table (these among its labels) or a string (its label text, exactly).
local function matches(s, name, want)
  if s.name ~= name then return false end
  if type(want) == "string" then return s.label_text == want end
  for k, v in pairs(want or {}) do
    if s.labels[k] ~= v then return false end
  end
  return true
end

-- The samples of metric name with the labels want, in order.
function prom.find(samples, name, want)
  local out = {}
  for _, s in ipairs(samples) do
    if matches(s, name, want) then out[#out + 1] = s end
  end
  return out
end

-- The value of the one sample of metric name with the labels want; nil when
-- there is none, an error when there are several.
function prom.value(samples, name, want)
  local found = prom.find(samples, name, want)
  if #found > 1 then error(("prom: %d samples of %s"):format(#found, name), 2) end
  return found[1] and found[1].value
end

return prom
