// The status page's script: polls /status.json and draws it. No library: the page must work
// where the gateway runs, with nothing fetched from elsewhere. Text goes in by textContent only
// (replica addresses and ejection reasons are not HTML).
"use strict";

const POLL_MS = 2000;
const KEY_STORE = "vllm-gateway-admin-key";

function adminKey() {
  const match = /(?:^|[#&])key=([^&]+)/.exec(location.hash);
  if (match) {  // from the address (#key=…): keep it for this tab, then take it out of the address bar
    sessionStorage.setItem(KEY_STORE, decodeURIComponent(match[1]));
    history.replaceState(null, "", location.pathname + location.search);
  }
  return sessionStorage.getItem(KEY_STORE);
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (name === "class") node.className = value; else node.setAttribute(name, value);
  }
  for (const child of children) {
    if (child !== null && child !== undefined) node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function fmt(value, digits = 0) {
  if (value === null || value === undefined) return "–";
  return Number(value).toLocaleString("en-US", {maximumFractionDigits: digits, minimumFractionDigits: digits});
}

function pct(value) { return value === null || value === undefined ? "–" : fmt(100 * value, 1) + " %"; }

function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return fmt(n, i ? 1 : 0) + " " + units[i];
}

function duration(seconds) {
  const s = Math.floor(seconds), d = Math.floor(s / 86400), h = Math.floor(s / 3600) % 24, m = Math.floor(s / 60) % 60;
  return d ? `${d} d ${h} h` : h ? `${h} h ${m} min` : m ? `${m} min ${s % 60} s` : `${s} s`;
}

function replicaRow(r) {
  const ejections = Object.values(r.ejections || {}).reduce((a, b) => a + b, 0);
  const kinds = Object.entries(r.ejections || {}).map(([k, n]) => `${k}: ${n}`).join(", ");
  const index = r.prefix_index;
  const indexText = !index ? "–" : index.events === null ? fmt(index.sent) + " sent"
    : `${fmt(index.events)} events${index.events_live ? "" : " (not live)"} + ${fmt(index.sent)} sent`;
  const kv = r.kv_usage === undefined || !r.metrics ? "–"
    : pct(r.kv_usage) + (r.kv_capacity_tokens ? ` of ${fmt(r.kv_capacity_tokens)} tok` : "");
  const load = (value) => (r.metrics ? fmt(value) : "–");
  return el("tr", {"data-replica": r.url},
    el("td", {}, r.url, r.model ? el("div", {class: "sub"}, r.model) : null),
    el("td", {class: `state state-${r.state}`}, r.state),
    el("td", {class: "reason"}, r.reason || ""),
    el("td", {class: "weights"}, r.weight_version === undefined ? "–" : r.weight_version),
    el("td", {class: "adapters"}, r.adapters === undefined || !r.adapters.length ? "–" : r.adapters.join(", ")),
    el("td", {class: "num"}, fmt(r.inflight)),
    el("td", {class: "num"}, load(r.running)),
    el("td", {class: "num"}, load(r.waiting)),
    el("td", {class: "num"}, kv),
    el("td", {class: "num"}, indexText),
    el("td", {class: "num"}, pct(r.prefix_hit_rate)),
    el("td", {class: "num", title: kinds}, fmt(ejections)),
    el("td", {class: "num"}, fmt(r.requests)));
}

// A small line chart over the last minutes: `values` oldest first, null where there is no point.
function chart(box, title, values, unit, digits) {
  const w = 300, h = 80, pad = 4;
  const present = values.filter((v) => v !== null);
  const top = Math.max(...present, 0) || 1;
  const x = (i) => pad + (i * (w - 2 * pad)) / Math.max(values.length - 1, 1);
  const y = (v) => h - pad - (v * (h - 2 * pad)) / top;
  let path = "", pen = false;
  const dots = [];  // points with no neighbour: a line would not show them
  values.forEach((v, i) => {
    if (v === null) { pen = false; return; }
    path += `${pen ? "L" : "M"}${x(i).toFixed(1)},${y(v).toFixed(1)}`;
    if (!pen && (i + 1 >= values.length || values[i + 1] === null)) dots.push([x(i), y(v)]);
    pen = true;
  });
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
  svg.setAttribute("preserveAspectRatio", "none");
  const line = (attrs) => {
    const node = document.createElementNS("http://www.w3.org/2000/svg", "path");
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    svg.append(node);
  };
  line({d: `M${pad},${h - pad}H${w - pad}`, stroke: "#dcdcde", "stroke-width": "1", fill: "none"});
  if (path) {
    line({d: path, stroke: "#2271b1", "stroke-width": "1.5", fill: "none", "vector-effect": "non-scaling-stroke"});
  }
  for (const [cx, cy] of dots) {
    const dot = document.createElementNS("http://www.w3.org/2000/svg", "circle");
    for (const [k, v] of Object.entries({cx, cy, r: 2.5, fill: "#2271b1"})) dot.setAttribute(k, v);
    svg.append(dot);
  }
  const last = [...values].reverse().find((v) => v !== null);
  box.replaceChildren(
    el("div", {class: "title"}, el("span", {}, title),
       el("span", {class: "last"}, last === undefined ? "–" : `${fmt(last, digits)}${unit ? " " + unit : ""}`)),
    svg,
    el("div", {class: "axis"}, el("span", {}, `max ${fmt(top, digits)}${unit ? " " + unit : ""}`),
       el("span", {}, "now")));
}

function pairs(dl, entries) {
  dl.replaceChildren(...entries.flatMap(([name, value, cls]) => [el("dt", {}, name), el("dd", cls ? {class: cls} : {}, value)]));
}

function render(s) {
  const g = s.gateway;
  document.getElementById("model").textContent = g.model;
  document.getElementById("process").textContent =
    `pid ${g.pid}, up ${duration(g.uptime_s)}${g.draining ? ", DRAINING" : ""}, ${g.websockets} WebSockets`;
  document.getElementById("routing").textContent = `routing: ${g.routing}`;
  document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
  const rows = s.replicas.map(replicaRow);
  document.querySelector("#replicas tbody").replaceChildren(
    ...(rows.length ? rows : [el("tr", {}, el("td", {colspan: "13", class: "empty"}, "no replicas"))]));

  const t = s.traffic;
  chart(document.getElementById("chart-requests"), "Requests", t.requests_per_s, "/s", 2);
  chart(document.getElementById("chart-ttft"), "Time to first token", t.ttft_ms, "ms", 1);
  chart(document.getElementById("chart-itl"), "Inter-token latency", t.itl_ms, "ms", 2);
  chart(document.getElementById("chart-errors"), `Errors (per ${t.step_s} s)`, t.errors, "", 0);

  const kinds = Object.entries(s.errors.by_kind);
  document.querySelector("#errors tbody").replaceChildren(
    ...kinds.map(([kind, n]) => el("tr", {}, el("td", {}, kind), el("td", {class: "num"}, fmt(n)))),
    el("tr", {}, el("td", {class: "empty"}, "cancelled (the client left)"), el("td", {class: "num"}, fmt(s.errors.cancelled))));

  const r = s.routing;
  pairs(document.getElementById("route"), [
    ["mode", r.mode],
    ...Object.entries(r.decisions).map(([reason, n]) => [`decisions: ${reason}`, fmt(n)]),
    ["prefix kept (of the best held)", pct(r.prefix_kept)],
    ["panic routes", fmt(r.panic_routes), r.panic_routes ? "bad" : ""],
    ["ejections over the cap", fmt(r.ejections_overflow)],
  ]);
  const held = s.held;
  pairs(document.getElementById("held"), [
    ["sessions", fmt(held.sessions)], ["rollouts", fmt(held.rollouts)],
    ["rollout tokens", fmt(held.rollout_tokens)],
    ["conversations", held.conversations === null ? "in the shared store" : fmt(held.conversations)],
  ]);
  const st = s.store;
  const fallbacks = Object.entries(st.fallbacks).map(([k, n]) => `${k}: ${n}`).join(", ") || "none";
  pairs(document.getElementById("store"), [
    ["kind", st.kind], ["status", st.status, st.status === "ok" ? "ok" : "bad"],
    ...(st.detail ? [["", st.detail]] : []),
    ...(st.memory_bytes !== undefined ? [["memory", `${bytes(st.memory_bytes)}${st.maxmemory_bytes ? " of " + bytes(st.maxmemory_bytes) : ""}`],
                                         ["keys", fmt(st.keys)], ["evicted keys", fmt(st.evicted_keys)]] : []),
    ["fallbacks", fallbacks, st.fallbacks.unreachable ? "bad" : ""],
  ]);
}

function problem(text, askKey) {
  const banner = document.getElementById("banner");
  banner.style.display = text ? "block" : "none";
  document.getElementById("banner-text").textContent = text || "";
  document.getElementById("key-form").style.display = askKey ? "inline-flex" : "none";
}

async function poll() {
  const key = adminKey();
  try {
    const response = await fetch("/status.json", {headers: key ? {authorization: "Bearer " + key} : {},
                                                  cache: "no-store"});
    if (response.status === 401 || response.status === 403) {
      const body = await response.json().catch(() => ({}));
      problem((body.error && body.error.message) || "The admin key is needed.", true);
      return;  // no polling until a key is given
    }
    if (!response.ok) throw new Error(`/status.json answered ${response.status}`);
    render(await response.json());
    problem("");
  } catch (error) {
    problem(`Cannot read the gateway's status: ${error.message}`, false);
  }
  setTimeout(poll, POLL_MS);
}

document.getElementById("key-form").addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem(KEY_STORE, document.getElementById("key").value.trim());
  poll();
});
poll();
