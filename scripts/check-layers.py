#!/usr/bin/env python3
"""Fails when the product's imports do not form the layered DAG docs/architecture.md draws.

Reads every non-test file under src/ and each path it names through `crate::` or `super::` (in `use`
items and inline paths). Two rules:

1. Modules: a top-level module may only import modules in lower layers (LAYERS below, bottom first;
   modules on one line are peers and may not import each other).
2. Files: the file-level import graph has no cycle. A path is resolved to the file that defines it;
   a name a `mod.rs` re-exports (`pub use child::Name`) resolves to the child that defines it.

Test code is skipped: files declared under `#[cfg(test)]` and inline `#[cfg(test)] mod … { … }` blocks.
Exit status 1 with each offending edge or cycle; 0 with a one-line summary.
Usage: scripts/check-layers.py [--graph] [--src DIR] [--self-test]
  --graph      also prints every module edge
  --src DIR    checks another tree (default: the repo's src/)
  --self-test  checks that an upward import and a file cycle in a scratch tree are both caught
"""
import re
import sys
from pathlib import Path

# Bottom first. A module may import only modules on earlier lines.
LAYERS = [
    ["error", "wire", "tls"],
    ["request", "datastore"],
    ["metrics"],
    ["predictor", "kvcache"],
    ["telemetry", "scheduling", "health", "discovery"],
    ["otel", "access"],
    ["flowcontrol"],
    ["director"],
    ["extproc"],
    ["config"],
    ["cli"],
    ["app"],
    ["lib", "main"],
]

ROOT = Path(__file__).resolve().parent.parent
SRC = Path(sys.argv[sys.argv.index("--src") + 1]) if "--src" in sys.argv else ROOT / "src"
RANK = {m: i for i, layer in enumerate(LAYERS) for m in layer}
PATH_RE = re.compile(r"\b(crate|super(?:::super)*|self)::((?:[A-Za-z_][A-Za-z0-9_]*::)*)(\{[^;]*?\}|[A-Za-z_][A-Za-z0-9_]*)",
                     re.S)
MOD_RE = re.compile(r"^\s*(#\[cfg\(test\)\]\s*)?(?:pub(?:\([a-z]+\))?\s+)?mod\s+([a-z_0-9]+)\s*;", re.M)


def module_of(path: Path) -> list[str]:
    """Module path of a file, e.g. src/scheduling/plugins/mod.rs -> ['scheduling', 'plugins']."""
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "mod":
        parts.pop()
    return parts or ["lib"]


def strip_tests(text: str) -> str:
    """Drops inline `#[cfg(test)] mod name { ... }` blocks and comments."""
    text = re.sub(r"//[^\n]*", "", text)
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{", text):
        if m.start() < i:
            continue
        out.append(text[i:m.start()])
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        i = j
    out.append(text[i:])
    return "".join(out)


def product_files() -> dict[tuple, Path]:
    """Every non-test product file, by module path, following `mod` declarations from lib.rs/main.rs."""
    files: dict[tuple, Path] = {}

    def visit(path: Path, modpath: tuple):
        files[modpath] = path
        base = path.parent if path.name in ("mod.rs", "lib.rs", "main.rs") else path.with_suffix("")
        for m in MOD_RE.finditer(path.read_text()):
            if m.group(1):
                continue
            name = m.group(2)
            for cand in (base / f"{name}.rs", base / name / "mod.rs"):
                if cand.exists():
                    visit(cand, modpath + (name,))
                    break

    visit(SRC / "lib.rs", ())
    files[("main",)] = SRC / "main.rs"
    return files


def reexports(files) -> dict[tuple, tuple]:
    """(module path + name) -> module path of the child file that defines a re-exported name."""
    table = {}
    for modpath, path in files.items():
        if path.name not in ("mod.rs", "lib.rs"):
            continue
        for m in re.finditer(r"pub(?:\(crate\))?\s+use\s+(?:self::)?([a-z_0-9]+)((?:::[a-z_0-9]+)*)::(\{[^;]*\}|\w+)\s*;",
                             strip_tests(path.read_text())):
            child = modpath + (m.group(1),) + tuple(p for p in m.group(2).split("::") if p)
            names = re.findall(r"[A-Za-z_][A-Za-z0-9_]*", m.group(3))
            for name in names:
                table[modpath + (name,)] = child
    return table


def resolve(segments: tuple, files, table) -> tuple | None:
    """The module path of the file that defines `segments` (longest file prefix, then re-exports)."""
    for n in range(len(segments), 0, -1):
        prefix = segments[:n]
        if prefix in files:
            rest = segments[n:]
            if rest and prefix + (rest[0],) in table:
                target = table[prefix + (rest[0],)]
                if target in files:
                    return target
            return prefix
    return None


def edges(files, table):
    found = set()
    for modpath, path in files.items():
        if modpath == ("main",):
            here, text = (), path.read_text()
        else:
            here, text = modpath, path.read_text()
        text = strip_tests(text)
        for m in PATH_RE.finditer(text):
            head, middle, tail = m.group(1), m.group(2), m.group(3)
            if head == "crate":
                base = ()
            elif head == "self":
                base = here
            else:
                base = here[: len(here) - head.count("super")]
            mids = tuple(p for p in middle.split("::") if p)
            tails = [tail] if not tail.startswith("{") else re.findall(r"(?:^|[{,])\s*([A-Za-z_][A-Za-z0-9_:]*)", tail)
            for t in tails:
                segs = base + mids + tuple(p for p in t.split("::") if p and p != "self")
                target = resolve(segs, files, table)
                if target is not None and target != modpath and target != ():
                    found.add((modpath, target))
    return found


def find_cycle(graph):
    color, stack = {}, []

    def dfs(n):
        color[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if color.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if not color.get(m):
                c = dfs(m)
                if c:
                    return c
        stack.pop()
        color[n] = 2
        return None

    for n in sorted(graph):
        if not color.get(n):
            c = dfs(n)
            if c:
                return c
    return None


def main() -> int:
    files = product_files()
    table = reexports(files)
    file_edges = edges(files, table)
    problems = []
    module_edges = set()
    for src, dst in file_edges:
        a, b = src[0] if src else "lib", dst[0]
        if a == b:
            continue
        module_edges.add((a, b))
    for a, b in sorted(module_edges):
        if a not in RANK or b not in RANK:
            problems.append(f"module {a} or {b} is not in a layer (add it to LAYERS in {Path(__file__).name})")
        elif RANK[b] >= RANK[a]:
            problems.append(f"upward or sideways import: {a} (layer {RANK[a]}) -> {b} (layer {RANK[b]})")
    graph = {}
    for src, dst in file_edges:
        graph.setdefault(src, set()).add(dst)
    # Cycles are reported one at a time: each is a real knot to untie.
    cycle = find_cycle(graph)
    if cycle:
        problems.append("file import cycle: " + " -> ".join("/".join(c) or "lib" for c in cycle))
    if "--graph" in sys.argv:
        for a, b in sorted(module_edges):
            print(f"{a} -> {b}")
    if problems:
        print("check-layers: the product's imports break the layering:", file=sys.stderr)
        for p in problems:
            print("  " + p, file=sys.stderr)
        return 1
    print(f"check-layers: ok ({len(files)} files, {len(file_edges)} file imports, {len(module_edges)} module "
          f"edges, all downward, no file cycles)")
    return 0


def self_test() -> int:
    """The check must be able to fail: an upward import and a file cycle in scratch trees."""
    import subprocess
    import tempfile

    cases = {
        "upward import": {"lib.rs": "pub mod error;\npub mod app;\n", "error.rs": "use crate::app::Server;\n",
                          "app.rs": "pub struct Server;\n"},
        "file cycle": {"lib.rs": "pub mod request;\n", "request/mod.rs": "mod a;\nmod b;\n",
                       "request/a.rs": "use super::b::B;\npub struct A;\n",
                       "request/b.rs": "use super::a::A;\npub struct B;\n"},
    }
    for name, tree in cases.items():
        with tempfile.TemporaryDirectory() as tmp:
            for rel, text in tree.items():
                (Path(tmp) / rel).parent.mkdir(parents=True, exist_ok=True)
                (Path(tmp) / rel).write_text(text)
            (Path(tmp) / "main.rs").write_text("fn main() {}\n")
            run = subprocess.run([sys.executable, __file__, "--src", tmp], capture_output=True, text=True)
            if run.returncode != 1:
                print(f"check-layers self-test: {name} was not caught:\n{run.stdout}{run.stderr}", file=sys.stderr)
                return 1
    print("check-layers self-test: an upward import and a file cycle are both caught")
    return 0


if __name__ == "__main__":
    sys.exit(self_test() if "--self-test" in sys.argv else main())
