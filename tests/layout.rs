//! The layout rules ARCHITECTURE.md states, checked on the source itself (a few milliseconds,
//! no dependency): for `src/` of the crate and of each workspace member,
//!
//! - no file has more than 700 lines that are neither blank nor comment-only (tests included);
//! - no import circle between files: no two files use each other, directly or through others
//!   (a parent module's `pub use` of its own children is a re-export and does not count);
//! - no file but `lib.rs` reaches a name through the public facade: a `crate::Name` path where
//!   `lib.rs` re-exports `Name` (or a path through a facade module such as `crate::futures`)
//!   means the real module path is hidden from the reader;
//! - no function outside tests has more than 80 lines of code, and no source file but a file
//!   of tests more than 1,000 lines, docs and comments included;
//! - ARCHITECTURE.md's tree names every folder and file of the crate's `src/`.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

const MAX_CODE_LINES: usize = 700;
/// The most lines of code (neither blank nor comment-only) a function outside tests has.
const MAX_FUNCTION_LINES: usize = 80;
/// The most lines a source file has, docs and comments included (files of tests excepted).
const MAX_FILE_LINES: usize = 1_000;

/// The crates whose `src/` follows the rules, relative to this crate's root.
const CRATES: &[&str] = &[".", "tollgate-redis", "tollgate-testkit"];

#[test]
fn no_source_file_is_longer_than_one_sitting() {
    let mut long = Vec::new();
    for krate in CRATES {
        for file in source_files(krate) {
            let text = fs::read_to_string(&file.path).unwrap();
            let code = text
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with("//"))
                .count();
            if code > MAX_CODE_LINES {
                long.push(format!("{} ({code} lines of code)", file.path.display()));
            }
        }
    }
    assert!(
        long.is_empty(),
        "files over {MAX_CODE_LINES} lines that are neither blank nor comments:\n{}",
        long.join("\n")
    );
}

#[test]
fn no_function_outside_tests_is_longer_than_eighty_lines_of_code() {
    let mut long = Vec::new();
    for file in files_outside_tests() {
        let code = without_test_modules(&strip_comments_and_strings(
            &fs::read_to_string(&file.path).unwrap(),
        ));
        for (name, line, lines) in functions(&code) {
            if lines > MAX_FUNCTION_LINES {
                long.push(format!(
                    "{}:{line} fn {name} ({lines} lines of code)",
                    file.path.display()
                ));
            }
        }
    }
    assert!(
        long.is_empty(),
        "functions over {MAX_FUNCTION_LINES} lines of code (cut them along what they do):\n{}",
        long.join("\n")
    );
}

#[test]
fn no_source_file_but_tests_is_longer_than_a_thousand_lines() {
    let mut long = Vec::new();
    for file in files_outside_tests() {
        let lines = fs::read_to_string(&file.path).unwrap().lines().count();
        if lines > MAX_FILE_LINES {
            long.push(format!("{} ({lines} lines)", file.path.display()));
        }
    }
    assert!(
        long.is_empty(),
        "files over {MAX_FILE_LINES} lines, docs included (cut them along their concepts):\n{}",
        long.join("\n")
    );
}

#[test]
fn the_architecture_tree_names_every_folder_and_file_of_src() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let architecture = fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let tree = architecture
        .split("```")
        .find(|block| block.trim_start().starts_with("src/"))
        .expect("ARCHITECTURE.md has a tree that starts with `src/`");
    // The entries: a line indented by two spaces starts one (`limit/hint.rs`, `map/`), the
    // lines indented deeper continue it.
    let mut entries: Vec<(String, String)> = Vec::new();
    for line in tree.lines().skip(1) {
        match line.strip_prefix("  ") {
            Some(rest) if !rest.starts_with(' ') && !rest.is_empty() => {
                let (path, text) = rest.split_once(' ').unwrap_or((rest, ""));
                entries.push((path.to_owned(), text.to_owned()));
            }
            _ => {
                if let Some((_, text)) = entries.last_mut() {
                    text.push_str(line);
                }
            }
        }
    }
    let src = root.join("src");
    let mut missing = Vec::new();
    for file in source_files(".") {
        let path = file
            .path
            .strip_prefix(&src)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        // The entry whose path is the file's, or the longest folder that holds it; what is
        // left of the file's path must be named in that entry's text, folder by folder.
        let entry = entries
            .iter()
            .filter(|(entry, _)| {
                *entry == path || (entry.ends_with('/') && path.starts_with(entry.as_str()))
            })
            .max_by_key(|(entry, _)| entry.len());
        let named = entry.is_some_and(|(entry, text)| {
            let rest = &path[entry.len()..];
            let mut parts: Vec<String> = rest.split('/').map(str::to_owned).collect();
            let last = parts.len() - 1;
            for part in &mut parts[..last] {
                part.push('/');
            }
            parts
                .iter()
                .filter(|part| !part.is_empty())
                .all(|part| text.contains(part.as_str()))
        });
        if !named {
            missing.push(path);
        }
    }
    assert!(
        missing.is_empty(),
        "files of src that ARCHITECTURE.md's tree does not name:\n{}",
        missing.join("\n")
    );
}

#[test]
fn no_two_source_files_import_each_other() {
    let mut report = Vec::new();
    for krate in CRATES {
        let files = source_files(krate);
        let modules: BTreeSet<Vec<String>> = files.iter().map(|f| f.module.clone()).collect();
        let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
        // Why each edge exists: the first path that made it, for the report.
        let mut because: BTreeMap<(Vec<String>, Vec<String>), String> = BTreeMap::new();
        for file in &files {
            let code = strip_comments_and_strings(&fs::read_to_string(&file.path).unwrap());
            let targets = edges.entry(file.module.clone()).or_default();
            for (path, is_reexport) in paths_used(&code, file) {
                let Some(target) = longest_module_prefix(&path, &modules) else {
                    continue;
                };
                let own_child =
                    target.len() > file.module.len() && target.starts_with(&file.module);
                if target == file.module || (is_reexport && own_child) {
                    continue;
                }
                because
                    .entry((file.module.clone(), target.clone()))
                    .or_insert_with(|| path.join("::"));
                targets.insert(target);
            }
        }
        for cycle in strongly_connected(&edges) {
            let names: Vec<String> = cycle.iter().map(|m| display(krate, m)).collect();
            report.push(names.join(" <-> "));
            for from in &cycle {
                for to in edges[from].iter().filter(|to| cycle.contains(to)) {
                    let path = &because[&(from.clone(), to.clone())];
                    report.push(format!("    {} uses {path}", display(krate, from)));
                }
            }
        }
    }
    assert!(
        report.is_empty(),
        "import circles between files:\n{}",
        report.join("\n")
    );
}

#[test]
fn no_file_reaches_a_name_through_the_facade() {
    let mut report = Vec::new();
    for krate in CRATES {
        let files = source_files(krate);
        let lib = files.iter().find(|f| f.module.is_empty()).expect("lib.rs");
        let lib_code = strip_comments_and_strings(&fs::read_to_string(&lib.path).unwrap());
        let (facade_names, facade_modules) = facade(&lib_code);
        // `race` is both a re-exported function and a module: `crate::race::X` is the module.
        let real_modules: BTreeSet<&String> = files
            .iter()
            .filter(|f| f.module.len() == 1)
            .map(|f| &f.module[0])
            .collect();
        for file in files.iter().filter(|f| !f.module.is_empty()) {
            let code = strip_comments_and_strings(&fs::read_to_string(&file.path).unwrap());
            for (path, _) in paths_used(&code, file) {
                let Some(first) = path.get(1) else { continue };
                if path[0] != "crate" {
                    continue;
                }
                let through_facade = facade_modules.contains(first)
                    || (facade_names.contains(first) && !real_modules.contains(first));
                if through_facade {
                    report.push(format!("{}: {}", file.path.display(), path.join("::")));
                }
            }
        }
    }
    report.sort();
    report.dedup();
    assert!(
        report.is_empty(),
        "paths through the public facade (use the item's own module path):\n{}",
        report.join("\n")
    );
}

struct SourceFile {
    path: PathBuf,
    /// The module path from the crate root: `[]` for lib.rs, `["map", "keyed"]` for
    /// `map/keyed/mod.rs` or `map/keyed.rs`.
    module: Vec<String>,
}

fn source_files(krate: &str) -> Vec<SourceFile> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(krate)
        .join("src");
    let mut out = Vec::new();
    walk(&root, &root, &mut out);
    assert!(!out.is_empty(), "no source under {}", root.display());
    out
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<SourceFile>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            walk(root, &path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let relative = path.strip_prefix(root).unwrap().with_extension("");
            let mut module: Vec<String> = relative
                .iter()
                .map(|s| s.to_string_lossy().into_owned())
                .collect();
            if matches!(module.last().map(String::as_str), Some("mod" | "lib")) {
                module.pop();
            }
            out.push(SourceFile { path, module });
        }
    }
}

/// The text with comments, string and char literals blanked out (line structure kept), so
/// that prose and literals never read as paths.
fn strip_comments_and_strings(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if chars[i] == '\n' {
                        out.push('\n');
                    }
                    i += 1;
                }
            }
        } else if c == 'r'
            && (next == Some('"') || next == Some('#'))
            && !ident_char(chars.get(i.wrapping_sub(1)))
        {
            // A raw string: r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                match chars.get(j) {
                    None => break,
                    Some('"') if (1..=hashes).all(|k| chars.get(j + k) == Some(&'#')) => {
                        j += 1 + hashes;
                        break;
                    }
                    Some('\n') => out.push('\n'),
                    _ => {}
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                } else if chars[i] == '\n' {
                    out.push('\n');
                }
                i += 1;
            }
            out.push_str("\"\"");
            i += 1;
        } else if c == '\''
            && next.is_some()
            && (chars.get(i + 2) == Some(&'\'') || next == Some('\\'))
        {
            // A char literal ('x' or '\n'); anything else after a quote is a lifetime.
            i += 1;
            while i < chars.len() && chars[i] != '\'' {
                if chars[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            out.push_str("' '");
            i += 1;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn ident_char(c: Option<&char>) -> bool {
    c.is_some_and(|c| c.is_alphanumeric() || *c == '_')
}

/// Every module path the file names (absolute, from the crate root), each with whether it
/// comes from a `pub use` / `pub(..) use` (a re-export). `use` trees are expanded; paths in
/// code (`crate::a::b()`, `super::c::D`, `child::E` for a child module) count too.
fn paths_used(code: &str, file: &SourceFile) -> Vec<(Vec<String>, bool)> {
    let children = declared_children(code);
    let mut out = Vec::new();
    let tokens = tokenize(code);
    // Inline modules (`mod tests { .. }`): `super` inside one is the file's own module.
    let mut inline: Vec<usize> = Vec::new();
    let mut depth = 0usize;
    let mut here = SourceFile {
        path: file.path.clone(),
        module: file.module.clone(),
    };
    let mut i = 0;
    while i < tokens.len() {
        match tokens[i].as_str() {
            "{" => depth += 1,
            "}" => {
                depth -= 1;
                if inline.last() == Some(&depth) {
                    inline.pop();
                    here.module.pop();
                }
            }
            "mod" if tokens.get(i + 2).is_some_and(|t| t == "{") => {
                here.module.push(tokens[i + 1].clone());
                inline.push(depth);
            }
            _ => {}
        }
        let file = &here;
        if tokens[i] == "use" {
            let is_reexport = i > 0 && (tokens[i - 1] == "pub" || tokens[i - 1] == ")");
            let end = tokens[i..]
                .iter()
                .position(|t| t == ";")
                .map_or(tokens.len(), |p| i + p);
            for path in expand_use_tree(&tokens[i + 1..end]) {
                if let Some(abs) = absolute(&path, file, &children) {
                    out.push((abs, is_reexport));
                }
            }
            i = end;
            continue;
        }
        // A path in code: a run of `ident :: ident :: ...` not preceded by `::` (nor by `$`:
        // a macro's `$crate::..` must name the crate root, wherever it expands).
        if is_ident(&tokens[i])
            && tokens.get(i + 1).is_some_and(|t| t == "::")
            && (i == 0 || (tokens[i - 1] != "::" && tokens[i - 1] != "$"))
        {
            let mut path = vec![tokens[i].clone()];
            let mut j = i + 1;
            while tokens.get(j).is_some_and(|t| t == "::")
                && tokens.get(j + 1).is_some_and(|t| is_ident(t))
            {
                path.push(tokens[j + 1].clone());
                j += 2;
            }
            if let Some(abs) = absolute(&path, file, &children) {
                out.push((abs, false));
            }
            i = j;
            continue;
        }
        i += 1;
    }
    out
}

fn declared_children(code: &str) -> BTreeSet<String> {
    let tokens = tokenize(code);
    tokens
        .windows(3)
        .filter(|w| w[0] == "mod" && is_ident(&w[1]) && w[2] == ";")
        .map(|w| w[1].clone())
        .collect()
}

/// Resolves a path as written in `file` to a path from the crate root, or `None` for paths
/// outside the crate (std, dependencies, local items).
fn absolute(
    path: &[String],
    file: &SourceFile,
    children: &BTreeSet<String>,
) -> Option<Vec<String>> {
    let first = path.first()?;
    let mut base: Vec<String> = match first.as_str() {
        "crate" => Vec::new(),
        "self" => file.module.clone(),
        "super" => {
            let mut base = file.module.clone();
            let mut rest = path;
            while rest.first().is_some_and(|s| s == "super") {
                base.pop()?;
                rest = &rest[1..];
            }
            base.extend(rest.iter().cloned());
            return Some(base);
        }
        name if children.contains(name) => {
            let mut base = file.module.clone();
            base.push(name.to_owned());
            base.extend(path[1..].iter().cloned());
            return Some(base);
        }
        _ => return None,
    };
    base.extend(path[1..].iter().cloned());
    if first == "crate" {
        base.insert(0, "crate".to_owned());
        // Keep "crate" as the first segment for the facade check; modules are matched
        // without it.
    }
    Some(base)
}

fn longest_module_prefix(path: &[String], modules: &BTreeSet<Vec<String>>) -> Option<Vec<String>> {
    let path: Vec<String> = path.iter().filter(|s| *s != "crate").cloned().collect();
    (0..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|p| modules.contains(p))
}

/// `{a::{b, c}, d}` into `[a, b]`, `[a, c]`, `[d]`; `as` aliases and globs dropped.
fn expand_use_tree(tokens: &[String]) -> Vec<Vec<String>> {
    fn go(tokens: &[String], i: &mut usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
        let mut path = prefix;
        while *i < tokens.len() {
            match tokens[*i].as_str() {
                "{" => {
                    *i += 1;
                    loop {
                        go(tokens, i, path.clone(), out);
                        match tokens.get(*i).map(String::as_str) {
                            Some(",") => *i += 1,
                            Some("}") => {
                                *i += 1;
                                return;
                            }
                            _ => return,
                        }
                        if tokens.get(*i).is_some_and(|t| t == "}") {
                            *i += 1;
                            return;
                        }
                    }
                }
                "::" => *i += 1,
                "," | "}" => break,
                "as" => *i += 2,
                "*" => *i += 1,
                name => {
                    path.push(name.to_owned());
                    *i += 1;
                }
            }
        }
        out.push(path);
    }
    let mut out = Vec::new();
    let mut i = 0;
    go(tokens, &mut i, Vec::new(), &mut out);
    out.retain(|p| !p.is_empty());
    out
}

fn tokenize(code: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let chars: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            tokens.push(chars[start..i].iter().collect());
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            tokens.push("::".to_owned());
            i += 2;
        } else if c.is_whitespace() {
            i += 1;
        } else {
            tokens.push(c.to_string());
            i += 1;
        }
    }
    tokens
}

fn is_ident(t: &str) -> bool {
    t.chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
}

/// The names `lib.rs` re-exports (last segment or alias of each `pub use`), and the public
/// modules that only re-export (`pub mod futures { pub use .. }`).
fn facade(lib: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let tokens = tokenize(lib);
    let mut names = BTreeSet::new();
    let mut modules = BTreeSet::new();
    for (i, t) in tokens.iter().enumerate() {
        if t == "use" && i > 0 && tokens[i - 1] == "pub" {
            let end = tokens[i..]
                .iter()
                .position(|t| t == ";")
                .map_or(tokens.len(), |p| i + p);
            let tree = &tokens[i + 1..end];
            // Aliases: `X as Y` re-exports Y.
            for w in tree.windows(2) {
                if w[0] == "as" {
                    names.insert(w[1].clone());
                }
            }
            for path in expand_use_tree(tree) {
                if let Some(last) = path.last() {
                    names.insert(last.clone());
                }
            }
        }
        if t == "mod"
            && i > 0
            && tokens[i - 1] == "pub"
            && tokens.get(i + 2).is_some_and(|t| t == "{")
        {
            modules.insert(tokens[i + 1].clone());
        }
    }
    (names, modules)
}

/// Tarjan's strongly connected components with more than one file: each is a circle.
fn strongly_connected(
    edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
) -> Vec<Vec<Vec<String>>> {
    struct State<'a> {
        edges: &'a BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        index: BTreeMap<&'a Vec<String>, usize>,
        low: BTreeMap<&'a Vec<String>, usize>,
        stack: Vec<&'a Vec<String>>,
        on_stack: BTreeSet<&'a Vec<String>>,
        out: Vec<Vec<Vec<String>>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a Vec<String>) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        let edges = s.edges;
        for w in edges.get(v).into_iter().flatten() {
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.clone());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.out.push(component);
            }
        }
    }
    let mut s = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out
}

fn display(krate: &str, module: &[String]) -> String {
    let name = if module.is_empty() {
        "lib".to_owned()
    } else {
        module.join("/")
    };
    format!("{krate}/src/{name}")
}

/// Every source file of the checked crates but the files of tests ([`files_of_tests`]).
fn files_outside_tests() -> Vec<SourceFile> {
    let mut out = Vec::new();
    for krate in CRATES {
        let files = source_files(krate);
        let of_tests = files_of_tests(&files);
        out.extend(
            files
                .into_iter()
                .filter(|file| !of_tests.contains(&file.path)),
        );
    }
    out
}

/// The files of `files` that hold tests only: named `tests.rs` or `*_tests.rs`, or brought in
/// by a `#[path = ".."]` under `#[cfg(test)]` (a test-only module kept beside its code).
fn files_of_tests(files: &[SourceFile]) -> BTreeSet<PathBuf> {
    let mut of_tests: BTreeSet<PathBuf> = files
        .iter()
        .filter(|file| {
            let name = file.path.file_name().unwrap().to_string_lossy();
            name == "tests.rs" || name.ends_with("_tests.rs")
        })
        .map(|file| file.path.clone())
        .collect();
    for file in files {
        let text = fs::read_to_string(&file.path).unwrap();
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        for (i, line) in lines.iter().enumerate() {
            let Some(path) = line
                .strip_prefix("#[path = \"")
                .and_then(|rest| rest.strip_suffix("\"]"))
            else {
                continue;
            };
            if lines[i.saturating_sub(2)..i].contains(&"#[cfg(test)]") {
                of_tests.insert(file.path.parent().unwrap().join(path));
            }
        }
    }
    of_tests
}

/// `code` (comments and strings blanked) with every `#[cfg(test)]` module's body blanked,
/// line structure kept.
fn without_test_modules(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        let after = &rest[at..];
        let module = after.find("mod ").filter(|&m| {
            after[..m].trim_end().ends_with(']') || after[..m].trim() == "#[cfg(test)]"
        });
        let body = module.and_then(|m| {
            let open = m + after[m..].find(['{', ';'])?;
            (after.as_bytes()[open] == b'{').then_some(open)
        });
        let Some(open) = body else {
            out.push_str(&rest[..at + "#[cfg(test)]".len()]);
            rest = &rest[at + "#[cfg(test)]".len()..];
            continue;
        };
        out.push_str(&rest[..at]);
        let close = open + matching_brace(&after[open..]);
        out.extend(after[..=close].chars().filter(|&c| c == '\n'));
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    out
}

/// The index of the `}` that closes the `{` `text` starts with (or the end).
fn matching_brace(text: &str) -> usize {
    let mut depth = 0usize;
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
    }
    text.len() - 1
}

/// Every function with a body in `code` (comments and strings blanked): its name, the line
/// its `fn` is on, and its lines of code from that line to its closing brace.
fn functions(code: &str) -> Vec<(String, usize, usize)> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let mut search = 0;
    while let Some(found) = code[search..].find("fn ") {
        let at = search + found;
        search = at + 3;
        if at > 0 && ident_char(Some(&(bytes[at - 1] as char))) {
            continue;
        }
        let name: String = code[at + 3..]
            .trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            continue;
        }
        // The body: the first `{` outside parentheses, brackets and generics; a `;` first
        // means a declaration without one.
        let mut depth = 0i32;
        let mut open = None;
        let mut previous = ' ';
        for (i, c) in code[search..].char_indices() {
            match c {
                '(' | '[' | '<' => depth += 1,
                ')' | ']' => depth -= 1,
                '>' if previous != '-' && previous != '=' => depth -= 1,
                ';' if depth <= 0 => break,
                '{' if depth <= 0 => {
                    open = Some(search + i);
                    break;
                }
                _ => {}
            }
            previous = c;
        }
        let Some(open) = open else { continue };
        let close = open + matching_brace(&code[open..]);
        let first_line = code[..at].matches('\n').count();
        let lines = code[at..=close]
            .lines()
            .filter(|line| !line.trim().is_empty())
            .count();
        out.push((name, first_line + 1, lines));
    }
    out
}
