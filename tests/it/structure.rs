//! Structure gate (stage 0 of `tests/run_all.sh`, `cargo test --test it
//! structure::`): the rules of `src/lib.rs`'s module map, checked by reading
//! the sources.
//!
//! - **Layering**: a top-level module refers (`crate::x…`, `use crate::{x, …}`)
//!   only to modules listed above it in the module map table of `src/lib.rs`.
//! - **The binary on top**: `src/main.rs` and its own modules in `src/cli/`
//!   ([`BIN_MODULES`]) use the library (`mcp_edge::…`, any module); the
//!   library never uses them, and the binary declares no library module as
//!   its own.
//! - **No circles** among sibling submodules (`super::x`, `crate::a::x`) of
//!   any module, the binary's included.
//! - **Small functions and files**: no function in `src/` over
//!   [`MAX_FN_LINES`] lines (from `fn` to its closing brace), no file over
//!   [`MAX_FILE_LINES`]; `lib.rs` and `main.rs` included.
//! - **Typed errors**: `anyhow` only in the binary (the library's errors are
//!   types at its module boundaries; its unit tests may use it).
//! - **Clock-free tables**: the fixed tables take `now` as an argument; their
//!   non-test code never reads the clock.
//! - **Names by role**: no file name repeats in `src/`.
//! - **No up-arrows** in the folders of [`NO_UP_ARROWS`] (the downstream
//!   face, subfolders included): a file uses `super::` only for its sibling
//!   modules (test files left out).
//! - **Through the router**: the downstream face's non-test code names
//!   nothing of `upstream` (`crate::upstream…`, however written); what it
//!   needs of the upstreams is the router's API ([`THROUGH`]).
//! - **No sleep orders events** in the tests (`tests/it/`, the fakes of
//!   `tests/fake/`): every `sleep(` either waits for something a test can see
//!   (replace it with `support::eventually`) or says on its line, or the line
//!   above, `not ordering: <why>` (a fake that must be slow, a time window
//!   the test is about, a poll interval).
//!
//! Comments and string literals are blanked before reading, so doc links and
//! messages do not count as imports.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The longest a function in `src/` may be, in lines.
const MAX_FN_LINES: usize = 80;
/// The longest a file in `src/` may be, in lines.
const MAX_FILE_LINES: usize = 600;
/// The binary's own modules, in `src/<name>/` and declared by `src/main.rs`.
const BIN_MODULES: &[&str] = &["cli"];
/// What a `sleep(` that orders nothing says on its line or the one above.
const NOT_ORDERING: &str = "not ordering:";
/// Modules that hold a fixed table and take `now` from their caller.
const CLOCK_FREE: &[&str] = &[
    "src/session.rs",
    "src/session/room.rs",
    "src/subscriptions.rs",
    "src/tasks.rs",
    "src/downstream/conns.rs",
    "src/downstream/parked.rs",
    "src/downstream/resume.rs",
];
/// Folders whose files, in subfolders too, never import their parent
/// module's own items (`super::X` where `X` is not a sibling module): the
/// parent declares and re-exports its children and holds nothing they
/// need, so the folder's imports run one way (issue 24: the downstream
/// face as a pipeline). Test files (`<module>_tests.rs`) are left out.
const NO_UP_ARROWS: &[&str] = &["src/downstream"];
/// (module, module it never names, the module it reaches it through): the
/// downstream face reaches upstreams only through the router (issue 24
/// part 4), which re-exports what of them it serves.
const THROUGH: &[(&str, &str, &str)] = &[("downstream", "upstream", "router")];

type ModPath = Vec<String>;

struct Source {
    file: PathBuf,
    /// In the binary (`main.rs`, [`BIN_MODULES`]) rather than the library.
    bin: bool,
    /// `[]` for a crate root (`lib.rs`, `main.rs`).
    module: ModPath,
    /// The text as written.
    raw: String,
    /// The text with comments and literals blanked (same line structure).
    code: String,
    lines: usize,
}

#[test]
fn layering_follows_the_module_map() {
    let tree = Tree::read();
    let order = tree.map_order();
    let mut bad = Vec::new();
    for (from, to) in tree.edges(false) {
        let (f, t) = (&from[0], &to[0]);
        if f == t {
            continue;
        }
        match (order.get(f), order.get(t)) {
            (Some(a), Some(b)) if b < a => {}
            (Some(_), Some(_)) => bad.push(format!(
                "{} uses {} (listed below it in src/lib.rs)",
                from.join("::"),
                to.join("::")
            )),
            _ => bad.push(format!(
                "{} -> {}: a module missing from src/lib.rs's module map",
                from.join("::"),
                to.join("::")
            )),
        }
    }
    bad.sort();
    bad.dedup();
    assert!(
        bad.is_empty(),
        "layering violations:\n  {}",
        bad.join("\n  ")
    );
}

#[test]
fn module_map_lists_every_module() {
    let tree = Tree::read();
    let listed: BTreeSet<String> = tree.map_order().into_keys().collect();
    let declared: BTreeSet<String> = tree
        .sources
        .iter()
        .filter(|s| !s.bin && s.module.len() == 1)
        .map(|s| s.module[0].clone())
        .collect();
    assert_eq!(listed, declared, "src/lib.rs's module map vs src/*");
}

#[test]
fn no_circles_among_sibling_modules() {
    let tree = Tree::read();
    // (binary?, parent) -> (child -> children it uses)
    type Graph = BTreeMap<String, BTreeSet<String>>;
    let mut graphs: BTreeMap<(bool, ModPath), Graph> = BTreeMap::new();
    for bin in [false, true] {
        for (from, to) in tree.edges(bin) {
            let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
            if common < from.len() && common < to.len() {
                graphs
                    .entry((bin, from[..common].to_vec()))
                    .or_default()
                    .entry(from[common].clone())
                    .or_default()
                    .insert(to[common].clone());
            }
        }
    }
    let mut bad = Vec::new();
    for ((bin, parent), g) in &graphs {
        if let Some(cycle) = find_cycle(g) {
            let krate = if *bin { "the binary" } else { "crate" };
            let p = if parent.is_empty() {
                krate.to_string()
            } else {
                format!("{krate} {}", parent.join("::"))
            };
            bad.push(format!("in {p}: {}", cycle.join(" -> ")));
        }
    }
    assert!(bad.is_empty(), "import circles:\n  {}", bad.join("\n  "));
}

#[test]
fn functions_and_files_stay_small() {
    let tree = Tree::read();
    let mut bad = Vec::new();
    let mut longest = (0, String::new());
    for s in &tree.sources {
        if s.lines > MAX_FILE_LINES {
            bad.push(format!(
                "{}: {} lines (max {MAX_FILE_LINES})",
                s.file.display(),
                s.lines
            ));
        }
        for (name, line, len) in functions(&s.code) {
            if len > longest.0 {
                longest = (len, format!("{}:{line} {name}", s.file.display()));
            }
            if len > MAX_FN_LINES {
                bad.push(format!(
                    "{}:{line}: fn {name} is {len} lines (max {MAX_FN_LINES})",
                    s.file.display()
                ));
            }
        }
    }
    eprintln!("longest function: {} ({} lines)", longest.1, longest.0);
    assert!(bad.is_empty(), "too long:\n  {}", bad.join("\n  "));
}

#[test]
fn tables_take_now_from_their_caller() {
    let tree = Tree::read();
    for f in CLOCK_FREE {
        assert!(
            tree.root.join(f).is_file(),
            "CLOCK_FREE names {f}, which is gone"
        );
    }
    let mut bad = Vec::new();
    let mut seen = 0;
    for s in &tree.sources {
        let path = Path::new("src").join(&s.file);
        if !CLOCK_FREE.iter().any(|f| path == Path::new(f)) {
            continue;
        }
        seen += 1;
        let non_test = without_tests(&s.code);
        for needle in ["Instant::now", "SystemTime::now"] {
            if non_test.contains(needle) {
                bad.push(format!("{} reads the clock ({needle})", s.file.display()));
            }
        }
    }
    assert_eq!(seen, CLOCK_FREE.len(), "every clock-free table read");
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// `src/main.rs` and `src/cli/` sit on top of the library: the library
/// never names them, and the binary declares no library module as its own
/// (it reaches every one through `mcp_edge::…`; a `mod config;` in
/// `main.rs` would compile a second copy into the binary).
#[test]
fn the_binary_uses_the_library_never_the_reverse() {
    let tree = Tree::read();
    let mut bad = Vec::new();
    for s in &tree.sources {
        if s.bin {
            for name in module_decls(&s.code) {
                let own = BIN_MODULES.contains(&name.as_str())
                    || (tree.modules.iter()).any(|(bin, m)| *bin && m.last() == Some(&name));
                if !own {
                    bad.push(format!(
                        "{} declares `mod {name}`, no module of the binary (src/{{{}}}/): \
                         the library is used as mcp_edge::{name}",
                        s.file.display(),
                        BIN_MODULES.join(",")
                    ));
                }
            }
        } else {
            for target in references(&s.code, &s.module) {
                if BIN_MODULES.contains(&target[0].as_str()) {
                    bad.push(format!(
                        "{} uses crate::{} of the binary",
                        s.file.display(),
                        target.join("::")
                    ));
                }
            }
            let path_attrs = s
                .raw
                .lines()
                .filter(|l| l.trim_start().starts_with("#[path"));
            for attr in path_attrs {
                let of_bin = attr.contains("main.rs")
                    || BIN_MODULES.iter().any(|d| attr.contains(&format!("{d}/")));
                if of_bin {
                    bad.push(format!(
                        "{}: {} (a file of the binary)",
                        s.file.display(),
                        attr.trim()
                    ));
                }
            }
        }
    }
    let bin_files = tree.sources.iter().filter(|s| s.bin).count();
    assert!(bin_files > 1, "src/main.rs and src/cli/ not read");
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// The library's errors are types at its module boundaries (`thiserror`);
/// `anyhow` is for the binary, which only reports them. (The library's
/// unit tests, `tests` modules, may use it to render an error's chain.)
#[test]
fn anyhow_only_in_the_binary() {
    let tree = Tree::read();
    let bad: Vec<String> = (tree.sources.iter())
        .filter(|s| !s.bin && s.module.last().is_none_or(|m| !is_test_module(m)))
        .filter(|s| words(&s.code).any(|w| w == "anyhow"))
        .map(|s| s.file.display().to_string())
        .collect();
    assert!(
        bad.is_empty(),
        "anyhow in the library (use a typed error): {bad:?}"
    );
}

/// No test sleeps a fixed time to order events: each `sleep(` (Rust and
/// the Python fakes) is marked `not ordering: <why>` on its line or the
/// line above, or it is replaced with a wait on something observable
/// (`support::eventually`, the fake's marks, a metric, a log line).
#[test]
fn no_sleep_orders_events_in_the_tests() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    walk_ext(&root.join("tests/it"), "rs", &mut files);
    walk_ext(&root.join("tests/fake"), "py", &mut files);
    assert!(
        files.len() > 30,
        "tests/it and tests/fake not read: {files:?}"
    );
    let mut bad = Vec::new();
    for file in &files {
        let raw = std::fs::read_to_string(file).unwrap();
        let rel = file.strip_prefix(&root).unwrap().display().to_string();
        for line in unmarked_sleeps(&raw, rel.ends_with(".py")) {
            bad.push(format!("{rel}:{line}"));
        }
    }
    assert!(
        bad.is_empty(),
        "sleep( without `// {NOT_ORDERING} <why>` on its line or the one above \
         (wait on something observable instead: support::eventually):\n  {}",
        bad.join("\n  ")
    );
}

/// The checker itself: a circle, a layering breach, comment blanking, `mod`
/// declarations and marked sleeps.
/// Files are named by role: no file name appears twice in `src/` (no
/// `mod.rs`, no `tests.rs` in every folder, no two `tasks.rs`).
#[test]
fn no_file_name_repeats_in_src() {
    let tree = Tree::read();
    let mut seen: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for s in &tree.sources {
        let name = s.file.file_name().unwrap().to_string_lossy().to_string();
        let rel = Path::new("src").join(&s.file).display().to_string();
        seen.entry(name).or_default().push(rel);
    }
    let twice: Vec<String> = (seen.into_iter())
        .filter(|(_, files)| files.len() > 1)
        .map(|(name, files)| format!("{name}: {}", files.join(", ")))
        .collect();
    assert!(
        twice.is_empty(),
        "file names used twice:\n{}",
        twice.join("\n")
    );
}

/// In the folders of [`NO_UP_ARROWS`], a file refers through `super::` only
/// to its sibling modules, never to an item of the parent module (the
/// `mod.rs` ↔ child circle a parent holding shared state makes). Test
/// modules are left out: `use super::*` is what they are for.
#[test]
fn the_downstream_face_has_no_up_arrows() {
    let tree = Tree::read();
    let mut bad = Vec::new();
    for folder in NO_UP_ARROWS {
        let dir = tree.root.join(folder);
        assert!(dir.is_dir(), "NO_UP_ARROWS names {folder}, which is gone");
        // Every file below the folder, in subfolders too (a test file,
        // `<module>_tests.rs`, is its parent's test module: left out).
        let inside = |s: &&Source| {
            let path = Path::new("src").join(&s.file);
            let test_file = s.module.last().is_some_and(|m| is_test_module(m));
            path.starts_with(folder) && !test_file
        };
        let files: Vec<&Source> = tree.sources.iter().filter(inside).collect();
        assert!(files.len() > 1, "{folder} holds {} files", files.len());
        for s in files {
            let code = without_tests(&s.code);
            let here = tree.root.join("src").join(&s.file);
            let here = here.parent().expect("a file has a folder");
            for name in super_names(&code) {
                let sibling = here.join(format!("{name}.rs"));
                if !sibling.is_file() && !here.join(&name).is_dir() {
                    let file = s.file.display();
                    let parent = Path::new("src").join(s.file.parent().unwrap_or(Path::new("")));
                    let parent = parent.display();
                    bad.push(format!("{file}: super::{name} (an item of {parent}.rs)"));
                }
            }
        }
    }
    assert!(
        bad.is_empty(),
        "up-arrows inside a folder:\n{}",
        bad.join("\n")
    );
}

/// The modules of [`THROUGH`] never name the module they reach through
/// another: no `crate::upstream…` path (a `use`, a type, a call; brace
/// groups and `super::super::` resolved) in `src/downstream.rs` or
/// `src/downstream/`, test modules left out.
#[test]
fn the_downstream_face_reaches_upstreams_through_the_router() {
    let tree = Tree::read();
    let mut bad = Vec::new();
    for (from, never, via) in THROUGH {
        let inside = |s: &&Source| !s.bin && s.module.first().is_some_and(|m| m == from);
        let files: Vec<&Source> = tree.sources.iter().filter(inside).collect();
        assert!(files.len() > 1, "{from} holds {} files", files.len());
        for s in files {
            let code = without_tests(&s.code);
            for target in references(&code, &s.module) {
                if target.first().is_some_and(|m| m == never) {
                    let (file, path) = (s.file.display(), target.join("::"));
                    bad.push(format!(
                        "src/{file}: crate::{path} (reach {never} through {via})"
                    ));
                }
            }
        }
    }
    bad.sort();
    bad.dedup();
    assert!(bad.is_empty(), "names it must not:\n{}", bad.join("\n"));
}

/// The first segment of each comma-separated item of a `{…}` list whose
/// opening brace `inner` follows, up to its matching closing brace.
fn top_level_items(inner: &str) -> Vec<String> {
    let (mut depth, mut item, mut out) = (0usize, String::new(), Vec::new());
    for c in inner.chars() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => out.push(std::mem::take(&mut item)),
            _ if depth == 0 => item.push(c),
            _ => {}
        }
    }
    out.push(item);
    (out.iter())
        .filter_map(|i| i.trim().split("::").next())
        .map(|h| h.split_whitespace().next().unwrap_or("").to_string())
        .filter(|h| !h.is_empty())
        .collect()
}

/// `code` without the items marked `#[cfg(test)]` (a `mod x;` line, or an
/// item up to its matching closing brace): what the build keeps.
fn without_tests(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(i) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..i]);
        let item = &rest[i..];
        let (semi, brace) = (item.find(';'), item.find('{'));
        let end = match (semi, brace) {
            (Some(s), b) if b.is_none_or(|b| s < b) => s + 1,
            (_, Some(b)) => b + matching_brace(&item[b..]).unwrap_or(item.len() - b),
            _ => item.len(),
        };
        // Keep the line structure: line numbers still match the file.
        out.extend(item[..end].chars().filter(|&c| c == '\n'));
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

/// The length of `s` (starting at `{`) up to and including its matching `}`.
fn matching_brace(s: &str) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// A unit-test module (`tests`, or a `<module>_tests` file).
fn is_test_module(m: &str) -> bool {
    m == "tests" || m.ends_with("_tests")
}

/// The first segment of every `super::…` path in `code` (one level up
/// only; braces expanded, nested ones included).
fn super_names(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(i) = rest.find("super::") {
        let preceded = rest[..i].chars().next_back();
        rest = &rest[i + "super::".len()..];
        if preceded.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        if let Some(inner) = rest.strip_prefix('{') {
            for head in top_level_items(inner) {
                if head != "self" {
                    out.insert(head);
                }
            }
        } else if rest.starts_with('*') {
            out.insert("*".to_string()); // a glob: the parent's items too
        } else if let Some(after) = rest.strip_prefix("super::") {
            rest = after; // super::super::…: not this folder's parent
        } else {
            let head: String = (rest.chars())
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !head.is_empty() && head != "super" {
                out.insert(head);
            }
        }
    }
    out
}

#[test]
fn the_checker_sees_what_it_must() {
    let mut g = BTreeMap::new();
    g.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    g.insert("b".to_string(), BTreeSet::from(["c".to_string()]));
    g.insert("c".to_string(), BTreeSet::from(["a".to_string()]));
    assert_eq!(find_cycle(&g).map(|c| c.len()), Some(4));
    g.get_mut("c").unwrap().clear();
    assert_eq!(find_cycle(&g), None);
    let code = blank("// crate::x\nlet s = \"crate::y\"; use crate::{z::w, v};\n");
    let refs: Vec<String> = references(&code, &["m".into()])
        .iter()
        .map(|p| p.join("::"))
        .collect();
    assert_eq!(refs, ["z::w", "v"]);
    let f = functions(&blank("fn a() {\n let c = '{';\n}\nfn b();\n"));
    assert_eq!(f, vec![("a".to_string(), 1, 3)]);
    let decls = "mod a;\npub(crate) mod b {\n mod c;\n}\n// mod d;\nuse e::model;\n";
    assert_eq!(module_decls(&blank(decls)), ["a", "b", "c"]);
    let rs = "sleep(x);\n// not ordering: a window\nsleep(y);\nf();\nsleep(z); // not ordering:\n\
              /* sleep( */ s(\"sleep(\");\nsleep_until(t);\nsleep(w); // not ordering: slow\n";
    assert_eq!(unmarked_sleeps(rs, false), [1, 5, 7]);
    let py = "time.sleep(1)\n# not ordering: a slow fake\ntime.sleep(2)\n# time.sleep(3)\n";
    assert_eq!(unmarked_sleeps(py, true), [1]);
    let ups = blank(
        "use super::{app::{App, Who}, reply};\nlet x = super::Body::new();\nsuper::super::y;\n",
    );
    let ups: Vec<String> = super_names(&ups).into_iter().collect();
    assert_eq!(ups, ["Body", "app", "reply"]);
    assert!(is_test_module("audit_tests") && !is_test_module("tests_of"));
    let t = blank(
        "fn a() {}\n#[cfg(test)]\nfn b() { x }\nfn c() {}\n#[cfg(test)]\nmod t;\nfn d() {}\n",
    );
    assert_eq!(
        without_tests(&t),
        "fn a() {}\n\n\nfn c() {}\n\n\nfn d() {}\n"
    );
    let glob: Vec<String> = super_names(&blank("use super::*;\n")).into_iter().collect();
    assert_eq!(glob, ["*"]);
}

struct Tree {
    root: PathBuf,
    sources: Vec<Source>,
    /// (in the binary?, module) of every source file.
    modules: BTreeSet<(bool, ModPath)>,
}

impl Tree {
    fn read() -> Tree {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let mut files = Vec::new();
        walk(&root.join("src"), &mut files);
        let mut sources = Vec::new();
        for file in files {
            let rel = file.strip_prefix(root.join("src")).unwrap().to_path_buf();
            let (bin, module) = module_of(&rel);
            let text = std::fs::read_to_string(&file).unwrap();
            sources.push(Source {
                lines: text.lines().count(),
                code: blank(&text),
                raw: text,
                file: rel,
                bin,
                module,
            });
        }
        let modules = sources.iter().map(|s| (s.bin, s.module.clone())).collect();
        Tree {
            root,
            sources,
            modules,
        }
    }

    /// Top-level modules in the order of the module map table in `src/lib.rs`.
    fn map_order(&self) -> BTreeMap<String, usize> {
        let lib = std::fs::read_to_string(self.root.join("src/lib.rs")).unwrap();
        lib.lines()
            .filter_map(|l| l.strip_prefix("//! | [`"))
            .filter_map(|l| l.split('`').next())
            .enumerate()
            .map(|(i, m)| (m.to_string(), i))
            .collect()
    }

    /// (from module, to module) for every reference to another module of
    /// the same crate: the library's, or the binary's (`bin`).
    fn edges(&self, bin: bool) -> Vec<(ModPath, ModPath)> {
        let mut out = Vec::new();
        for s in self.sources.iter().filter(|s| s.bin == bin) {
            for target in references(&s.code, &s.module) {
                let to = self.deepest_module(bin, &target);
                if !to.is_empty() && !to.starts_with(&s.module) && !s.module.starts_with(&to) {
                    out.push((s.module.clone(), to));
                }
            }
        }
        out
    }

    /// The longest prefix of `path` that names a module file of the
    /// library, or of the binary (`bin`).
    fn deepest_module(&self, bin: bool, path: &[String]) -> ModPath {
        (1..=path.len())
            .rev()
            .map(|n| path[..n].to_vec())
            .find(|p| self.modules.contains(&(bin, p.clone())))
            .unwrap_or_default()
    }
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            walk(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    out.sort();
}

/// Whether `rel` (under `src/`) is the binary's, and its module:
/// `a/b.rs` → `[a, b]`; `a/mod.rs` → `[a]`; `lib.rs` and `main.rs` are the crates' roots
/// (`[]`); `cli/x.rs` is the binary's `cli::x` ([`BIN_MODULES`]).
fn module_of(rel: &Path) -> (bool, ModPath) {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if parts.len() == 1 && (parts[0] == "lib" || parts[0] == "main") {
        return (parts[0] == "main", Vec::new());
    }
    let bin = BIN_MODULES.contains(&parts[0].as_str());
    if parts.last().is_some_and(|l| l == "mod") {
        parts.pop();
    }
    (bin, parts)
}

/// `*.{ext}` files beneath `dir`, sorted.
fn walk_ext(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            walk_ext(&p, ext, out);
        } else if p.extension().is_some_and(|x| x == ext) {
            out.push(p);
        }
    }
    out.sort();
}

/// The identifiers of `code`, in order.
fn words(code: &str) -> impl Iterator<Item = &str> {
    code.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
}

/// The names of the `mod` items `code` declares (`mod a;`, `pub mod b {`),
/// nested ones included.
fn module_decls(code: &str) -> Vec<String> {
    let w: Vec<&str> = words(code).collect();
    (w.windows(2))
        .filter(|p| p[0] == "mod")
        .map(|p| p[1].to_string())
        .collect()
}

/// Lines (1-based) of `text` with a `sleep(` (or `sleep_until(`) in code,
/// not in a comment or a string, and no `not ordering: <why>` on that line
/// or the one above. `python`: `#` comments; else Rust (blanked).
fn unmarked_sleeps(text: &str, python: bool) -> Vec<usize> {
    let code = if python {
        (text.lines())
            .map(|l| l.split('#').next().unwrap_or(""))
            .collect::<Vec<_>>()
            .join("\n")
    } else {
        blank(text)
    };
    let raw: Vec<&str> = text.lines().collect();
    let says_why = |l: &str| {
        l.split_once(NOT_ORDERING)
            .is_some_and(|(_, why)| !why.trim().is_empty())
    };
    let mut out = Vec::new();
    for (i, line) in code.lines().enumerate() {
        if !(line.contains("sleep(") || line.contains("sleep_until(")) {
            continue;
        }
        if says_why(raw[i]) || (i > 0 && says_why(raw[i - 1])) {
            continue;
        }
        out.push(i + 1);
    }
    out
}

/// Every `crate::…` and `super::…` path in `code`, resolved from `module`
/// (brace groups expanded).
fn references(code: &str, module: &[String]) -> Vec<ModPath> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    for start in ["crate::", "super::"] {
        for (i, _) in code.match_indices(start) {
            let before = if i == 0 { b' ' } else { b[i - 1] };
            if before.is_ascii_alphanumeric() || before == b'_' || before == b'$' || before == b':'
            {
                continue;
            }
            let mut base: ModPath = if start == "crate::" {
                Vec::new()
            } else {
                module[..module.len().saturating_sub(1)].to_vec()
            };
            let mut j = i + start.len();
            // `super::super::…`
            while code[j..].starts_with("super::") {
                base.pop();
                j += "super::".len();
            }
            parse_path(code, j, base, &mut out);
        }
    }
    out
}

/// Reads `a::b::{c, d::e}` at `at` onto `base`, pushing each full path.
fn parse_path(code: &str, mut at: usize, mut base: ModPath, out: &mut Vec<ModPath>) -> usize {
    let b = code.as_bytes();
    loop {
        while at < b.len() && b[at].is_ascii_whitespace() {
            at += 1;
        }
        if at < b.len() && b[at] == b'{' {
            at += 1;
            loop {
                at = parse_path(code, at, base.clone(), out);
                while at < b.len() && b[at] != b',' && b[at] != b'}' {
                    at += 1;
                }
                if at >= b.len() || b[at] == b'}' {
                    return at + 1;
                }
                at += 1;
            }
        }
        let end = at
            + code[at..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(code.len() - at);
        if end > at && code[at..end] != *"self" {
            base.push(code[at..end].to_string());
        }
        at = end;
        if code[at..].starts_with("::") {
            at += 2;
        } else {
            if !base.is_empty() {
                out.push(base);
            }
            return at;
        }
    }
}

/// (name, first line, length in lines) of every function with a body.
fn functions(code: &str) -> Vec<(String, usize, usize)> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    for (i, _) in code.match_indices("fn ") {
        if i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_') {
            continue;
        }
        let name: String = code[i + 3..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            continue;
        }
        let (mut depth, mut j, mut open) = (0usize, i, false);
        while j < b.len() {
            match b[j] {
                b';' if !open => break,
                b'{' => {
                    open = true;
                    depth += 1;
                }
                b'}' if open => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
            j += 1;
        }
        if open {
            let first = code[..i].matches('\n').count() + 1;
            let last = code[..j].matches('\n').count() + 1;
            out.push((name, first, last - first + 1));
        }
    }
    out
}

/// `src` with comments, string and char literals replaced by spaces
/// (newlines kept, so line numbers hold).
fn blank(src: &str) -> String {
    let c: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    let keep = |out: &mut String, s: &[char]| {
        out.extend(s.iter().map(|&ch| if ch == '\n' { '\n' } else { ' ' }))
    };
    while i < c.len() {
        let rest = &c[i..];
        let prev_ident = i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_');
        let end = if rest.starts_with(&['/', '/']) {
            i + rest.iter().position(|&x| x == '\n').unwrap_or(rest.len())
        } else if rest.starts_with(&['/', '*']) {
            i + 2 + find(&rest[2..], &['*', '/']).map_or(rest.len() - 2, |p| p + 2)
        } else if !prev_ident && raw_string(rest).is_some() {
            i + raw_string(rest).unwrap()
        } else if c[i] == '"' {
            let mut j = i + 1;
            while j < c.len() && c[j] != '"' {
                j += if c[j] == '\\' { 2 } else { 1 };
            }
            j + 1
        } else if c[i] == '\'' && char_literal(rest).is_some() {
            i + char_literal(rest).unwrap()
        } else {
            out.push(c[i]);
            i += 1;
            continue;
        };
        let end = end.min(c.len());
        keep(&mut out, &c[i..end]);
        i = end;
    }
    out
}

fn find(hay: &[char], needle: &[char]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Length of a raw string literal (`r"…"`, `r#"…"#`, `br"…"`) at the start.
fn raw_string(s: &[char]) -> Option<usize> {
    let mut i = usize::from(s.first() == Some(&'b'));
    if s.get(i) != Some(&'r') {
        return None;
    }
    i += 1;
    let hashes = s[i..].iter().take_while(|&&x| x == '#').count();
    i += hashes;
    if s.get(i) != Some(&'"') {
        return None;
    }
    let mut close = vec!['"'];
    close.extend(std::iter::repeat_n('#', hashes));
    find(&s[i + 1..], &close).map(|p| i + 1 + p + close.len())
}

/// Length of a char literal (`'x'`, `'\n'`, `'\u{..}'`) at the start; `None`
/// for a lifetime.
fn char_literal(s: &[char]) -> Option<usize> {
    if s.get(1) == Some(&'\\') {
        return s[2..].iter().position(|&x| x == '\'').map(|p| p + 3);
    }
    (s.get(2) == Some(&'\'')).then_some(3)
}

/// A circle in a directed graph, as `a -> b -> … -> a`.
fn find_cycle(g: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        g: &BTreeMap<String, BTreeSet<String>>,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(p) = stack.iter().position(|s| s == n) {
            let mut c = stack[p..].to_vec();
            c.push(n.to_string());
            return Some(c);
        }
        if done.contains(n) {
            return None;
        }
        stack.push(n.to_string());
        for m in g.get(n).into_iter().flatten() {
            if let Some(c) = visit(m, g, stack, done) {
                return Some(c);
            }
        }
        stack.pop();
        done.insert(n.to_string());
        None
    }
    let mut done = BTreeSet::new();
    g.keys()
        .find_map(|n| visit(n, g, &mut Vec::new(), &mut done))
}
