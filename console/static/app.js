// Flux console: a single-page application on the broker's HTTP API (docs/http-api.md) and
// its live event stream (/ui/events). Plain JavaScript, no build step. Every value that comes
// from the cluster (topic names, keys, values, headers) is put in the page as text, never as
// markup.
"use strict";

const main = document.getElementById("main");
const notice = document.getElementById("notice");
const liveBadge = document.getElementById("live");
const HISTORY_POINTS = 120;
const SCHEMA_REQUESTS_IN_FLIGHT = 8;  // registry reads one page has running at once
let cleanup = [];  // what the current page must undo when another is shown

// -- helpers -----------------------------------------------------------------------------------

function h(tag, attrs, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) element.addEventListener(name.slice(2), value);
    else if (name === "className") element.className = value;
    else element.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return element;
}

function table(columns, rows, attrs) {
  return h("table", attrs || {},
    h("thead", {}, h("tr", {}, columns.map((c) => h("th", { className: c.num ? "num" : "" }, c.title)))),
    h("tbody", {}, rows.map((row) => h("tr", row.attrs || {},
      columns.map((c) => h("td", { className: c.num ? "num" : "" }, c.cell(row)))))));
}

function card(label, value, id, tone) {
  return h("div", { className: "card" }, h("div", { className: "label" }, label),
    h("div", { className: "value " + (tone || ""), id: id }, value));
}

function fmt(n) {
  if (n === null || n === undefined) return "–";
  return Number(n).toLocaleString("en-US", { maximumFractionDigits: 1 });
}

function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = n, unit = 0;
  while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit += 1; }
  return `${value.toFixed(unit ? 1 : 0)} ${units[unit]}`;
}

function show(message, info) {
  notice.textContent = message;
  notice.className = info ? "notice info" : "notice";
  notice.hidden = !message;
}

async function api(path, options) {
  const init = Object.assign({ headers: {} }, options || {});
  if (init.json !== undefined) {
    init.body = JSON.stringify(init.json);
    init.headers["Content-Type"] = "application/json";
    delete init.json;
  }
  const response = await fetch(path, init);
  let body = null;
  try { body = await response.json(); } catch (error) { body = null; }
  if (!response.ok) {
    const reason = body && (body.error || body.message) ? (body.error || body.message) : response.statusText;
    const failure = new Error(`${response.status}: ${reason}`);
    failure.status = response.status;
    throw failure;
  }
  return body;
}

function enc(name) { return encodeURIComponent(name); }

// fn(item) for every item, at most `limit` running at once; a failure is null in the results.
async function pooled(items, limit, fn) {
  const results = new Array(items.length).fill(null);
  let next = 0;
  async function worker() {
    while (next < items.length) {
      const index = next++;
      try { results[index] = await fn(items[index], index); } catch (error) { results[index] = null; }
    }
  }
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return results;
}

function route() {
  const hash = location.hash.replace(/^#/, "") || "/cluster";
  const [path, query] = hash.split("?");
  return { parts: path.split("/").filter(Boolean).map(decodeURIComponent),
           query: new URLSearchParams(query || "") };
}

// Live figures: one EventSource per page, closed when the page goes.
function stream(params, onEvent) {
  const query = new URLSearchParams();
  for (const topic of params.topics || []) query.append("topic", topic);
  for (const group of params.groups || []) query.append("group", group);
  if (params.totals) query.set("totals", "true");
  const source = new EventSource("/ui/events?" + query.toString());
  source.onopen = () => { liveBadge.textContent = "● live"; };
  source.onerror = () => { liveBadge.textContent = "○ reconnecting"; };
  source.onmessage = (message) => onEvent(JSON.parse(message.data));
  cleanup.push(() => source.close());
  return source;
}

function lineChart(canvas, label) {
  const chart = new Chart(canvas.getContext("2d"), {
    type: "line",
    data: { labels: [], datasets: [{ label: label, data: [], borderColor: "#2463b3",
                                      backgroundColor: "rgba(36,99,179,.12)", fill: true,
                                      pointRadius: 0, tension: 0.2 }] },
    options: { animation: false, responsive: true, maintainAspectRatio: false,
               scales: { y: { beginAtZero: true } }, plugins: { legend: { display: true } } },
  });
  cleanup.push(() => chart.destroy());
  return {
    chart: chart,
    push(time, value) {
      chart.data.labels.push(new Date(time).toLocaleTimeString());
      chart.data.datasets[0].data.push(value);
      if (chart.data.labels.length > HISTORY_POINTS) {
        chart.data.labels.shift();
        chart.data.datasets[0].data.shift();
      }
      chart.update("none");
    },
  };
}

// A rate from successive sums: (sum now - sum before) / seconds between them.
function rater() {
  let last = null;
  return (time, sum) => {
    const rate = last && time > last.time ? Math.max(0, (sum - last.sum) * 1000 / (time - last.time)) : null;
    last = { time: time, sum: sum };
    return rate;
  };
}

function summaryCards(summary) {
  const set = (id, value, bad) => {
    const element = document.getElementById(id);
    if (!element) return;
    element.textContent = fmt(value);
    element.className = "value " + (bad ? "bad" : "");
  };
  set("sum-brokers", summary.brokers - summary.fenced, summary.fenced > 0);
  set("sum-fenced", summary.fenced, summary.fenced > 0);
  set("sum-topics", summary.topics);
  set("sum-partitions", summary.partitions);
  set("sum-under", summary.under_replicated, summary.under_replicated > 0);
  set("sum-offline", summary.offline, summary.offline > 0);
  const controller = document.getElementById("sum-controller");
  if (controller) controller.textContent = summary.controller_id === null ? "–" : summary.controller_id;
}

// -- pages -------------------------------------------------------------------------------------

async function clusterPage() {
  const cluster = await api("/cluster");
  const problems = [];
  for (const topic of cluster.topics) {
    for (const p of topic.partitions) {
      if (p.leader < 0 || p.isr.length < p.replicas.length) problems.push({ topic: topic.name, p: p });
    }
  }
  const voters = new Set(cluster.quorum_voters.map((v) => v.id));
  main.replaceChildren(
    h("h1", {}, "Cluster"),
    h("div", { className: "cards" },
      card("brokers up", "…", "sum-brokers"), card("fenced", "…", "sum-fenced"),
      card("active controller", cluster.controller_id === null ? "–" : cluster.controller_id, "sum-controller"),
      card("topics", "…", "sum-topics"), card("partitions", "…", "sum-partitions"),
      card("under-replicated", "…", "sum-under"), card("offline", "…", "sum-offline"),
      card("requests/s (this broker)", "…", "sum-requests")),
    h("h2", {}, "Brokers"),
    table([
      { title: "id", cell: (b) => b.id },
      { title: "status", cell: (b) => h("span", { className: "badge " + (b.fenced ? "bad" : "ok") }, b.fenced ? "fenced" : "up") },
      { title: "roles", cell: (b) => [b.id === cluster.controller_id ? h("span", { className: "badge" }, "active controller") : null,
                                       voters.has(b.id) ? h("span", { className: "badge" }, "quorum voter") : null] },
      { title: "Kafka listener", cell: (b) => b.kafka },
      { title: "HTTP", cell: (b) => b.http },
      { title: "rack", cell: (b) => b.rack || "–" },
    ], cluster.brokers.sort((a, b) => a.id - b.id), { id: "brokers" }),
    h("h2", {}, "Controller quorum"),
    table([{ title: "node", cell: (v) => v.id }, { title: "Raft address", cell: (v) => v.raft },
           { title: "role", cell: (v) => v.id === cluster.controller_id ? "leader (active controller)" : "follower" }],
          cluster.quorum_voters, { id: "voters" }),
    h("h2", {}, `Under-replicated or offline partitions (${problems.length})`),
    problems.length === 0 ? h("p", { className: "ok", id: "no-problems" }, "Every partition has a leader and its whole ISR.")
      : table([{ title: "topic", cell: (x) => h("a", { href: `#/topics/${enc(x.topic)}` }, x.topic) },
               { title: "partition", cell: (x) => x.p.partition },
               { title: "leader", cell: (x) => x.p.leader < 0 ? h("span", { className: "bad" }, "none (offline)") : x.p.leader },
               { title: "replicas", cell: (x) => x.p.replicas.join(", ") },
               { title: "ISR", cell: (x) => x.p.isr.join(", ") }], problems.slice(0, 500), { id: "problems" }),
  );
  const requests = rater();
  stream({}, (event) => {
    summaryCards(event.cluster);
    const rate = requests(event.time_ms, event.cluster.requests);
    const element = document.getElementById("sum-requests");
    if (element && rate !== null) element.textContent = fmt(rate);
  });
}

async function topicsPage() {
  // The table first; sizes and message counts (one request to each broker) fill in after.
  const [listing, cluster] = await Promise.all([api("/topics"), api("/cluster")]);
  const states = new Map(cluster.topics.map((t) => [t.name, t.partitions]));
  const rows = listing.topics.sort((a, b) => a.name.localeCompare(b.name)).map((t) => {
    const partitions = states.get(t.name) || [];
    return { name: t.name, partitions: t.partitions, config: t.config, messages: null,
             replication: partitions.length ? partitions[0].replicas.length : 0,
             under: partitions.filter((p) => p.leader < 0 || p.isr.length < p.replicas.length).length,
             attrs: { "data-topic": t.name } };
  });
  const form = h("form", { className: "inline", id: "create-topic" },
    h("label", {}, "name", h("input", { name: "name", required: true, placeholder: "orders" })),
    h("label", {}, "partitions", h("input", { name: "partitions", type: "number", min: 1, value: 3 })),
    h("label", {}, "replication factor", h("input", { name: "replication_factor", type: "number", min: 1, value: 3 })),
    h("button", { className: "primary", type: "submit" }, "Create topic"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const data = new FormData(form);
    try {
      await api("/topics", { method: "POST", json: { name: data.get("name"),
        partitions: Number(data.get("partitions")), replication_factor: Number(data.get("replication_factor")) } });
      show(`Topic ${data.get("name")} created.`, true);
      render();
    } catch (error) { show(`Cannot create topic ${data.get("name")}: ${error.message}`); }
  });
  main.replaceChildren(
    h("h1", {}, `Topics (${rows.length})`),
    form,
    table([
      { title: "name", cell: (t) => h("a", { href: `#/topics/${enc(t.name)}` }, t.name) },
      { title: "partitions", num: true, cell: (t) => t.partitions },
      { title: "replication", num: true, cell: (t) => t.replication },
      { title: "under-replicated", num: true, cell: (t) => h("span", { className: t.under ? "bad" : "" }, t.under) },
      { title: "messages", num: true, cell: (t) => h("span", { "data-messages": t.name }, fmt(t.messages)) },
      { title: "size", num: true, cell: (t) => h("span", { "data-size": t.name }, "…") },
      { title: "msg/s", num: true, cell: (t) => h("span", { "data-rate": t.name }, "…") },
      { title: "config overrides", cell: (t) => Object.entries(t.config).map(([k, v]) => h("span", { className: "badge" }, `${k}=${v}`)) },
      { title: "", cell: (t) => t.name.startsWith("__") ? h("span", { className: "muted" }, "internal") : deleteButton(t.name) },
    ], rows, { id: "topics" }));
  api("/topics?totals=true").then((totals) => {
    for (const t of totals.topics) {
      const size = main.querySelector(`[data-size="${CSS.escape(t.name)}"]`);
      if (size) size.textContent = bytes(t.size_bytes);
      const count = main.querySelector(`[data-messages="${CSS.escape(t.name)}"]`);
      if (count && t.messages !== null) count.textContent = fmt(t.messages);
    }
  }).catch(() => undefined);
  // Live: each topic's message count and rate, from one stream (one request per broker).
  const cells = new Map();
  for (const element of main.querySelectorAll("[data-rate]")) cells.set(element.dataset.rate, { rate: element, rater: rater() });
  for (const element of main.querySelectorAll("[data-messages]")) cells.get(element.dataset.messages).messages = element;
  stream({ totals: true }, (event) => {
    summaryCards(event.cluster);
    for (const [name, end] of Object.entries(event.totals || {})) {
      const cell = cells.get(name);
      if (!cell) continue;
      cell.messages.textContent = fmt(end);
      const value = cell.rater(event.time_ms, end);
      if (value !== null) cell.rate.textContent = fmt(value);
    }
  });
}

function deleteButton(name) {
  const button = h("button", { className: "danger", "data-delete": name }, "Delete");
  button.addEventListener("click", async () => {
    if (button.dataset.armed !== "yes") {  // a second click confirms (no modal dialog)
      button.dataset.armed = "yes";
      button.textContent = "Click again to delete";
      return;
    }
    try {
      await api(`/topics/${enc(name)}`, { method: "DELETE" });
      show(`Topic ${name} deleted.`, true);
      render();
    } catch (error) { show(`Cannot delete topic ${name}: ${error.message}`); }
  });
  return button;
}

async function topicPage(name) {
  const topic = await api(`/topics/${enc(name)}?offsets=all`);
  const total = (field) => topic.partitions.reduce((sum, p) => sum + (p[field] || 0), 0);
  const configForm = h("form", { className: "inline", id: "alter-config" },
    h("label", {}, "config", h("input", { name: "name", required: true, placeholder: "retention.ms" })),
    h("label", {}, "value (empty deletes the override)", h("input", { name: "value" })),
    h("button", { className: "primary", type: "submit" }, "Set"));
  configForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    const data = new FormData(configForm);
    const value = data.get("value");
    try {
      await api(`/topics/${enc(name)}/configs`, { method: "PATCH",
        json: { configs: { [data.get("name")]: value === "" ? null : value } } });
      show(`${data.get("name")} of ${name} changed.`, true);
      render();
    } catch (error) { show(`Cannot change ${data.get("name")}: ${error.message}`); }
  });
  const canvas = h("canvas", { id: "produce-chart" });
  main.replaceChildren(
    h("h1", {}, "Topic ", h("span", { id: "topic-name" }, topic.name)),
    h("p", {}, h("a", { href: `#/topics/${enc(name)}/messages` }, "Browse messages"),
      h("span", { className: "muted" }, `  · id ${topic.topic_id}`)),
    h("div", { className: "cards" },
      card("partitions", topic.partitions.length),
      card("messages (sum of high watermarks)", fmt(total("high_watermark")), "topic-end"),
      card("size (leaders)", bytes(total("size_bytes"))),
      card("produce rate (msg/s)", "…", "topic-rate")),
    h("h2", {}, "Produce rate"),
    h("div", { className: "chart" }, canvas),
    h("h2", {}, "Partitions"),
    h("div", { className: "scroll" }, table([
      { title: "partition", num: true, cell: (p) => p.partition },
      { title: "leader", num: true, cell: (p) => p.leader < 0 ? h("span", { className: "bad" }, "none") : p.leader },
      { title: "replicas", cell: (p) => p.replicas.join(", ") },
      { title: "ISR", cell: (p) => h("span", { className: p.isr.length < p.replicas.length ? "bad" : "" }, p.isr.join(", ")) },
      { title: "leader epoch", num: true, cell: (p) => p.leader_epoch },
      { title: "log start", num: true, cell: (p) => fmt(p.log_start_offset) },
      { title: "high watermark", num: true, cell: (p) => fmt(p.high_watermark) },
      { title: "log end", num: true, cell: (p) => fmt(p.log_end_offset) },
      { title: "size (leader)", num: true, cell: (p) => bytes(p.size_bytes) },
    ], topic.partitions.map((p) => Object.assign({ attrs: { "data-partition": p.partition } }, p)), { id: "partitions" })),
    h("h2", {}, "Configuration overrides"),
    Object.keys(topic.config).length === 0 ? h("p", { className: "muted", id: "configs" }, "None: every config is the broker default.")
      : table([{ title: "name", cell: (c) => c[0] }, { title: "value", cell: (c) => c[1] }],
              Object.entries(topic.config), { id: "configs" }),
    configForm,
    h("h2", {}, "Delete"), deleteButton(name));
  const chart = lineChart(canvas, "messages/s");
  const rate = rater();
  stream({ topics: [name] }, (event) => {
    summaryCards(event.cluster);
    const figures = event.topics[name];
    if (!figures) return;
    document.getElementById("topic-end").textContent = fmt(figures.end);
    const value = rate(event.time_ms, figures.end);
    if (value !== null) {
      document.getElementById("topic-rate").textContent = fmt(value);
      chart.push(event.time_ms, value);
    }
  });
}

function renderValue(text, base64, format) {
  if (format === "hex") {
    const raw = base64 !== undefined ? atob(base64) : unescape(encodeURIComponent(text || ""));
    return h("pre", {}, Array.from(raw, (c) => c.charCodeAt(0).toString(16).padStart(2, "0")).join(" "));
  }
  if (text === undefined || text === null) return base64 !== undefined ? h("span", { className: "muted" }, `(${atob(base64).length} bytes, binary: see hex)`) : h("span", { className: "muted" }, "null");
  if (format === "json") {
    try { return h("pre", {}, JSON.stringify(JSON.parse(text), null, 2)); } catch (error) { /* not JSON */ }
  }
  return h("pre", {}, text);
}

async function messagesPage(name, query) {
  const topic = await api(`/topics/${enc(name)}?offsets=all`);
  const partition = Number(query.get("partition") || 0);
  const order = query.get("order") || "newest";
  const format = query.get("format") || "text";
  const limit = Math.min(Number(query.get("limit") || 50), 1000);
  const state = topic.partitions[partition] || {};
  const start = state.log_start_offset || 0;
  const end = state.high_watermark || 0;
  let offset = query.has("offset") ? Number(query.get("offset")) : (order === "newest" ? Math.max(start, end - limit) : start);
  offset = Math.min(Math.max(offset, start), end);
  const time = query.get("time");  // a datetime-local value: from the first message stamped then
  let read = { messages: [] };
  const path = `/topics/${enc(name)}/partitions/${partition}/messages`;
  if (end > start && time && !query.has("offset")) {
    read = await api(`${path}?timestamp=${Date.parse(time)}&limit=${limit}`);
  } else if (end > start) {
    read = await api(`${path}?offset=${offset}&limit=${limit}`);
  }
  const messages = order === "newest" ? read.messages.slice().reverse() : read.messages;
  const controls = h("form", { className: "inline", id: "browse" },
    h("label", {}, "partition", h("select", { name: "partition" },
      topic.partitions.map((p) => h("option", { value: p.partition, selected: p.partition === partition }, p.partition)))),
    h("label", {}, "from offset", h("input", { name: "offset", type: "number", min: 0, value: query.get("offset") || "" , placeholder: "auto" })),
    h("label", {}, "or from time", h("input", { name: "time", type: "datetime-local", step: 1, value: time || "" })),
    h("label", {}, "order", h("select", { name: "order" },
      h("option", { value: "newest", selected: order === "newest" }, "newest first"),
      h("option", { value: "oldest", selected: order === "oldest" }, "oldest first"))),
    h("label", {}, "value as", h("select", { name: "format" },
      ["text", "json", "hex"].map((f) => h("option", { value: f, selected: f === format }, f)))),
    h("label", {}, "limit", h("input", { name: "limit", type: "number", min: 1, max: 1000, value: limit })),
    h("button", { type: "submit" }, "Show"));
  controls.addEventListener("submit", (event) => {
    event.preventDefault();
    const data = new FormData(controls);
    const next = new URLSearchParams();
    for (const [key, value] of data.entries()) if (value !== "") next.set(key, value);
    location.hash = `#/topics/${enc(name)}/messages?${next.toString()}`;
  });
  const produce = h("form", { className: "inline", id: "produce" },
    h("label", {}, "key", h("input", { name: "key" })),
    h("label", {}, "value", h("input", { name: "value", required: true, size: 40 })),
    h("button", { className: "primary", type: "submit" }, "Produce to partition " + partition));
  produce.addEventListener("submit", async (event) => {
    event.preventDefault();
    const data = new FormData(produce);
    const message = { value: data.get("value"), partition: partition };
    if (data.get("key")) message.key = data.get("key");
    try {
      const answer = await api(`/topics/${enc(name)}/messages`, { method: "POST", json: message });
      show(`Stored at offset ${answer.offsets[0].offset} of partition ${answer.offsets[0].partition}.`, true);
      render();
    } catch (error) { show(`Cannot produce: ${error.message}`); }
  });
  main.replaceChildren(
    h("h1", {}, "Messages of ", h("a", { href: `#/topics/${enc(name)}` }, name)),
    controls,
    h("p", { className: "muted" }, `Partition ${partition}: offsets ${fmt(start)} to ${fmt(end)} (high watermark); showing ${messages.length}.`),
    table([
      { title: "offset", num: true, cell: (m) => m.offset },
      { title: "timestamp", cell: (m) => new Date(m.timestamp).toISOString() },
      { title: "key", cell: (m) => renderValue(m.key, m.key_base64, format === "hex" ? "hex" : "text") },
      { title: "value", cell: (m) => renderValue(m.value, m.value_base64, format) },
      { title: "headers", cell: (m) => Object.entries(m.headers || {}).map(([k, v]) => h("div", {}, h("span", { className: "badge" }, k), v === null ? "null" : String(v))) },
    ], messages.map((m) => Object.assign({ attrs: { "data-offset": m.offset } }, m)), { id: "messages" }),
    h("h2", {}, "Produce a test message"), produce);
}

// A consumer group member's assignment: Kafka's ConsumerProtocolAssignment (int16 version,
// then topics: int16-length name, int32 count of int32 partitions), "topic: p, p" each.
function decodeAssignment(base64) {
  if (!base64) return [];
  const raw = Uint8Array.from(atob(base64), (c) => c.charCodeAt(0));
  const view = new DataView(raw.buffer);
  try {
    let at = 2;
    const topics = [];
    const count = view.getInt32(at); at += 4;
    for (let t = 0; t < count; t++) {
      const length = view.getInt16(at); at += 2;
      const name = new TextDecoder().decode(raw.subarray(at, at + length)); at += length;
      const partitions = [];
      const n = view.getInt32(at); at += 4;
      for (let p = 0; p < n; p++) { partitions.push(view.getInt32(at)); at += 4; }
      topics.push(`${name}: ${partitions.sort((a, b) => a - b).join(", ")}`);
    }
    return topics;
  } catch (error) {
    return [`(${raw.length} bytes, not a consumer assignment)`];
  }
}

async function groupsPage() {
  const listing = await api("/groups");
  main.replaceChildren(
    h("h1", {}, `Consumer groups (${listing.groups.length})`),
    table([
      { title: "group", cell: (g) => h("a", { href: `#/groups/${enc(g.group_id)}` }, g.group_id) },
      { title: "state", cell: (g) => g.group_state || "–" },
      { title: "protocol", cell: (g) => g.protocol_type || "–" },
    ], listing.groups.map((g) => Object.assign({ attrs: { "data-group": g.group_id } }, g)), { id: "groups" }));
}

async function groupPage(name) {
  const group = await api(`/groups/${enc(name)}`);
  const members = group.members || [];
  const lag = group.offsets.reduce((sum, o) => sum + (o.lag || 0), 0);
  const topics = [...new Set(group.offsets.map((o) => o.topic))];
  const reset = h("form", { className: "inline", id: "reset-offsets" },
    h("label", {}, "topic", h("select", { name: "topic" }, topics.map((t) => h("option", { value: t }, t)))),
    h("label", {}, "to", h("select", { name: "to" }, h("option", { value: "earliest" }, "earliest"),
      h("option", { value: "latest" }, "latest"), h("option", { value: "offset" }, "offset…"))),
    h("label", {}, "offset", h("input", { name: "offset", type: "number", min: 0 })),
    h("button", { className: "primary", type: "submit" }, "Reset offsets"));
  reset.addEventListener("submit", async (event) => {
    event.preventDefault();
    const data = new FormData(reset);
    const to = data.get("to") === "offset" ? Number(data.get("offset")) : data.get("to");
    try {
      await api(`/groups/${enc(name)}/offsets`, { method: "POST", json: { topic: data.get("topic"), to: to } });
      show(`Offsets of ${name} on ${data.get("topic")} reset to ${to}.`, true);
      render();
    } catch (error) { show(`Cannot reset offsets: ${error.message}`); }
  });
  const canvas = h("canvas", { id: "lag-chart" });
  const rateCanvas = h("canvas", { id: "consume-chart" });
  main.replaceChildren(
    h("h1", {}, "Consumer group ", h("span", { id: "group-name" }, name)),
    h("div", { className: "cards" },
      card("state", group.state || "–", "group-state"),
      card("members", members.length, "group-members"),
      card("total lag (messages)", fmt(lag), "group-lag", lag > 0 ? "warn" : "ok"),
      card("consume rate (msg/s)", "…", "group-rate"),
      card("partitions", group.offsets.length)),
    h("h2", {}, "Members"),
    members.length === 0 ? h("p", { className: "muted", id: "members" }, "No active members.")
      : table([
        { title: "member", cell: (m) => m.member_id },
        { title: "client", cell: (m) => m.client_id },
        { title: "host", cell: (m) => m.client_host },
        { title: "static id", cell: (m) => m.group_instance_id || "–" },
        { title: "assignment", cell: (m) => group.protocol_type === "consumer"
            ? decodeAssignment(m.assignment_base64).map((line) => h("div", {}, line))
            : h("span", { className: "muted" }, group.protocol_type || "–") },
      ], members, { id: "members" }),
    h("h2", {}, "Lag over time"),
    h("div", { className: "chart" }, canvas),
    h("h2", {}, "Consume rate"),
    h("div", { className: "chart" }, rateCanvas),
    h("h2", {}, "Committed offsets"),
    h("div", { className: "scroll" }, table([
      { title: "topic", cell: (o) => h("a", { href: `#/topics/${enc(o.topic)}` }, o.topic) },
      { title: "partition", num: true, cell: (o) => o.partition },
      { title: "committed", num: true, cell: (o) => fmt(o.committed) },
      { title: "high watermark", num: true, cell: (o) => fmt(o.high_watermark) },
      { title: "lag", num: true, cell: (o) => h("span", { className: o.lag ? "warn" : "" }, fmt(o.lag)) },
    ], group.offsets.map((o) => Object.assign({ attrs: { "data-partition": `${o.topic}/${o.partition}` } }, o)), { id: "offsets" })),
    h("h2", {}, "Reset offsets"),
    h("p", { className: "muted" }, "Only for a group without active members (stop its consumers first)."),
    reset);
  const chart = lineChart(canvas, "lag (messages)");
  const rateChart = lineChart(rateCanvas, "messages/s committed");
  const rate = rater();
  stream({ groups: [name] }, (event) => {
    summaryCards(event.cluster);
    const figures = event.groups[name];
    if (!figures) return;
    const element = document.getElementById("group-lag");
    element.textContent = fmt(figures.lag);
    element.className = "value " + (figures.lag > 0 ? "warn" : "ok");
    chart.push(event.time_ms, figures.lag);
    const value = rate(event.time_ms, figures.committed);
    if (value !== null) {
      document.getElementById("group-rate").textContent = fmt(value);
      rateChart.push(event.time_ms, value);
    }
    // The table's rows follow the stream too (the rows drawn with the page; a partition added
    // since shows on the page's next opening).
    const rows = document.querySelectorAll("#offsets tbody tr");
    const byPartition = new Map(Array.from(rows, (row) => [row.dataset.partition, row]));
    for (const [topic, partition, committed, end, lagged] of figures.offsets || []) {
      const row = byPartition.get(`${topic}/${partition}`);
      if (!row) continue;
      row.children[2].textContent = fmt(committed);
      row.children[3].textContent = fmt(end);
      row.children[4].replaceChildren(h("span", { className: lagged ? "warn" : "" }, fmt(lagged)));
    }
  });
}

async function subscriptionsPage() {
  const listing = await api("/subscriptions");
  const rows = listing.subscriptions || [];
  main.replaceChildren(
    h("h1", {}, `Push subscriptions (${rows.length})`),
    rows.length === 0 ? h("p", { className: "muted", id: "subscriptions" }, "No push subscriptions.")
      : table([
        { title: "id", cell: (s) => h("a", { href: `#/subscriptions/${enc(s.id)}` }, s.id) },
        { title: "address", cell: (s) => s.address },
        { title: "topics", cell: (s) => (s.topics || []).map((t) => h("a", { className: "badge", href: `#/topics/${enc(t)}` }, t)) },
        { title: "active", cell: (s) => h("span", { className: s.active ? "ok" : "bad" }, s.active ? "yes" : "no") },
        { title: "in flight", num: true, cell: (s) => s.maxInFlight },
        { title: "group", cell: (s) => s.group ? h("a", { href: `#/groups/${enc(s.group)}` }, s.group) : "–" },
      ], rows, { id: "subscriptions" }));
}

async function subscriptionPage(id) {
  const subscription = await api(`/subscriptions/${enc(id)}`);
  const ends = new Map();
  for (const topic of subscription.topics) {
    try {
      const described = await api(`/topics/${enc(topic)}?offsets=all`);
      for (const p of described.partitions) ends.set(`${topic}/${p.partition}`, p.high_watermark);
    } catch (error) { /* a topic not created yet */ }
  }
  const committed = new Map(subscription.offsets.map((o) => [`${o.topic}/${o.partition}`, o.committed]));
  const rows = subscription.deliveries.map((d) => {
    const key = `${d.topic}/${d.partition}`;
    const end = ends.get(key);
    const done = committed.has(key) ? committed.get(key) : null;
    return Object.assign({ attrs: { "data-partition": key }, committed: done, end: end,
                           pending: end !== undefined && done !== null ? Math.max(end - done, 0) : null }, d);
  });
  const canvas = h("canvas", { id: "pending-chart" });
  main.replaceChildren(
    h("h1", {}, "Push subscription ", h("span", { id: "subscription-id" }, subscription.id)),
    h("div", { className: "cards" },
      card("address", subscription.address),
      card("active", subscription.active ? "yes" : "no (retries exhausted)", "subscription-active", subscription.active ? "ok" : "bad"),
      card("in-flight window", subscription.maxInFlight),
      card("waiting messages", fmt(rows.reduce((sum, r) => sum + (r.pending || 0), 0)), "subscription-pending")),
    h("p", { className: "muted" }, "Topics: ", subscription.topics.join(", "),
      ` · replays old messages: ${subscription.readOld ? "yes" : "no"} · positions kept by group `,
      h("a", { href: `#/groups/${enc(subscription.group)}` }, subscription.group)),
    h("h2", {}, "Waiting messages over time"),
    h("div", { className: "chart" }, canvas),
    h("h2", {}, "Delivery per partition"),
    rows.length === 0 ? h("p", { className: "muted", id: "deliveries" }, "No partition is being delivered (inactive, or its topics have no leader).")
      : table([
        { title: "topic", cell: (d) => d.topic },
        { title: "partition", num: true, cell: (d) => d.partition },
        { title: "by broker", num: true, cell: (d) => d.broker },
        { title: "kind", cell: (d) => d.kind },
        { title: "acknowledged up to", num: true, cell: (d) => fmt(d.acknowledged) },
        { title: "committed", num: true, cell: (d) => fmt(d.committed) },
        { title: "high watermark", num: true, cell: (d) => fmt(d.end) },
        { title: "waiting", num: true, cell: (d) => fmt(d.pending) },
        { title: "retries", cell: (d) => d.retries ? h("span", { className: "bad" }, `${d.retries} of ${d.retry_count} at offset ${d.retrying_offset}`) : "none" },
      ], rows, { id: "deliveries" }));
  const chart = lineChart(canvas, "waiting messages");
  stream({ groups: [subscription.group] }, (event) => {
    summaryCards(event.cluster);
    const figures = event.groups[subscription.group];
    if (!figures) return;
    document.getElementById("subscription-pending").textContent = fmt(figures.lag);
    chart.push(event.time_ms, figures.lag);
  });
}

// The schema registry (Confluent's REST API under /schemas). AVRO and JSON schemas are JSON
// text, shown pretty-printed; a PROTOBUF schema is shown as it was registered.
function schemaType(entry) { return entry.schemaType || "AVRO"; }

function prettySchema(entry) {
  if (schemaType(entry) === "PROTOBUF") return entry.schema;
  try { return JSON.stringify(JSON.parse(entry.schema), null, 2); } catch (error) { return entry.schema; }
}

function subjectLink(subject, version) {
  const query = version === undefined ? "" : `?version=${enc(version)}`;
  return h("a", { href: `#/schemas/${enc(subject)}${query}` }, subject);
}

async function schemasPage() {
  // The table first; each subject's versions and latest schema (two requests) fill in after.
  const subjects = (await api("/schemas/subjects")).slice().sort((a, b) => a.localeCompare(b));
  const rows = subjects.map((s) => ({ subject: s, attrs: { "data-subject": s } }));
  main.replaceChildren(
    h("h1", {}, `Schemas (${subjects.length} subjects)`),
    h("p", { className: "muted" }, "The cluster's schema registry (Confluent's REST API under ",
      h("code", {}, "/schemas"), " on every broker)."),
    subjects.length === 0 ? h("p", { className: "muted", id: "subjects" }, "No subjects registered.")
      : table([
        { title: "subject", cell: (r) => subjectLink(r.subject) },
        { title: "versions", cell: (r) => h("span", { "data-versions": r.subject }, "…") },
        { title: "latest version", num: true, cell: (r) => h("span", { "data-latest-version": r.subject }, "…") },
        { title: "latest id", num: true, cell: (r) => h("span", { "data-latest-id": r.subject }, "…") },
        { title: "type", cell: (r) => h("span", { "data-type": r.subject }, "…") },
      ], rows, { id: "subjects" }));
  const cells = new Map(rows.map((r) => [r.subject, Object.fromEntries(
    ["versions", "latest-version", "latest-id", "type"].map((name) =>
      [name, main.querySelector(`[data-${name}="${CSS.escape(r.subject)}"]`)]))]));
  pooled(subjects, SCHEMA_REQUESTS_IN_FLIGHT, async (subject) => {
    const cell = cells.get(subject);
    try {
      const [versions, latest] = await Promise.all([
        api(`/schemas/subjects/${enc(subject)}/versions`),
        api(`/schemas/subjects/${enc(subject)}/versions/latest`)]);
      cell.versions.replaceChildren(...versions.map((v) =>
        h("a", { className: "badge", href: `#/schemas/${enc(subject)}?version=${v}` }, v)));
      cell["latest-version"].textContent = latest.version;
      cell["latest-id"].textContent = latest.id;
      cell.type.textContent = schemaType(latest);
    } catch (error) {
      cell.versions.textContent = error.message;
      cell.versions.className = "bad";
    }
  });
}

async function schemaSubjectPage(subject, query) {
  const path = `/schemas/subjects/${enc(subject)}`;
  const [versions, config] = await Promise.all([
    api(`${path}/versions`),
    api(`/schemas/config/${enc(subject)}?defaultToGlobal=true`)]);
  const entries = await pooled(versions, SCHEMA_REQUESTS_IN_FLIGHT, (v) => api(`${path}/versions/${v}`));
  const latest = versions[versions.length - 1];
  const wanted = query.has("version") ? Number(query.get("version")) : latest;
  const selected = entries.find((e) => e && e.version === wanted);
  if (!selected) throw new Error(`${subject} has no version ${query.get("version")}`);
  const rows = versions.map((v, index) => Object.assign({ version: v, attrs: { "data-version": v,
    className: v === selected.version ? "selected" : null } }, entries[index] || {}));
  main.replaceChildren(
    h("h1", {}, "Subject ", h("span", { id: "subject-name" }, subject)),
    h("p", {}, h("a", { href: "#/schemas" }, "All subjects")),
    h("div", { className: "cards" },
      card("versions", versions.length, "subject-versions"),
      card("latest version", latest, "subject-latest"),
      card("compatibility", config.compatibilityLevel, "subject-compatibility")),
    h("h2", {}, "Versions"),
    table([
      { title: "version", num: true, cell: (r) => h("a", { href: `#/schemas/${enc(subject)}?version=${r.version}` }, r.version) },
      { title: "schema id", num: true, cell: (r) => r.id === undefined ? "–" : r.id },
      { title: "type", cell: (r) => r.schema === undefined ? "–" : schemaType(r) },
      { title: "references", cell: (r) => (r.references || []).length === 0 ? "–"
          : r.references.map((ref) => h("span", { className: "badge" }, `${ref.name} → ${ref.subject} v${ref.version}`)) },
    ], rows, { id: "versions" }),
    h("h2", {}, "Version ", h("span", { id: "schema-version" }, selected.version),
      h("span", { className: "muted" }, ` · id ${selected.id} · ${schemaType(selected)}`)),
    ...((selected.references || []).length === 0 ? []
      : [h("p", { id: "schema-references" }, "References: ", selected.references.map((ref) =>
        h("span", { className: "badge" }, `${ref.name} → `, subjectLink(ref.subject, ref.version), ` v${ref.version}`)))]),
    h("pre", { className: "schema", id: "schema-text" }, prettySchema(selected)));
}

// -- router ------------------------------------------------------------------------------------

async function render() {
  for (const undo of cleanup.splice(0)) undo();
  const { parts, query } = route();
  const section = parts[0] || "cluster";
  for (const link of document.querySelectorAll("header nav a")) {
    link.classList.toggle("active", link.dataset.nav === section);
  }
  try {
    if (section === "topics" && parts.length === 1) await topicsPage();
    else if (section === "topics" && parts[2] === "messages") await messagesPage(parts[1], query);
    else if (section === "topics") await topicPage(parts[1]);
    else if (section === "groups" && parts.length === 1) await groupsPage();
    else if (section === "groups") await groupPage(parts[1]);
    else if (section === "subscriptions" && parts.length === 1) await subscriptionsPage();
    else if (section === "subscriptions") await subscriptionPage(parts[1]);
    else if (section === "schemas" && parts.length === 1) await schemasPage();
    else if (section === "schemas") await schemaSubjectPage(parts[1], query);
    else await clusterPage();
    document.body.dataset.page = section;
    document.body.dataset.rendered = String(Date.now());
  } catch (error) {
    main.replaceChildren(h("h1", {}, "Cannot show this page"), h("p", { className: "bad", id: "page-error" }, error.message));
    document.body.dataset.rendered = String(Date.now());
  }
}

window.addEventListener("hashchange", () => { show(""); render(); });
render();
