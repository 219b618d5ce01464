-- wrk script for benchmarks/push_http.py --publish-client wrk: POST /publish, one message per
-- request, each with its own id ("<prefix>-<thread>-<n>"), to the topic given as the first
-- script argument; prints one JSON line of counts and latency (microseconds) when done. With a
-- third argument, a file of ids (one per line), the n-th request carries the n-th id instead
-- (push_http.py --route leader writes ids whose partitions the target broker leads).
local threads = {}
local next_thread = 0

function setup(thread)
  thread:set("thread_id", next_thread)
  next_thread = next_thread + 1
  table.insert(threads, thread)
end

function init(args)
  topic = args[1]
  prefix = args[2] .. "-" .. thread_id
  sent = 0
  ids = nil
  if args[3] then
    ids = {}
    for line in io.lines(args[3]) do
      table.insert(ids, line)
    end
  end
end

function request()
  sent = sent + 1
  local id
  if ids then
    id = ids[sent] or string.format("%s-extra-%d", prefix, sent)
  else
    id = string.format("%s-%d", prefix, sent)
  end
  local body = string.format('{"id":"%s","message":"m-%s-%d","topic":"%s"}',
    id, prefix, sent, topic)
  return wrk.format("POST", "/publish", {["Content-Type"] = "application/json"}, body)
end

function done(summary, latency, requests)
  local errors = summary.errors
  io.write(string.format(
    '{"requests": %d, "duration_us": %d, "connect_errors": %d, "read_errors": %d, ' ..
    '"write_errors": %d, "status_errors": %d, "timeouts": %d, ' ..
    '"latency_p50_us": %d, "latency_p99_us": %d, "latency_max_us": %d}\n',
    summary.requests, summary.duration, errors.connect, errors.read, errors.write,
    errors.status, errors.timeout, latency:percentile(50), latency:percentile(99), latency.max))
end
