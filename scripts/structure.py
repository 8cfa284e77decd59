#!/usr/bin/env python3
"""The workspace's structure, drawn from the code: what each file imports, and what breaks the
house rules of docs/design.md ("Structure, measured").

Reports
  (a) every import circle across files within a crate (a file `use`s, or names by a
      `crate::`/`super::`/`self::` path, an item another file of the circle defines);
  (b) every arrow from a lower layer to a higher one: a crate depending on (Cargo.toml) or naming
      (`intendant_x::` in its non-test code) a crate that the crate table of docs/design.md does
      not list below it, and a file of a crate reaching back into its binary's `main.rs`;
  (c) every non-test function over 100 lines without a `//` comment directly above it (among its
      doc comment and attributes) saying why it is one piece.

Only `crates/*/src` is read; test code (`#[cfg(test)]` modules and files, `#[test]` functions,
`tests/`) is left out. Re-exports (`pub use`) are followed to the file that defines the item, so a
facade `mod.rs` is not an importer of what it re-exports.

Usage: scripts/structure.py [--report] [--graph] [--crate NAME]...
  exit 0: clean; 1: something found (a summary, or with --report every finding).
"""

import argparse
import os
import re
import sys
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_FN_LINES = 100
TEST_ATTR = re.compile(r"#\[\s*(cfg\s*\(\s*test\s*\)|(\w+::)*test\b)")


# ---------------------------------------------------------------------------------------------
# Lexing: code with comments and literals blanked (line structure kept), and comment lines.


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def strip(src):
    """Returns (code, comments): `code` is `src` with comments and string/char literal contents
    replaced by spaces (newlines kept); `comments[line]` is "doc" or "plain" for a line that
    starts with a comment."""
    out = []
    comments = {}
    i, n, line = 0, len(src), 1
    while i < n:
        c = src[i]
        if c == "\n":
            out.append(c)
            line += 1
            i += 1
        elif src.startswith("//", i):
            end = src.find("\n", i)
            end = n if end < 0 else end
            text = src[i:end]
            start_of_line = src.rfind("\n", 0, i) + 1
            if src[start_of_line:i].strip() == "":
                is_doc = text.startswith("///") and not text.startswith("////") or text.startswith("//!")
                comments[line] = "doc" if is_doc else "plain"
            out.append(" " * (end - i))
            i = end
        elif src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            chunk = src[i:j]
            out.append("".join(ch if ch == "\n" else " " for ch in chunk))
            line += chunk.count("\n")
            i = j
        elif c in "rb" and re.match(r'(br|r|b)?#*"', src[i:i + 260]) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            m = re.match(r'(br|b|r)?(#*)"', src[i:])
            raw = m.group(1) in ("r", "br")
            hashes = m.group(2)
            j = i + m.end()
            if raw:
                close = '"' + hashes
                k = src.find(close, j)
                k = n if k < 0 else k
            else:
                k = j
                while k < n and src[k] != '"':
                    k += 2 if src[k] == "\\" else 1
            chunk = src[j:k]
            out.append(src[i:j] + "".join(ch if ch == "\n" else " " for ch in chunk))
            line += chunk.count("\n")
            end = k + (len(hashes) + 1 if raw else 1)
            out.append(src[k:end])
            i = end
        elif c == '"':
            k = i + 1
            while k < n and src[k] != '"':
                k += 2 if src[k] == "\\" else 1
            chunk = src[i + 1:k]
            out.append('"' + "".join(ch if ch == "\n" else " " for ch in chunk) + '"')
            line += chunk.count("\n")
            i = k + 1
        elif c == "'":
            # A char literal ('a', '\n', '\u{1F600}', '{') or a lifetime ('a).
            m = re.match(r"'(\\(u\{[0-9a-fA-F]+\}|x[0-9a-fA-F]{2}|.)|[^\\'\n])'", src[i:i + 12])
            if m:
                out.append("' '" + " " * (m.end() - 3))
                i += m.end()
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out), comments


def matching_brace(code, open_idx):
    depth = 0
    for j in range(open_idx, len(code)):
        if code[j] == "{":
            depth += 1
        elif code[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(code) - 1


def line_of(code, idx):
    return code.count("\n", 0, idx) + 1


def attrs_before(code, idx):
    """The attribute text directly before position `idx` (outer attributes of an item)."""
    k = idx
    acc = []
    while True:
        before = code[:k].rstrip()
        if before.endswith("]"):
            # Walk back to the matching '#['.
            depth, j = 0, len(before) - 1
            while j >= 0:
                if before[j] == "]":
                    depth += 1
                elif before[j] == "[":
                    depth -= 1
                    if depth == 0:
                        break
                j -= 1
            if j > 0 and before[j - 1] == "#":
                acc.append(before[j - 1:])
                k = j - 1
                continue
        return " ".join(acc)


# ---------------------------------------------------------------------------------------------
# A crate's files: the module tree, items, re-exports, imports, functions.


class File:
    def __init__(self, path, modpath, is_test):
        self.path = path
        self.modpath = modpath  # tuple of segments from the crate root
        self.is_test = is_test
        src = read(path)
        self.lines = src.split("\n")
        self.code, self.comments = strip(src)
        self.test_spans = []  # (start, end) character spans of test-only code
        self.children = {}  # child module name -> (File or inline span, modpath)
        self.inline = {}  # inline module path (tuple, relative) -> span


def module_dir(path, modpath_is_root):
    base = os.path.basename(path)
    d = os.path.dirname(path)
    if modpath_is_root or base == "mod.rs":
        return d
    return os.path.join(d, base[:-3])


class Crate:
    def __init__(self, name, directory):
        self.name = name
        self.dir = directory
        self.files = {}  # path -> File
        self.mods = {}  # modpath tuple -> (path, span or None)
        self.items = defaultdict(set)  # modpath -> item names defined there
        self.reexports = defaultdict(dict)  # modpath -> name -> absolute path tuple
        self.globs = defaultdict(list)  # modpath -> [absolute module path]
        self.roots = []

    def load(self):
        src = os.path.join(self.dir, "src")
        lib, main = os.path.join(src, "lib.rs"), os.path.join(src, "main.rs")
        if os.path.exists(lib):
            self.roots.append(lib)
            self.walk(lib, (), True, False)
        if os.path.exists(main):
            # Beside a library, main.rs is a crate of its own that uses the library by name.
            self.roots.append(main)
            self.walk(main, ("<bin:main>",) if os.path.exists(lib) else (), True, False)
        cargo = read(os.path.join(self.dir, "Cargo.toml"))
        for rel in re.findall(r'(?m)^path\s*=\s*"(src/[^"]+\.rs)"', cargo):
            p = os.path.normpath(os.path.join(self.dir, rel))
            if p not in self.files:
                self.roots.append(p)
                self.walk(p, ("<bin:%s>" % os.path.basename(p)[:-3],), True, False)
        bindir = os.path.join(src, "bin")
        if os.path.isdir(bindir):
            for f in sorted(os.listdir(bindir)):
                if f.endswith(".rs"):
                    p = os.path.join(bindir, f)
                    self.roots.append(p)
                    self.walk(p, ("<bin:%s>" % f[:-3],), True, False)

    def walk(self, path, modpath, is_root, is_test):
        if path in self.files or not os.path.exists(path):
            return
        f = File(path, modpath, is_test)
        self.files[path] = f
        self.mods[modpath] = (path, None)
        self.scan(f, f.code, 0, len(f.code), modpath, module_dir(path, is_root), is_test)

    def scan(self, f, code, start, end, modpath, mdir, is_test):
        """Walks one module body (a file, or an inline `mod x { }`) for modules, items, re-exports
        and test code."""
        pos = start
        item = re.compile(
            r"\b(?:pub(?:\s*\([^)]*\))?\s+)?(mod|fn|struct|enum|trait|type|const|static|union|use|macro_rules!|impl)\b"
        )
        while True:
            m = item.search(code, pos, end)
            if not m:
                break
            kw = m.group(1)
            attrs = attrs_before(code, m.start())
            test = is_test or bool(TEST_ATTR.search(attrs))
            if kw == "mod":
                mm = re.compile(r"mod\s+(r#)?(\w+)\s*([;{])").match(code, m.start(1))
                if not mm:
                    pos = m.end()
                    continue
                name = mm.group(2)
                self.items[modpath].add(name)
                if mm.group(3) == ";":
                    pm = re.search(r'path\s*=\s*"', attrs)
                    if pm:
                        rel = re.search(r'#\[\s*path\s*=\s*"([^"]*)"', self.raw_attr(f, m.start()))
                        child = os.path.join(os.path.dirname(f.path), rel.group(1)) if rel else None
                    else:
                        child = os.path.join(mdir, name + ".rs")
                        if not os.path.exists(child):
                            child = os.path.join(mdir, name, "mod.rs")
                    if child:
                        if test:
                            self.test_files.add(os.path.normpath(child))
                        self.walk(os.path.normpath(child), modpath + (name,), False, test)
                    pos = mm.end()
                else:
                    close = matching_brace(code, mm.end() - 1)
                    if test:
                        f.test_spans.append((m.start(), close))
                    self.mods[modpath + (name,)] = (f.path, (mm.end(), close))
                    self.scan(f, code, mm.end(), close, modpath + (name,), os.path.join(mdir, name), test)
                    pos = close + 1
                continue
            if kw == "use":
                semi = code.find(";", m.end())
                is_pub = code[m.start():m.start(1)].strip().startswith("pub")
                if is_pub and not test:
                    for path in expand_use(code[m.end():semi]):
                        absolute = absolutize(path, modpath, self)
                        if absolute is None:
                            continue
                        last = path[-1]
                        if last == "*":
                            self.globs[modpath].append(absolute[:-1])
                        else:
                            self.reexports[modpath][path.alias or last] = absolute
                pos = semi + 1
                continue
            if kw == "fn" and test:
                nm = re.compile(r"fn\s+(\w+)").match(code, m.start(1))
                brace = code.find("{", m.end())
                semi = code.find(";", m.end())
                if nm and brace >= 0 and (semi < 0 or brace < semi):
                    close = matching_brace(code, brace)
                    f.test_spans.append((m.start(), close))
                    pos = close + 1
                    continue
            if kw in ("struct", "enum", "trait", "type", "const", "static", "union", "fn"):
                nm = re.compile(r"(?:fn|struct|enum|trait|type|const|static|union)\s+(?:mut\s+)?(r#)?(\w+)").match(code, m.start(1))
                if nm:
                    self.items[modpath].add(nm.group(2))
            if kw == "macro_rules!":
                nm = re.compile(r"macro_rules!\s*(\w+)").match(code, m.start(1))
                if nm:
                    self.items[modpath].add(nm.group(1))
            if kw in ("impl", "trait") and test:
                brace = code.find("{", m.end())
                if brace >= 0:
                    close = matching_brace(code, brace)
                    f.test_spans.append((m.start(), close))
                    pos = close + 1
                    continue
            pos = m.end()

    def descendants(self, modpath):
        """The files of the modules beneath `modpath`."""
        n = len(modpath)
        return {path for mp, (path, _) in self.mods.items() if len(mp) > n and mp[:n] == modpath}

    def raw_attr(self, f, idx):
        # The un-blanked text before idx (the path attribute's string is blanked in `code`).
        line = line_of(f.code, idx)
        return "\n".join(f.lines[max(0, line - 4):line])


class UsePath(tuple):
    """A path segment tuple with the name it is bound to (`as` alias or last segment)."""

    alias = None


def expand_use(tree):
    """`a::{b, c::{d as e, *}}` -> [a::b, a::c::d (alias e), a::c::*]."""
    tree = re.sub(r"\s+as\s+", "@", tree)
    tree = re.sub(r"\s+", "", tree)
    results = []

    def go(prefix, t):
        if t.startswith("::"):
            t = t[2:]
        brace = t.find("{")
        if brace < 0:
            segs = [p for p in t.split("::") if p]
            alias = None
            if segs and "@" in segs[-1]:
                segs[-1], alias = segs[-1].split("@", 1)
            p = UsePath(prefix + tuple(segs))
            p.alias = alias or (segs[-1] if segs else None)
            results.append(p)
            return
        head = tuple(p for p in t[:brace].split("::") if p)
        inner = t[brace + 1:t.rfind("}")]
        depth, cur, parts = 0, "", []
        for ch in inner:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        parts.append(cur)
        for part in parts:
            if part == "self":
                p = UsePath(prefix + head)
                p.alias = head[-1] if head else None
                results.append(p)
            elif part:
                go(prefix + head, part)

    go((), tree)
    return results


def absolutize(path, modpath, crate):
    """A path as written in module `modpath` -> a path from the crate root, or None when it names
    another crate or std."""
    segs = list(path)
    if not segs:
        return None
    base = list(modpath)
    if segs[0] == "crate":
        base = list(modpath[:1]) if modpath and modpath[0].startswith("<bin:") else []
        segs = segs[1:]
    elif segs[0] in ("super", "self"):
        while segs and segs[0] in ("super", "self"):
            if segs[0] == "super":
                base = base[:-1]
            segs = segs[1:]
    elif tuple(base + segs[:1]) in crate.mods:
        pass
    else:
        return None
    return tuple(base + segs)


def resolve(crate, absolute, depth=0):
    """The file that defines what `absolute` names (following re-exports)."""
    if depth > 8:
        return None
    cur = ()
    segs = list(absolute)
    i = 0
    if segs and segs[0].startswith("<bin:"):
        cur, i = (segs[0],), 1
    while i < len(segs):
        nxt = cur + (segs[i],)
        if nxt in crate.mods:
            cur, i = nxt, i + 1
            continue
        name = segs[i]
        if name in crate.items.get(cur, ()):
            return crate.mods[cur][0]
        target = crate.reexports.get(cur, {}).get(name)
        if target is not None:
            return resolve(crate, target + tuple(segs[i + 1:]), depth + 1)
        for g in crate.globs.get(cur, ()):
            if g + (name,) in crate.mods or name in crate.items.get(g, ()) or name in crate.reexports.get(g, {}):
                return resolve(crate, g + tuple(segs[i:]), depth + 1)
        break
    return crate.mods[cur][0] if cur in crate.mods else None


def module_at(crate, f, idx):
    """The module path of position `idx` in file `f` (inline modules included)."""
    best = f.modpath
    for mp, (path, span) in crate.mods.items():
        if path == f.path and span and span[0] <= idx <= span[1] and len(mp) > len(best):
            best = mp
    return best


def in_spans(spans, idx):
    return any(a <= idx <= b for a, b in spans)


PATH_RE = re.compile(r"(?<![\w:])((?:crate|super|self)(?:::(?:r#)?\w+)+)")


def imports(crate, f):
    """(target file, line) for every import of `f` outside its test code."""
    out = []
    code = f.code
    use_re = re.compile(r"\b(pub(?:\s*\([^)]*\))?\s+)?use\s+")
    use_spans = []
    for m in use_re.finditer(code):
        if not (m.start() == 0 or not (code[m.start() - 1].isalnum() or code[m.start() - 1] == "_")):
            continue
        semi = code.find(";", m.end())
        use_spans.append((m.start(), semi))
        if in_spans(f.test_spans, m.start()) or m.group(1):
            continue  # test code, or a re-export (followed by `resolve` instead)
        if TEST_ATTR.search(attrs_before(code, m.start())):
            continue
        mp = module_at(crate, f, m.start())
        for p in expand_use(code[m.end():semi]):
            absolute = absolutize(p, mp, crate)
            if absolute is None:
                continue
            if p[-1] == "*":
                absolute = absolute[:-1]
            out.append((resolve(crate, absolute), line_of(code, m.start())))
    for m in PATH_RE.finditer(code):
        if in_spans(f.test_spans, m.start()) or in_spans(use_spans, m.start()):
            continue
        mp = module_at(crate, f, m.start())
        absolute = absolutize(UsePath(m.group(1).split("::")), mp, crate)
        if absolute is not None:
            out.append((resolve(crate, absolute), line_of(code, m.start())))
    # A module is made of its submodules: its arrows down into them are not imports, so a child
    # reaching up to its parent (`super::Error`) makes no circle; siblings reaching each other do.
    own = crate.descendants(f.modpath)
    return [(t, ln) for t, ln in out if t and t != f.path and t not in crate.test_files and t not in own]


def long_functions(f):
    """(line, name, length) of each non-test function over MAX_FN_LINES lines without a plain
    `//` comment directly above it."""
    out = []
    code = f.code
    for m in re.finditer(r"\bfn\s+(\w+)", code):
        if in_spans(f.test_spans, m.start()):
            continue
        brace = code.find("{", m.end())
        semi = code.find(";", m.end())
        if brace < 0 or (0 <= semi < brace and not re.search(r"\[[^\]]*$", code[m.end():semi])):
            continue
        # A `;` inside the signature (array types `[u8; 4]`) is not a declaration's end.
        sig = code[m.end():brace]
        if ";" in re.sub(r"\[[^\]]*\]", "", sig):
            continue
        close = matching_brace(code, brace)
        first, last = line_of(code, m.start()), line_of(code, close)
        length = last - first + 1
        if length <= MAX_FN_LINES:
            continue
        ln = first - 1
        why = False
        while ln >= 1:
            text = f.lines[ln - 1].strip()
            kind = f.comments.get(ln)
            if kind == "plain":
                why = True
                break
            if kind == "doc" or text.startswith("#[") or (text.endswith("]") and not text.endswith(";")):
                ln -= 1
                continue
            break
        if not why:
            out.append((first, m.group(1), length))
    return out


# ---------------------------------------------------------------------------------------------
# Crate layers: Cargo.toml and docs/design.md.


def cargo_deps(cargo_toml):
    deps, section = set(), None
    for line in read(cargo_toml).splitlines():
        s = line.strip()
        if s.startswith("["):
            section = s.strip("[]")
            continue
        m = re.match(r"(intendant-[\w-]+)\b", s)
        if m and section == "dependencies":
            deps.add(m.group(1)[len("intendant-"):])
        m = re.match(r"\[dependencies\.(intendant-[\w-]+)\]", s)
        if m:
            deps.add(m.group(1)[len("intendant-"):])
    return deps


def design_table(root, crates):
    """crate -> set of crates docs/design.md allows it to depend on."""
    allowed, order = {}, []
    path = os.path.join(root, "docs", "design.md")
    in_table = False
    rows, pending = [], ""
    for line in read(path).splitlines(keepends=True):
        # A table row may wrap onto the next lines; it ends at a closing `|`.
        if pending:
            pending += " " + line.strip()
            if pending.endswith("|"):
                rows.append(pending)
                pending = ""
            continue
        if line.startswith("| `") and not line.rstrip().endswith("|"):
            pending = line.strip()
            continue
        rows.append(line)
    for line in rows:
        if line.startswith("## "):
            in_table = line.strip() == "## Crates"
            continue
        if not in_table or not line.startswith("| `"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        name = cells[0].strip("`")
        deps_cell = cells[-1]
        if "everything above" in deps_cell:
            deps = set(order)
        else:
            deps = set(re.findall(r"\b(" + "|".join(map(re.escape, crates)) + r")\b", deps_cell))
        allowed[name] = deps
        order.append(name)
    # A layer may use every layer below the ones it names.
    changed = True
    while changed:
        changed = False
        for name, deps in allowed.items():
            more = set().union(*(allowed.get(d, set()) for d in deps)) - deps
            if more:
                deps |= more
                changed = True
    return allowed


# ---------------------------------------------------------------------------------------------


def tarjan(nodes, edges):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                strong(w)
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
                out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            strong(v)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--report", action="store_true", help="print every finding")
    ap.add_argument("--graph", action="store_true", help="print each crate's file import graph")
    ap.add_argument("--crate", action="append", help="only these crates (repeatable)")
    ap.add_argument("--root", default=ROOT, help="the workspace (default: this script's)")
    args = ap.parse_args(argv)
    root = os.path.abspath(args.root)

    crates_dir = os.path.join(root, "crates")
    names = sorted(d for d in os.listdir(crates_dir) if os.path.exists(os.path.join(crates_dir, d, "Cargo.toml")))
    allowed = design_table(root, names)
    findings = {"circle": [], "upward": [], "long": []}

    for name in names:
        if args.crate and name not in args.crate:
            continue
        crate = Crate(name, os.path.join(crates_dir, name))
        crate.test_files = set()
        crate.load()
        rel = lambda p: os.path.relpath(p, root)  # noqa: E731

        # (b) crate arrows.
        deps = cargo_deps(os.path.join(crate.dir, "Cargo.toml"))
        if name not in allowed:
            findings["upward"].append(f"{name}: not in the crate table of docs/design.md")
        for d in sorted(deps - allowed.get(name, set())):
            findings["upward"].append(f"{name} -> {d}: Cargo.toml depends on it; docs/design.md does not put it below {name}")
        for f in crate.files.values():
            if f.is_test or f.path in crate.test_files:
                continue
            for m in re.finditer(r"\bintendant_(\w+)::", f.code):
                other = m.group(1)
                if in_spans(f.test_spans, m.start()) or other == name.replace("-", "_"):
                    continue
                if other in names and other not in allowed.get(name, set()):
                    findings["upward"].append(f"{rel(f.path)}:{line_of(f.code, m.start())}: {name} -> {other} (docs/design.md does not put {other} below {name})")

        # (a) circles, and arrows back into a binary's main.rs.
        edges = defaultdict(dict)
        for f in crate.files.values():
            if f.is_test or f.path in crate.test_files:
                continue
            for target, ln in imports(crate, f):
                if target in edges[f.path]:
                    continue
                edges[f.path][target] = ln
                if os.path.basename(target) == "main.rs" and os.path.dirname(target) == os.path.join(crate.dir, "src"):
                    findings["upward"].append(f"{rel(f.path)}:{ln}: imports from main.rs (the top of {name}; shared items belong in a module of their own)")
        if args.graph:
            print(f"# {name}")
            for src in sorted(edges):
                for dst, ln in sorted(edges[src].items()):
                    print(f"  {rel(src)}:{ln} -> {rel(dst)}")
        for comp in tarjan(list(edges), {k: list(v) for k, v in edges.items()}):
            members = set(comp)
            arrows = [f"{rel(a)}:{edges[a][b]} -> {rel(b)}" for a in comp for b in sorted(edges[a]) if b in members]
            findings["circle"].append(f"{name}: {len(comp)} files: " + "; ".join(arrows))

        # (c) long functions.
        for f in sorted(crate.files.values(), key=lambda f: f.path):
            if f.is_test or f.path in crate.test_files:
                continue
            for line, fn, length in long_functions(f):
                findings["long"].append(f"{rel(f.path)}:{line}: fn {fn} is {length} lines, with no `//` comment above it saying why")

    titles = {
        "circle": "import circles across files",
        "upward": "arrows from a lower layer to a higher one",
        "long": f"non-test functions over {MAX_FN_LINES} lines without a why-comment",
    }
    total = 0
    for kind in ("circle", "upward", "long"):
        items = findings[kind]
        total += len(items)
        print(f"{len(items):4} {titles[kind]}")
        if args.report:
            for it in items:
                print(f"     {it}")
    if total and not args.report:
        print("(scripts/structure.py --report lists them)")
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
