-- The jar caches of mk/rocketmq.sh fetch and bench/java.sh fetch on a flaky network: a copy
-- cut mid-way, and two fetches into one cache at once. Maven is the stand-in of
-- spec/support/fake-maven/ (copy-dependencies' rule for jars already in the output directory,
-- no network, no JDK), and the cache is a fresh directory whose name holds a space.
local function q(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

local FAKE = "spec/support/fake-maven"

local function sh(cmd)
  local p = assert(io.popen("bash -c " .. q("(" .. cmd .. ") 2>&1; echo \"rc=$?\"")))
  local out = p:read("a")
  p:close()
  return tonumber(out:match("rc=(%d+)%s*$")), out
end

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

-- A repository of jars with random contents, a year old (older than any copy of them).
local function make_repo(dir, names)
  assert(os.execute("mkdir -p " .. q(dir)))
  for _, name in ipairs(names) do
    local path = dir .. "/" .. name
    assert(os.execute(("head -c 65536 /dev/urandom >%s && touch -d '1 year ago' %s"):format(q(path), q(path))))
  end
end

local function cases(script, version_env, version, jars, lib_of)
  local dir, repo, cache, env

  before_each(function()
    dir = os.tmpname()
    os.remove(dir)
    repo = dir .. "/repo"
    cache = dir .. "/the cache"
    make_repo(repo, jars)
    env = ("PATH=%s:\"$PATH\" FAKE_MAVEN_REPO=%s MQLEASE_CACHE=%s %s=%s FAKE_MAVEN_PAUSED=%s "):format(
      q(FAKE), q(repo), q(cache), version_env, version, q(dir .. "/paused"))
  end)

  after_each(function()
    os.execute("rm -rf " .. q(dir))
  end)

  local function lib() return cache .. "/" .. lib_of(version) end

  it("does not take a jar cut mid-copy for a cached one when fetched again", function()
    local rc, out = sh(env .. "FAKE_MAVEN_CUT=" .. jars[1] .. " bash " .. script .. " fetch")
    assert.are_not.equal(0, rc, out)
    rc, out = sh(env .. "bash " .. script .. " fetch")
    assert.are.equal(0, rc, out)
    for _, name in ipairs(jars) do
      assert.is_true(read(repo .. "/" .. name) == read(lib() .. "/" .. name), name .. " in the cache is not the repository's")
    end
  end)

  it("returns from a fetch only with whole jars while another fetch fills the same cache", function()
    -- the first fetch stops half-way through a jar; the second starts then, and the moment it
    -- returns every jar in the cache must be whole
    local check = ""
    for _, name in ipairs(jars) do
      check = check .. ("cmp -s %s %s || echo 'torn: %s'; "):format(q(repo .. "/" .. name), q(lib() .. "/" .. name), name)
    end
    local rc, out = sh(env .. "FAKE_MAVEN_PAUSE=" .. jars[1] .. " bash " .. script .. " fetch >/dev/null 2>&1 & "
      .. "for _ in $(seq 100); do [[ -e " .. q(dir .. "/paused") .. " ]] && break; sleep 0.1; done; "
      .. env .. "bash " .. script .. " fetch; rc=$?; " .. check .. "wait; exit $rc")
    assert.are.equal(0, rc, out)
    assert.is_nil(out:find("torn: ", 1, true), out)
  end)
end

describe("mk/rocketmq.sh fetch", function()
  cases("mk/rocketmq.sh", "ROCKETMQ_VERSION", "5.2.0",
    { "rocketmq-proxy-5.2.0.jar", "rocketmq-namesrv-5.2.0.jar", "rocketmq-tools-5.2.0.jar", "netty-all-4.1.65.jar" },
    function(v) return "rocketmq-" .. v .. "/lib" end)
end)

describe("bench/java.sh fetch", function()
  cases("bench/java.sh", "MQLEASE_JAVA_CLIENT_VERSION", "5.0.7",
    { "rocketmq-client-java-5.0.7.jar", "rocketmq-client-apis-5.0.7.jar", "slf4j-api-1.7.36.jar" },
    function(v) return "java-client-" .. v .. "/lib" end)
end)
