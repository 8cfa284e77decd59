#!/usr/bin/env python3
"""Tests of scripts/structure.py on small workspaces written for each case.

Run: python3 scripts/structure_test.py
"""

import contextlib
import io
import os
import sys
import tempfile
import textwrap
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import structure  # noqa: E402

DESIGN = """\
# Design

## Crates

| crate | owns | depends on |
|---|---|---|
| `base` | the bottom | — |
| `mid` | the middle, a row that wraps
onto a second line | base |
| `top` | the top | everything above |

## Next
"""


def workspace(files):
    """A workspace in a temporary directory: `files` maps a path to its text."""
    tmp = tempfile.TemporaryDirectory()
    files = dict(files)
    files.setdefault("docs/design.md", DESIGN)
    for path, text in files.items():
        full = os.path.join(tmp.name, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w", encoding="utf-8") as f:
            f.write(textwrap.dedent(text))
    return tmp


def cargo(name, *deps):
    lines = [f'[package]\nname = "intendant-{name}"\n\n[dependencies]']
    lines += [f"intendant-{d}.workspace = true" for d in deps]
    lines.append("\n[dev-dependencies]\nintendant-top.workspace = true\n")
    return "\n".join(lines)


def run(tmp):
    """Runs the checker on `tmp` (and removes it afterwards): exit code and report."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = structure.main(["--report", "--root", tmp.name])
    tmp.cleanup()
    return code, out.getvalue()


def long_fn(name, above=""):
    body = "".join(f"    let _x{i} = {i};\n" for i in range(101))
    return f"{above}pub fn {name}() {{\n{body}}}\n"


class Circles(unittest.TestCase):
    def test_siblings_that_import_each_other_are_a_circle(self):
        tmp = workspace({
            "crates/base/Cargo.toml": cargo("base"),
            "crates/base/src/lib.rs": "//! b\npub mod a;\npub mod b;\n",
            "crates/base/src/a.rs": "use crate::b::B;\npub struct A;\n",
            "crates/base/src/b.rs": "use super::a::A;\npub struct B;\n",
        })
        code, out = run(tmp)
        self.assertEqual(code, 1)
        self.assertIn("1 import circles", out)
        self.assertIn("crates/base/src/a.rs:1 -> crates/base/src/b.rs", out)
        self.assertIn("crates/base/src/b.rs:1 -> crates/base/src/a.rs", out)

    def test_a_circle_through_a_path_in_code_and_a_reexport(self):
        tmp = workspace({
            "crates/base/Cargo.toml": cargo("base"),
            "crates/base/src/lib.rs": "//! b\npub mod a;\npub mod b;\npub use b::B;\n",
            "crates/base/src/a.rs": "pub fn f() -> crate::B { crate::B }\npub struct A;\n",
            "crates/base/src/b/mod.rs": "pub struct B;\nfn g() { let _ = super::a::A; }\n",
        })
        code, out = run(tmp)
        self.assertEqual(code, 1, out)
        self.assertIn("crates/base/src/a.rs:1 -> crates/base/src/b/mod.rs", out)

    def test_a_child_using_its_parent_is_no_circle(self):
        tmp = workspace({
            "crates/base/Cargo.toml": cargo("base"),
            "crates/base/src/lib.rs": "//! b\npub mod a;\n",
            "crates/base/src/a.rs": "mod walk;\npub struct Error;\npub fn f() { walk::g() }\nuse walk::g;\n",
            "crates/base/src/a/walk.rs": "use super::Error;\npub fn g() {}\n",
        })
        code, out = run(tmp)
        self.assertEqual(code, 0, out)
        self.assertIn("0 import circles", out)

    def test_test_code_imports_nothing(self):
        tmp = workspace({
            "crates/base/Cargo.toml": cargo("base"),
            "crates/base/src/lib.rs": "//! b\npub mod a;\npub mod b;\n",
            "crates/base/src/a.rs": "use crate::b::B;\npub struct A;\n",
            "crates/base/src/b.rs": textwrap.dedent("""\
                pub struct B;
                #[cfg(test)]
                use crate::a::A;
                #[cfg(test)]
                mod tests {
                    use crate::a::A;
                }
                #[test]
                fn t() { let _ = crate::a::A; }
                """),
        })
        code, out = run(tmp)
        self.assertEqual(code, 0, out)


class Layers(unittest.TestCase):
    def test_a_dependency_the_table_does_not_put_below_is_reported(self):
        tmp = workspace({
            "crates/base/Cargo.toml": cargo("base", "mid"),
            "crates/base/src/lib.rs": "//! b\npub fn f() { intendant_mid::g() }\n",
            "crates/mid/Cargo.toml": cargo("mid"),
            "crates/mid/src/lib.rs": "//! m\npub fn g() {}\n",
        })
        code, out = run(tmp)
        self.assertEqual(code, 1)
        self.assertIn("base -> mid: Cargo.toml depends on it", out)
        self.assertIn("crates/base/src/lib.rs:2: base -> mid", out)

    def test_layers_below_the_named_ones_and_everything_above_are_allowed(self):
        tmp = workspace({
            "crates/base/Cargo.toml": cargo("base"),
            "crates/base/src/lib.rs": "//! b\n",
            "crates/mid/Cargo.toml": cargo("mid", "base"),
            "crates/mid/src/lib.rs": "//! m\n",
            "crates/top/Cargo.toml": cargo("top", "mid", "base"),
            "crates/top/src/lib.rs": "//! t\npub fn f() { intendant_base::x(); intendant_mid::y() }\n",
        })
        code, out = run(tmp)
        self.assertEqual(code, 0, out)

    def test_an_arrow_back_into_main_rs(self):
        tmp = workspace({
            "crates/top/Cargo.toml": cargo("top"),
            "crates/top/src/main.rs": "//! t\nmod cmd;\npub struct Args;\nfn main() { cmd::run() }\n",
            "crates/top/src/cmd.rs": "use crate::Args;\npub fn run() {}\n",
        })
        code, out = run(tmp)
        self.assertEqual(code, 1)
        self.assertIn("crates/top/src/cmd.rs:1: imports from main.rs", out)


class LongFunctions(unittest.TestCase):
    def files(self, text):
        return workspace({
            "crates/base/Cargo.toml": cargo("base"),
            "crates/base/src/lib.rs": "//! b\n" + text,
        })

    def test_a_long_function_without_a_why(self):
        code, out = run(self.files("/// What it does.\n" + long_fn("big")))
        self.assertEqual(code, 1)
        self.assertIn("crates/base/src/lib.rs:3: fn big is 103 lines", out)

    def test_a_plain_comment_above_says_why(self):
        above = "/// What it does.\n// One piece: the steps share one borrow.\n#[inline]\n"
        code, out = run(self.files(above + long_fn("big")))
        self.assertEqual(code, 0, out)

    def test_test_functions_and_short_ones_are_left_alone(self):
        text = "#[cfg(test)]\nmod tests {\n" + long_fn("big") + "}\n#[tokio::test]\n" + long_fn("t")
        text += "pub fn short() {\n" + "    let _ = 1;\n" * 98 + "}\n"
        code, out = run(self.files(text))
        self.assertEqual(code, 0, out)

    def test_strings_and_comments_do_not_confuse_the_braces(self):
        text = long_fn("big").replace("let _x0 = 0;", 'let _x0 = "}}} {"; // }\n    let _c = \'}\';')
        code, out = run(self.files(text))
        self.assertEqual(code, 1)
        self.assertIn("fn big is 104 lines", out)


class UseTrees(unittest.TestCase):
    def test_nested_groups_aliases_and_self(self):
        paths = structure.expand_use("crate::a::{self, b::{C as D, *}, e}")
        self.assertEqual([tuple(p) for p in paths], [
            ("crate", "a"), ("crate", "a", "b", "C"), ("crate", "a", "b", "*"), ("crate", "a", "e"),
        ])
        self.assertEqual([p.alias for p in paths], ["a", "D", "*", "e"])


if __name__ == "__main__":
    unittest.main()
