-- mqlease.lab.analyze: what a scenario run did, from the experiment's raw record
-- (mqlease.lab.experiment) -- the report's figures and the series of its plots.
-- Pure: no processes, no files, so it is tested with made-up logs.
--
-- Times in the raw record are mqlease.now() seconds (t0, faults, sent) and
-- milliseconds (log events); everything returned is in scenario seconds.
--
--   analyze.report(raw) -> { sent =, runs =, duplicates =, lost =, ... }   (FIELDS lists them)
--   analyze.series(raw, buckets) -> { t = {...}, leases = {...}, completions = {...},
--                                     duplicates = {...}, renewals = {...}, faults = { {t=, label=} } }

local floor, max, huge = math.floor, math.max, math.huge
local ipairs, pairs = ipairs, pairs
local sort = table.sort

local _M = {}

-- The report's rows: key, label, format (nil: an integer).
_M.FIELDS = {
  { "sent", "messages sent" },
  { "runs", "business runs (handler succeeded)" },
  { "duplicates", "duplicate business runs" },
  { "lost", "lost (never succeeded, not running, not dead-lettered)" },
  { "unfinished", "still running at the end" },
  { "held_at_end", "leases held at the end" },
  { "poison", "poison messages sent" },
  { "dead_lettered", "dead-lettered (max_attempts)" },
  { "failed_runs", "failed runs (retried)" },
  { "caught", "redeliveries caught by the policy" },
  { "retry_copies", "retry copies sent on SIGTERM (push4x)" },
  { "orphans", "messages taken from killed/stopped workers" },
  { "recovery_p50", "their recovery p50 (s)", "%.1f" },
  { "recovery_max", "their recovery max (s)", "%.1f" },
  { "latency_p50", "latency send->done p50 (s)", "%.1f" },
  { "latency_p99", "latency send->done p99 (s)", "%.1f" },
  { "renewals", "lease renewals" },
  { "expired_while_alive", "leases expired while their handler ran" },
  { "redis_calls", "Redis calls" },
}

-- The p-th quantile (0..1) of a list (sorted here), nearest rank; nil when empty.
function _M.quantile(v, p)
  if #v == 0 then return nil end
  sort(v)
  local rank = math.ceil(p * #v)
  if rank < 1 then rank = 1 end
  return v[rank]
end

local function last_metrics(events)
  local m
  for _, e in ipairs(events) do
    if e.kind == "metrics" then m = e end
  end
  return m
end

-- is_lab(seq): whether seq is one of the lab's messages: sent, or numbered
-- for a send that failed (a timeout, a frozen proxy) and may have reached the
-- broker all the same. Not a foreign body's -1 (another producer's message on
-- --topic).
local function lab_seqs(raw)
  local top = raw.nsent or 0
  for seq in pairs(raw.sent) do if seq > top then top = seq end end
  return function(seq) return seq >= 1 and seq <= top end
end

function _M.report(raw)
  local k = raw.scenario.time_scale
  local t0 = raw.t0
  local r = { sent = 0, runs = 0, duplicates = 0, lost = 0, unfinished = 0, dead_lettered = 0, failed_runs = 0,
    caught = 0, retry_copies = 0, orphans = 0, renewals = 0, expired_while_alive = 0, redis_calls = 0,
    send_failed = raw.send_failed or 0 }
  local ok_count, first_ok, open_at_end, poison, dead = {}, {}, {}, 0, {}
  local starts = {}   -- every start: { t (s), seq, w }
  for _, w in ipairs(raw.incarnations) do
    local open = {}
    for _, e in ipairs(w.events) do
      if e.kind == "start" then
        open[e.id] = e.seq
        starts[#starts + 1] = { t = e.t / 1000, seq = e.seq, w = w }
      elseif e.kind == "end" then
        open[e.id] = nil
        if e.ok then
          r.runs = r.runs + 1
          ok_count[e.seq] = (ok_count[e.seq] or 0) + 1
          if not first_ok[e.seq] or e.t < first_ok[e.seq] then first_ok[e.seq] = e.t end
        else
          r.failed_runs = r.failed_runs + 1
        end
      elseif e.kind == "dlq" then
        dead[e.seq] = true
      elseif e.kind == "push4x" then
        r.retry_copies = r.retry_copies + e.n
      end
    end
    -- open when the lab stopped it (a worker killed by a fault abandoned its runs)
    if not w.signalled then
      for _, seq in pairs(open) do open_at_end[seq] = true end
    end
    local m = last_metrics(w.events)
    if m then
      r.renewals = r.renewals + m.renewals
      r.redis_calls = r.redis_calls + m.redis
      r.caught = r.caught + m.skipped + m.handoff
      r.expired_while_alive = r.expired_while_alive + m.expired
    end
  end
  -- leases held when the lab stopped waiting: nothing should be left unless
  -- a handler still runs, or a lease outlived its release (stuck)
  r.held_at_end = 0
  local t_held = raw.t_held or raw.t_end
  for _, w in ipairs(raw.incarnations) do
    if not w.died or w.died >= t_held then
      local held
      for _, e in ipairs(w.events) do
        if e.kind == "metrics" and e.t / 1000 <= t_held then held = e.inflight end
      end
      r.held_at_end = r.held_at_end + (held or 0)
    end
  end
  local latency = {}
  for seq, m in pairs(raw.sent) do
    r.sent = r.sent + 1
    if m.poison then poison = poison + 1 end
    local n = ok_count[seq] or 0
    if n > 1 then r.duplicates = r.duplicates + n - 1 end
    if dead[seq] then r.dead_lettered = r.dead_lettered + 1 end
    if n == 0 and not dead[seq] then
      if open_at_end[seq] then r.unfinished = r.unfinished + 1 else r.lost = r.lost + 1 end
    end
    if first_ok[seq] then latency[#latency + 1] = (first_ok[seq] / 1000 - m.t) / k end
  end
  -- a failed send that reached the broker runs as the others do: its runs
  -- beyond the first are duplicates (the plot counts them too)
  local is_lab = lab_seqs(raw)
  for seq, n in pairs(ok_count) do
    if n > 1 and not raw.sent[seq] and is_lab(seq) then r.duplicates = r.duplicates + n - 1 end
  end
  r.poison = poison
  r.latency_p50 = _M.quantile(latency, 0.5)
  r.latency_p99 = _M.quantile(latency, 0.99)

  -- recovery: from a kill or term to the next start of each message it was running, elsewhere or later
  sort(starts, function(a, b) return a.t < b.t end)
  -- the runs a signalled worker still finished itself (a drain) were not taken from it
  local finished_by = {}
  for _, w in ipairs(raw.incarnations) do
    local done = {}
    for _, e in ipairs(w.events) do
      if e.kind == "end" and e.ok then done[e.seq] = e.t / 1000 end
    end
    finished_by[w] = done
  end
  local rec, never = {}, 0
  for _, f in ipairs(raw.faults) do
    if f.open and f.worker then
      for _, seq in ipairs(f.open) do
        local own = finished_by[f.worker][seq]
        if own and own >= f.t then goto continue end
        r.orphans = r.orphans + 1
        local found
        for _, s in ipairs(starts) do
          if s.seq == seq and s.t >= f.t and s.w ~= f.worker then found = s.t; break end
        end
        if found then rec[#rec + 1] = (found - f.t) / k else never = never + 1 end
        ::continue::
      end
    end
  end
  r.never_rerun = never
  local rmax
  for _, v in ipairs(rec) do rmax = max(rmax or 0, v) end
  r.recovery_p50 = _M.quantile(rec, 0.5)
  r.recovery_max = rmax
  r.span = (raw.t_end - t0) / k
  r.sending = (raw.t_sent - t0) / k
  return r
end

-- The time (s) of the last thing that happened: the end of the wait, or a
-- run that finished while the workers stopped.
function _M.last_event(raw)
  local last = raw.t_end
  for _, w in ipairs(raw.incarnations) do
    for _, e in ipairs(w.events) do
      if e.t and e.t / 1000 > last then last = e.t / 1000 end
    end
  end
  return last
end

function _M.series(raw, buckets)
  buckets = buckets or 60
  local k = raw.scenario.time_scale
  local t0 = raw.t0
  local span = max(_M.last_event(raw) - t0, 1e-3)
  local width = span / buckets                     -- real seconds
  local out = { t = {}, leases = {}, completions = {}, duplicates = {}, renewals = {}, faults = {},
    width = width / k }
  for i = 1, buckets do
    out.t[i] = (i - 0.5) * width / k
    out.leases[i], out.completions[i], out.duplicates[i], out.renewals[i] = 0, 0, 0, 0
  end
  local function bucket(t)   -- t in real seconds
    local i = floor((t - t0) / width) + 1
    if i < 1 or i > buckets then return nil end
    return i
  end
  local oks = {}
  for _, w in ipairs(raw.incarnations) do
    local metrics = {}
    for _, e in ipairs(w.events) do
      if e.kind == "metrics" then metrics[#metrics + 1] = e
      elseif e.kind == "end" and e.ok then oks[#oks + 1] = e end
    end
    -- leases held: the incarnation's last reading at each bucket's middle, while it lives
    local j, prev = 1, nil
    for i = 1, buckets do
      local tc = t0 + (i - 0.5) * width
      while metrics[j] and metrics[j].t / 1000 <= tc do prev = metrics[j]; j = j + 1 end
      local died = w.died or huge
      if prev and tc < died then out.leases[i] = out.leases[i] + prev.inflight end
    end
    -- renewals per second: each reading's increase, in the bucket where it was read
    local last = 0
    for _, m in ipairs(metrics) do
      local i = bucket(m.t / 1000)
      if i then out.renewals[i] = out.renewals[i] + (m.renewals - last) / (width / k) end
      last = m.renewals
    end
  end
  sort(oks, function(a, b) return a.t < b.t end)
  local seen, dup, is_lab = {}, {}, lab_seqs(raw)
  for _, e in ipairs(oks) do
    local i = bucket(e.t / 1000)
    if i then out.completions[i] = out.completions[i] + 1 / (width / k) end
    if seen[e.seq] and is_lab(e.seq) then   -- as analyze.report counts them
      local b = i or (e.t / 1000 < t0 and 1 or buckets)
      dup[b] = (dup[b] or 0) + 1
    end
    seen[e.seq] = true
  end
  local total = 0
  for i = 1, buckets do
    total = total + (dup[i] or 0)
    out.duplicates[i] = total
  end
  for _, f in ipairs(raw.faults) do
    out.faults[#out.faults + 1] = { t = (f.t - t0) / k, label = f.label }
  end
  out.span = span / k
  return out
end

return _M
