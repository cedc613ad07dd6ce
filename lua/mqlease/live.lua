-- mqlease.live: the leases held right now, as the metrics servers show them
-- (`mqlease run --metrics` and mqlease.ngx): /leases as JSON, / as one small
-- HTML page that refreshes itself.
--
--   live.track(consumer, fn)            mqlease.run: fn(cap) -> messages, total, running
--   live.view(consumers [, opts])       -> view: the oldest leases and the key gauges
--   live.json(view)                     -> string, or nil, message (needs lua-cjson)
--   live.html(view)                     -> string
--
-- A request must not slow the consumer, so its work is bounded: at most
-- opts.cap (500) leases are listed, the oldest, and the view says how many
-- more are held. The oldest are found without asking the core about every
-- lease: the core numbers leases in the order they arrive
-- (src/lease/mql_lease.c), and mqlease.run starts handlers in the order
-- messages arrived, so its running messages are older than its queued ones;
-- a bounded heap picks the cap smallest lease ids among the running ones and
-- the queue is read from its head. Only the listed leases are then asked
-- for (client:lease: state, remaining, renewals, age, uncertain).
--
-- Everything a message brings (id, topic) is text from the broker, so the
-- page escapes it, the JSON escapes < > & as \u003c \u003e \u0026 (it stays
-- inert if pasted into a page), and the page's Content-Security-Policy
-- allows no script at all.

local lease_mod = require "mqlease.lease"
local message = require "mqlease.message"

local rawget, ipairs, pairs, pcall, tostring, type, error, setmetatable, assert =
  rawget, ipairs, pairs, pcall, tostring, type, error, setmetatable, assert
local floor, sort, concat, format = math.floor, table.sort, table.concat, string.format

local _M = {}

_M.CAP = 500         -- leases listed at most
_M.REFRESH = 2       -- seconds between two loads of the page

local trackers = setmetatable({}, { __mode = "k" })   -- consumer -> fn(cap)

-- While mqlease.run drives consumer, fn(cap) gives at most cap of its
-- messages, oldest first, how many it holds, and its set of running
-- messages (message -> true); fn is nil when the run ends.
function _M.track(consumer, fn)
  trackers[consumer] = fn
end

-- A message's lease id, without making the lease objects of a million
-- messages (see mqlease.lease); or a lease's own.
local function id_of(x)
  return message.lease_id(x) or rawget(x, "id")
end

-- The at most cap keys of set (its values when values) with the smallest
-- lease ids, oldest first: a max-heap of size cap, O(n log cap) for n entries.
local function smallest(set, cap, values)
  local heap, n = {}, 0
  local function up(i)
    while i > 1 do
      local p = floor(i / 2)
      if heap[p][1] >= heap[i][1] then return end
      heap[p], heap[i] = heap[i], heap[p]
      i = p
    end
  end
  local function down(i)
    while true do
      local l, r, big = 2 * i, 2 * i + 1, i
      if l <= n and heap[l][1] > heap[big][1] then big = l end
      if r <= n and heap[r][1] > heap[big][1] then big = r end
      if big == i then return end
      heap[big], heap[i] = heap[i], heap[big]
      i = big
    end
  end
  if cap <= 0 then return {} end
  for k, v in pairs(set) do
    local x = values and v or k
    local id = id_of(x)
    if id then
      if n < cap then
        n = n + 1
        heap[n] = { id, x }
        up(n)
      elseif id < heap[1][1] then
        heap[1] = { id, x }
        down(1)
      end
    end
  end
  sort(heap, function(a, b) return a[1] < b[1] end)
  local out = {}
  for i = 1, n do out[i] = heap[i][2] end
  return out
end
_M.smallest = smallest

-- mqlease.run's pick: running (message -> true) first, the oldest by lease
-- id, then the queue from its head (queue[head..tail], in arrival order).
-- A message whose ack is on its way is in neither and is not listed.
function _M.select(running, queue, head, tail, cap)
  local out = smallest(running, cap)
  local i = head
  while #out < cap and i <= tail do
    out[#out + 1] = queue[i]
    i = i + 1
  end
  return out
end

local function ms(v)
  return floor(v * 1000 + 0.5) / 1000
end

-- One entry of the view: what the core says of the lease now, and what the
-- message and its exactly-once lock add; nil once the core let go of it.
local function entry(c, lease, m, running)
  local client = lease_mod.router(lease).client
  if client:closed() then return nil end
  local state, remaining, renewals, age, uncertain = client:lease(rawget(lease, "id"))
  if not state then return nil end
  local e = {
    lease = rawget(lease, "id"), group = c.group, topic = c.topic,
    state = state, age = ms(age), remaining = ms(remaining > 0 and remaining or 0),
    renewals = renewals, uncertain = uncertain == true,
    fence = rawget(lease, "fence"), lock_owner = rawget(lease, "lock_owner"),
    -- the exactly-once lock could not be kept: another instance may run the message
    lock_lost = not lease_mod.lock_kept(lease) or nil,
  }
  if m then
    e.id, e.topic, e.delivery_attempt = m.id, m.topic or c.topic, m.delivery_attempt
    -- selected from the run: running, else still in its queue
    e.handler = running and (running[m] and "running" or "queued") or nil
  end
  return e
end

-- The leases of one consumer: entries (at most cap), how many it holds, and
-- a note when the list cannot say which message each lease is.
local function leases_of(c, cap)
  local out = {}
  if rawget(c, "_closed") then return out, 0 end   -- it gave every lease back
  local track = trackers[c]
  if track then
    local msgs, total, running = track(cap)
    for _, m in ipairs(msgs) do
      local e = entry(c, m.lease, m, running)
      if e then out[#out + 1] = e end
    end
    return out, total
  end
  -- a consumer without mqlease.run: the leases its router knows, without messages
  local router = c._router
  if not router or not router.leases then return out, 0, "this consumer tracks no leases" end
  local total = 0
  for _ in pairs(router.leases) do total = total + 1 end
  for _, m in ipairs(smallest(router.leases, cap, true)) do
    local lease = m.lease
    if not rawget(lease, "_final") then
      local e = entry(c, lease)
      if e then out[#out + 1] = e end
    end
  end
  if total < #out then total = #out end
  return out, total, "not under mqlease.run: leases are listed without their messages"
end

-- The handler histogram's quantile q, read as Prometheus' histogram_quantile
-- does: linear within the bucket it falls in, the highest bound past it.
local function quantile(h, q)
  if not h or not h.count or h.count == 0 then return nil end
  local rank, seen, lower = q * h.count, 0, 0
  for i, bound in ipairs(h.bounds) do
    local n = h.counts[i]
    if seen + n >= rank and n > 0 then
      return lower + (bound - lower) * (rank - seen) / n
    end
    seen = seen + n
    lower = bound
  end
  return h.bounds[#h.bounds]
end
_M.quantile = quantile

local function add_hist(into, h)
  if not h then return into end
  if not into then
    into = { bounds = h.bounds, counts = {}, count = 0 }
    for i = 1, #h.bounds + 1 do into.counts[i] = 0 end
  end
  for i = 1, #h.bounds + 1 do into.counts[i] = into.counts[i] + (h.counts[i] or 0) end
  into.count = into.count + (h.count or 0)
  return into
end

local function gauges_of(consumers)
  local g = { leases_held = 0, renewals_ok = 0, renewals_failed = 0, renewals_uncertain = 0, expired_while_alive = 0 }
  local hist
  for _, c in ipairs(consumers) do
    local ok, m = pcall(c.metrics, c)
    if ok and type(m) == "table" then
      g.leases_held = g.leases_held + (m.inflight or 0)
      g.renewals_ok = g.renewals_ok + (m.renew_success or 0)
      g.renewals_failed = g.renewals_failed + (m.renew_fail or 0)
      g.renewals_uncertain = g.renewals_uncertain + (m.renew_uncertain or 0)
      g.expired_while_alive = g.expired_while_alive + (m.expire_while_alive or 0)
      hist = add_hist(hist, m.handler)
    end
  end
  local p50, p99 = quantile(hist, 0.5), quantile(hist, 0.99)
  g.handler_p50 = p50 and ms(p50)
  g.handler_p99 = p99 and ms(p99)
  return g
end

-- The view of consumers (an array, or one consumer): the cap oldest leases
-- over all of them, how many more are held, the gauges. opts: cap, worker.
function _M.view(consumers, opts)
  opts = opts or {}
  local cap = opts.cap or _M.CAP
  if type(cap) ~= "number" or cap < 0 or cap ~= floor(cap) then
    error("mqlease.live.view: option 'cap' must be an integer from 0", 2)
  end
  if consumers.group ~= nil or consumers._router ~= nil then consumers = { consumers } end
  local all, total, notes = {}, 0, {}
  for _, c in ipairs(consumers) do
    local list, n, note = leases_of(c, cap)
    total = total + (n or 0)
    if note then notes[#notes + 1] = note end
    for _, e in ipairs(list) do all[#all + 1] = e end
  end
  sort(all, function(a, b) return a.age > b.age end)
  for i = cap + 1, #all do all[i] = nil end
  if total < #all then total = #all end
  local note = notes[1]
  if #consumers == 0 then note = "no consumer is running" end
  return {
    worker = opts.worker, cap = cap, total = total, listed = #all, more = total - #all,
    note = note, gauges = gauges_of(consumers), leases = all,
  }
end

-- ------------------------------------------------------------------ JSON

local FIELDS = { "id", "topic", "group", "lease", "state", "handler", "age", "remaining", "renewals",
  "uncertain", "delivery_attempt", "fence", "lock_owner" }
local GAUGES = { "leases_held", "renewals_ok", "renewals_failed", "renewals_uncertain", "expired_while_alive",
  "handler_p50", "handler_p99" }
_M.FIELDS, _M.GAUGES = FIELDS, GAUGES

local INERT = { ["<"] = "\\u003c", [">"] = "\\u003e", ["&"] = "\\u0026" }

local cjson
local function encoder()
  if cjson == nil then
    local ok, lib = pcall(require, "cjson.safe")
    cjson = ok and lib or false
  end
  return cjson or nil
end
function _M._set_encoder(lib) cjson = lib end   -- specs: cjson, or false for none

-- The view as JSON, or nil, message when lua-cjson is missing. The summary
-- keys come first in a fixed order, then the gauges, then the leases (one
-- encode for all of them: a row's keys come in cjson's order); an empty lease
-- list is written [], which lua-cjson 2.1.0 would write {}.
function _M.json(view)
  local json = encoder()
  if not json then
    return nil, "/leases needs the Lua package lua-cjson (luarocks install lua-cjson; Debian: apt-get install lua-cjson)"
  end
  local parts = {}
  for _, k in ipairs({ "worker", "cap", "total", "listed", "more", "note" }) do
    if view[k] ~= nil then parts[#parts + 1] = '"' .. k .. '":' .. assert(json.encode(view[k])) end
  end
  parts[#parts + 1] = '"gauges":' .. assert(json.encode(view.gauges))
  parts[#parts + 1] = '"leases":' .. (#view.leases > 0 and assert(json.encode(view.leases)) or "[]")
  return (("{" .. concat(parts, ",") .. "}"):gsub("[<>&]", INERT))
end

-- ------------------------------------------------------------------ HTML

local ENTITIES = { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;", ["'"] = "&#39;" }
local function esc(s)
  s = tostring(s)
  if not s:find("[&<>\"']") then return s end   -- most ids and topics: no copy
  return (s:gsub("[&<>\"']", ENTITIES))
end
_M.escape = esc

local function secs(v)
  if v == nil then return "-" end
  if v >= 100 then return format("%.0f s", v) end
  if v >= 1 then return format("%.1f s", v) end
  return format("%.0f ms", v * 1000)
end

local CSS = [[
body{font-family:system-ui,sans-serif;margin:20px;color:#222}
h1{font-size:20px;margin:0 0 12px}
.gauges{display:flex;flex-wrap:wrap;gap:10px;margin-bottom:14px}
.gauge{border:1px solid #ccc;border-radius:4px;padding:6px 12px;min-width:7em}
.gauge b{display:block;font-size:20px;font-variant-numeric:tabular-nums}
.gauge span{font-size:12px;color:#555}
table{border-collapse:collapse;font-size:13px}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:left}
th{background:#f3f3f3}
td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.id{font-family:ui-monospace,monospace;max-width:28em;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
td.owner{max-width:14em}
.bar{display:inline-block;height:8px;background:#2c6fbb;vertical-align:middle;margin-left:6px}
tr.uncertain td{background:#fff4e0}
p.note{color:#555}
]]

local HEADS = { "message id", "topic", "group", "handler", "state", "age", "remaining", "renewals",
  "uncertain", "attempt", "fence", "lock owner" }

local ROW = '<tr class="lease%s"><td class="id">%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td>'
  .. '<td class="n">%s</td><td class="n">%s<span class="bar" style="width:%dpx"></span></td>'
  .. '<td class="n">%s</td><td>%s</td><td class="n">%s</td><td class="n">%s</td>'
  .. '<td class="id owner" title="%s">%s</td></tr>'

-- The page: gauges, then one row per listed lease, oldest first.
function _M.html(view)
  local out = {}
  local function w(s) out[#out + 1] = s end
  local g = view.gauges or {}
  w('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">')
  -- no script may run, whatever a message id carries; styles only inline
  w([[<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">]])
  w(format('<meta http-equiv="refresh" content="%d">', _M.REFRESH))
  w("<title>mqlease: leases held</title><style>" .. CSS .. "</style></head><body>")
  w("<h1>mqlease: leases held" .. (view.worker and (" (worker " .. esc(view.worker) .. ")") or "") .. "</h1>")
  w('<div class="gauges">')
  local cards = {
    { "leases held", g.leases_held }, { "renewals ok", g.renewals_ok }, { "renewals failed", g.renewals_failed },
    { "renewals unanswered", g.renewals_uncertain }, { "expired while alive", g.expired_while_alive },
    { "handler p50", g.handler_p50 and secs(g.handler_p50) }, { "handler p99", g.handler_p99 and secs(g.handler_p99) },
  }
  for _, card in ipairs(cards) do
    w(format('<div class="gauge"><b>%s</b><span>%s</span></div>', esc(card[2] == nil and "-" or card[2]), esc(card[1])))
  end
  w("</div>")
  if view.note then w('<p class="note">' .. esc(view.note) .. "</p>") end
  w('<table id="leases"><thead><tr>')
  for _, h in ipairs(HEADS) do w("<th>" .. esc(h) .. "</th>") end
  w("</tr></thead><tbody>")
  local longest = 0
  for _, e in ipairs(view.leases) do if e.remaining > longest then longest = e.remaining end end
  for _, e in ipairs(view.leases) do
    local bar = longest > 0 and floor(60 * e.remaining / longest + 0.5) or 0
    local owner = e.lock_owner and esc(e.lock_owner) or ""
    if e.lock_lost then owner = "lost: " .. owner end
    -- a lock owner is long (client id/token): shortened, whole in its title
    w(format(ROW, e.uncertain and " uncertain" or "", esc(e.id or ("lease " .. tostring(e.lease))),
      esc(e.topic or ""), esc(e.group or ""), esc(e.handler or "-"), esc(e.state), secs(e.age), secs(e.remaining),
      bar, esc(e.renewals), e.uncertain and "yes" or "", esc(e.delivery_attempt or ""), esc(e.fence or ""),
      owner, owner))
  end
  w("</tbody></table>")
  if view.more > 0 then
    w(format('<p class="more">and %d more not listed (the %d oldest are)</p>', view.more, view.cap))
  elseif #view.leases == 0 then
    w('<p class="more">no lease is held right now</p>')
  end
  w('<p class="note">JSON: <a href="leases">leases</a>, Prometheus: <a href="metrics">metrics</a></p>')
  w("</body></html>\n")
  return concat(out, "\n")
end

return _M
