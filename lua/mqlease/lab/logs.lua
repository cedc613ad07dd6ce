-- mqlease.lab.logs: the worker logs (format in mqlease.lab.worker), parsed
-- into events and followed while the workers write them.
--
--   logs.parse(line) -> { kind = "start"|"end"|"metrics"|"push4x"|"ready"|"exit", ... } or nil
--   local f = logs.follower()
--   f:read(path, worker)      reads the complete lines added since the last call
--   f:open_count(worker), f:open_seqs(worker)   handlers running there now
--   f:effects(seq)            business runs of seq that ended ok, anywhere
--   f:dead_lettered(seq)      whether a worker dead-lettered it (max_attempts)
--   f:last_metric(worker, name), f:events(worker)

local tonumber, setmetatable, pairs, ipairs = tonumber, setmetatable, pairs, ipairs

local _M = {}

local METRICS = { "inflight", "renewals", "dlq", "redis", "skipped", "handoff", "expired" }
_M.METRICS = METRICS

-- A line the worker did not write whole (a garbled or cut line, a field that
-- is not a number) is nil, not an event with fields missing: the follower
-- and mqlease.lab.analyze index by seq and id and do arithmetic on t.
function _M.parse(line)
  local words = {}
  for w in line:gmatch("%S+") do words[#words + 1] = w end
  local kind = words[1]
  if kind == "start" then
    local seq, id, t, attempt = tonumber(words[2]), words[3], tonumber(words[4]), tonumber(words[5])
    if not (seq and id and t and attempt) then return nil end
    return { kind = kind, seq = seq, id = id, t = t, attempt = attempt }
  elseif kind == "end" then
    local seq, id, t, result = tonumber(words[2]), words[3], tonumber(words[4]), words[5]
    if not (seq and id and t) or (result ~= "ok" and result ~= "fail") then return nil end
    return { kind = kind, seq = seq, id = id, t = t, ok = result == "ok", attempt = tonumber(words[6]) or 1,
      why = words[7] }
  elseif kind == "metrics" then
    local e = { kind = kind, t = tonumber(words[2]) }
    if not e.t then return nil end
    for i, name in ipairs(METRICS) do e[name] = tonumber(words[i + 2]) or 0 end
    return e
  elseif kind == "dlq" then
    local seq, id, t = tonumber(words[2]), words[3], tonumber(words[4])
    if not (seq and id and t) then return nil end
    return { kind = kind, seq = seq, id = id, t = t, attempt = tonumber(words[5]), ok = words[6] == "ok" }
  elseif kind == "push4x" then
    local t, n = tonumber(words[2]), tonumber(words[3])
    if not (t and n) then return nil end
    return { kind = kind, t = t, n = n }
  elseif kind == "ready" or kind == "exit" then
    return { kind = kind }
  end
end

local follower = {}
follower.__index = follower

function _M.follower()
  return setmetatable({ pos = {}, state = {}, done = {}, dead = {} }, follower)
end

local function state_of(self, w)
  local st = self.state[w]
  if not st then
    st = { open = {}, nopen = 0, events = {}, metrics = nil }
    self.state[w] = st
  end
  return st
end

function follower:read(path, w)
  local f = io.open(path)
  if not f then return end
  local st = state_of(self, w)
  f:seek("set", self.pos[path] or 0)
  while true do
    local at = f:seek()
    local line = f:read("L")
    if not line then break end
    if line:sub(-1) ~= "\n" then f:seek("set", at); break end   -- half a line: next time
    local e = _M.parse(line)
    if e then
      st.events[#st.events + 1] = e
      if e.kind == "start" then
        if not st.open[e.id] then st.nopen = st.nopen + 1 end
        st.open[e.id] = e.seq
      elseif e.kind == "end" then
        if st.open[e.id] then st.nopen = st.nopen - 1 end
        st.open[e.id] = nil
        if e.ok then self.done[e.seq] = (self.done[e.seq] or 0) + 1 end
      elseif e.kind == "dlq" then
        self.dead[e.seq] = true
      elseif e.kind == "metrics" then
        st.metrics = e
      end
    end
  end
  self.pos[path] = f:seek()
  f:close()
end

function follower:open_count(w) return state_of(self, w).nopen end

function follower:open_seqs(w)
  local out = {}
  for _, seq in pairs(state_of(self, w).open) do out[#out + 1] = seq end
  table.sort(out)
  return out
end

function follower:effects(seq) return self.done[seq] end

-- Whether mqlease.run dead-lettered seq (max_attempts), anywhere.
function follower:dead_lettered(seq) return self.dead[seq] end

function follower:last_metric(w, name)
  local m = state_of(self, w).metrics
  return m and m[name] or 0
end

function follower:events(w) return state_of(self, w).events end

return _M
