#!/usr/bin/env python3
"""The load and the report of bench/fleet.sh (standard library only).

  fleet.py keys   --phases a,b --limit N --per S [--reload-limit N]   > keys.toml
  fleet.py load   --url URL --dir DIR [--streams N --calls N --limited N ...]
  fleet.py report --dir DIR --instances N [--summary FILE]

`keys` writes the virtual keys: `load` (every stream and call, a limit far above the load, so
that every request touches Redis) and, per phase and limited worker, `lim-<phase>-<i>`, a
request limit (GCRA: a burst of N, then N per S seconds). A key serves one phase only, so
what it admitted is compared with what its limit allows over that phase alone.

`load` runs worker threads until DIR/phase says `done` (or --max-seconds pass): stream workers
(SSE streams of the mock's paced tokens), call workers and limited workers (small calls, paced,
each on its phase's key). Every request is a new connection to HAProxy with `Connection:
close` and an `x-fleet-id`, which HAProxy logs with the instance it chose. Each request's
outcome goes to DIR/requests.jsonl: its phase (DIR/phase when it started), start, first event
and end times, status, the instance (HAProxy's `x-fleet-server` response header), and for a
failure its cause: `status_NNN[_code]`, `cut` (the connection broke mid-response: a stream
without `[DONE]`), `error_event_<code>` (a stream that ended with an SSE error event),
`timeout`, `connect_refused`, ...

`report` joins DIR/requests.jsonl, DIR/events (what fleet.sh did and when), DIR/haproxy.log and
DIR/metrics-*.txt, prints the report and writes the summary as JSON.
"""

import argparse
import hashlib
import json
import math
import os
import socket
import sys
import threading
import time
from collections import Counter, defaultdict

LOAD_KEY = "sk-fleet-load"


def key_secret(phase, i):
    return f"sk-fleet-lim-{phase}-{i}"


# === keys ===


def cmd_keys(a):
    def entry(kid, secret, extra):
        h = hashlib.sha256(secret.encode()).hexdigest()
        return f'[[key]]\nid = "{kid}"\nhash = "sha256:{h}"\nteam = "fleet"\n{extra}\n'

    out = [entry("load", LOAD_KEY, 'requests = { limit = 1000000000, per = "1m" }')]
    for phase in a.phases.split(","):
        limit = a.reload_limit if (phase == "reload" and a.reload_limit is not None) else a.limit
        for i in range(a.limited):
            out.append(
                entry(
                    f"lim-{phase}-{i}",
                    key_secret(phase, i),
                    f'requests = {{ limit = {limit}, per = "{a.per}s" }}',
                )
            )
    sys.stdout.write("\n".join(out))


# === load ===


class Loader:
    def __init__(self, a):
        self.a = a
        host, port = a.url.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)
        self.host, self.port = host, int(port)
        self.records = []
        self.lock = threading.Lock()
        self.seq = 0
        self.deadline = time.time() + a.max_seconds
        self._phase = ("", 0.0)

    def phase(self):
        # Re-read at most every 20 ms: fleet.sh replaces the file whole (rename).
        name, at = self._phase
        now = time.time()
        if now - at > 0.02:
            try:
                with open(os.path.join(self.a.dir, "phase")) as f:
                    name = f.read().strip()
            except OSError:
                name = name or "start"
            self._phase = (name, now)
        return name

    def running(self):
        return self.phase() != "done" and time.time() < self.deadline

    def next_id(self, kind):
        with self.lock:
            self.seq += 1
            return f"{kind[0]}{self.seq}"

    def one(self, kind, key, stream, mock):
        rid = self.next_id(kind)
        phase = self.phase()
        body = {
            "model": "gpt-4o-mini",
            "messages": [{"role": "user", "content": f"fleet {rid}"}],
        }
        if stream:
            body["stream"] = True
        headers = {
            "content-type": "application/json",
            "authorization": f"Bearer {key}",
            "x-mock": mock,
            "x-fleet-id": rid,
            "connection": "close",
        }
        rec = {"id": rid, "kind": kind, "key": key, "phase": phase, "start": time.time()}
        sock = None
        try:
            sock = socket.create_connection((self.host, self.port), timeout=self.a.timeout)
            f = sock.makefile("rb")
            payload = json.dumps(body).encode()
            head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
            sock.sendall(
                f"POST /v1/chat/completions HTTP/1.1\r\nhost: {self.host}:{self.port}\r\n{head}"
                f"content-length: {len(payload)}\r\n\r\n".encode() + payload
            )
            status, hdrs = read_head(f)
            rec["headers_at"] = time.time()
            rec["status"] = status
            rec["server"] = hdrs.get("x-fleet-server")
            if status == 200 and stream:
                self.read_stream(f, hdrs, rec)
            else:
                data = b"".join(read_body(f, hdrs))
                if status == 200:
                    rec["outcome"] = "ok"
                else:
                    code = error_code(data)
                    rec["code"] = code
                    if status == 429:
                        rec["outcome"] = "limited"
                    elif status == 503 and (code or "").startswith("state_"):
                        # fail_closed's answer when Redis is down or slow: state_error or
                        # state_timeout for a request whose own call failed, state_unavailable
                        # once the store is marked down.
                        rec["outcome"] = "state_refused"
                    else:
                        rec["outcome"] = "failed"
                        rec["cause"] = f"status_{status}" + (f"_{code}" if code else "")
        except socket.timeout:
            rec["outcome"], rec["cause"] = "failed", "timeout"
        except ConnectionRefusedError:
            rec["outcome"], rec["cause"] = "failed", "connect_refused"
        except ClosedBeforeHeaders:
            rec["outcome"], rec["cause"] = "failed", "closed_before_headers"
        except (Cut, ConnectionResetError, BrokenPipeError) as e:
            # The connection broke mid-response: the body (chunked, or of a content-length)
            # ended early. The client sees it at once, never as a success.
            rec["outcome"], rec["cause"] = "failed", "cut"
            rec["error"] = type(e).__name__
        except Exception as e:  # noqa: BLE001 - every other failure is counted by its type
            rec["outcome"], rec["cause"] = "failed", type(e).__name__
            rec["error"] = str(e)[:200]
        finally:
            if sock is not None:
                sock.close()
        rec["end"] = time.time()
        with self.lock:
            self.records.append(rec)
        return rec["outcome"] == "ok"

    def read_stream(self, f, hdrs, rec):
        done = False
        events = 0
        error = None
        buf = b""
        for chunk in read_body(f, hdrs):
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if events == 0:
                    rec["first_event_at"] = time.time()
                events += 1
                if data == b"[DONE]":
                    done = True
                elif b'"error"' in data:
                    error = error_code(data) or "unknown"
        rec["events"] = events
        if error is not None:
            rec["outcome"], rec["cause"] = "failed", f"error_event_{error}"
        elif done:
            rec["outcome"] = "ok"
        else:
            # A complete HTTP body without [DONE]: a silent cut, the worst kind.
            rec["outcome"], rec["cause"] = "failed", "no_done"

    def worker(self, kind, index):
        a = self.a
        pace = {"call": 1.0 / a.call_rate, "limited": 1.0 / a.limited_rate}.get(kind, 0.0)
        nxt = time.time()
        while self.running():
            phase = self.phase()
            if kind == "stream":
                ok = self.one(kind, LOAD_KEY, True, f"tokens={a.stream_tokens}, interval_ms={a.interval_ms}")
                if not ok:
                    # A refused stream (fail_closed's 503s while Redis is down) comes back at
                    # once: pause as a client would, or 12 workers spin at hundreds a second.
                    time.sleep(0.2)
            elif kind == "call":
                self.one(kind, LOAD_KEY, False, "tokens=8")
            else:
                self.one(kind, key_secret(phase, index), False, "tokens=4")
            if pace:
                nxt = max(nxt + pace, time.time() - pace)
                delay = nxt - time.time()
                if delay > 0:
                    time.sleep(delay)

    def run(self):
        threads = []
        for kind, n in (("stream", self.a.streams), ("call", self.a.calls), ("limited", self.a.limited)):
            for i in range(n):
                t = threading.Thread(target=self.worker, args=(kind, i), daemon=True)
                t.start()
                threads.append(t)
        for t in threads:
            t.join(timeout=max(0.0, self.deadline - time.time()) + self.a.timeout + 5)
        with self.lock, open(os.path.join(self.a.dir, "requests.jsonl"), "w") as f:
            for r in sorted(self.records, key=lambda r: r["start"]):
                f.write(json.dumps(r) + "\n")


class Cut(Exception):
    """The connection ended inside the response body."""


class ClosedBeforeHeaders(Exception):
    """The connection ended before a status line."""


def read_head(f):
    line = f.readline()
    if not line:
        raise ClosedBeforeHeaders()
    status = int(line.split()[1])
    hdrs = {}
    while True:
        line = f.readline()
        if not line:
            raise Cut()
        if line in (b"\r\n", b"\n"):
            return status, hdrs
        k, _, v = line.decode("latin-1").partition(":")
        hdrs[k.strip().lower()] = v.strip()


def read_body(f, hdrs):
    """The body's pieces as they come; Cut when the connection ends before the body does."""
    if "chunked" in hdrs.get("transfer-encoding", "").lower():
        while True:
            line = f.readline()
            if not line.endswith(b"\n"):
                raise Cut()
            size = int(line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while f.readline() not in (b"\r\n", b"\n", b""):
                    pass
                return
            data = f.read(size + 2)
            if len(data) < size + 2:
                raise Cut()
            yield data[:size]
    elif "content-length" in hdrs:
        n = int(hdrs["content-length"])
        data = f.read(n)
        if len(data) < n:
            raise Cut()
        yield data
    else:
        while True:
            data = f.read1(65536)
            if not data:
                return
            yield data


def error_code(data):
    try:
        v = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return "html" if b"<html" in data.lower() else None
    err = v.get("error") if isinstance(v, dict) else None
    if isinstance(err, dict):
        return err.get("code") or err.get("type")
    return None


def cmd_load(a):
    Loader(a).run()


# === report ===


def p99(values):
    if not values:
        return None
    v = sorted(values)
    return round(v[max(0, math.ceil(0.99 * len(v)) - 1)] * 1000, 1)


def read_events(path):
    events = []
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 2:
                events.append((float(parts[0]), parts[1], parts[2:]))
    return events


def read_haproxy(path):
    """id -> (server, status, termination state, retries)."""
    out = {}
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            p = line.split()
            if len(p) >= 5 and p[0].startswith("fleet=") and p[0] != "fleet=-":
                out[p[0][6:]] = {"server": p[1], "status": p[2], "term": p[3], "retries": p[4]}
    return out


def read_metrics(path):
    out = {}
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            name, _, value = line.rpartition(" ")
            try:
                out[name] = float(value)
            except ValueError:
                pass
    return out


def reload_report(d, n):
    """Each instance's /admin/config before and after the SIGHUP: the version moved on, the
    hash changed, and the instances run the same config (the listeners aside, which differ
    by instance here: they come from the command line)."""
    out = {"before": [], "after": [], "hash_changed": [], "same_config": None}
    bodies = []
    for i in range(1, n + 1):
        try:
            b = json.load(open(os.path.join(d, f"config-gw{i}-before.json")))
            a = json.load(open(os.path.join(d, f"config-gw{i}-after.json")))
        except (OSError, ValueError):
            return {}
        out["before"].append(b["version"])
        out["after"].append(a["version"])
        out["hash_changed"].append(a["hash"] != b["hash"])
        body = a["config"]
        body["server"].pop("listen", None)
        body["server"].pop("admin_listen", None)
        bodies.append(json.dumps(body, sort_keys=True))
    out["same_config"] = len(set(bodies)) == 1
    return out


def cmd_report(a):
    d = a.dir
    reqs = [json.loads(line) for line in open(os.path.join(d, "requests.jsonl"))]
    events = read_events(os.path.join(d, "events"))
    ha = read_haproxy(os.path.join(d, "haproxy.log"))
    cfg = json.load(open(os.path.join(d, "limits.json")))
    for r in reqs:
        h = ha.get(r["id"])
        if h:
            r["ha"] = h
            if not r.get("server") and h["server"] not in ("<NOSRV>", "-"):
                r["server"] = h["server"]

    phases = [e[2][0] for e in events if e[1] == "phase" and e[2][0] != "done"]
    at = defaultdict(list)
    for t, what, args in events:
        at[what].append((t, args))

    # The SIGKILLed instance's own in-flight requests: sent to it, not over before the kill,
    # started before it was gone (reaped: until then the kernel still completes connections to
    # its listening socket, a few ms after the signal). Only these may fail.
    excused = set()
    kill = {}
    for t, args in at["sigkill"]:
        inst = args[0]
        t_before = float(args[1]) if len(args) > 1 else t
        dead = [dt for dt, da in at["dead"] if da and da[0] == inst and dt >= t]
        t_dead = min(dead) if dead else t
        flying = [
            r for r in reqs
            if r.get("server") == inst and r["start"] < t_dead and r["end"] >= t_before
        ]
        failed = [r for r in flying if r["outcome"] == "failed"]
        excused.update(r["id"] for r in failed)
        kill = {
            "instance": inst,
            "in_flight": len(flying),
            "in_flight_failed": len(failed),
            "in_flight_failed_by_cause": dict(Counter(r["cause"] for r in failed)),
            "in_flight_streams": sum(1 for r in flying if r["kind"] == "stream"),
            "slowest_failure_after_kill_ms": round(max((r["end"] - t_before for r in failed), default=0) * 1000, 1),
            "gone_after_ms": round((t_dead - t_before) * 1000, 1),
        }

    term = {}
    for t, args in at["sigterm"]:
        inst = args[0]
        restarts = [rt for rt, ra in at["restart"] if ra and ra[0] == inst and rt > t]
        t_restart = min(restarts) if restarts else float("inf")
        exited = [et for et, ea in at["exited"] if ea and ea[0] == inst and et > t]
        flying = [
            r for r in reqs
            if r.get("server") == inst and r["start"] < t and r["end"] > t
        ]
        streams = [r for r in flying if r["kind"] == "stream"]
        # A request that reached it after SIGTERM: sent later, answered by it, before its
        # restart. 50 ms of slack for the client's clock against the signal's.
        late = [
            r for r in reqs
            if r.get("server") == inst and t + 0.05 < r["start"] < t_restart
        ]
        term = {
            "instance": inst,
            "in_flight": len(flying),
            "in_flight_streams": len(streams),
            "in_flight_streams_finished": sum(1 for r in streams if r["outcome"] == "ok"),
            "in_flight_failed": sum(1 for r in flying if r["outcome"] == "failed"),
            "reached_after_sigterm": len(late),
            "drained_in_s": round(min(exited) - t, 2) if exited else None,
        }

    lost = [r for r in reqs if r["outcome"] == "failed" and r["id"] not in excused]
    lost_ids = {r["id"] for r in lost}

    n = a.instances
    rows = []
    limits = []
    for ph in phases:
        rs = [r for r in reqs if r["phase"] == ph]
        calls = [r["end"] - r["start"] for r in rs if r["kind"] != "stream" and r["outcome"] in ("ok", "limited")]
        first = [r["first_event_at"] - r["start"] for r in rs if r["kind"] == "stream" and "first_event_at" in r]
        whole = [r["end"] - r["start"] for r in rs if r["kind"] == "stream" and r["outcome"] == "ok"]
        causes = Counter(r["cause"] for r in rs if r["outcome"] == "failed")
        rows.append({
            "phase": ph,
            "sent": len(rs),
            "ok": sum(1 for r in rs if r["outcome"] == "ok"),
            "limited": sum(1 for r in rs if r["outcome"] == "limited"),
            "state_refused": sum(1 for r in rs if r["outcome"] == "state_refused"),
            "failed": sum(causes.values()),
            "failed_by_cause": dict(causes),
            "lost": sum(1 for r in rs if r["id"] in lost_ids),
            "p99_call_ms": p99(calls),
            "p99_stream_first_event_ms": p99(first),
            "p99_stream_ms": p99(whole),
            "max_call_ms": round(max(calls, default=0) * 1000, 1),
        })
        # Limits: what each of the phase's keys admitted against what its limit allows
        # over the phase (from the first request's start to the last one's end).
        lim = cfg["limit"]
        per = cfg["per_s"]
        checked = ph not in cfg.get("unchecked", {})
        for i in range(cfg["limited"]):
            kr = [r for r in rs if r["kind"] == "limited" and r["key"] == key_secret(ph, i)]
            if not kr:
                continue
            window = max(r["end"] for r in kr) - min(r["start"] for r in kr)
            allowed = math.floor(lim + lim * window / per)
            # Admitted: answered 200, plus any failure that may have been admitted first.
            admitted = sum(1 for r in kr if r["outcome"] == "ok") + sum(
                1 for r in kr if r["outcome"] == "failed"
            )
            entry = {
                "phase": ph,
                "key": f"lim-{ph}-{i}",
                "sent": len(kr),
                "admitted": admitted,
                "limited": sum(1 for r in kr if r["outcome"] == "limited"),
                "configured": allowed,
                "window_s": round(window, 2),
                "excess": admitted - allowed,
                "checked": checked,
            }
            if ph == "reload" and cfg.get("reload_before") is not None:
                before = cfg["reload_before"]
                entry["configured_before_reload"] = math.floor(before + before * window / per)
            limits.append(entry)

    # The store and the reload, from each instance's /metrics and /admin/config at the end.
    inst_metrics = {}
    for i in range(1, n + 1):
        m = read_metrics(os.path.join(d, f"metrics-gw{i}.txt"))
        inst_metrics[f"gw{i}"] = {
            k: int(m.get(k, 0))
            for k in (
                "sluice_state_trips_total",
                "sluice_state_recoveries_total",
                "sluice_state_fallbacks_total",
                "sluice_state_timeouts_total",
                "sluice_config_version",
            )
        }
    reload = reload_report(d, n)

    by_cause = Counter(r["cause"] for r in reqs if r["outcome"] == "failed")
    checked_limits = [x for x in limits if x["checked"]]
    summary = {
        "instances": n,
        "on_failure": cfg.get("on_failure"),
        "sent": len(reqs),
        "answered": sum(1 for r in reqs if r["outcome"] != "failed"),
        "ok": sum(1 for r in reqs if r["outcome"] == "ok"),
        "limited": sum(1 for r in reqs if r["outcome"] == "limited"),
        "state_refused": sum(1 for r in reqs if r["outcome"] == "state_refused"),
        "failed": sum(by_cause.values()),
        "failed_by_cause": dict(by_cause),
        "lost": len(lost),
        "lost_examples": [
            {k: r.get(k) for k in ("id", "phase", "kind", "server", "cause", "status", "start", "end", "ha")}
            for r in lost[:5]
        ],
        "sigterm": term,
        "sigkill": kill,
        "limits": limits,
        "limits_max_excess": max((x["excess"] for x in checked_limits), default=None),
        "phases": rows,
        "instance_metrics": inst_metrics,
        "reload": reload,
        "haproxy_logged": len(ha),
    }

    w = sys.stdout.write
    w(f"fleet: {n} instances behind HAProxy, one redis-server ({summary['on_failure']})\n")
    w(f"requests: {summary['sent']} sent, {summary['answered']} answered "
      f"({summary['ok']} ok, {summary['limited']} limited 429"
      + (f", {summary['state_refused']} fail_closed 503s" if summary["state_refused"] else "")
      + f"), {summary['failed']} failed, {summary['lost']} lost\n")
    if by_cause:
        w("failed by cause: " + ", ".join(f"{c} {k}" for c, k in by_cause.most_common()) + "\n")
    w(f"\n{'phase':<14}{'sent':>6}{'ok':>6}{'429':>5}{'503st':>6}{'fail':>5}{'lost':>5}"
      f"{'p99 call':>10}{'p99 1st ev':>11}{'p99 stream':>11}{'max call':>10}  failed by cause\n")
    for r in rows:
        def ms(v):
            return "-" if v is None else f"{v:.0f}"
        w(f"{r['phase']:<14}{r['sent']:>6}{r['ok']:>6}{r['limited']:>5}{r['state_refused']:>6}"
          f"{r['failed']:>5}{r['lost']:>5}{ms(r['p99_call_ms']):>10}{ms(r['p99_stream_first_event_ms']):>11}"
          f"{ms(r['p99_stream_ms']):>11}{ms(r['max_call_ms']):>10}  "
          + ", ".join(f"{c} {k}" for c, k in sorted(r["failed_by_cause"].items())) + "\n")
    w("(503st: fail_closed's 503 state_unavailable / state_error / state_timeout; latencies in ms:\n"
      " calls to the end of the body, streams to the first event and to [DONE])\n")
    if term:
        w(f"\nSIGTERM {term['instance']}: {term['in_flight_streams']} streams in flight, "
          f"{term['in_flight_streams_finished']} finished; {term['in_flight_failed']} in-flight requests failed; "
          f"{term['reached_after_sigterm']} requests reached it after the signal; drained and exited in "
          f"{term['drained_in_s']} s\n")
    if kill:
        w(f"SIGKILL {kill['instance']}: {kill['in_flight']} requests in flight ({kill['in_flight_streams']} streams), "
          f"{kill['in_flight_failed']} failed ({', '.join(f'{c} {k}' for c, k in kill['in_flight_failed_by_cause'].items()) or 'none'}), "
          f"the last failure {kill['slowest_failure_after_kill_ms']} ms after the kill; "
          f"the process gone {kill['gone_after_ms']} ms after the signal\n")
    w(f"\nlimits (requests, GCRA limit {cfg['limit']} per {cfg['per_s']} s"
      + (f"; the reload phase's keys {cfg['reload_before']} before the reload" if cfg.get("reload_before") is not None else "")
      + f"): admitted vs configured over each phase's window, fleet-wide\n")
    w(f"{'key':<22}{'sent':>6}{'admitted':>10}{'configured':>12}{'excess':>8}  note\n")
    for x in limits:
        note = "" if x["checked"] else f"not checked: {cfg['unchecked'][x['phase']]}"
        if "configured_before_reload" in x:
            note = f"{x['configured_before_reload']} before the reload"
        w(f"{x['key']:<22}{x['sent']:>6}{x['admitted']:>10}{x['configured']:>12}{x['excess']:>8}  {note}\n")
    w(f"largest excess where Redis was up: {summary['limits_max_excess']} (goal: at most {n}, one per instance)\n")
    w("\nper instance at the end (since its last start): "
      + "; ".join(
          f"{k} trips {v['sluice_state_trips_total']} recoveries {v['sluice_state_recoveries_total']} "
          f"fallbacks {v['sluice_state_fallbacks_total']} timeouts {v['sluice_state_timeouts_total']} "
          f"config v{v['sluice_config_version']}"
          for k, v in inst_metrics.items()) + "\n")
    if reload:
        w(f"reload: versions {reload['before']} -> {reload['after']}, hash changed {reload['hash_changed']}, "
          f"the same config on every instance (listeners aside): {reload['same_config']}\n")
    if lost:
        w("\nLOST requests (first 5):\n")
        for x in summary["lost_examples"]:
            w(f"  {json.dumps(x)}\n")
    goals = {
        "no_request_lost": not lost,
        "limits_within_one_per_instance": summary["limits_max_excess"] is not None
        and summary["limits_max_excess"] <= n,
        "sigterm_streams_finished": bool(term) and term["in_flight_streams_finished"] == term["in_flight_streams"],
        "nothing_reached_a_draining_instance": bool(term) and term["reached_after_sigterm"] == 0,
        "no_timeout": "timeout" not in by_cause,
        "reload_everywhere": bool(reload) and reload["same_config"] and all(reload["hash_changed"]),
    }
    summary["goals"] = goals
    missed = [g for g, ok in goals.items() if not ok]
    w("\ngoals: " + ", ".join(f"{g} {'yes' if ok else 'NO'}" for g, ok in goals.items()) + "\n")
    if a.summary:
        with open(a.summary, "w") as f:
            json.dump(summary, f, indent=1)
    if missed:
        sys.exit(3)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    k = sub.add_parser("keys")
    k.add_argument("--phases", required=True)
    k.add_argument("--limit", type=int, required=True)
    k.add_argument("--per", type=float, required=True)
    k.add_argument("--reload-limit", type=int)
    k.add_argument("--limited", type=int, default=3)
    ld = sub.add_parser("load")
    ld.add_argument("--url", required=True)
    ld.add_argument("--dir", required=True)
    ld.add_argument("--streams", type=int, default=6)
    ld.add_argument("--calls", type=int, default=2)
    ld.add_argument("--limited", type=int, default=3)
    ld.add_argument("--call-rate", type=float, default=10.0, help="per call worker, per second")
    ld.add_argument("--limited-rate", type=float, default=6.0, help="per limited worker, per second")
    ld.add_argument("--stream-tokens", type=int, default=30)
    ld.add_argument("--interval-ms", type=int, default=50)
    ld.add_argument("--timeout", type=float, default=20.0)
    ld.add_argument("--max-seconds", type=float, default=600.0)
    r = sub.add_parser("report")
    r.add_argument("--dir", required=True)
    r.add_argument("--instances", type=int, default=3)
    r.add_argument("--summary")
    a = p.parse_args()
    {"keys": cmd_keys, "load": cmd_load, "report": cmd_report}[a.cmd](a)


if __name__ == "__main__":
    main()
