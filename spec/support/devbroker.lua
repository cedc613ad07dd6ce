-- spec/support/devbroker.lua: build/mqlease-devbroker (the sanitizer one when built) for
-- a spec, started by mqlease.launch on free loopback ports, and its control port.
--   local dv = devbroker.start({ "topicA", "topicB" }, { "--fail-change", "0.5" })
--   dv.endpoints, dv.control("set paused 1") -> "ok ..." (nil: no answer in 5 s), dv.stop()
--   dv.idle_client(seconds) -> pid of a control client that connects and says nothing
--   dv.alive() -> whether the process still runs
--   devbroker.node_view(endpoints, group, topic, n, seconds) -> wait(): the official
--     Node.js client receives (and acks) up to n messages in the background; wait()
--     returns { { id =, corrupted = }, ... } -- corrupted is its body-digest check
local mqlease = require "mqlease"
local launch = require "mqlease.launch"

local _M = {}

-- The sanitizer build (make sanitize, part of make test) when there is one.
local function binary()
  local env = os.getenv("MQLEASE_DEVBROKER")
  if env then return env end
  local f = io.open("build/san/mqlease-devbroker")
  if f then f:close(); return "build/san/mqlease-devbroker" end
  return "build/mqlease-devbroker"
end

-- mqlease.launch starts it; a spec adds an idle control client. dv.stop():
-- SIGTERM, 5 s to exit, then SIGKILL, and whether it exited on SIGTERM.
function _M.start(topics, flags)
  local dv = assert(launch.devbroker { path = binary(), topics = topics, flags = flags })
  function dv.idle_client(seconds)
    local q = assert(io.popen(("bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d; sleep %d' >/dev/null 2>&1 & echo $!")
      :format(dv.control_port, seconds)))
    local cpid = tonumber(q:read("l"))
    q:close()
    mqlease.sleep(0.3)   -- connected by now
    return cpid
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
