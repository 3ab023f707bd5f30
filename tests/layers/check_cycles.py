#!/usr/bin/env python3
"""Finds import circles between the modules of one Rust crate.

Usage: check_cycles.py [--strict] [--order] [--edges] CRATE/src [...]

Exit status 1 if any circle is found, 0 otherwise.

DESIGN.md wants every arrow to point down: no module imports from a stage above it. A crate is
a tree of modules, so "a circle" is read per level of that tree: for each module P, its child
modules form a graph, with an edge A -> B when anything inside A (any depth, tests included)
names anything inside B, through `use crate::…`, `use super::…` or a path written inline. That
graph must be acyclic. A child naming its own ancestor (`use super::Thing` from `h1/conn.rs`
into `h1/mod.rs`) is not counted: a directory module and its files are one unit. With
`--strict` it is: the items written in P's own file become one more node, `P(self)`, so a
child that reaches back into its parent's file while the parent uses the child is a circle too.

Names are followed through `use`/`pub use` re-exports (`crate::Lane` → `crate::pool::Lane`),
so a re-export does not hide an edge. `mod x;` declarations are not edges. Doc comments and
strings are ignored. Good enough for our crates; not a Rust parser (no macros, no `#[path]`).

`--order` prints, per level, an order of the children in which every edge points to an earlier
one (leaves first); `--edges` prints every edge with a file:line where it comes from.
"""

import os
import re
import sys
from collections import defaultdict

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def strip(src):
    """`src` with comments, strings and char literals blanked (newlines kept, for line numbers)."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', src[i:]) and (i == 0 or not re.match(r"\w", src[i - 1])):
            m = re.match(r'r(#*)"', src[i:])
            end = '"' + m.group(1)
            j = src.find(end, i + len(m.group(0)))
            j = n if j < 0 else j + len(end)
            out.append('""' + re.sub(r"[^\n]", " ", src[i + 2 : j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            j += 1
            out.append('"' + re.sub(r"[^\n]", " ", src[i + 1 : j - 1]) + '"')
            i = j
        elif c == "'":
            m = re.match(r"'(\\(x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]+\}|.)|[^\\'])'", src[i:], re.S)
            if m:
                out.append("' '" + " " * (len(m.group(0)) - 3))
                i += len(m.group(0))
            else:  # a lifetime
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def parse_use_tree(text):
    """`a::{b, c::d as e, f::*}` → [(['a','b'], 'b'), (['a','c','d'], 'e'), (['a','f','*'], '*')]."""
    text = re.sub(r"\s+as\s+", "@", text.strip())
    text = re.sub(r"\s+", "", text)
    out = []

    def tree(s, prefix):
        # s is one use tree: a path, `path as alias`, or `path::{tree, ...}`.
        brace = s.find("{")
        if brace < 0:
            path, _, alias = s.partition("@")
            segs = [p for p in path.split("::") if p]
            if segs and segs[-1] == "self":
                segs = segs[:-1]
            full = prefix + segs
            if not full:
                return
            out.append((full, alias or full[-1]))
            return
        head = s[:brace]
        segs = [p for p in head.split("::") if p]
        inner = s[brace + 1 : s.rfind("}")]
        depth, start = 0, 0
        for k, ch in enumerate(inner + ","):
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif ch == "," and depth == 0:
                part = inner[start:k]
                if part:
                    tree(part, prefix + segs)
                start = k + 1

    tree(text, [])
    return out


class Crate:
    def __init__(self, src_dir):
        self.src = os.path.normpath(src_dir)
        self.files = {}  # module path tuple -> file
        self.modules = set()  # every module, inline ones too
        self.names = defaultdict(dict)  # module -> {name: absolute path list}
        self.globs = defaultdict(list)  # module -> [absolute module path]
        self.refs = []  # (from module, raw path list, file, line)
        self.discover()
        for mod, path in sorted(self.files.items()):
            self.scan(mod, path)

    def discover(self):
        for root, _dirs, files in os.walk(self.src):
            for f in files:
                if not f.endswith(".rs"):
                    continue
                rel = os.path.relpath(os.path.join(root, f), self.src)
                parts = rel[:-3].split(os.sep)
                if parts in (["lib"], ["main"]):
                    mod = ()
                elif parts[0] == "bin":
                    continue
                elif parts[-1] == "mod":
                    mod = tuple(parts[:-1])
                else:
                    mod = tuple(parts)
                self.files[mod] = os.path.join(root, f)
                for k in range(len(mod) + 1):
                    self.modules.add(mod[:k])

    def scan(self, file_mod, path):
        with open(path, encoding="utf-8") as fh:
            text = strip(fh.read())
        line_of = lambda pos: text.count("\n", 0, pos) + 1
        # Inline modules: (start, end, module path).
        spans = []
        for m in re.finditer(r"\bmod\s+(" + IDENT + r")\s*\{", text):
            depth, j = 1, m.end()
            while j < len(text) and depth:
                depth += {"{": 1, "}": -1}.get(text[j], 0)
                j += 1
            spans.append((m.start(), j, m.group(1)))

        def module_at(pos):
            mod = list(file_mod)
            for s, e, name in spans:  # sorted by start; nested spans come after their parent
                if s <= pos < e:
                    mod.append(name)
            return tuple(mod)

        for s, e, name in spans:
            self.modules.add(module_at(s) + (name,))
        use_spans = []
        for m in re.finditer(r"(?<![\w:])use\s+", text):
            end = text.find(";", m.end())
            use_spans.append((m.start(), end))
            mod = module_at(m.start())
            for segs, alias in parse_use_tree(text[m.end() : end]):
                absolute = self.absolute(mod, segs)
                if absolute is None:
                    continue
                if alias == "*":
                    self.globs[mod].append(absolute[:-1])
                else:
                    self.names[mod][alias] = absolute
                self.refs.append((mod, absolute, path, line_of(m.start())))
        for m in re.finditer(r"(?<![\w:])(?:crate|super|self)(?:::" + IDENT + r")+", text):
            if any(s <= m.start() < e for s, e in use_spans):
                continue
            mod = module_at(m.start())
            absolute = self.absolute(mod, m.group(0).split("::"))
            if absolute is not None:
                self.refs.append((mod, absolute, path, line_of(m.start())))

    def absolute(self, mod, segs):
        """`segs` as written in `mod`, made absolute (a list from the crate root), or None if
        it names another crate."""
        segs = list(segs)
        if segs[0] == "crate":
            return segs[1:]
        if segs[0] in ("super", "self"):
            cur = list(mod)
            while segs and segs[0] in ("super", "self"):
                if segs.pop(0) == "super":
                    cur = cur[:-1]
            return cur + segs
        if tuple(mod) + (segs[0],) in self.modules:
            return list(mod) + segs
        if segs[0] in self.names.get(tuple(mod), {}):
            return self.names[tuple(mod)][segs[0]] + segs[1:]
        return None

    def resolve(self, segs, depth=0):
        """The module that the item at absolute path `segs` lives in."""
        cur = ()
        for i, seg in enumerate(segs):
            if seg == "*":
                return cur
            if cur + (seg,) in self.modules:
                cur = cur + (seg,)
                continue
            target = self.names.get(cur, {}).get(seg)
            if target is not None and depth < 16 and target != list(cur) + [seg]:
                return self.resolve(target + list(segs[i + 1 :]), depth + 1)
            for glob in self.globs.get(cur, []):
                if depth < 16 and tuple(glob) != cur:
                    found = self.resolve(glob + list(segs[i:]), depth + 1)
                    if found != tuple(glob):
                        return found
            return cur
        return cur

    def edges(self, strict):
        """{parent: {(a, b): [where]}} — edges between children of each parent."""
        out = defaultdict(lambda: defaultdict(list))
        for mod, segs, path, line in self.refs:
            target = self.resolve(segs)
            k = 0
            while k < min(len(mod), len(target)) and mod[k] == target[k]:
                k += 1
            parent = mod[:k]
            a = mod[k] if k < len(mod) else None
            b = target[k] if k < len(target) else None
            if a == b:
                continue
            if a is None or b is None:
                if not strict:
                    continue
                a = a or "(self)"
                b = b or "(self)"
            where = f"{os.path.relpath(path, self.src)}:{line}"
            out[parent][(a, b)].append(where)
        return out


def cycles(nodes, edges):
    """Strongly connected components with more than one node (Tarjan)."""
    graph = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
    index, low, stack, on, comps = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return comps


def order(nodes, edges):
    """Leaves first: each node after everything it names."""
    deps = defaultdict(set)
    for a, b in edges:
        deps[a].add(b)
    done, out = set(), []
    while len(done) < len(nodes):
        ready = sorted(n for n in nodes if n not in done and deps[n] <= done)
        if not ready:
            return None
        done.update(ready)
        out.append(ready)
    return out


def main(argv):
    flags = {a for a in argv if a.startswith("--")}
    dirs = [a for a in argv if not a.startswith("--")]
    unknown = flags - {"--strict", "--order", "--edges"}
    if not dirs or unknown:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    strict = "--strict" in flags
    found = False
    for d in dirs:
        crate = Crate(d)
        per_parent = crate.edges(strict)
        for parent in sorted(crate.modules):
            children = {m[len(parent)] for m in crate.modules if len(m) > len(parent) and m[: len(parent)] == parent}
            edges = per_parent.get(parent, {})
            if strict and any("(self)" in e for e in edges):
                children.add("(self)")
            name = "crate" if not parent else "crate::" + "::".join(parent)
            for comp in cycles(children, edges):
                found = True
                print(f"{d}: circle in {name}: {' <-> '.join(comp)}")
                for (a, b), where in sorted(edges.items()):
                    if a in comp and b in comp:
                        print(f"    {a} -> {b}  ({', '.join(where[:3])}{' …' if len(where) > 3 else ''})")
            if "--edges" in flags:
                for (a, b), where in sorted(edges.items()):
                    print(f"{d}: {name}: {a} -> {b}  ({', '.join(where[:3])})")
            if "--order" in flags and len(children) > 1:
                layers = order(children, edges)
                if layers:
                    print(f"{d}: order in {name} (leaves first): " + " < ".join(", ".join(l) for l in layers))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
