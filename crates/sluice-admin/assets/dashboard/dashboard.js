// Sluice dashboard: reads /admin/feed (server-sent events) with fetch, so that the admin
// token can travel in an Authorization header (EventSource cannot send one), and draws the
// state and the last minutes of the time series with plain DOM and SVG.
"use strict";

const PLOT_POINTS = 300; // 5 minutes at one point a second
const points = [];
const $ = (id) => document.getElementById(id);

function text(id, v) { const e = $(id); if (e && e.textContent !== String(v)) e.textContent = String(v); }
function ms(v) { return v == null ? "–" : v < 10 ? v.toFixed(1) : Math.round(v).toString(); }
function dur(s) {
  if (s == null) return "–";
  if (s < 60) return s.toFixed(1) + " s";
  if (s < 3600) return Math.floor(s / 60) + " m " + Math.floor(s % 60) + " s";
  return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " m";
}
function bytes(n) {
  if (n == null) return "–";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"]; let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + u[i];
}
function el(tag, attrs, children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const c of children || []) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}
function rows(tbody, list, empty) {
  const body = $(tbody);
  body.replaceChildren(...(list.length ? list : [el("tr", {}, [el("td", { colspan: 5, class: "meta" }, [empty])])]));
}

function plot(id, series) {
  const svg = $(id);
  const data = points.slice(-PLOT_POINTS);
  let max = 0;
  for (const s of series) for (const p of data) { const v = p[s.key]; if (v != null && v > max) max = v; }
  max = max > 0 ? max * 1.15 : 1;
  const n = Math.max(data.length - 1, 1);
  const parts = [];
  series.forEach((s) => {
    const pts = [];
    data.forEach((p, i) => {
      const v = p[s.key];
      if (v != null) pts.push(((i / n) * 300).toFixed(1) + "," + (80 - (v / max) * 76).toFixed(1));
    });
    parts.push(`<polyline stroke="var(--${s.color})" points="${pts.join(" ")}"/>`);
  });
  parts.push(`<text x="2" y="9">${max < 10 ? max.toFixed(1) : Math.round(max)}</text>`);
  svg.innerHTML = parts.join("");
}

function drawPlots() {
  plot("plot-rps", [{ key: "rps", color: "c1" }, { key: "errors", color: "c3" }]);
  plot("plot-active", [{ key: "active", color: "c1" }, { key: "pending", color: "c2" }]);
  plot("plot-fb", [{ key: "fb_p50", color: "c1" }, { key: "fb_p99", color: "c2" }]);
  plot("plot-fe", [{ key: "fe_p50", color: "c1" }, { key: "fe_p99", color: "c2" }]);
}

function onHistory(h) {
  points.length = 0;
  points.push(...h.points);
}

function onTick(f) {
  const p = f.point;
  if (!points.length || points[points.length - 1].t !== p.t) points.push(p);
  if (points.length > 2 * PLOT_POINTS) points.splice(0, points.length - PLOT_POINTS);
  text("version", f.version);
  text("uptime", dur(f.uptime_s));
  text("config-hash", f.config_hash.slice(0, 19));
  const ready = $("ready");
  ready.textContent = f.draining ? "draining" : f.ready ? "ready" : "not ready";
  ready.className = "badge " + (f.ready ? "ok" : "bad");
  text("rps", p.rps.toFixed(1));
  text("active-streams", f.streams.active);
  text("oldest-stream", f.streams.active ? dur(f.streams.oldest_s) : "–");
  text("mean-age", f.streams.active ? dur(f.streams.mean_s) : "–");
  text("pending", p.pending);
  text("first-byte", ms(p.fb_p50) + " / " + ms(p.fb_p99) + " ms");
  text("first-event", ms(p.fe_p50) + " / " + ms(p.fe_p99) + " ms");
  text("errors", p.errors.toFixed(1));
  text("retries", p.retries.toFixed(1) + " / s");
  text("retries-total", f.totals.retries);
  text("fallbacks-total", f.totals.fallbacks);
  text("requests-total", f.totals.requests);
  text("tokens", p.tokens.toFixed(0));
  text("spend", "$" + p.spend.toFixed(6));
  const b = f.books;
  if (b) text("books-hours", b.hours);
  rows("books", b ? ["team", "key", "model"].flatMap((g) => b[g].map((r) => el("tr", {}, [
    el("td", {}, [g]), el("td", {}, [r.group]), el("td", { class: "n" }, [r.requests]),
    el("td", { class: "n" }, [r.input_tokens + r.output_tokens]),
    el("td", { class: "n" }, ["$" + r.cost_usd])]))) : [], b ? "nothing spent yet" : "no ledger (see [ledger])");

  const tier = (ts) => ts.map((t) => t.upstream + (t.model ? " → " + t.model : "") + (t.weight !== 1 ? " ×" + t.weight : "")).join(", ");
  rows("routes", f.routes.map((r) => el("tr", {}, [el("td", {}, [r.name]), el("td", {}, [r.models.join(" ")]),
    el("td", {}, [tier(r.targets)]), el("td", {}, [tier(r.fallbacks) || "–"])])), "no routes");
  rows("end-reasons", Object.entries(f.totals.end_reasons).sort((a, b) => b[1] - a[1])
    .map(([k, v]) => el("tr", {}, [el("td", {}, [k]), el("td", { class: "n" }, [v])])), "no requests yet");
  rows("keys", f.keys.map((k) => el("tr", {}, [el("td", {}, [k.key]), el("td", { class: "n" }, [k.requests]),
    el("td", { class: "n" }, [k.input_tokens]), el("td", { class: "n" }, [k.output_tokens]),
    el("td", { class: "n" }, [k.spend.toFixed(4)])])), "no per-key usage (keys are not configured)");

  $("upstreams").replaceChildren(...f.upstreams.map((u) => {
    const lanes = u.lanes.map((l) => el("tr", {}, [
      el("td", {}, [l.lane]), el("td", { class: "n" }, [l.ready]), el("td", { class: "n" }, [l.degraded]),
      el("td", { class: "n" }, [l.draining]), el("td", { class: "n" }, [l.in_flight]), el("td", { class: "n" }, [l.pending])]));
    const conns = u.lanes.flatMap((l) => l.connections).map((c) => {
      const pct = c.cap ? Math.min(100, (100 * c.in_flight) / c.cap) : 0;
      const bar = el("span", { class: "bar", title: c.in_flight + " of " + c.cap }, [el("span", { style: "width:" + pct + "%" })]);
      return el("tr", {}, [el("td", {}, ["#" + c.id]), el("td", {}, [c.lane]), el("td", {}, [c.protocol]),
        el("td", { class: "st-" + c.state }, [c.state]), el("td", {}, [bar, " " + c.in_flight + "/" + c.cap]),
        el("td", { class: "n" }, [c.rtt_ms == null ? "–" : c.rtt_ms.toFixed(2) + " ms"]),
        el("td", { class: "n" }, [dur(c.age_ms / 1000)]), el("td", { class: "n" }, [c.requests_served]),
        el("td", { class: "n" }, [bytes(c.bytes_in)]), el("td", { class: "n" }, [bytes(c.bytes_out)])]);
    });
    const head = (cols) => el("thead", {}, [el("tr", {}, cols.map((c) => el("th", c.startsWith("#") ? {} : { class: "n" }, [c.replace(/^#/, "")])))]);
    return el("div", { class: "up" }, [
      el("h3", {}, [u.name + " ", el("span", { class: "meta" }, [u.protocol + " · " + u.open_connections + " connections · " + u.in_flight + " in flight"])]),
      el("table", {}, [head(["#lane", "ready", "degraded", "draining", "in flight", "pending"]), el("tbody", {}, lanes)]),
      conns.length ? el("table", {}, [head(["#conn", "#lane", "#proto", "#state", "#in flight / cap", "PING RTT", "age", "requests", "bytes in", "bytes out"]), el("tbody", {}, conns)])
        : el("div", { class: "meta" }, ["no connections open"]),
    ]);
  }));
  drawPlots();
}

function setStatus(cls, words) { const s = $("status"); s.className = "badge " + cls; s.textContent = words; }

function token() {
  const m = location.hash.match(/token=([^&]+)/);
  if (m) { sessionStorage.setItem("sluice-admin-token", decodeURIComponent(m[1])); history.replaceState(null, "", location.pathname); }
  return sessionStorage.getItem("sluice-admin-token");
}

async function connect() {
  const t = token();
  const headers = t ? { Authorization: "Bearer " + t } : {};
  let resp;
  try {
    resp = await fetch("/admin/feed", { headers, cache: "no-store" });
  } catch (e) {
    setStatus("bad", "disconnected"); setTimeout(connect, 2000); return;
  }
  if (resp.status === 401) { setStatus("bad", "token needed"); $("login").hidden = false; return; }
  if (!resp.ok || !resp.body) { setStatus("bad", "feed " + resp.status); setTimeout(connect, 2000); return; }
  $("login").hidden = true;
  setStatus("ok", "live");
  const reader = resp.body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buf.indexOf("\n\n")) >= 0) {
        const block = buf.slice(0, cut); buf = buf.slice(cut + 2);
        let event = "message", data = "";
        for (const line of block.split("\n")) {
          if (line.startsWith("event:")) event = line.slice(6).trim();
          else if (line.startsWith("data:")) data += line.slice(5).trim();
        }
        if (!data) continue;
        const v = JSON.parse(data);
        if (event === "history") onHistory(v); else if (event === "tick") onTick(v);
      }
    }
  } catch (e) { /* the connection broke: reconnect below */ }
  setStatus("wait", "reconnecting");
  setTimeout(connect, 1000);
}

$("login").addEventListener("submit", (e) => {
  e.preventDefault();
  sessionStorage.setItem("sluice-admin-token", $("token").value);
  connect();
});
connect();
