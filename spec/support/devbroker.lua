-- spec/support/devbroker.lua: starts build/mqlease-devbroker on free loopback
-- ports for a spec and talks to its control port.
--   local dv = devbroker.start({ "topicA", "topicB" }, { "--fail-change", "0.5" })
--   dv.endpoints, dv.control("set paused 1") -> "ok ..." (nil: no answer in 5 s), dv.stop()
--   dv.idle_client(seconds) -> pid of a control client that connects and says nothing
--   dv.alive() -> whether the process still runs
--   devbroker.node_view(endpoints, group, topic, n, seconds) -> wait(): the official
--     Node.js client receives (and acks) up to n messages in the background; wait()
--     returns { { id =, corrupted = }, ... } -- corrupted is its body-digest check
local mqlease = require "mqlease"

local _M = {}

-- The sanitizer build (make sanitize, part of make test) when there is one.
local function binary()
  local env = os.getenv("MQLEASE_DEVBROKER")
  if env then return env end
  local f = io.open("build/san/mqlease-devbroker")
  if f then f:close(); return "build/san/mqlease-devbroker" end
  return "build/mqlease-devbroker"
end

local function control(port, line)
  local p = assert(io.popen(("timeout 5 bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d; printf \"%%s\\n\" \"$0\" >&3; head -n1 <&3' %q")
    :format(port, line)))
  local answer = p:read("l")
  p:close()
  return answer
end

function _M.start(topics, flags)
  local out = os.tmpname()
  local args = { "--listen", "127.0.0.1:0", "--control", "127.0.0.1:0" }
  for _, t in ipairs(topics or {}) do args[#args + 1] = "--topic"; args[#args + 1] = t end
  for _, f in ipairs(flags or {}) do args[#args + 1] = f end
  local p = assert(io.popen(("%s %s >%s 2>&1 & echo $!"):format(binary(), table.concat(args, " "), out)))
  local pid = tonumber(p:read("l"))
  p:close()
  local deadline = mqlease.now() + 10
  local line
  repeat
    mqlease.sleep(0.05)
    local f = io.open(out)
    line = f and f:read("l")
    if f then f:close() end
  until (line and line:match("listening")) or mqlease.now() > deadline
  assert(line and line:match("listening"), "the dev broker did not start: " .. tostring(line))
  local port, cport = line:match("127%.0%.0%.1:(%d+) control 127%.0%.0%.1:(%d+)")
  local dv = { endpoints = "127.0.0.1:" .. port, pid = pid, control_port = tonumber(cport) }
  function dv.control(cmd) return control(dv.control_port, cmd) end
  function dv.alive()
    local r = os.execute(("kill -0 %d 2>/dev/null"):format(pid))
    return r == true or r == 0
  end
  function dv.idle_client(seconds)
    local q = assert(io.popen(("bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d; sleep %d' >/dev/null 2>&1 & echo $!")
      :format(dv.control_port, seconds)))
    local cpid = tonumber(q:read("l"))
    q:close()
    mqlease.sleep(0.3)   -- connected by now
    return cpid
  end
  -- SIGTERM, 5 s to exit, then SIGKILL: a wedged broker never outlives its spec.
  -- Returns whether it exited on SIGTERM.
  function dv.stop()
    os.execute(("kill %d 2>/dev/null; for i in $(seq 50); do kill -0 %d 2>/dev/null || break; sleep 0.1; done"):format(pid, pid))
    local clean = not dv.alive()
    if not clean then os.execute(("kill -9 %d 2>/dev/null; sleep 0.2"):format(pid)) end
    os.remove(out)
    return clean
  end
  return dv
end

local node_script = [==[
const { SimpleConsumer } = require('rocketmq-client-nodejs');
const { makeLogger } = require(process.cwd() + '/spec/support/node/common');
(async () => {
  const [endpoint, group, topic, expect, seconds] = process.argv.slice(2);
  const c = new SimpleConsumer({ endpoints: endpoint, namespace: '', sslEnabled: false, consumerGroup: group,
    subscriptions: new Map([[topic, '*']]), awaitDuration: 5000, logger: makeLogger('view') });
  await c.startup();
  const out = [];
  const deadline = Date.now() + Number(seconds) * 1000;
  while (out.length < Number(expect) && Date.now() < deadline) {
    for (const m of await c.receive(16, 15000)) {
      out.push({ id: m.messageId, corrupted: !!m.corrupted });
      await c.ack(m);
    }
  }
  process.stdout.write(JSON.stringify(out) + '\n', () => process.exit(0));
})().catch(e => { process.stderr.write(String(e && e.stack) + '\n'); process.exit(1); });
]==]

function _M.node_view(endpoints, group, topic, n, seconds)
  local base = os.tmpname()
  local f = assert(io.open(base .. ".js", "w"))
  f:write(node_script)
  f:close()
  os.execute(("(NODE_PATH=spec/support/node/node_modules timeout %d node %s.js %s %s %s %d %d >%s.out 2>%s.err &)")
    :format(seconds + 30, base, endpoints, group, topic, n, seconds, base, base))
  return function()
    local deadline = mqlease.now() + seconds + 35
    local text
    repeat
      mqlease.sleep(0.2)
      local o = io.open(base .. ".out")
      text = o and o:read("a") or ""
      if o then o:close() end
    until text:match("%]%s*$") or mqlease.now() > deadline
    local e = io.open(base .. ".err")
    local err = e and e:read("a") or ""
    if e then e:close() end
    for _, suffix in ipairs({ "", ".js", ".out", ".err" }) do os.remove(base .. suffix) end
    assert(text:match("%]%s*$"), "the Node.js client gave no answer: " .. err)
    return require("cjson").decode(text:match("(%[.*%])%s*$"))
  end
end

return _M
