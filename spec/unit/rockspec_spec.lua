-- Both rockspecs install every Lua module the checkout has: a module added under lua/mqlease
-- and forgotten in the install table would load from a checkout and fail from a rock.

local function modules_on_disk()
  local found = {}
  local p = assert(io.popen("cd lua && find mqlease -name '*.lua' | sort"))
  for path in p:lines() do
    local name = path:gsub("%.lua$", ""):gsub("/init$", ""):gsub("/", ".")
    found[name] = "lua/" .. path
  end
  p:close()
  return found
end

local function installed_by(rockspec)
  local env = {}
  assert(loadfile(rockspec, "t", env))()
  return env.build.install.lua
end

describe("the rockspecs", function()
  local disk = modules_on_disk()
  for _, rockspec in ipairs { "rockspec/mqlease-scm-1.rockspec", "rockspec/mqlease-0.1.0-1.rockspec" } do
    it(rockspec .. " installs every module under lua/mqlease, from its own file", function()
      local listed = installed_by(rockspec)
      for name, path in pairs(disk) do
        assert.are.equal(path, listed[name], name .. " is not installed by " .. rockspec)
      end
      for name in pairs(listed) do
        assert.is_truthy(disk[name], rockspec .. " lists " .. name .. ", which has no file")
      end
    end)
  end
end)
