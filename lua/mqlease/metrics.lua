-- mqlease.metrics: the Prometheus text exposition of a consumer's or producer's metrics.
--
--   mqlease.metrics.text(c)  -> string (text format 0.0.4)
--   c:metrics()              -> the raw table (counters and histograms)

local concat, format = table.concat, string.format
local ipairs, pairs, tostring = ipairs, pairs, tostring

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
  { "mqlease_defer_budget_spent_total", "Messages nacked after holding them for max_defer seconds.", { { nil, "defer_budget_spent" } } },
  { "mqlease_messages_sent_total", "Messages sent by result.", { { 'result="ok"', "sent_ok" }, { 'result="fail"', "sent_fail" } } },
  { "mqlease_session_reconnects_total", "Times the session connected again: the next endpoint at start, Telemetry re-opened.",
    { { nil, "reconnects" } } },
}

-- counters by reason: the raw table holds { reason = n } under the key
local BY_REASON = {
  { "mqlease_messages_corrupted_total",
    "Messages whose digest or body failed (never handed to a handler), by reason.", "corrupted" },
  { "mqlease_messages_malformed_total",
    "ReceiveMessage frames that were no usable message (undecodable, no id/handle/topic), by reason.", "malformed" },
  { "mqlease_messages_dead_lettered_total",
    "Messages forwarded to the group's dead-letter queue, by reason.", "dead_lettered" },
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

-- text(c [, labels]) where labels is an optional table of constant labels.
function _M.text(c, labels)
  local m = c:metrics()
  local base
  if labels then
    local parts = {}
    for k, v in pairs(labels) do parts[#parts + 1] = format('%s="%s"', k, escape(v)) end
    table.sort(parts)
    base = concat(parts, ",")
  end
  local out = {}
  local function line(s) out[#out + 1] = s end
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
  return concat(out, "\n") .. "\n"
end

return _M
