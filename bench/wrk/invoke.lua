-- wrk script for bench/serve.py: POST /retrieve/invoke with the bench questions.
-- RP_QUESTIONS: the questions, one per line; RP_DISTINCT=1 appends a word spelled
-- from the request number, so no query vector is ever cached. A response counts as
-- good only when it is a 200 whose body holds a non-empty chunk list; done() prints
-- one JSON line.
local threads = {}

function setup(thread)
  thread:set("id", #threads + 1)
  table.insert(threads, thread)
end

function init(args)
  bad = 0
  counter = 0
  questions = {}
  for line in string.gmatch(os.getenv("RP_QUESTIONS") or "", "[^\n]+") do
    table.insert(questions, line)
  end
  distinct = os.getenv("RP_DISTINCT") == "1"
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
end

-- A number spelled in letters (a word no document holds): the question is new, so
-- its vector is not cached, without the digits that would read as an identifier.
function letters(n)
  local out = ""
  repeat
    out = string.char(97 + n % 26) .. out
    n = math.floor(n / 26)
  until n == 0
  return "zq" .. out
end

function request()
  counter = counter + 1
  local q = questions[(counter % #questions) + 1]
  if distinct then
    q = q .. " " .. letters(id * 1000003 + counter)
  end
  local body = '{"input":{"question":"' .. q .. '","limit":8}}'
  return wrk.format("POST", "/retrieve/invoke", nil, body)
end

function response(status, headers, body)
  if status ~= 200 or not string.find(body, '"chunks":%[{') then
    bad = bad + 1
  end
end

function done(summary, latency, requests)
  local total_bad = 0
  for _, t in ipairs(threads) do
    total_bad = total_bad + t:get("bad")
  end
  io.write(string.format(
    'RESULT {"requests":%d,"duration_us":%d,"bad":%d,"non2xx":%d,"connect":%d,' ..
    '"read":%d,"write":%d,"timeout":%d,"p50_us":%d,"p95_us":%d,"p99_us":%d}\n',
    summary.requests, summary.duration, total_bad, summary.errors.status,
    summary.errors.connect, summary.errors.read, summary.errors.write,
    summary.errors.timeout, latency:percentile(50), latency:percentile(95),
    latency:percentile(99)))
end
