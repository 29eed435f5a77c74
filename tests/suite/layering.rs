//! The house has one direction: every `crate::` path in the library's non-test code must go
//! down the layers (docs/ARCHITECTURE.md draws them, with what each module takes and gives:
//! `report` only under the CLI; sim, live logs and the testbed on top). The table below is the
//! whole rule: a module may name the modules listed for it and nothing else. A new arrow up
//! fails here, with the file and line.
//!
//! Paths are read from the source text (use lines and inline `crate::a::b` paths, brace groups
//! included), with comments and `#[cfg(test)]` modules left out. `crate::model::onnx` (the ONNX
//! export, which reads trained SVR models) and `crate::transport::io` (the socket edge) are
//! their own rooms; the rest of `model` and `transport`, like `time`, `features`, `runtime`,
//! `control`, `selfcal` and `airtime`, is `aggrate-core`, re-exported, below everything.
//! Inside `aggrate-core` the same rule holds with a table of its own (`CORE_ALLOWED`), and
//! neither table may hold a circle, so the code has none from room to room.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The core crate's modules, re-exported at the root: anyone may use them.
const CORE: &[&str] = &[
    "time",
    "features",
    "runtime",
    "control",
    "selfcal",
    "airtime",
    "level",
    "model",
    "transport",
    "watch",
    "Ts",
    "Tsft",
];

/// Who may use whom (besides the core). `report` is in no list: only the CLI renders.
const ALLOWED: &[(&str, &[&str])] = &[
    ("metrics", &[]),
    ("impair", &[]),
    ("bulk", &["impair", "parallel"]),
    ("phy", &[]),
    ("parallel", &[]),
    ("progress", &[]),
    ("rxstamp", &[]),
    ("capture", &["phy"]),
    ("label", &["capture"]),
    ("wlan", &["phy", "progress", "capture", "rxstamp"]),
    ("dataset", &["capture", "label"]),
    (
        "pipeline",
        &["capture", "label", "dataset", "parallel", "progress", "wlan", "phy"],
    ),
    (
        "train",
        &[
            "capture", "label", "dataset", "pipeline", "metrics", "parallel", "progress", "wlan", "phy",
        ],
    ),
    ("bottleneck", &["dataset", "train"]),
    ("model::onnx", &["train"]),
    ("transport::io", &["rxstamp", "impair"]),
    ("livelog", &["metrics", "wlan"]),
    (
        "testbed",
        &[
            "parallel",
            "capture",
            "wlan",
            "rxstamp",
            "metrics",
            "livelog",
            "bottleneck",
            "transport::io",
        ],
    ),
    ("sim", &["metrics", "wlan", "train", "bottleneck", "parallel"]),
    (
        "report",
        &[
            "metrics",
            "bulk",
            "train",
            "sim",
            "livelog",
            "wlan",
            "pipeline",
            "dataset",
            "capture",
            "phy",
            "testbed",
            "bottleneck",
        ],
    ),
];

/// The core crate's own layers (`crates/aggrate-core/src`): who may use whom inside it. The
/// clock at the bottom; the airtime relation and the learned level's trees alone; features,
/// then models, then the online estimator; the controller and self-calibration on it; the
/// transport on all of them; `watch` on top.
const CORE_ALLOWED: &[(&str, &[&str])] = &[
    ("time", &[]),
    ("airtime", &[]),
    ("level", &[]),
    ("features", &["time"]),
    ("model", &["features", "level"]),
    ("runtime", &["airtime", "features", "level", "model", "time"]),
    ("control", &["airtime", "model", "runtime", "time"]),
    ("selfcal", &["features", "model", "runtime", "time"]),
    (
        "transport",
        &["airtime", "control", "features", "runtime", "selfcal", "time"],
    ),
    ("watch", &["model", "runtime", "transport", "time"]),
];

/// The room a `crate::` path names: its first segment, or `model::onnx` / `transport::io`.
fn room(path: &[&str]) -> String {
    match path {
        ["model", "onnx", ..] => "model::onnx".into(),
        ["transport", "io", ..] => "transport::io".into(),
        // The clock's types, re-exported at the core crate's root.
        ["Ts" | "Tsft", ..] => "time".into(),
        [first, ..] => first.to_string(),
        [] => String::new(),
    }
}

/// The room a source file is in.
fn file_room(rel: &Path) -> String {
    let parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    let segs: Vec<&str> = parts.iter().map(String::as_str).collect();
    room(&segs)
}

/// The text with comments blanked and `#[cfg(test)]` items removed (line numbers kept).
fn strip(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    for line in src.lines() {
        let code = match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        };
        out.push_str(code);
        out.push('\n');
    }
    // Blank each `#[cfg(test)]` item: from the attribute to the brace that closes it.
    while let Some(at) = out.find("#[cfg(test)]") {
        let open = match out[at..].find(['{', ';']) {
            Some(i) => at + i,
            None => break,
        };
        let mut end = open + 1;
        if out.as_bytes()[open] == b'{' {
            let mut depth = 0i64;
            for (i, c) in out[open..].char_indices() {
                depth += match c {
                    '{' => 1,
                    '}' => -1,
                    _ => 0,
                };
                if depth == 0 {
                    end = open + i + 1;
                    break;
                }
            }
        }
        let blank: String = out[at..end]
            .chars()
            .map(|c| if c == '\n' { '\n' } else { ' ' })
            .collect();
        out.replace_range(at..end, &blank);
    }
    out
}

/// Every `crate::` path in `code`, as (line, segments); brace groups expand to one path each.
fn crate_paths(code: &str) -> Vec<(usize, Vec<String>)> {
    let mut out = Vec::new();
    let b = code.as_bytes();
    let mut i = 0;
    while let Some(k) = code[i..].find("crate::") {
        let at = i + k;
        i = at + 7;
        if at > 0 && (b[at - 1].is_ascii_alphanumeric() || b[at - 1] == b'_' || b[at - 1] == b'$') {
            continue; // `aggrate_core::…`, `$crate::…`
        }
        let line = code[..at].matches('\n').count() + 1;
        expand(code, i, Vec::new(), line, &mut out);
    }
    out
}

/// Paths starting at byte `i` (after a `::`), with `prefix` before them.
fn expand(code: &str, mut i: usize, prefix: Vec<String>, line: usize, out: &mut Vec<(usize, Vec<String>)>) {
    let b = code.as_bytes();
    let mut path = prefix;
    loop {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        if i < b.len() && b[i] == b'{' {
            // A group: split at top-level commas.
            let mut depth = 0;
            let mut start = i + 1;
            let mut j = i;
            while j < b.len() {
                match b[j] {
                    b'{' => depth += 1,
                    b'}' => {
                        depth -= 1;
                        if depth == 0 {
                            if !code[start..j].trim().is_empty() {
                                expand(code, start, path.clone(), line, out);
                            }
                            return;
                        }
                    }
                    b',' if depth == 1 => {
                        expand(code, start, path.clone(), line, out);
                        start = j + 1;
                    }
                    _ => {}
                }
                j += 1;
            }
            return;
        }
        let s = i;
        while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
            i += 1;
        }
        if s == i {
            break;
        }
        path.push(code[s..i].to_string());
        if code[i..].starts_with("::") {
            i += 2;
        } else {
            break;
        }
    }
    if !path.is_empty() {
        out.push((line, path));
    }
}

/// Every upward or sideways arrow in the library under `src`: (file, line, from, to).
fn violations(src: &Path) -> Vec<String> {
    violations_in(src, ALLOWED, CORE)
}

/// Every arrow under `src` that `allowed` does not list (`free`: rooms anyone may use).
fn violations_in(src: &Path, allowed: &[(&str, &[&str])], free: &[&str]) -> Vec<String> {
    let allowed: BTreeMap<&str, &[&str]> = allowed.iter().copied().collect();
    let mut bad = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    let mut files = Vec::new();
    walk(src, &mut files);
    for f in files {
        let rel = f.strip_prefix(src).unwrap();
        let top = rel.iter().next().unwrap().to_string_lossy().to_string();
        if top == "lib.rs" || top == "main.rs" || top == "cli" {
            continue; // the root re-exports and the binary are on top
        }
        let from = file_room(rel);
        let text = std::fs::read_to_string(&f).unwrap();
        for (line, path) in crate_paths(&strip(&text)) {
            let segs: Vec<&str> = path.iter().map(String::as_str).collect();
            let to = room(&segs);
            let own = from.split("::").next() == to.split("::").next();
            if own || segs.first().is_some_and(|s| *s == "self" || *s == "super") {
                continue;
            }
            let core = free.contains(&to.as_str());
            let ok = core
                || allowed
                    .get(from.as_str())
                    .or_else(|| allowed.get(from.split("::").next().unwrap()))
                    .is_some_and(|a| a.contains(&to.as_str()));
            if !ok && seen.insert((rel.to_path_buf(), line, to.clone())) {
                bad.push(format!(
                    "{}:{line}: {from} → {to} (crate::{})",
                    rel.display(),
                    path.join("::")
                ));
            }
        }
    }
    bad
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            walk(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn every_arrow_goes_down() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let bad = violations(&src);
    assert!(
        bad.is_empty(),
        "arrows against the layers (tests/suite/layering.rs has the table):\n{}",
        bad.join("\n")
    );
}

#[test]
fn every_arrow_in_the_core_crate_goes_down() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/aggrate-core/src");
    // The check itself: an arrow up inside the core crate is caught (on a made-up file).
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("features.rs"),
        "use crate::{time::Ts, runtime::OnlineEstimator};\n",
    )
    .unwrap();
    let up = violations_in(dir.path(), CORE_ALLOWED, &[]);
    assert!(
        up.len() == 1 && up[0].starts_with("features.rs:1: features → runtime"),
        "{up:?}"
    );
    let bad = violations_in(&src, CORE_ALLOWED, &[]);
    assert!(
        bad.is_empty(),
        "arrows against the core crate's layers (CORE_ALLOWED in tests/suite/layering.rs):\n{}",
        bad.join("\n")
    );
    // Every module the core crate declares is placed.
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    for l in lib.lines() {
        if let Some(m) = l.trim().strip_prefix("pub mod ").and_then(|m| m.strip_suffix(';')) {
            assert!(
                CORE_ALLOWED.iter().any(|(r, _)| *r == m),
                "crates/aggrate-core/src/lib.rs declares `{m}`, which CORE_ALLOWED does not place"
            );
        }
    }
}

/// A table of arrows with a circle in it (A may use B, B may use A, through any path): the
/// first circle found, as the rooms along it.
fn circle(table: &[(&str, &[&str])]) -> Option<Vec<String>> {
    fn visit<'a>(
        m: &'a str,
        t: &BTreeMap<&'a str, &'a [&'a str]>,
        path: &mut Vec<&'a str>,
        done: &mut std::collections::BTreeSet<&'a str>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| *p == m) {
            return Some(path[i..].iter().chain([&m]).map(|s| s.to_string()).collect());
        }
        if !done.insert(m) {
            return None;
        }
        path.push(m);
        for to in t.get(m).copied().unwrap_or(&[]) {
            if let Some(c) = visit(to, t, path, done) {
                return Some(c);
            }
        }
        path.pop();
        None
    }
    let t: BTreeMap<&str, &[&str]> = table.iter().copied().collect();
    let mut done = std::collections::BTreeSet::new();
    t.keys().find_map(|m| visit(m, &t, &mut Vec::new(), &mut done))
}

#[test]
fn the_tables_have_no_circle() {
    // Arrows in the code are checked against the tables; tables without a circle leave none in
    // the code (room by room).
    assert_eq!(circle(ALLOWED), None);
    assert_eq!(circle(CORE_ALLOWED), None);
    assert_eq!(
        circle(&[("a", &["b"]), ("b", &["c"]), ("c", &["a"]), ("d", &[])]),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
}

#[test]
fn every_room_is_in_the_table() {
    // A new top-level module must be placed in the table (or be core), not slip through.
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let listed: Vec<&str> = ALLOWED.iter().map(|(m, _)| *m).collect();
    for l in lib.lines() {
        if let Some(m) = l.trim().strip_prefix("pub mod ").and_then(|m| m.strip_suffix(';')) {
            assert!(
                listed.contains(&m) || CORE.contains(&m),
                "src/lib.rs declares `{m}`, which tests/suite/layering.rs does not place"
            );
        }
    }
}

#[test]
fn the_reader_sees_what_it_must() {
    // The checker on made-up files: an arrow up is caught through a brace group and an inline
    // path, a test module and a comment are not read, `aggrate_core::` is not `crate::`.
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::create_dir_all(src.join("train")).unwrap();
    std::fs::write(
        src.join("capture.rs"),
        "use crate::{phy::Radiotap, label::{self, Label}};\n// crate::train::x\nfn f() { aggrate_core::model::x(); }\n\
         #[cfg(test)]\nmod tests {\n    use crate::train::Fit;\n}\n",
    )
    .unwrap();
    std::fs::write(
        src.join("train").join("cv.rs"),
        "use crate::metrics::BinaryMetrics;\nfn g() -> crate::report::Table { crate::model::onnx::export() }\n",
    )
    .unwrap();
    let bad = violations(src);
    assert_eq!(bad.len(), 3, "{bad:?}");
    assert!(bad[0].starts_with("capture.rs:1: capture → label"), "{bad:?}");
    assert!(bad[1].starts_with("train/cv.rs:2: train → report"), "{bad:?}");
    assert!(bad[2].starts_with("train/cv.rs:2: train → model::onnx"), "{bad:?}");
    let paths = crate_paths(&strip(
        "fn g() { crate::model::onnx::export(); crate::model::ModelFile::shipped(); }",
    ));
    let rooms: Vec<String> = paths
        .iter()
        .map(|(_, p)| room(&p.iter().map(String::as_str).collect::<Vec<_>>()))
        .collect();
    assert_eq!(rooms, ["model::onnx", "model"]);
}

/// The CLI modules that are commands (every file under src/cli but the shared ones).
fn commands(cli: &Path) -> Vec<String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(cli)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .collect();
    files.sort();
    files
        .iter()
        .filter_map(|f| f.file_stem().map(|s| s.to_string_lossy().to_string()))
        .filter(|s| !["mod", "common", "progress"].contains(&s.as_str()))
        .collect()
}

/// `super::` paths in `code` that name a command module other than the file's own.
fn command_imports(code: &str, own: &str, commands: &[String]) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(k) = code[i..].find("super::") {
        let at = i + k;
        i = at + 7;
        let line = code[..at].matches('\n').count() + 1;
        let mut paths = Vec::new();
        expand(code, i, Vec::new(), line, &mut paths);
        for (line, p) in paths {
            if let Some(first) = p.first().filter(|f| *f != own && commands.contains(f)) {
                out.push((line, first.clone()));
            }
        }
    }
    out
}

#[test]
fn no_command_imports_another() {
    // What two commands share lives in the library or in cli/common.rs (and cli/mod.rs's shared
    // argument types); `demo`, which runs the commands in turn, is the one exception.
    let cli = Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join("cli");
    let cmds = commands(&cli);
    assert!(
        cmds.contains(&"train".to_string()) && cmds.contains(&"calibrate".to_string()),
        "{cmds:?}"
    );
    let mut bad = Vec::new();
    for c in cmds.iter().filter(|c| *c != "demo") {
        let text = std::fs::read_to_string(cli.join(format!("{c}.rs"))).unwrap();
        for (line, other) in command_imports(&strip(&text), c, &cmds) {
            bad.push(format!("src/cli/{c}.rs:{line}: imports the `{other}` command"));
        }
    }
    // The shared modules import no command either.
    for shared in ["common", "progress"] {
        let text = std::fs::read_to_string(cli.join(format!("{shared}.rs"))).unwrap();
        for (line, other) in command_imports(&strip(&text), shared, &cmds) {
            bad.push(format!("src/cli/{shared}.rs:{line}: imports the `{other}` command"));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    // The check sees a command import through a group.
    let made_up = "use super::{inputs, train::TrainArgs};\nfn f() { super::sweep::replot(); }\n";
    assert_eq!(
        command_imports(made_up, "eval", &cmds),
        [(1, "train".to_string()), (2, "sweep".to_string())]
    );
}

/// Functions longer than `limit` lines in `code` (comments and test modules already stripped):
/// (line of the `fn`, name, lines).
fn long_functions(code: &str, limit: usize) -> Vec<(usize, String, usize)> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(k) = code[i..].find("fn ") {
        let at = i + k;
        i = at + 3;
        if at > 0 && (b[at - 1].is_ascii_alphanumeric() || b[at - 1] == b'_') {
            continue;
        }
        let name: String = code[i..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        // The body: the first `{` before any `;` (a declaration without a body has none).
        let Some(open) = code[i..].find(['{', ';']).map(|o| i + o) else {
            break;
        };
        if b[open] == b';' || name.is_empty() {
            continue;
        }
        let mut depth = 0i64;
        let mut end = open;
        for (j, c) in code[open..].char_indices() {
            depth += match c {
                '{' => 1,
                '}' => -1,
                _ => 0,
            };
            if depth == 0 {
                end = open + j;
                break;
            }
        }
        let first = code[..at].matches('\n').count() + 1;
        let lines = code[at..=end].matches('\n').count() + 1;
        if lines > limit {
            out.push((first, name, lines));
        }
    }
    out
}

#[test]
fn no_function_over_120_lines() {
    // The two solver kernels say in their docs why they are longer.
    const KERNELS: &[&str] = &["smo", "fit_mlp"];
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["src", "crates", "bindings"] {
        walk(&root.join(dir), &mut files);
    }
    let mut long = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for (line, name, n) in long_functions(&strip(&text), 120) {
            if !KERNELS.contains(&name.as_str()) {
                long.push(format!(
                    "{}:{line}: fn {name} is {n} lines",
                    f.strip_prefix(root).unwrap().display()
                ));
            }
        }
    }
    assert!(long.is_empty(), "functions over 120 lines:\n{}", long.join("\n"));
    // The reader counts a made-up function.
    let body = "fn big() {\n".to_string() + &"    x();\n".repeat(130) + "}\nfn small() { if a { b } }\n";
    assert_eq!(long_functions(&body, 120), [(1, "big".to_string(), 132)]);
}
