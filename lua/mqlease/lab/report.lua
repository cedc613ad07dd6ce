-- mqlease.lab.report: the lab's results as a text table (one column per
-- scenario) and as one self-contained HTML file: the same table, then one row
-- of plots per measure (leases held, completions, duplicates, renewals), one
-- panel per scenario on a shared y scale, the faults marked as dashed lines.
-- Inline SVG and CSS only: no script, no external asset.
--
--   report.text(results) -> string
--   report.html(results) -> string
--   results = { { scenario =, report = (analyze.report), series = (analyze.series) }, ... }

local analyze = require "mqlease.lab.analyze"

local floor, max, min, log10 = math.floor, math.max, math.min, math.log10
local ipairs, tostring, type = ipairs, tostring, type
local concat, format = table.concat, string.format

local _M = {}

local function cell(v, fmt)
  if v == nil then return "-" end
  if fmt then return format(fmt, v) end
  if type(v) == "number" and v == floor(v) then return format("%d", v) end
  return tostring(v)
end

-- The rows of the table: { label, value per scenario... }
function _M.rows(results)
  local rows = {}
  local function add(label, get)
    local row = { label }
    for i, r in ipairs(results) do row[i + 1] = get(r) end
    rows[#rows + 1] = row
  end
  add("time scale (real s per scenario s)", function(r) return cell(r.scenario.time_scale) end)
  add("workers x concurrency", function(r) return r.scenario.fleet.workers .. " x " .. r.scenario.fleet.concurrency end)
  add("policy / shutdown", function(r) return r.scenario.fleet.policy.kind .. " / " .. r.scenario.fleet.shutdown end)
  for _, f in ipairs(analyze.FIELDS) do
    add(f[2], function(r) return cell(r.report[f[1]], f[3]) end)
  end
  return rows
end

function _M.text(results)
  local header = { "" }
  for i, r in ipairs(results) do header[i + 1] = r.scenario.name end
  local rows = _M.rows(results)
  table.insert(rows, 1, header)
  local widths = {}
  for _, row in ipairs(rows) do
    for j, v in ipairs(row) do widths[j] = max(widths[j] or 0, #v) end
  end
  local lines = {}
  for n, row in ipairs(rows) do
    local parts = {}
    for j, v in ipairs(row) do
      parts[j] = j == 1 and v .. (" "):rep(widths[j] - #v) or (" "):rep(widths[j] - #v) .. v
    end
    lines[#lines + 1] = concat(parts, "  ")
    if n == 1 then
      local rule = {}
      for j = 1, #row do rule[j] = ("-"):rep(widths[j]) end
      lines[#lines + 1] = concat(rule, "  ")
    end
  end
  return concat(lines, "\n") .. "\n"
end

-- ------------------------------------------------------------- HTML

local function esc(s)
  return (tostring(s):gsub("[&<>\"']", { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;",
    ["'"] = "&#39;" }))
end
_M.escape = esc

-- A round axis maximum at or above v (1, 2, 5 x 10^n).
local function nice(v)
  if v <= 0 then return 1 end
  local p = 10 ^ floor(log10(v))
  for _, m in ipairs({ 1, 2, 5, 10 }) do
    if v <= m * p then return m * p end
  end
  return 10 * p
end
_M.nice = nice

local function num(v)
  if v == floor(v) then return format("%d", v) end
  return (format("%.2f", v):gsub("0+$", ""))
end

local W, H, L, R, T, B = 420, 190, 46, 12, 14, 30   -- panel size and margins

-- One panel: values ys at times ts (scenario s) over [0, xmax], y over [0, ymax].
function _M.svg(title, ts, ys, xmax, ymax, faults, color)
  local pw, ph = W - L - R, H - T - B
  local function x(t) return L + pw * min(t, xmax) / xmax end
  local function y(v) return T + ph * (1 - min(v, ymax) / ymax) end
  local out = {}
  out[#out + 1] = format('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" role="img">', W, H, W, H)
  out[#out + 1] = format('<title>%s</title>', esc(title))
  out[#out + 1] = format('<rect x="%d" y="%d" width="%d" height="%d" fill="#fff" stroke="#bbb"/>', L, T, pw, ph)
  for i = 0, 5 do
    local v = ymax * i / 5
    out[#out + 1] = format('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#eee"/>', L, L + pw, y(v), y(v))
    out[#out + 1] = format('<text x="%d" y="%.1f" font-size="10" text-anchor="end" fill="#555">%s</text>', L - 4, y(v) + 3, num(v))
  end
  local step = nice(xmax / 6)
  local t = 0
  while t <= xmax + 1e-9 do
    out[#out + 1] = format('<text x="%.1f" y="%d" font-size="10" text-anchor="middle" fill="#555">%s</text>', x(t), T + ph + 13, num(t))
    t = t + step
  end
  out[#out + 1] = format('<text x="%d" y="%d" font-size="10" text-anchor="middle" fill="#555">scenario seconds</text>', L + pw / 2, H - 3)
  -- faults: a dashed line each, numbered as in the list under the scenario's name
  for i, f in ipairs(faults or {}) do
    local fx = x(f.t)
    out[#out + 1] = format('<line class="fault" x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#c0392b" stroke-dasharray="4 3"><title>%s</title></line>',
      fx, fx, T, T + ph, esc(f.label))
    out[#out + 1] = format('<text x="%.1f" y="%d" font-size="9" fill="#c0392b">%d</text>', fx + 2, T + 9 + 9 * ((i - 1) % 2), i)
  end
  local pts = {}
  for i, v in ipairs(ys) do pts[#pts + 1] = format("%.1f,%.1f", x(ts[i]), y(v)) end
  if #pts > 0 then
    out[#out + 1] = format('<polyline fill="none" stroke="%s" stroke-width="1.8" points="%s"/>', color or "#2c6fbb", concat(pts, " "))
  end
  out[#out + 1] = '</svg>'
  return concat(out)
end

_M.PLOTS = {
  { "leases", "leases held" },
  { "completions", "completions per second" },
  { "duplicates", "duplicate business runs (cumulative)" },
  { "renewals", "renewals per second" },
}

local COLORS = { "#2c6fbb", "#e67e22", "#27ae60", "#8e44ad", "#16a085", "#7f8c8d" }

local CSS = [[
body{font-family:system-ui,sans-serif;margin:24px;color:#222}
table{border-collapse:collapse;margin:12px 0 24px}
th,td{border:1px solid #ccc;padding:4px 10px}
td.v{text-align:right;font-variant-numeric:tabular-nums}
th{background:#f3f3f3}
th[scope=row]{text-align:left;font-weight:normal}
.row{display:flex;flex-wrap:wrap;gap:16px}
.panel h3{font-size:13px;margin:4px 0}
p.desc{color:#555;max-width:60em;margin-bottom:2px}
ol.faults{color:#c0392b;font-size:13px;margin:0 0 10px;columns:2;max-width:50em}
]]

function _M.html(results, title)
  title = title or "mqlease lab"
  local out = {}
  local function w(s) out[#out + 1] = s end
  w("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" .. esc(title) .. "</title>")
  w("<style>" .. CSS .. "</style></head><body>")
  w("<h1>" .. esc(title) .. "</h1>")
  for _, r in ipairs(results) do
    w(format("<p class=\"desc\"><b>%s</b> (%s): %s</p>", esc(r.scenario.name), esc(r.scenario.file or ""),
      esc(r.scenario.description)))
    if #r.series.faults > 0 then
      w("<ol class=\"faults\">")
      for _, f in ipairs(r.series.faults) do w(format("<li>%.1f s: %s</li>", f.t, esc(f.label))) end
      w("</ol>")
    end
  end
  w("<table id=\"report\"><thead><tr><th></th>")
  for _, r in ipairs(results) do w("<th>" .. esc(r.scenario.name) .. "</th>") end
  w("</tr></thead><tbody>")
  for _, row in ipairs(_M.rows(results)) do
    w("<tr><th scope=\"row\">" .. esc(row[1]) .. "</th>")
    for j = 2, #row do w("<td class=\"v\">" .. esc(row[j]) .. "</td>") end
    w("</tr>")
  end
  w("</tbody></table>")
  local xmax = 0
  for _, r in ipairs(results) do xmax = max(xmax, r.series.span) end
  xmax = nice(xmax)
  for _, p in ipairs(_M.PLOTS) do
    local key, label = p[1], p[2]
    local ymax = 0
    for _, r in ipairs(results) do
      for _, v in ipairs(r.series[key]) do ymax = max(ymax, v) end
    end
    ymax = nice(ymax)
    w(format("<h2>%s</h2><div class=\"row\" id=\"plot-%s\">", esc(label), key))
    for i, r in ipairs(results) do
      w("<div class=\"panel\"><h3>" .. esc(r.scenario.name) .. "</h3>")
      w(_M.svg(r.scenario.name .. ": " .. label, r.series.t, r.series[key], xmax, ymax, r.series.faults,
        COLORS[(i - 1) % #COLORS + 1]))
      w("</div>")
    end
    w("</div>")
  end
  w("</body></html>\n")
  return concat(out, "\n")
end

return _M
