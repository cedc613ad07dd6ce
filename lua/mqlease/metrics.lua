-- mqlease.metrics: the Prometheus text exposition of a consumer's or producer's metrics.
--
--   mqlease.metrics.text(c)           -> string (text format 0.0.4)
--   mqlease.metrics.text({ c1, c2 })  -> one text for several clients
--   mqlease.metrics.merge(texts)      -> texts of this module, as one
--   c:metrics()                       -> the raw table (counters and histograms)

local core = require "mqlease.core"

local concat, format, sort = table.concat, string.format, table.sort
local ipairs, pairs, tostring, tonumber, pcall, error, setmetatable, select, type =
  ipairs, pairs, tostring, tonumber, pcall, error, setmetatable, select, type
local pack = table.pack or function(...) return { n = select("#", ...), ... } end   -- LuaJIT
local unpack = table.unpack or unpack   -- LuaJIT

local _M = {}

-- name, type, help, and how to read it from the raw table
local COUNTERS = {
  { "mqlease_messages_received_total", "Messages received (each is a new lease).", { { nil, "received" } } },
  { "mqlease_acks_total", "Acks by result.", { { 'result="ok"', "acks_ok" }, { 'result="fail"', "acks_fail" } } },
  { "mqlease_nacks_total", "Nacks (early releases) by result.", { { 'result="ok"', "nacks_ok" }, { 'result="fail"', "nacks_fail" } } },
  { "mqlease_lease_renew_total", "Lease renewals (ChangeInvisibleDuration) by result; uncertain = no reply came.",
    { { 'result="success"', "renew_success" }, { 'result="fail"', "renew_fail" }, { 'result="uncertain"', "renew_uncertain" } } },
  { "mqlease_lease_expire_while_alive_total", "Leases whose deadline passed while neither acked nor nacked.",
    { { nil, "expire_while_alive" } } },
  { "mqlease_lease_lost_total", "Leases lost, by reason.", { { 'reason="expired"', "lost_expired" }, { 'reason="rejected"', "lost_rejected" } } },
  { "mqlease_lease_budget_exhausted_total", "Leases whose renewal budget ran out, by the decision taken.",
    { { 'decision="expire"', "budget_expire" }, { 'decision="nack"', "budget_nack" } } },
  { "mqlease_lease_handoff_total", "Messages found locked by another live owner (take-over race).", { { nil, "handoff" } } },
  { "mqlease_leases_dropped_total", "Messages collected by Lua while their lease was held (never acked or nacked); nacked by the finalizer.",
    { { nil, "leases_dropped" } } },
  { "mqlease_lock_lost_total", "Redis locks lost while their handler ran (exactly-once policy): lease:alive() turned false.",
    { { nil, "lock_lost" } } },
  { "mqlease_redis_unavailable_total", "Messages the exactly-once policy could not lock because Redis did not answer.",
    { { nil, "redis_unavailable" } } },
  { "mqlease_duplicates_skipped_total", "Redeliveries of messages already done, acked without running.", { { nil, "duplicate_skipped" } } },
  { "mqlease_fifo_retries_total", "Ordered messages tried again in place after a failure, their lease kept (a nack would let the broker reorder their group).",
    { { nil, "fifo_retries" } } },
  { "mqlease_held_total", "Times a policy kept a message's lease and asked again later instead of nacking it (no delivery attempt spent), by reason.",
    { { 'reason="locked"', "deferred_held" }, { 'reason="redis_unavailable"', "fail_closed_held" } } },
  { "mqlease_defer_budget_spent_total", "Messages nacked after holding them for max_defer seconds (once per delivery).", { { nil, "defer_budget_spent" } } },
  { "mqlease_done_marker_failed_total", "Done markers (exactly-once FINISH) that failed at first; each is written again before the ack goes.",
    { { nil, "done_marker_failed" } } },
  { "mqlease_done_marker_retries_total", "Done markers written again after a failure, while the lease or the lock lived.",
    { { nil, "done_marker_retries" } } },
  { "mqlease_fifo_given_back_total", "Ordered messages given back unrun because an earlier message of their group ended unreleased and may come back.",
    { { nil, "fifo_given_back" } } },
  { "mqlease_release_retries_total", "Acks and dead letters made again by mqlease.run after a failure, while the lease lived.",
    { { nil, "release_retries" } } },
  { "mqlease_messages_sent_total", "Messages sent by result.", { { 'result="ok"', "sent_ok" }, { 'result="fail"', "sent_fail" } } },
  -- transactions (mqlease.transaction): the official clients count none of them
  { "mqlease_transactions_begun_total", "Transactions begun: half messages the proxy stored.", { { nil, "tx_begun" } } },
  { "mqlease_transactions_ended_total", "Transactions the producer ended itself (EndTransaction, source CLIENT), by resolution and result.",
    { { 'resolution="commit",result="ok"', "tx_commit_ok" }, { 'resolution="commit",result="fail"', "tx_commit_fail" },
      { 'resolution="rollback",result="ok"', "tx_rollback_ok" }, { 'resolution="rollback",result="fail"', "tx_rollback_fail" } } },
  { "mqlease_transaction_checks_received_total", "Checks of half messages left open the proxy sent (RecoverOrphanedTransactionCommand).",
    { { nil, "orphan_checks" } } },
  { "mqlease_transaction_checks_total", "Checks answered by producer:poll, by answer: the checker's commit, rollback or unknown; error (it raised or answered something else); already_ended (a transaction this producer just ended itself, not asked); resent (one it ended a while ago: its end sent again).",
    { { 'answer="commit"', "tx_check_commit" }, { 'answer="rollback"', "tx_check_rollback" },
      { 'answer="unknown"', "tx_check_unknown" }, { 'answer="error"', "tx_check_error" },
      { 'answer="already_ended"', "tx_check_already_ended" }, { 'answer="resent"', "tx_check_resent" } } },
  { "mqlease_transaction_check_ends_failed_total", "Checker answers whose EndTransaction (source SERVER_CHECK) failed; the broker asks again.",
    { { nil, "tx_check_end_fail" } } },
  { "mqlease_session_reconnects_total", "Times the session connected again: the next endpoint at start, Telemetry re-opened.",
    { { nil, "reconnects" } } },
  { "mqlease_releases_held_total", "Acks, nacks and dead letters held while the session moved to another proxy, sent once it had our settings (or after one request timeout, or when their lease could wait no longer).",
    { { nil, "releases_held" } } },
  { "mqlease_receives_held_total", "Receives held, unsent, while the renewals were behind (renewals first).",
    { { nil, "receives_held" } } },
  { "mqlease_receives_held_empty_total", "Held receives answered empty: no whole long poll fitted in what the receive promised any more.",
    { { nil, "receives_held_empty" } } },
  { "mqlease_events_dropped_total", "Core events Lua could not take (out of memory): skipped, their leases nacked, their waiters told INTERNAL.",
    { { nil, "events_dropped" } } },
}

-- counters by reason: the raw table holds { reason = n } under the key
local BY_REASON = {
  { "mqlease_messages_corrupted_total",
    "Messages whose digest or body failed (never handed to a handler), by reason.", "corrupted" },
  { "mqlease_messages_malformed_total",
    "ReceiveMessage frames that were no usable message (undecodable, no id/handle/topic, an id too long), by reason.", "malformed" },
  { "mqlease_messages_dead_lettered_total",
    "Messages forwarded to the group's dead-letter queue, by reason.", "dead_lettered" },
  { "mqlease_messages_given_back_total",
    "Messages past a receive's batch (over_batch) or byte budget (over_bytes), or on a FIFO group behind a corrupted or malformed one (behind_corrupted, behind_malformed), nacked at once.", "given_back" },
}

local SESSION_STATES = { "starting", "ready", "reconnecting", "failed", "closing" }

local HISTOGRAMS = {
  { "mqlease_renew_latency_seconds", "Time from sending a renewal to its reply.", "renew_latency" },
  { "mqlease_renew_lateness_seconds", "Time from a renewal's scheduled moment to its sending.", "renew_lateness" },
  { "mqlease_handler_seconds", "Time from receive to ack or nack.", "handler" },
}

local function num(v)
  if v == math.huge then return "+Inf" end
  if v == math.floor(v) and v < 1e15 then return format("%d", v) end
  -- the shortest form that reads back as the same number (0.1, not 0.10000000000000001)
  local short = format("%.15g", v)
  if tonumber(short) == v then return short end
  return format("%.17g", v)
end

local function escape(v)
  return (tostring(v):gsub("\\", "\\\\"):gsub("\n", "\\n"):gsub('"', '\\"'))
end

local function label(extra, base)
  if not extra and not base then return "" end
  if extra and base then return "{" .. base .. "," .. extra .. "}" end
  return "{" .. (extra or base) .. "}"
end

-- ------------------------------------------------ the official clients' names
--
-- The RocketMQ 5.x clients (rocketmq-clients, Java: metrics/HistogramEnum,
-- GaugeEnum, MetricLabels, InvocationStatus, MessageMeterInterceptor) export
-- these families through OpenTelemetry; they are rendered here beside
-- mqlease's own, with the same names, buckets (milliseconds, as there) and
-- labels, so a dashboard built for those clients reads mqlease unchanged.
--
--   rocketmq_send_cost_time     producer send round trip          topic, client_id, invocation_status
--   rocketmq_delivery_latency   message stored (or due) -> received topic, client_id, consumer_group
--   rocketmq_await_time         received -> handler starts         topic, client_id, consumer_group
--   rocketmq_process_time       the handler's run time             topic, client_id, consumer_group, invocation_status
--   rocketmq_consumer_cached_messages / _bytes (gauges)            topic, client_id, consumer_group
--
-- mqlease.run records the consumer's (receive, await, process), a producer's
-- send records its own; the recordings live here, per client object, in weak
-- tables that let a collected client go.

local OFFICIAL = {
  { name = "rocketmq_send_cost_time", help = "Cost time of message sends in milliseconds (as the RocketMQ 5 clients export it).",
    buckets = { 1, 5, 10, 20, 50, 200, 500 } },
  { name = "rocketmq_delivery_latency", help = "Milliseconds from a message's store time (its delivery time when later) to its receipt (as the RocketMQ 5 clients export it).",
    buckets = { 1, 5, 10, 20, 50, 200, 500 } },
  { name = "rocketmq_await_time", help = "Milliseconds from a message's receipt to the start of its handler (as the RocketMQ 5 clients export it).",
    buckets = { 1, 5, 20, 100, 1000, 5000, 10000 } },
  { name = "rocketmq_process_time", help = "Milliseconds a handler ran, by invocation_status (as the RocketMQ 5 clients export it).",
    buckets = { 1, 5, 10, 100, 1000, 10000, 60000 } },
}
local OFFICIAL_LABELS = { topic = true, consumer_group = true, client_id = true, invocation_status = true }
-- the labels of mqlease's own families (and le, every histogram's): a constant
-- label of one of these names would be written twice in a series, which
-- Prometheus refuses, and with it the whole scrape
local OWN_LABELS = { result = true, reason = true, decision = true, resolution = true, answer = true,
  state = true, op = true, code = true, le = true }
local BY_NAME = {}
for _, f in ipairs(OFFICIAL) do BY_NAME[f.name] = f end

local recorded = setmetatable({}, { __mode = "k" })   -- client object -> { [family] = { [labels] = hist } }
local received_at = setmetatable({}, { __mode = "k" }) -- message -> core.now() at its receipt
local holders = setmetatable({}, { __mode = "k" })    -- consumer -> fn() -> messages, bytes held (mqlease.run)

local ids = setmetatable({}, { __mode = "k" })        -- client object -> its client id

-- The id the proxy knows c by; remembered, since a closed client cannot say.
local function client_id(c)
  local id = ids[c]
  if id then return id end
  local ok, got = pcall(c.id, c)
  if not ok or type(got) ~= "string" then return "" end
  ids[c] = got
  return got
end

-- t[a][b], the inner table made on first use.
local function series_of(t, a, b)
  local outer = t[a]
  if not outer then
    outer = {}
    t[a] = outer
  end
  local inner = outer[b]
  if not inner then
    inner = {}
    outer[b] = inner
  end
  return inner
end

-- The histogram of family under the labels (an array of { name, value }
-- pairs, in the official order), made on first use.
local function histogram(c, family, labels)
  local f = BY_NAME[family]
  local series = series_of(recorded, c, family)
  local parts = {}
  for i, l in ipairs(labels) do parts[i] = format('%s="%s"', l[1], escape(l[2])) end
  local key = concat(parts, ",")
  local h = series[key]
  if not h then
    h = { count = 0, sum = 0, counts = {} }
    for i = 1, #f.buckets + 1 do h.counts[i] = 0 end
    series[key] = h
  end
  return h
end

local function add(h, family, ms)
  local buckets = BY_NAME[family].buckets
  local i = 1
  while buckets[i] and ms > buckets[i] do i = i + 1 end
  h.counts[i] = h.counts[i] + 1
  h.count = h.count + 1
  h.sum = h.sum + ms
end

-- Adds one observation of ms milliseconds to family, under the labels.
local function observe(c, family, labels, ms)
  add(histogram(c, family, labels), family, ms)
end

local function consumer_labels(c, topic, status)
  local labels = { { "topic", topic or c.topic or "" }, { "client_id", client_id(c) }, { "consumer_group", c.group or "" } }
  if status then labels[4] = { "invocation_status", status } end
  return labels
end

-- A consumer observes three families per message, under labels that differ
-- only by topic and status: each histogram is found again by those two raw
-- values, so the labels are built and escaped once per series, not three
-- times per message.
local by_raw = setmetatable({}, { __mode = "k" })   -- client object -> family -> raw key -> histogram
local function observe_consumer(c, family, topic, status, ms)
  topic = topic or c.topic or ""
  local series = series_of(by_raw, c, family)
  local raw = status and (topic .. "\0" .. status) or topic
  local h = series[raw]
  if not h then
    h = histogram(c, family, consumer_labels(c, topic, status))
    series[raw] = h
  end
  add(h, family, ms)
end

-- Messages just received by c: delivery latency now (the broker's wall clock
-- against ours: a negative difference is skew and is dropped, as the Java
-- client does), and the moment their await begins.
function _M.received(c, msgs)
  local now, wall = core.now(), core.wall()
  for _, m in ipairs(msgs) do
    received_at[m] = now
    -- each field read once: a message's fields are read through its __index
    local from, delivery = m.store_at or m.born_at, m.delivery_timestamp
    if delivery and (not from or delivery > from) then from = delivery end
    if from and wall >= from then
      observe_consumer(c, "rocketmq_delivery_latency", m.topic, nil, (wall - from) * 1000)
    end
  end
end

-- handler(m, lease, ...) wrapped to record await_time when it starts and
-- process_time (success: it returned a true value) when it ends or raises.
function _M.timed(c, handler)
  return function(m, ...)
    local start, topic = core.now(), m.topic
    local at = received_at[m]
    if at then
      received_at[m] = nil
      observe_consumer(c, "rocketmq_await_time", topic, nil, (start - at) * 1000)
    end
    local r = pack(pcall(handler, m, ...))
    local ms = (core.now() - start) * 1000
    observe_consumer(c, "rocketmq_process_time", topic, (r[1] and r[2]) and "success" or "failure", ms)
    if not r[1] then error(r[2], 0) end
    return unpack(r, 2, r.n)
  end
end

-- A send of producer p to topic took ms milliseconds; ok: it succeeded.
function _M.sent(p, topic, ms, ok)
  observe(p, "rocketmq_send_cost_time",
    { { "topic", topic }, { "client_id", client_id(p) }, { "invocation_status", ok and "success" or "failure" } }, ms)
end

-- While mqlease.run drives c, fn() says how many messages it holds and their
-- body bytes (the cached messages of the official push consumer); nil when
-- the run ends: it closed c, which holds nothing any more.
local function nothing() return 0, 0 end
function _M.holding(c, fn)
  holders[c] = fn or nothing
end

-- The official families of c, after mqlease's own.
local function official_text(c, m, base, line)
  local families = recorded[c] or {}
  local consumer = c.group ~= nil
  for _, f in ipairs(OFFICIAL) do
    local series = families[f.name]
    if series or (consumer == (f.name ~= "rocketmq_send_cost_time")) then
      line(format("# HELP %s %s", f.name, f.help))
      line(format("# TYPE %s histogram", f.name))
      local keys = {}
      for key in pairs(series or {}) do keys[#keys + 1] = key end
      sort(keys)
      for _, key in ipairs(keys) do
        local h = series[key]
        local labels = base and (base .. "," .. key) or key
        local cumulative = 0
        for i, bound in ipairs(f.buckets) do
          cumulative = cumulative + h.counts[i]
          -- bounds as the OpenTelemetry exporters print them (1.0, not 1)
          line(format('%s_bucket{%s,le="%.1f"} %s', f.name, labels, bound, num(cumulative)))
        end
        line(format('%s_bucket{%s,le="+Inf"} %s', f.name, labels, num(h.count)))
        line(format("%s_sum{%s} %s", f.name, labels, num(h.sum)))
        line(format("%s_count{%s} %s", f.name, labels, num(h.count)))
      end
    end
  end
  if consumer then
    local held, bytes
    local holder = holders[c]
    if holder then held, bytes = holder() else held = m.inflight or 0 end
    local labels = format('topic="%s",client_id="%s",consumer_group="%s"',
      escape(c.topic or ""), escape(client_id(c)), escape(c.group))
    if base then labels = base .. "," .. labels end
    line("# HELP rocketmq_consumer_cached_messages Messages received and not yet acked or nacked (leases held), as the RocketMQ 5 clients export it.")
    line("# TYPE rocketmq_consumer_cached_messages gauge")
    line(format("rocketmq_consumer_cached_messages{%s} %s", labels, num(held)))
    if bytes then
      line("# HELP rocketmq_consumer_cached_bytes Body bytes of the messages mqlease.run holds, as the RocketMQ 5 clients export it.")
      line("# TYPE rocketmq_consumer_cached_bytes gauge")
      line(format("rocketmq_consumer_cached_bytes{%s} %s", labels, num(bytes)))
    end
  end
end

-- ------------------------------------------------ one series per label set
--
-- The text format writes each series (a metric name and its label set) once:
-- "Each line must have a unique combination of a metric name and labels.
-- Otherwise, the ingestion behavior is undefined" (Prometheus, "Exposition
-- formats", text format details). Clients carry no label of their own (one
-- would change every user's series), so two of them can write the same
-- series: two consumers of one group and topic in an nginx worker (mqlease.ngx
-- labels group, topic and worker), or any clients given the same constant
-- labels. Such a series is written once, its values combined: counters and
-- histograms (each bucket, _sum and _count) added, as a sum() over a label
-- telling the clients apart would; a gauge by its rule below.

-- How the samples of a gauge combine: "sum" for a count (what is held; the
-- sessions in a state), "max" for what is no count (a setting, a flag, an age).
-- docs/metrics.md names each; a gauge not listed here is taken at its maximum.
local GAUGES = {
  mqlease_inflight_leases = "sum",
  mqlease_session_state = "sum",
  rocketmq_consumer_cached_messages = "sum",
  rocketmq_consumer_cached_bytes = "sum",
  mqlease_invisible_seconds = "max",
  mqlease_renew_queue_age_seconds = "max",
  mqlease_renew_queue_age_max_seconds = "max",
  mqlease_retry_max_attempts = "max",
  mqlease_fifo = "max",
}
_M.GAUGES = GAUGES

local function sample_value(v)
  if v == "+Inf" then return math.huge end
  return tonumber(v)
end

-- An exposition being written from lines of this module's text: each family
-- once (its HELP and TYPE, from the first text that has them), each series
-- once, in the order first met. line(s) takes one line; text() the result.
local function exposition()
  local order, families = {}, {}
  local current   -- the family whose HELP or TYPE came last
  local function family(name)
    local f = families[name]
    if not f then
      f = { series = {}, values = {}, rule = "max" }
      families[name] = f
      order[#order + 1] = name
    end
    return f
  end
  local out = {}
  function out.line(s)
    local word, name, rest = s:match("^# (%u+) (%S+) ?(.*)$")
    if word == "HELP" then
      current = family(name)
      current.help = current.help or s
    elseif word == "TYPE" then
      current = family(name)
      if not current.type then
        current.type = s
        current.rule = (rest == "counter" or rest == "histogram") and "sum" or GAUGES[name] or "max"
      end
    elseif s:sub(1, 1) ~= "#" and current then
      local series, raw = s:match("^(.*) (%S+)$")
      if not series then return end
      local v, values = sample_value(raw), current.values
      local had = values[series]
      if had == nil then
        current.series[#current.series + 1] = series
        values[series] = v or raw
      elseif v and type(had) == "number" then
        if current.rule == "sum" then values[series] = had + v
        elseif v > had then values[series] = v end
      end
    end
  end
  function out.text()
    local lines = {}
    for _, name in ipairs(order) do
      local f = families[name]
      if f.help then lines[#lines + 1] = f.help end
      if f.type then lines[#lines + 1] = f.type end
      for _, series in ipairs(f.series) do
        local v = f.values[series]
        lines[#lines + 1] = series .. " " .. (type(v) == "number" and num(v) or v)
      end
    end
    return #lines > 0 and concat(lines, "\n") .. "\n" or ""
  end
  return out
end

-- Exposition texts of this module (of several processes, say) as one: each
-- family once, each series once, combined as above.
function _M.merge(texts)
  local out = exposition()
  for _, text in ipairs(texts) do
    for s in text:gmatch("[^\n]+") do out.line(s) end
  end
  return out.text()
end

-- The samples of client c, each given to line().
local function render(c, base, official_base, line)
  local m = c:metrics()
  for _, c_ in ipairs(COUNTERS) do
    line(format("# HELP %s %s", c_[1], c_[2]))
    line(format("# TYPE %s counter", c_[1]))
    for _, series in ipairs(c_[3]) do
      line(format("%s%s %s", c_[1], label(series[1], base), num(m[series[2]] or 0)))
    end
  end
  line("# HELP mqlease_inflight_leases Leases held right now.")
  line("# TYPE mqlease_inflight_leases gauge")
  line(format("mqlease_inflight_leases%s %s", label(nil, base), num(m.inflight or 0)))
  if m.invisible_seconds then
    line("# HELP mqlease_invisible_seconds The invisible duration the next receive and renewal ask for (moves with invisible = \"auto\").")
    line("# TYPE mqlease_invisible_seconds gauge")
    line(format("mqlease_invisible_seconds%s %s", label(nil, base), num(m.invisible_seconds)))
  end
  if m.renew_queue_age_seconds then
    line("# HELP mqlease_renew_queue_age_seconds Age of the oldest renewal due and not yet sent, at the renewal thread's last pass.")
    line("# TYPE mqlease_renew_queue_age_seconds gauge")
    line(format("mqlease_renew_queue_age_seconds%s %s", label(nil, base), num(m.renew_queue_age_seconds)))
    line("# HELP mqlease_renew_queue_age_max_seconds The most that age has been.")
    line("# TYPE mqlease_renew_queue_age_max_seconds gauge")
    line(format("mqlease_renew_queue_age_max_seconds%s %s", label(nil, base), num(m.renew_queue_age_max_seconds)))
  end
  if m.retry_policy then
    line("# HELP mqlease_retry_max_attempts Delivery attempts the group's retry policy allows (the server's Settings: retryMaxTimes + 1).")
    line("# TYPE mqlease_retry_max_attempts gauge")
    line(format("mqlease_retry_max_attempts%s %s", label(nil, base), num(m.retry_policy.max_attempts)))
  end
  if m.retry_policy then   -- a consumer's Settings (a producer's carry no group)
    line("# HELP mqlease_fifo 1 when the server's Settings say the group consumes in order (an orderly group).")
    line("# TYPE mqlease_fifo gauge")
    line(format("mqlease_fifo%s %d", label(nil, base), m.fifo and 1 or 0))
  end
  line("# HELP mqlease_session_state The session's state: 1 for the one it is in.")
  line("# TYPE mqlease_session_state gauge")
  for _, st in ipairs(SESSION_STATES) do
    line(format('mqlease_session_state%s %d', label(format('state="%s"', st), base), m.session_state == st and 1 or 0))
  end
  line("# HELP mqlease_errors_total Failed operations by operation and code.")
  line("# TYPE mqlease_errors_total counter")
  for _, e in ipairs(m.errors or {}) do
    line(format('mqlease_errors_total%s %s', label(format('op="%s",code="%s"', escape(e.op), escape(e.code)), base), num(e.n)))
  end
  for _, r in ipairs(BY_REASON) do
    line(format("# HELP %s %s", r[1], r[2]))
    line(format("# TYPE %s counter", r[1]))
    local reasons = {}
    for reason in pairs(m[r[3]] or {}) do reasons[#reasons + 1] = reason end
    table.sort(reasons)
    for _, reason in ipairs(reasons) do
      line(format('%s%s %s', r[1], label(format('reason="%s"', escape(reason)), base), num(m[r[3]][reason])))
    end
  end
  for _, h in ipairs(HISTOGRAMS) do
    local hist = m[h[3]]
    line(format("# HELP %s %s", h[1], h[2]))
    line(format("# TYPE %s histogram", h[1]))
    if hist then
      local cumulative = 0
      for i, bound in ipairs(hist.bounds) do
        cumulative = cumulative + hist.counts[i]
        line(format('%s_bucket%s %s', h[1], label(format('le="%s"', num(bound)), base), num(cumulative)))
      end
      cumulative = cumulative + hist.counts[#hist.bounds + 1]
      line(format('%s_bucket%s %s', h[1], label('le="+Inf"', base), num(cumulative)))
      line(format("%s_sum%s %s", h[1], label(nil, base), num(hist.sum)))
      line(format("%s_count%s %s", h[1], label(nil, base), num(hist.count)))
    end
  end
  official_text(c, m, official_base, line)
end

-- text(c [, labels]): c a client, or an array of clients written as one
-- exposition (the series they share written once, combined as above); labels
-- an optional table of constant labels.
function _M.text(c, labels)
  local base, official_base
  if labels then
    -- the official families carry topic, consumer_group, ... themselves: a
    -- constant label of one of those names is left out there, never doubled
    local parts, official = {}, {}
    for k, v in pairs(labels) do
      -- names beginning with "__" are Prometheus' own (__name__ is the metric
      -- name: a series would carry it twice), as the official client
      -- libraries refuse them (https://prometheus.io/docs/concepts/data_model/)
      if type(k) ~= "string" or not k:match("^[%a_][%w_]*$") or k:sub(1, 2) == "__" or OWN_LABELS[k] then
        error(("mqlease.metrics.text: %s is no constant label name (letters, digits and '_', not a "
          .. "digit first, not '__' first, none of result, reason, decision, resolution, answer, state, op, code, le)")
          :format(type(k) == "string" and ("%q"):format(k) or tostring(k)), 2)
      end
      local part = format('%s="%s"', k, escape(v))
      parts[#parts + 1] = part
      if not OFFICIAL_LABELS[k] then official[#official + 1] = part end
    end
    table.sort(parts)
    table.sort(official)
    -- an empty table is no label: "" would be written as "{,result=...}"
    if #parts > 0 then base = concat(parts, ",") end
    if #official > 0 then official_base = concat(official, ",") end
  end
  local out = exposition()
  if type(c) == "table" and c.metrics == nil then
    for i, each in ipairs(c) do
      if type(each) ~= "table" or each.metrics == nil then
        error(("mqlease.metrics.text: clients[%d] is no consumer or producer"):format(i), 2)
      end
      render(each, base, official_base, out.line)
    end
  elseif type(c) == "table" then
    render(c, base, official_base, out.line)
  else
    error(("mqlease.metrics.text: a consumer or producer, or an array of them, expected (got %s)"):format(type(c)), 2)
  end
  return out.text()
end

return _M
