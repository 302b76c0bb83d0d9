-- Used by bench/lib/load.ts: optional request method/body from the environment, and a JSON
-- summary (latencies in microseconds) on one line starting with WRKJSON.
local method = os.getenv("WRK_METHOD")
local body = os.getenv("WRK_BODY")
local ctype = os.getenv("WRK_CONTENT_TYPE")
if method and method ~= "" then wrk.method = method end
if body and body ~= "" then wrk.body = body end
if ctype and ctype ~= "" then wrk.headers["Content-Type"] = ctype end

-- No response() callback on purpose: defining one makes wrk copy every body into Lua, which
-- caps an 8 MiB download at a fraction of the wire speed. errors.status counts answers >= 400.
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests":%d,"duration_us":%d,"bytes":%d,"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},"lat_us":{"p50":%d,"p90":%d,"p99":%d,"mean":%.3f,"max":%d}}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.mean, latency.max))
end
