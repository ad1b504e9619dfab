-- wrk script for tests/bench/run.sh: MCP `tools/call` of an echo tool, a unique JSON-RPC id per request
-- (MCP forbids reusing an id within a session: 2025-11-25 basic/index.mdx §Requests), alternately a number
-- and a string, and a check of every answer.
--
-- Environment (read in each wrk thread):
--   TOOL      tool name (e.g. echo, echo__echo)
--   ERA       legacy | modern. modern: 2026-07-28 `_meta` in params (protocolVersion, clientInfo,
--             clientCapabilities) and the MCP-Protocol-Version / Mcp-Method / Mcp-Name headers
--             (2026-07-28 transports-streamable-http.mdx); legacy: MCP-Protocol-Version 2025-11-25
--   PV        MCP-Protocol-Version of a legacy run (the version initialize negotiated; default 2025-11-25)
--   SID       Mcp-Session-Id of a legacy session (empty: none)
--   ID_BASE   a prefix that keeps ids unique across the runs of one session (e.g. the round number)
--   OUT       file the summary is written to (JSON)
--   MAX_PER_THREAD  stop this thread after that many answers (0: run for wrk's -d duration)
--
-- Check: an answer counts as good when its status is 200 and its body (JSON or one SSE event) holds
-- "id":<the id of a request sent on this thread and not answered yet, as sent: number or string> and
-- the text "m<same id>".
-- Anything else (other status, wrong/duplicate/unknown id, echo text missing) counts as bad.

local threads = {}

function setup(thread)
  table.insert(threads, thread)
  thread:set("tid", #threads)
end

local tool, era, base, max_n
local pending = {}
-- globals: the main thread reads them through thread:get in done()
n, good, bad, first_bad = 0, 0, 0, nil

function init(args)
  tool = os.getenv("TOOL") or "echo"
  era = os.getenv("ERA") or "legacy"
  base = os.getenv("ID_BASE") or "0"
  max_n = tonumber(os.getenv("MAX_PER_THREAD") or "0") or 0
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
  wrk.headers["Accept"] = "application/json, text/event-stream"
  if era == "modern" then
    wrk.headers["MCP-Protocol-Version"] = "2026-07-28"
    wrk.headers["Mcp-Method"] = "tools/call"
    wrk.headers["Mcp-Name"] = tool
  else
    wrk.headers["MCP-Protocol-Version"] = os.getenv("PV") or "2025-11-25"
  end
  local sid = os.getenv("SID")
  if sid and sid ~= "" then wrk.headers["Mcp-Session-Id"] = sid end
end

local META = '"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
  .. '"io.modelcontextprotocol/clientInfo":{"name":"bench","version":"1"},'
  .. '"io.modelcontextprotocol/clientCapabilities":{}},'

function request()
  n = n + 1
  -- key: digits only, so a numeric id and the echo text agree on it. Odd n: numeric id, even n: string id.
  local key = string.format("%s%02d%09d", base, tid, n)
  local numeric = (n % 2 == 1)
  local id = numeric and key or ('"' .. key .. '"')
  pending[key] = numeric and "number" or "string"
  local meta = (era == "modern") and META or ""
  local body = '{"jsonrpc":"2.0","id":' .. id .. ',"method":"tools/call","params":{' .. meta
    .. '"name":"' .. tool .. '","arguments":{"text":"m' .. key .. '"}}}'
  return wrk.format(nil, nil, nil, body)
end

local function check(status, body)
  if status ~= 200 then return "status " .. status end
  -- the id exactly as sent: a number stays that number (not 1.0e11, not "…"), a string stays a string
  local kind, key = "string", body:match('"id"%s*:%s*"(%d+)"')
  if not key then
    kind, key = "number", body:match('"id"%s*:%s*(%d+)[,}%s]')
  end
  if not key then return "no id, or an id that is not one this script sends" end
  if not pending[key] then return "id " .. key .. " not pending (duplicate or never sent)" end
  if pending[key] ~= kind then return "id " .. key .. " sent as a " .. pending[key] .. ", answered as a " .. kind end
  pending[key] = nil
  if not body:find('"text"%s*:%s*"m' .. key .. '"') then return "echo text for id " .. key .. " missing" end
  return nil
end

function response(status, headers, body)
  local why = check(status, body)
  if why then
    bad = bad + 1
    if not first_bad then first_bad = (why .. ": " .. body:sub(1, 200)):gsub('[%c\\]', " "):gsub('"', "'") end
  else
    good = good + 1
  end
  if max_n > 0 and good + bad >= max_n then wrk.thread:stop() end
end

function done(summary, latency, requests)
  local g, b, fb = 0, 0, ""
  for _, t in ipairs(threads) do
    g = g + t:get("good")
    b = b + t:get("bad")
    local f = t:get("first_bad")
    if f and fb == "" then fb = f end
  end
  local e = summary.errors
  local out = string.format(
    '{"requests":%d,"duration_us":%d,"good":%d,"bad":%d,"p50_us":%d,"p90_us":%d,"p99_us":%d,'
      .. '"max_us":%d,"connect_errors":%d,"read_errors":%d,"write_errors":%d,"status_errors":%d,'
      .. '"timeouts":%d,"first_bad":"%s"}',
    summary.requests, summary.duration, g, b, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency.max, e.connect, e.read, e.write, e.status, e.timeout, fb)
  local path = os.getenv("OUT")
  if path and path ~= "" then
    local f = assert(io.open(path, "w"))
    f:write(out, "\n")
    f:close()
  else
    io.write(out, "\n")
  end
end
