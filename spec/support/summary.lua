-- A busted output handler: busted's own terminal output, then the seconds each
-- spec file took (slowest first, to keep the suite's total in check) and one
-- closing line "busted: N passed, N failed, N skipped" that CI recognises.
return function(options)
  local busted = require "busted"
  local handler = require "busted.outputHandlers.utfTerminal"(options)
  local passed, failed, skipped = 0, 0, 0
  local files, started, failures = {}, {}, {}
  local tests, test_started = {}, {}
  local clock = function()
    local ok, socket = pcall(require, "socket")
    if ok and socket.gettime then return socket.gettime() end
    return os.time()
  end
  -- "file:line name: first line of the message", kept for the closing list
  local function describe(element, message)
    local where = element and element.trace and element.trace.short_src or "?"
    local line = element and element.trace and element.trace.currentline or 0
    local ok, name = pcall(handler.getFullName, element)
    if not ok or not name then name = element and element.name or "?" end
    local first = tostring(message or ""):match("[^\n]*") or ""
    return ("%s:%s %s: %s"):format(where, line, name, first:sub(1, 300))
  end
  busted.subscribe({ "test", "start" }, function(element)
    test_started[element] = clock()
    return nil, true
  end)
  busted.subscribe({ "test", "end" }, function(element, _, status)
    if test_started[element] then
      tests[#tests + 1] = { name = describe(element, ""):gsub(": $", ""), seconds = clock() - test_started[element] }
      test_started[element] = nil
    end
    if status == "success" then passed = passed + 1
    elseif status == "pending" then skipped = skipped + 1
    else failed = failed + 1 end
    return nil, true
  end)
  busted.subscribe({ "failure" }, function(element, _, message)
    failures[#failures + 1] = describe(element, message)
    return nil, true
  end)
  busted.subscribe({ "file", "start" }, function(file)
    started[file.name] = clock()
    return nil, true
  end)
  busted.subscribe({ "file", "end" }, function(file)
    if started[file.name] then
      files[#files + 1] = { name = file.name, seconds = clock() - started[file.name] }
    end
    return nil, true
  end)
  -- errors outside a test (a failing setup, a file that does not load) fail the run too;
  -- errors inside a test are counted by its "test end" above
  busted.subscribe({ "error" }, function(element, _, message)
    if not (element and element.descriptor == "it") then failed = failed + 1 end
    failures[#failures + 1] = describe(element, message)
    return nil, true
  end)
  busted.subscribe({ "suite", "end" }, function()
    table.sort(files, function(a, b) return a.seconds > b.seconds end)
    if #files > 1 then
      io.write("\nseconds per spec file:\n")
      for _, f in ipairs(files) do io.write(("  %7.1f  %s\n"):format(f.seconds, f.name)) end
    end
    -- the tests that cost the most, where a trim would pay (setup time is the file's)
    table.sort(tests, function(a, b) return a.seconds > b.seconds end)
    if #tests > 1 then
      io.write("\nslowest tests:\n")
      for i = 1, math.min(15, #tests) do
        io.write(("  %7.1f  %s\n"):format(tests[i].seconds, tests[i].name))
      end
    end
    -- repeated here (and again by run-specs.sh at the very end) so a CI log that keeps
    -- only its tail still names what failed
    for _, f in ipairs(failures) do io.write("FAILED: ", f, "\n") end
    io.write(("\nbusted: %d passed, %d failed, %d skipped\n"):format(passed, failed, skipped))
    io.flush()
    return nil, true
  end)
  return handler
end
