-- mqlease.launch: starts and stops the servers that the lab, the demo, the
-- bench, the soak and the specs run against on loopback -- mqlease-devbroker
-- and a redis-server -- so each is started one way, in one place.
--
--   local launch = require "mqlease.launch"
--   local dv = assert(launch.devbroker { topics = { "tasks" }, flags = { "--min-invisible-ms", "1000" } })
--   dv.endpoints, dv.pid, dv.control_port, dv.control("set paused 1") -> "ok ..." (nil: no answer in 5 s)
--   dv.alive(), dv.stop() -> whether it exited on SIGTERM (else it was killed)
--   local r = assert(launch.redis { dir = "/tmp/x" })   -- r.address, r.port, r.pid, r.alive(), r.stop()
--   launch.redis_start { port = 16379, run = "/tmp/r" } -> r (r.reused: it was up already), or nil, message
--   launch.redis_stop { port = 16379, run = "/tmp/r" } -> what it did, or nil, message
--     (a redis-server that outlives the process that started it, as the specs share one:
--     spec/support/redis.sh is their shell entry)
--   launch.devbroker_path(root) -> the program's path, or nil, message
--
-- Each server runs in the background with its output in a file, on a port the
-- kernel picks (the dev broker: it prints the ports it got) or a free random
-- one (redis-server: it cannot say), and is stopped with SIGTERM, then SIGKILL
-- after a few seconds, so a wedged server never outlives what started it.
-- It is a child of this process (core.spawn) killed with SIGKILL when this
-- process ends in any way, a SIGKILL included; only a server started with
-- opts.detached outlives it (the kept Redis of redis_start, on the port it is
-- given, which a later process stops; bench/servers.lua's).
--   launch.spawn(cmd, out, { detached = }) -> pid, or nil, message
-- Waiting uses mqlease.sleep: it yields inside mqlease.run and blocks outside.
-- A wrong option raises; a server that does not start returns nil, message.

local mqlease = require "mqlease"
local core = require "mqlease.core"

local now, sleep = mqlease.now, mqlease.sleep
local ipairs, tostring, tonumber, type, error = ipairs, tostring, tonumber, type, error
local random = math.random

local _M = {}

local function shell_quote(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end
_M.shell_quote = shell_quote

local function sh(cmd)
  local p = assert(io.popen(cmd))
  local out = p:read("a")
  p:close()
  return out
end

local function read_file(path)
  local f = io.open(path)
  if not f then return nil end
  local text = f:read("a")
  f:close()
  return text
end
_M.read_file = read_file   -- the whole text of a file, or nil

-- The last n lines of text.
local function tail(text, n)
  local lines = {}
  for line in text:gmatch("[^\n]+") do lines[#lines + 1] = line end
  return table.concat(lines, "\n", math.max(1, #lines - n + 1))
end

-- The children spawn started and did not detach: pid -> true while it may
-- run, "ended" once reaped. A reaped child's pid may be given to another
-- process: it is never looked at, nor signalled, again.
local children = {}

-- Whether pid runs (a zombie does not); false for nil. A child of ours that
-- ended is reaped here.
function _M.alive(pid)
  if not pid then return false end
  local ours = children[pid]
  if ours == "ended" then return false end
  if ours then
    local how = core.reap(pid)
    if how == false then return true end
    children[pid] = "ended"   -- it ended (reaped now), or another reaped it
    return false
  end
  local text = read_file("/proc/" .. tostring(pid) .. "/stat")
  if not text then return false end
  -- the state follows the name's closing parenthesis, the last one of the
  -- line (proc(5)): the name itself may hold ") " or "(" unbalanced
  local state = text:match("^.*%) (%a)")
  return state ~= nil and state ~= "Z"
end
local alive = _M.alive

-- Starts cmd (a shell word list, already quoted) in the background with its
-- output in out; returns its pid, or nil, message. The shell execs the
-- program in its place (the pid is the program's), a child of this process
-- that dies with it; opts.detached: init's from the start (the shell that
-- started it has exited), it outlives this process.
function _M.spawn(cmd, out, opts)
  if opts and opts.detached then
    local pid = tonumber(sh(("%s >%s 2>&1 & echo $!"):format(cmd, shell_quote(out))))
    if not pid then return nil, "cannot start " .. cmd end
    return pid
  end
  -- (a command that execs itself already is taken as it is: "exec exec x"
  -- would look for a program named exec)
  local line = cmd:match("^%s*exec%s") and cmd or "exec " .. cmd
  local pid, err = core.spawn({ "/bin/sh", "-c", line }, out)
  if not pid then return nil, err end
  children[pid] = true
  return pid
end
local spawn = _M.spawn

-- SIGTERM, then SIGKILL after seconds (5). Returns whether it exited on SIGTERM.
function _M.stop_pid(pid, seconds)
  if not pid or not alive(pid) then return true end
  os.execute("kill " .. pid .. " 2>/dev/null")
  local deadline = now() + (seconds or 5)
  while alive(pid) and now() < deadline do sleep(0.05) end
  if not alive(pid) then return true end
  os.execute("kill -9 " .. pid .. " 2>/dev/null")
  while alive(pid) and now() < deadline + 2 do sleep(0.05) end
  return false
end
local stop_pid = _M.stop_pid

-- A server handle's stop(seconds): stop_pid with `default` seconds, then the
-- temporary output file (when there is one) is removed.
local function stopper(pid, temporary_out, default)
  return function(seconds)
    local clean = stop_pid(pid, seconds or default)
    if temporary_out then os.remove(temporary_out) end
    return clean
  end
end

local function executable(path)
  local ok, _, n = os.execute("test -x " .. shell_quote(path))
  if type(ok) == "number" then return ok == 0 end
  return ok == true and (n or 0) == 0
end

-- The path of mqlease-devbroker: root's build/mqlease-devbroker (a
-- checkout), else the one on PATH (where the rock and `make install` put it);
-- or nil, message. (launch.devbroker asks $MQLEASE_DEVBROKER first.)
function _M.devbroker_path(root)
  if root and executable(root .. "/build/mqlease-devbroker") then return root .. "/build/mqlease-devbroker" end
  local found = sh("command -v mqlease-devbroker 2>/dev/null"):match("^[^\n]*")
  if found and found ~= "" then return found end
  return nil, "mqlease-devbroker not found on PATH: the rock installs it beside mqlease "
    .. "(the tree's bin/), `make install` in PREFIX/bin, `make` in a checkout as build/mqlease-devbroker"
end

-- One line to a dev broker's control port; its one-line answer, or nil
-- when none came within 5 s.
function _M.control(port, line)
  local answer = sh(("timeout 5 bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d; printf \"%%s\\n\" \"$0\" >&3; head -n1 <&3' %s 2>/dev/null")
    :format(port, shell_quote(line))):match("^[^\n]+")
  return answer
end
local control = _M.control

-- A dev broker on free loopback ports (gRPC and control).
--   opts.path    the program (else $MQLEASE_DEVBROKER, else devbroker_path(opts.root))
--   opts.topics  topics to create at start
--   opts.flags   more of its flags, as a list of words
--   opts.out     the file for its output (else a temporary one, removed by stop)
--   opts.detached  it outlives this process (see spawn)
-- Returns the handle above, or nil, message.
function _M.devbroker(opts)
  opts = opts or {}
  if type(opts) ~= "table" then error("mqlease.launch.devbroker: opts must be a table", 2) end
  local path, err = opts.path or os.getenv("MQLEASE_DEVBROKER"), nil
  if path == "" then path = nil end
  if not path then
    path, err = _M.devbroker_path(opts.root)
    if not path then return nil, err end
  end
  local words = { shell_quote(path), "--listen", "127.0.0.1:0", "--control", "127.0.0.1:0" }
  for _, t in ipairs(opts.topics or {}) do words[#words + 1] = "--topic"; words[#words + 1] = shell_quote(t) end
  for _, f in ipairs(opts.flags or {}) do words[#words + 1] = shell_quote(f) end
  local out, temporary = opts.out, not opts.out
  if temporary then out = os.tmpname() end
  local pid, serr = spawn(table.concat(words, " "), out, { detached = opts.detached })
  if not pid then
    if temporary then os.remove(out) end
    return nil, "the dev broker did not start: " .. serr
  end
  local deadline, line = now() + 10, nil
  repeat
    sleep(0.05)
    line = (read_file(out) or ""):match("[^\n]*listening[^\n]*")
  until line or now() > deadline or not alive(pid)
  local port, cport
  if line then port, cport = line:match("127%.0%.0%.1:(%d+) control 127%.0%.0%.1:(%d+)") end
  if not port then
    local text = read_file(out) or ""
    stop_pid(pid, 1)
    if temporary then os.remove(out) end
    return nil, "the dev broker did not start: " .. text
  end
  local dv = { pid = pid, endpoints = "127.0.0.1:" .. port, control_port = tonumber(cport), out = out }
  function dv.control(cmd) return control(dv.control_port, cmd) end
  function dv.alive() return alive(pid) end
  dv.stop = stopper(pid, temporary and out, 5)
  return dv
end

-- Whether p is a port number (NaN is not: p % 1 is NaN).
local function is_port(p)
  return type(p) == "number" and p % 1 == 0 and p >= 1 and p <= 65535
end

-- A redis-server on a free loopback port, saving nothing.
--   opts.port  that port (else up to 8 random free ones are tried)
--   opts.dir   an append-only file there (fsync always), so one started again on
--              the same port and dir finds its keys (as a restarted production
--              Redis would); else no persistence at all
--   opts.out   the file for its output (else in dir, or a temporary one)
--   opts.program  the server (redis-server)
--   opts.wait  seconds to wait for it to accept connections (5)
--   opts.detached  it outlives this process (see spawn)
-- Returns { pid =, port =, address =, alive(), stop() }, or nil, message (with
-- the last lines of its output).
function _M.redis(opts)
  opts = opts or {}
  if type(opts) ~= "table" then error("mqlease.launch.redis: opts must be a table", 2) end
  -- it goes into the shell command unquoted, and a redis-server on port 0
  -- listens on no TCP port at all
  if opts.port ~= nil and not is_port(opts.port) then error("mqlease.launch.redis: opts.port must be a port number", 2) end
  local program = opts.program or "redis-server"
  local tries = opts.port and 1 or 8
  local said = ""
  for _ = 1, tries do
    -- 22000-32000: under the kernel's default ephemeral range (32768-60999), where every
    -- client socket takes its local port, and above the fixed ports a test harness or a
    -- RocketMQ of one's own usually sits on (mk/rocketmq.sh's are 18080-21100)
    local p = opts.port or random(22000, 32000)
    local out, temporary = opts.out, false
    if not out then
      if opts.dir then out = ("%s/redis-%d.out"):format(opts.dir, p) else out, temporary = os.tmpname(), true end
    end
    local words = { shell_quote(program), "--port", tostring(p), "--bind", "127.0.0.1", "--save", "''" }
    if opts.dir then
      words[#words + 1] = "--appendonly yes --appendfsync always --dbfilename mqlease.rdb --dir " .. shell_quote(opts.dir)
    else
      words[#words + 1] = "--appendonly no"
    end
    local pid, serr = spawn(table.concat(words, " "), out, { detached = opts.detached })
    local deadline = now() + (opts.wait or 5)
    if not pid then
      if temporary then os.remove(out) end
      return nil, "cannot start redis-server: " .. serr
    end
    repeat
      sleep(0.05)
      if (read_file(out) or ""):find("Ready to accept connections", 1, true) then
        local r = { pid = pid, port = p, address = "127.0.0.1:" .. p, out = out }
        function r.alive() return alive(pid) end
        r.stop = stopper(pid, temporary and out, 2)
        return r
      end
    until not alive(pid) or now() > deadline
    stop_pid(pid, 1)
    said = tail(read_file(out) or "", 10)
    if temporary then os.remove(out) end
  end
  return nil, ("cannot start redis-server on %s (is it installed? Debian: apt-get install -y redis-server); "
    .. "its last words: %s"):format(opts.port and "127.0.0.1:" .. opts.port or "a loopback port", said)
end

-- The specs' shared Redis: one redis-server on a given port that outlives the
-- process that started it, so a later process can stop it. A run dir holds
-- its output (redis.log), its pid (redis.pid) and, only when redis_start
-- started it, the file started-by-us: redis_stop stops that one and nothing
-- else (a Redis somebody else started on the port is used and left alone).
-- Both take { port =, run = }; callers that may race hold a lock around them
-- (spec/support/redis.sh does).

local function service_opts(opts, name)
  if type(opts) ~= "table" then error("mqlease.launch." .. name .. ": opts must be a table", 3) end
  if not is_port(opts.port) then
    error("mqlease.launch." .. name .. ": opts.port must be a port number", 3)
  end
  if type(opts.run) ~= "string" or opts.run == "" then
    error("mqlease.launch." .. name .. ": opts.run must be a directory's path", 3)
  end
  return opts.port, opts.run
end

-- Whether a Redis answers PING on 127.0.0.1:port (within 5 s).
function _M.redis_answers(port)
  return (control(port, "PING") or ""):find("^%+PONG") ~= nil
end
local redis_answers = _M.redis_answers

-- The pid of the redis-server redis_start started in run, on port, if it still
-- runs; pids get recycled, so it must still be a redis-server on that port.
local function started_pid(port, run)
  if not read_file(run .. "/started-by-us") then return nil end
  local pid = tonumber((read_file(run .. "/redis.pid") or ""):match("^%d+"))
  if not pid then return nil end
  local cmdline = (read_file("/proc/" .. pid .. "/cmdline") or ""):gsub("%z", " ")
  if not cmdline:find("redis-server", 1, true) or not cmdline:find(":" .. port .. "%f[%D]") then return nil end
  return alive(pid) and pid or nil
end

local function write_file(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

function _M.redis_start(opts)
  local port, run = service_opts(opts, "redis_start")
  local address = "127.0.0.1:" .. port
  os.execute("mkdir -p " .. shell_quote(run))
  if redis_answers(port) then
    -- ours from an earlier start, or somebody else's: used, ownership left as it is
    return { port = port, address = address, pid = started_pid(port, run), reused = true }
  end
  local pid = started_pid(port, run)
  if pid then
    return nil, ("our redis-server (pid %d) runs but does not answer PING on %s; see %s/redis.log")
      :format(pid, address, run)
  end
  os.remove(run .. "/started-by-us")
  os.remove(run .. "/redis.pid")
  local r, err = _M.redis { port = port, out = run .. "/redis.log", program = opts.program, wait = 20,
    detached = true }
  if not r then return nil, err end
  write_file(run .. "/redis.pid", r.pid .. "\n")
  write_file(run .. "/started-by-us", "")
  return { port = port, address = address, pid = r.pid, reused = false }
end

function _M.redis_stop(opts)
  local port, run = service_opts(opts, "redis_stop")
  local pid = started_pid(port, run)
  if pid then
    stop_pid(pid, 10)
    if alive(pid) then return nil, ("redis-server (pid %d) survived SIGKILL"):format(pid) end
  end
  os.remove(run .. "/started-by-us")
  os.remove(run .. "/redis.pid")
  if not pid then return "nothing of ours is running on 127.0.0.1:" .. port end
  return ("stopped redis-server (pid %d)"):format(pid)
end

return _M
