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

  -- Maven 3.8's default checksum policy only warns (unseen under -q) and keeps the jar: a
  -- download a proxy or an attacker altered was marked complete and run. The last jar is a
  -- dependency, which the check for the main jars does not look at.
  it("stops on a jar that does not match its checksum, caching nothing, and fetches whole jars after", function()
    local bad = jars[#jars]
    local rc, out = sh(env .. "FAKE_MAVEN_BAD_SUM=" .. bad .. " bash " .. script .. " fetch")
    assert.are_not.equal(0, rc, "a fetch with a jar that fails its checksum succeeded:\n" .. out)
    assert.matches("Checksum validation failed", out, 1, true)
    assert.matches("failed its checksum validation", out, 1, true)
    assert.is_nil(io.open(lib() .. "/.complete"), "the cache was marked complete")
    assert.is_nil(io.open(lib() .. "/" .. bad), "the altered jar is in the cache")
    rc, out = sh(env .. "bash " .. script .. " fetch")
    assert.are.equal(0, rc, out)
    for _, name in ipairs(jars) do
      assert.is_true(read(repo .. "/" .. name) == read(lib() .. "/" .. name), name .. " in the cache is not the repository's")
    end
  end)
end

-- The stand-in itself: a jar that fails its checksum under each of Maven's policies.
describe("the fake mvn's checksum policies", function()
  local dir, env
  before_each(function()
    dir = os.tmpname()
    os.remove(dir)
    make_repo(dir .. "/repo", { "a.jar", "b.jar" })
    env = ("PATH=%s:\"$PATH\" FAKE_MAVEN_REPO=%s FAKE_MAVEN_BAD_SUM=b.jar "):format(q(FAKE), q(dir .. "/repo"))
  end)
  after_each(function() os.execute("rm -rf " .. q(dir)) end)

  it("warns and keeps the altered jar by default, and fails copying nothing with -C", function()
    local rc, out = sh(env .. "mvn -B -DoutputDirectory=" .. q(dir .. "/warn"))
    assert.are.equal(0, rc, out)
    assert.matches("[WARNING] Could not validate integrity of download from https://repo.maven.apache.org/maven2/fake/b.jar: "
      .. "Checksum validation failed, expected ", out, 1, true)
    assert.is_true(read(dir .. "/repo/a.jar") == read(dir .. "/warn/a.jar"))
    assert.is_false(read(dir .. "/repo/b.jar") == read(dir .. "/warn/b.jar"))
    rc, out = sh(env .. "mvn -B -q -DoutputDirectory=" .. q(dir .. "/quiet"))
    assert.are.equal(0, rc, out)
    assert.are.equal("rc=0\n", out)   -- -q hides warnings
    rc, out = sh(env .. "mvn -B -q -C -DoutputDirectory=" .. q(dir .. "/strict"))
    assert.are.equal(1, rc, out)
    assert.matches("%[ERROR%] Failed to execute goal .- Could not transfer artifact fake:b:jar:1 from/to central "
      .. "%(https://repo.maven.apache.org/maven2/fake%): Checksum validation failed, expected %x+ but is %x+ %-> %[Help 1%]", out)
    assert.is_nil(io.open(dir .. "/strict/a.jar"), "-C copied a jar")
    assert.are.equal(1, (sh(env .. "mvn -c --strict-checksums -DoutputDirectory=" .. q(dir .. "/both"))))
  end)
end)

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
