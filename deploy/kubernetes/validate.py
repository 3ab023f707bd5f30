#!/usr/bin/env python3
"""Renders the Kustomize trees under deploy/kubernetes and checks what comes out.

For each kustomization (base and every overlay, or the directories given):

1. `kubectl kustomize DIR` renders it (kubectl's built-in Kustomize); a render error fails.
2. Every object is validated against the Kubernetes JSON schemas of each version asked for
   (kubernetes-validate, strict: an unknown field is an error, and so is a kind or apiVersion
   that version does not have).
3. The fleet's own rules, which no schema knows:
   - the gateway container's config file (found through its args and volume mounts in the
     rendered ConfigMaps) passes `sluice check-config`, without warnings, with the pod's
     environment: plain values as they are, Secret references by stand-ins (the Secrets are
     created out of band), and Secret files mounted beside the config as empty stand-ins;
   - both listeners are on a non-loopback address and on a declared containerPort; the
     readiness probe asks /readyz and the liveness probe /healthz on the admin port;
   - terminationGracePeriodSeconds >= preStop sleep + server.shutdown_grace + 5 s (the
     gateway's bounded wait for the last error events), or streams are cut by SIGKILL;
   - every Service, PodDisruptionBudget and HorizontalPodAutoscaler finds its pods, ports and
     target; CPU utilisation targets have CPU requests to be measured against.

Exit 0 when everything passes, 1 otherwise. Every failing check is printed (a schema's first
error per object and version).
deploy/kubernetes/validate.sh runs this with the repository's .venv; .ci/run runs that.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import re
import secrets
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import yaml
from kubernetes_validate import utils as kv

HERE = Path(__file__).resolve().parent
# The oldest Kubernetes these manifests are for (the preStop `sleep` action is on by default
# from 1.30) and the newest schemas kubernetes-validate 1.37 ships, to see removals coming.
DEFAULT_VERSIONS = ["1.31.0", "1.37.0"]
# After shutdown_grace the gateway gives the remaining streams their error event and waits at
# most this long for them to close (crates/sluice-gateway/src/edge/mod.rs, `serve`).
FINAL_WAIT_S = 5


class Report:
    def __init__(self) -> None:
        self.failures: list[str] = []

    def fail(self, where: str, msg: str) -> None:
        self.failures.append(f"{where}: {msg}")
        print(f"FAIL {where}: {msg}")


def kustomizations(root: Path) -> list[Path]:
    """base, then every overlay (components are not buildable alone)."""
    out = [root / "base"]
    overlays = root / "overlays"
    if overlays.is_dir():
        out += sorted(p for p in overlays.iterdir() if (p / "kustomization.yaml").is_file())
    return out


def render(kubectl: str, path: Path) -> str:
    r = subprocess.run(
        [kubectl, "kustomize", str(path)], capture_output=True, text=True, check=False
    )
    if r.returncode != 0:
        raise RuntimeError(r.stderr.strip() or f"kubectl kustomize exited {r.returncode}")
    return r.stdout


def name_of(obj: dict) -> str:
    return f"{obj.get('kind', '?')}/{(obj.get('metadata') or {}).get('name', '?')}"


# === schemas ===


def check_schemas(where: str, objs: list[dict], versions: list[str], rep: Report) -> None:
    for obj in objs:
        for v in versions:
            try:
                kv.validate(obj, v, strict=True)
            except kv.ValidationError as e:
                path = ".".join(str(p) for p in e.path) or "(top)"
                rep.fail(where, f"{name_of(obj)} (Kubernetes {v}): {path}: {e.message}")
            except kv.SchemaNotFoundError as e:
                rep.fail(where, f"{name_of(obj)}: {e.message}")
            except (kv.VersionNotSupportedError, kv.InvalidSchemaError) as e:
                raise SystemExit(f"kubernetes-validate cannot check {v}: {e}")


# === the gateway's config ===

DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|msec|s|sec|secs|m|min|mins|h|hr|hrs|d)")
UNIT_S = {"ms": 0.001, "msec": 0.001, "s": 1, "sec": 1, "secs": 1, "m": 60, "min": 60,
          "mins": 60, "h": 3600, "hr": 3600, "hrs": 3600, "d": 86400}


def seconds(text: str) -> float | None:
    """A humantime duration ("30s", "1m30s", "1.5s") in seconds; None if not one."""
    compact = text.replace(" ", "")
    parts = DURATION.findall(compact)
    if not parts or "".join(n + u for n, u in parts) != compact:
        return None
    return sum(float(n) * UNIT_S[u] for n, u in parts)


def addr_port(text: str) -> tuple[str, int] | None:
    m = re.fullmatch(r"\[?([^\]]*)\]?:(\d+)", text)
    return (m.group(1), int(m.group(2))) if m else None


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def stand_in(var: str) -> str:
    """A value for a variable the pod takes from a Secret: valid where the config needs a form."""
    if "REDIS" in var.upper():
        return "redis://redis.invalid:6379/0"
    return "stand-in-" + secrets.token_hex(16)


def config_path(args: list[str]) -> str | None:
    """The file `sluice serve` reads: `--config F`, `-c F`, `--config=F`, or `serve F`."""
    rest = args[1:] if args[:1] == ["serve"] else None
    if rest is None:
        return None
    i = 0
    while i < len(rest):
        a = rest[i]
        if a in ("--config", "-c") and i + 1 < len(rest):
            return rest[i + 1]
        if a.startswith("--config="):
            return a.split("=", 1)[1]
        if a in ("--listen", "--admin-listen", "--log-format"):
            i += 2
            continue
        if not a.startswith("-"):
            return a
        i += 1
    return "sluice.toml"


def mounted_files(pod: dict, c: dict, cms: dict[str, dict], where: str, rep: Report
                  ) -> dict[str, tuple[str, str]]:
    """Container path -> (content, origin) for the files of ConfigMap, Secret and projected
    volumes; Secret files (created out of band) are empty stand-ins."""
    vols = {v["name"]: v for v in pod.get("volumes", [])}
    out: dict[str, tuple[str, str]] = {}
    for m in c.get("volumeMounts", []):
        v = vols.get(m["name"])
        if v is None:
            rep.fail(where, f"volumeMount {m['name']} names no volume")
            continue
        sources = []
        if "configMap" in v:
            sources.append({"configMap": v["configMap"]})
        if "secret" in v:
            sources.append({"secret": {**v["secret"], "name": v["secret"].get("secretName")}})
        sources += (v.get("projected") or {}).get("sources", [])
        for s in sources:
            if "configMap" in s:
                ref = s["configMap"]
                cm = cms.get(ref.get("name"))
                if cm is None:
                    if not ref.get("optional"):
                        rep.fail(where, f"volume {m['name']}: ConfigMap {ref.get('name')} is not in the render")
                    continue
                data = cm.get("data") or {}
                items = ref.get("items") or [{"key": k, "path": k} for k in data]
                for it in items:
                    if it["key"] not in data:
                        rep.fail(where, f"volume {m['name']}: ConfigMap {ref['name']} has no key {it['key']}")
                        continue
                    out[f"{m['mountPath'].rstrip('/')}/{it['path']}"] = (
                        data[it["key"]], f"ConfigMap {ref['name']} key {it['key']}")
            elif "secret" in s:
                ref = s["secret"]
                for it in ref.get("items") or []:
                    out[f"{m['mountPath'].rstrip('/')}/{it['path']}"] = (
                        "", f"Secret {ref.get('name')} key {it['key']} (empty stand-in)")
    return out


def pod_env(c: dict, cms: dict[str, dict], where: str, rep: Report) -> dict[str, str]:
    env: dict[str, str] = {}
    for e in c.get("env", []):
        name = e["name"]
        if "value" in e:
            env[name] = str(e["value"])
            continue
        src = e.get("valueFrom") or {}
        if "configMapKeyRef" in src:
            ref = src["configMapKeyRef"]
            val = ((cms.get(ref["name"]) or {}).get("data") or {}).get(ref["key"])
            if val is None and not ref.get("optional"):
                rep.fail(where, f"env {name}: ConfigMap {ref['name']} key {ref['key']} is not in the render")
            env[name] = val or ""
        else:  # secretKeyRef, fieldRef, resourceFieldRef: not known before the pod runs
            env[name] = stand_in(name)
    return env


def port_number(c: dict, port: object) -> int | None:
    if isinstance(port, int):
        return port
    for p in c.get("ports", []):
        if p.get("name") == port:
            return p["containerPort"]
    return None


def check_gateway(where: str, dep: dict, cms: dict[str, dict], sluice: str | None, rep: Report
                  ) -> bool:
    """The rules of one Deployment running `sluice serve`; False if it runs none."""
    pod = dep["spec"]["template"]["spec"]
    found = False
    for c in pod.get("containers", []):
        args = [str(a) for a in (c.get("command", [])[1:] if c.get("command") else []) + c.get("args", [])]
        path = config_path(args)
        if path is None:
            continue
        found = True
        at = f"{where}: {name_of(dep)} container {c['name']}"
        workdir = c.get("workingDir", "/")
        if not path.startswith("/"):
            path = f"{workdir.rstrip('/')}/{path}"
        files = mounted_files(pod, c, cms, at, rep)
        if path not in files:
            rep.fail(at, f"the config {path} comes from no ConfigMap mounted in the container")
            continue
        text = files[path][0]
        try:
            cfg = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            rep.fail(at, f"{path} ({files[path][1]}) is not TOML: {e}")
            continue

        # `sluice check-config` with the pod's files and environment.
        if sluice:
            with tempfile.TemporaryDirectory(prefix="sluice-k8s-") as tmp:
                for p, (content, _) in files.items():
                    dst = Path(tmp + p)
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    dst.write_text(content)
                cwd = Path(tmp + workdir)
                cwd.mkdir(parents=True, exist_ok=True)
                env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
                env.update(pod_env(c, cms, at, rep))
                r = subprocess.run([sluice, "check-config", tmp + path], cwd=cwd, env=env,
                                   capture_output=True, text=True, check=False)
                out = (r.stdout + r.stderr).replace(tmp, "")
                if r.returncode != 0:
                    rep.fail(at, f"sluice check-config {path}:\n{out.strip()}")
                elif "warning:" in r.stderr:
                    rep.fail(at, f"sluice check-config {path} warns:\n{r.stderr.replace(tmp, '').strip()}")

        server = cfg.get("server", {})
        ports = {p["containerPort"] for p in c.get("ports", [])}
        listen = {"listen": server.get("listen", "127.0.0.1:8080"),
                  "admin_listen": server.get("admin_listen", "127.0.0.1:9901")}
        admin_port = None
        for key, value in listen.items():
            if "${" in value:
                continue
            ap = addr_port(value)
            if ap is None:
                continue  # check-config says why
            host, port = ap
            if is_loopback(host):
                rep.fail(at, f"server.{key} = {value!r} is loopback: nothing outside the pod reaches it")
            if port not in ports:
                rep.fail(at, f"server.{key} port {port} is not a containerPort ({sorted(ports)})")
            if key == "admin_listen":
                admin_port = port

        for probe, want in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
            get = (c.get(probe) or {}).get("httpGet")
            if not get:
                rep.fail(at, f"no {probe} with httpGet {want}")
                continue
            if get.get("path") != want:
                rep.fail(at, f"{probe} asks {get.get('path')!r}, not {want}")
            n = port_number(c, get.get("port"))
            if admin_port is not None and n != admin_port:
                rep.fail(at, f"{probe} port {get.get('port')} is not the admin port {admin_port}")

        grace_text = server.get("shutdown_grace", "30s")
        grace = seconds(grace_text) if "${" not in grace_text else None
        pre = (((c.get("lifecycle") or {}).get("preStop") or {}).get("sleep") or {}).get("seconds", 0)
        tgps = pod.get("terminationGracePeriodSeconds", 30)
        if grace is not None:
            need = pre + grace + FINAL_WAIT_S
            if tgps < need:
                rep.fail(at, f"terminationGracePeriodSeconds {tgps} < preStop sleep {pre} s + "
                             f"shutdown_grace {grace_text} + {FINAL_WAIT_S} s = {need:g} s: "
                             "streams would be cut by SIGKILL")
    return found


# === references between objects ===


def matches(selector: dict, labels: dict) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def has_port(c: dict, port: object) -> bool:
    """A named port must be declared; so must a numbered one here (Kubernetes would not ask)."""
    key = "name" if isinstance(port, str) else "containerPort"
    return any(p.get(key) == port for p in c.get("ports", []))


def check_references(where: str, objs: list[dict], rep: Report) -> None:
    pods = [(o, o["spec"]["template"]) for o in objs
            if o.get("kind") in ("Deployment", "StatefulSet", "DaemonSet")]

    def selected(sel: dict) -> list[tuple[dict, dict]]:
        return [(w, t) for w, t in pods if matches(sel, (t.get("metadata") or {}).get("labels") or {})]

    for o in objs:
        kind, at = o.get("kind"), f"{where}: {name_of(o)}"
        if kind == "Service" and (o["spec"].get("selector")):
            targets = selected(o["spec"]["selector"])
            if not targets:
                rep.fail(at, f"selector {o['spec']['selector']} matches no pod template")
            for p in o["spec"].get("ports", []):
                tp = p.get("targetPort", p.get("port"))
                for w, t in targets:
                    if not any(has_port(c, tp) for c in t["spec"]["containers"]):
                        rep.fail(at, f"port {p.get('name', p.get('port'))}: targetPort {tp!r} is no "
                                     f"container port of {name_of(w)}")
        elif kind == "PodDisruptionBudget":
            sel = (o["spec"].get("selector") or {}).get("matchLabels") or {}
            if not selected(sel):
                rep.fail(at, f"selector {sel} matches no pod template")
        elif kind == "HorizontalPodAutoscaler":
            ref = o["spec"]["scaleTargetRef"]
            target = next((w for w, _ in pods
                           if w["kind"] == ref["kind"] and w["metadata"]["name"] == ref["name"]), None)
            if target is None:
                rep.fail(at, f"scaleTargetRef {ref['kind']}/{ref['name']} is not in the render")
                continue
            for m in o["spec"].get("metrics", []):
                res = m.get("resource") or {}
                if m.get("type") == "Resource" and res.get("target", {}).get("type") == "Utilization":
                    for c in target["spec"]["template"]["spec"]["containers"]:
                        if res["name"] not in ((c.get("resources") or {}).get("requests") or {}):
                            rep.fail(at, f"{res['name']} utilisation, but container {c['name']} of "
                                         f"{name_of(target)} requests no {res['name']}")


# === main ===


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dirs", nargs="*", type=Path,
                    help="kustomization directories (default: base and every overlay)")
    ap.add_argument("--kubectl", default=os.environ.get("KUBECTL", "kubectl"))
    ap.add_argument("--sluice", default=os.environ.get("SLUICE_BIN"),
                    help="the sluice binary for check-config (default $SLUICE_BIN)")
    ap.add_argument("--kubernetes-version", "-k", action="append", dest="versions",
                    help=f"schemas to validate against (default {' and '.join(DEFAULT_VERSIONS)})")
    args = ap.parse_args()
    versions = args.versions or DEFAULT_VERSIONS
    dirs = args.dirs or kustomizations(HERE)
    sluice = args.sluice
    if not sluice or not Path(sluice).is_file():
        if os.environ.get("CI") == "true":
            print(f"FAIL: no sluice binary for check-config (--sluice / SLUICE_BIN: {sluice!r})")
            return 1
        print(f"note: no sluice binary ({sluice!r}): the configs are not run through check-config")
        sluice = None

    rep = Report()
    total = 0
    for d in dirs:
        where = os.path.relpath(d, Path.cwd())
        try:
            objs = [o for o in yaml.safe_load_all(render(args.kubectl, d)) if o]
        except (RuntimeError, yaml.YAMLError) as e:
            rep.fail(where, f"kubectl kustomize failed:\n{e}")
            continue
        before = len(rep.failures)
        check_schemas(where, objs, versions, rep)
        cms = {o["metadata"]["name"]: o for o in objs if o.get("kind") == "ConfigMap"}
        gateways = sum(check_gateway(where, o, cms, sluice, rep)
                       for o in objs if o.get("kind") == "Deployment")
        if not gateways:
            rep.fail(where, "no Deployment runs `sluice serve`")
        check_references(where, objs, rep)
        total += len(objs)
        state = "ok" if len(rep.failures) == before else f"{len(rep.failures) - before} failure(s)"
        print(f"{where}: {len(objs)} objects, schemas {', '.join(versions)} (strict), "
              f"sluice check-config {'run' if sluice else 'not run'}: {state}")
    if rep.failures:
        print(f"validate: {len(rep.failures)} failure(s) in {len(dirs)} kustomization(s)")
        return 1
    print(f"validate: {len(dirs)} kustomization(s), {total} objects, all valid")
    return 0


if __name__ == "__main__":
    sys.exit(main())
