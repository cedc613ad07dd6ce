-- mqlease.lab: run scenario files (a workload, a fleet of worker processes,
-- faults at given times) on the dev broker or a real RocketMQ and measure what
-- happened to every message. `mqlease lab` is its command line; the parts:
--
--   mqlease.lab.scenario    the scenario table: fields, defaults, checks, time scale
--   mqlease.lab.workload    handler-time distribution and the message body
--   mqlease.lab.worker      one worker process (mqlease.run) and its event log
--   mqlease.lab.logs        those logs, parsed and followed
--   mqlease.lab.experiment  runs one scenario: starts what it needs (mqlease.launch),
--                           sends, injects faults, stops
--   mqlease.lab.analyze     the figures and the time series
--   mqlease.lab.report      the text table and the HTML file
--
--   local lab = require "mqlease.lab"
--   local result = assert(lab.run("examples/lab/no_renewal.lua", { root = "." }))
--   result.report.duplicates, result.series.leases
--   io.write(lab.report.text({ result }))

local scenario = require "mqlease.lab.scenario"
local experiment = require "mqlease.lab.experiment"
local analyze = require "mqlease.lab.analyze"
local report = require "mqlease.lab.report"

local type = type

local _M = { scenario = scenario, report = report, analyze = analyze }

-- Runs a scenario (a file name or a checked table). Raises for a bad scenario;
-- returns { scenario =, report =, series = }, or nil, message when a server
-- or process failed. opts: see mqlease.lab.experiment.
function _M.run(s, opts)
  if type(s) == "string" then s = scenario.load(s) end
  local raw, err = experiment.run(s, opts)
  if not raw then return nil, err end
  return { scenario = s, report = analyze.report(raw), series = analyze.series(raw, (opts or {}).buckets) }
end

return _M
