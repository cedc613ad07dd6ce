-- check-links.lua [FILE.md...] -- every relative link in the docs points at something.
--
--   lua5.4 spec/support/check-links.lua        README.md, CHANGELOG.md, docs/*.md, bench/*.md
--
-- For each [text](target) that is not a URL: the file must exist (relative to the
-- linking file), and a #fragment must be the GitHub anchor of one of its headings
-- (lower case, punctuation dropped, spaces to dashes; a repeated heading gets -1, -2).
-- Also checks that README.md links every docs/*.md. Prints each broken link; exits 1
-- if there is one. Run from the repository root.

local function read(path)
  local f = io.open(path, "r")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

local function dirname(path) return path:match("^(.*)/[^/]*$") or "." end

local function normalise(path)
  local parts = {}
  for p in path:gmatch("[^/]+") do
    if p == ".." and #parts > 0 and parts[#parts] ~= ".." then parts[#parts] = nil
    elseif p ~= "." then parts[#parts + 1] = p end
  end
  return table.concat(parts, "/")
end

-- GitHub's heading anchors: lower case; drop what is not a letter, digit, space, '-' or '_'
-- (markdown backticks and the like included); spaces become dashes.
local function slug(text)
  text = text:gsub("%[([^%]]*)%]%([^)]*%)", "%1"):lower()
  text = text:gsub("[^%w%s%-_\128-\255]", ""):gsub("%s", "-")
  return text
end

local anchor_cache = {}
local function anchors(path)
  if anchor_cache[path] then return anchor_cache[path] end
  local set, seen, fenced = {}, {}, false
  for line in (read(path) or ""):gmatch("[^\n]*") do
    if line:match("^```") then fenced = not fenced
    elseif not fenced then
      local h = line:match("^#+%s+(.-)%s*$")
      if h then
        local s = slug(h)
        local n = seen[s]
        set[n and (s .. "-" .. n) or s] = true
        seen[s] = (n or 0) + 1
      end
    end
  end
  anchor_cache[path] = set
  return set
end

local function exists(path)
  local f = io.open(path, "r")
  if f then f:close() return true end
  return os.execute("test -e '" .. path:gsub("'", "'\\''") .. "'") == true
end

local files = { ... }
if #files == 0 then
  files = { "README.md", "CHANGELOG.md", "bench/README.md", "bench/history.md" }
  local p = io.popen("ls docs/*.md 2>/dev/null")
  for f in p:lines() do files[#files + 1] = f end
  p:close()
end

local bad, checked = 0, 0
for _, file in ipairs(files) do
  local text = read(file)
  if not text then
    print(file .. ": cannot be read"); bad = bad + 1
  else
    local fenced, n = false, 0
    for line in text:gmatch("[^\n]*") do
      n = n + 1
      if line:match("^```") then fenced = not fenced
      elseif not fenced then
        for target in line:gmatch("%]%(([^)%s]+)%)") do
          if not target:match("^%a[%w+.-]*:") then       -- not http:, https:, mailto:
            checked = checked + 1
            local path, frag = target:match("^([^#]*)#?(.*)$")
            local dest = path == "" and file or normalise(dirname(file) .. "/" .. path)
            if not exists(dest) then
              print(("%s:%d: %s: no such file (%s)"):format(file, n, target, dest)); bad = bad + 1
            elseif frag ~= "" and dest:match("%.md$") and not anchors(dest)[frag] then
              print(("%s:%d: %s: no heading with anchor #%s in %s"):format(file, n, target, frag, dest))
              bad = bad + 1
            end
          end
        end
      end
    end
  end
end

-- README is the front page: every page of docs/ must be reachable from it.
local readme = read("README.md") or ""
local p = io.popen("ls docs/*.md 2>/dev/null")
for f in p:lines() do
  if not readme:find("(" .. f, 1, true) then
    print("README.md: does not link " .. f); bad = bad + 1
  end
end
p:close()

print(("check-links: %d links checked, %d broken"):format(checked, bad))
os.exit(bad == 0 and 0 or 1)
