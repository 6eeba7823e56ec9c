#!/usr/bin/env python3
"""Import circles between the modules of each crate.

Cargo forbids circles between crates; inside a crate nothing does, so this checks them:
every `crate::…` and `super::…` path in a crate's sources is an edge from the module of the
file to the module the path names. An edge between two modules counts between the two
siblings that contain them under their lowest common ancestor (a module and its own
children are one unit: a parent re-exporting its children, a child using its parent's
items, are not circles). A circle among the siblings of any module is reported with one
path of each edge, and the exit code is 1.

usage: tools/module-cycles.py [CRATE_SRC_DIR ...]   (default: every crates/*/src and src)
"""
import os
import re
import sys
from pathlib import Path

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def module_of(src: Path, file: Path):
    rel = file.relative_to(src).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] in ("lib", "main", "mod"):
        parts = parts[:-1]
    if parts and parts[0] == "bin":
        return None  # binaries are crates of their own
    return tuple(parts)


def strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def split_group(body: str):
    """Items of a `{a, b::{c, d}, e}` group, at depth 0."""
    items, depth, cur = [], 0, ""
    for ch in body:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            items.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        items.append(cur.strip())
    return items


def group_at(text: str, start: int) -> str:
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1 : i]
    return ""


def expand(prefix, rest: str):
    """`a::b::{c, d::e}` after `crate::` → [[a,b,c],[a,b,d,e]]."""
    rest = rest.strip()
    out = []
    m = re.match(rf"((?:{IDENT}\s*::\s*)*)(\{{|{IDENT}|\*)", rest)
    if not m:
        return [prefix]
    segs = [s.strip() for s in m.group(1).split("::") if s.strip()]
    head = prefix + segs
    if m.group(2) == "{":
        body = group_at(rest, m.end(2) - 1)
        for item in split_group(body):
            if item in ("self", ""):
                out.append(head)
            else:
                out.extend(expand(head, item))
        return out
    if m.group(2) == "*":
        return [head]
    return [head + [m.group(2)]]


def paths_in(text: str):
    text = strip_comments(text)
    for m in re.finditer(r"\b(crate|super(?:\s*::\s*super)*)\s*::\s*", text):
        kind = m.group(1)
        ups = 0 if kind == "crate" else kind.count("super")
        for p in expand([], text[m.end() :]):
            yield ups, p


def check(src: Path):
    modules = {}
    for file in sorted(src.rglob("*.rs")):
        mod = module_of(src, file)
        if mod is not None:
            modules[mod] = file
    known = set(modules)
    edges = {}
    for mod, file in modules.items():
        for ups, path in paths_in(file.read_text()):
            if ups:
                # `super` in foo/bar.rs (module foo::bar) is foo; mod.rs/lib.rs shift nothing here
                base = list(mod[: len(mod) - ups])
            else:
                base = []
            full = base + path
            target = ()
            for i in range(len(full), 0, -1):
                if tuple(full[:i]) in known:
                    target = tuple(full[:i])
                    break
            n = 0
            while n < min(len(mod), len(target)) and mod[n] == target[n]:
                n += 1
            if n == len(mod) or n == len(target):
                continue  # same module, or a module and its own ancestor/descendant
            a, b = mod[: n + 1], target[: n + 1]
            edges.setdefault(a, {}).setdefault(b, f"{file.relative_to(src)}: {'::'.join(full)}")
    return cycles(edges)


def cycles(edges):
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]
    nodes = set(edges) | {b for bs in edges.values() for b in bs}
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
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
                found.append((sorted(comp), edges))
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return found


def main():
    root = Path(__file__).resolve().parent.parent
    dirs = [Path(d) for d in sys.argv[1:]] or sorted(
        [p / "src" for p in (root / "crates").glob("*") if (p / "src").is_dir()]
        + ([root / "src"] if (root / "src").is_dir() else [])
        + [p for p in (root / "loadtest" / "src", root / "migrations" / "src") if p.is_dir()]
    )
    bad = 0
    for src in dirs:
        for comp, edges in check(src):
            bad += 1
            names = ["::".join(c) for c in comp]
            print(f"{src}: circle between {', '.join(names)}")
            members = set(comp)
            for a in comp:
                for b, why in sorted(edges.get(a, {}).items()):
                    if b in members:
                        print(f"    {'::'.join(a)} -> {'::'.join(b)}   ({why})")
    if bad:
        print(f"{bad} circle(s)")
        return 1
    print(f"no circles between modules in {len(dirs)} crate source tree(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
