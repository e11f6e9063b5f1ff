//! The layer order of docs/ARCHITECTURE.md, checked: every `crate::` path
//! in the engine's sources must point down the table "Who may call whom",
//! and modules of one layer must not import each other in a circle.
//!
//! The table in the doc is the one source of truth: this test reads its
//! rows (backticked module paths in both columns; the `*` row is what
//! every module may use, and a layer of its own) and nothing else. It
//! also fails if the table itself has a circle, names a module the crate
//! does not have, or leaves a module without a row.
//!
//! What the reader sees. A small lexer over `src/**/*.rs` (not a Rust
//! parser) blanks out comments (line, block, doc: so intra-doc links do
//! not count), string, byte-string, raw-string and char literals, and
//! drops every item under `#[cfg(test)]` or `#[cfg(all(test, ..))]` (unit
//! tests may reach any layer). It then collects
//! - `use` trees (`use crate::a::{b, c::{self, D}}`, `use super::x`,
//!   `use child::x` for a child module, globs, renames), wherever they are;
//! - `crate::a::b` and `super::a` paths in code (not `$crate::` in macros,
//!   nor visibilities: `pub(in crate::fs)`).
//!
//! A path is resolved to the module that defines its item: the longest
//! prefix that is a module file, then through that module's re-exports
//! (`pub use`, including globs) when the item is not defined there. It
//! does not see method calls (`x.f()`), types reached only through
//! inference, macros' expansions, or modules declared inline (their paths
//! count as their file's). The crate root (lib.rs) is the facade and is
//! not checked; re-exports (`pub use`) count as imports like any `use`.
//! Circles are looked for between files of one row, a directory's mod.rs
//! and the files below it counting as one (the files implement the types
//! mod.rs declares, `impl` blocks of one type over several files).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// One source file read as a module.
struct Module {
    /// Module path from the crate root, `""` for lib.rs (`fs::mount`).
    path: String,
    /// The file, relative to the crate (`src/fs/mount.rs`), for messages.
    file: String,
    /// Names of items defined in the file (structs, fns, consts, ...).
    items: BTreeSet<String>,
    /// Re-exports: visible name -> absolute path it points at.
    reexports: BTreeMap<String, Vec<String>>,
    /// Glob re-exports (`pub use x::*`): absolute module paths.
    globs: Vec<Vec<String>>,
    /// Every path this module names: (line, absolute path segments).
    refs: Vec<(usize, Vec<String>)>,
}

// ---------------------------------------------------------------- lexing

/// Blanks comments and literals (keeping newlines, so line numbers hold).
fn blank_comments_and_literals(src: &str) -> String {
    let b: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(b[i]));
                    i += 1;
                }
            }
        } else if (c == 'r' || (c == 'b' && next == Some('r')))
            && !prev_is_ident(&b, i)
            && raw_string_start(&b, i + usize::from(c == 'b')).is_some()
        {
            let start = i + usize::from(c == 'b');
            let hashes = raw_string_start(&b, start).unwrap();
            // r, hashes, quote
            let mut j = start + 1 + hashes + 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == '"' && (0..hashes).all(|k| b.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            for &ch in &b[i..j.min(b.len())] {
                out.push(blank(ch));
            }
            i = j;
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < b.len() {
                    out.push(blank(b[i]));
                    i += 1;
                }
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{1F}') or a lifetime ('a).
            let end = if next == Some('\\') {
                // Past the escaped character: '\'' and '\\' end at i + 3.
                (i + 3..b.len()).find(|&j| b[j] == '\'')
            } else if b.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            match end {
                Some(e) => {
                    for _ in i..=e {
                        out.push(' ');
                    }
                    i = e + 1;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn prev_is_ident(b: &[char], i: usize) -> bool {
    i > 0 && (b[i - 1].is_alphanumeric() || b[i - 1] == '_')
}

/// At `r` of `r"..."` / `r#"..."#`: the number of hashes.
fn raw_string_start(b: &[char], i: usize) -> Option<usize> {
    if b.get(i) != Some(&'r') {
        return None;
    }
    let mut j = i + 1;
    while b.get(j) == Some(&'#') {
        j += 1;
    }
    (b.get(j) == Some(&'"')).then_some(j - i - 1)
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    /// `::`
    Sep,
    Punct(char),
}

fn tokenize(src: &str) -> Vec<(usize, Tok)> {
    let b: Vec<char> = src.chars().collect();
    let mut toks = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c.is_alphanumeric() || c == '_' {
            let s = i;
            while i < b.len() && (b[i].is_alphanumeric() || b[i] == '_') {
                i += 1;
            }
            toks.push((line, Tok::Ident(b[s..i].iter().collect())));
        } else if c == ':' && b.get(i + 1) == Some(&':') {
            toks.push((line, Tok::Sep));
            i += 2;
        } else {
            toks.push((line, Tok::Punct(c)));
            i += 1;
        }
    }
    toks
}

fn is_ident(t: Option<&(usize, Tok)>, s: &str) -> bool {
    matches!(t, Some((_, Tok::Ident(x))) if x == s)
}

fn is_punct(t: Option<&(usize, Tok)>, c: char) -> bool {
    matches!(t, Some((_, Tok::Punct(x))) if *x == c)
}

/// Drops the items under `#[cfg(test)]` (or a `cfg` whose predicate is
/// `test` inside `all(..)`): the attribute, further attributes, then the
/// item up to its `;` or its matching `}`.
fn drop_test_items(toks: Vec<(usize, Tok)>) -> Vec<(usize, Tok)> {
    let mut out = Vec::with_capacity(toks.len());
    let mut i = 0;
    while i < toks.len() {
        if is_punct(toks.get(i), '#') && is_punct(toks.get(i + 1), '[') {
            let end = matching(&toks, i + 1);
            let attr: Vec<&Tok> = toks[i + 2..end].iter().map(|(_, t)| t).collect();
            if cfg_is_test(&attr) {
                let mut j = end + 1;
                // Further attributes of the same item.
                while is_punct(toks.get(j), '#') && is_punct(toks.get(j + 1), '[') {
                    j = matching(&toks, j + 1) + 1;
                }
                while j < toks.len() && !is_punct(toks.get(j), ';') && !is_punct(toks.get(j), '{') {
                    j += 1;
                }
                i = if is_punct(toks.get(j), '{') { matching(&toks, j) + 1 } else { j + 1 };
                continue;
            }
        }
        out.push(toks[i].clone());
        i += 1;
    }
    out
}

/// `cfg(test)` or `cfg(all(test, ..))`; not `cfg(not(test))` nor `any`.
fn cfg_is_test(attr: &[&Tok]) -> bool {
    let id = |k: usize, s: &str| matches!(attr.get(k), Some(Tok::Ident(x)) if x == s);
    let p = |k: usize, c: char| matches!(attr.get(k), Some(Tok::Punct(x)) if *x == c);
    id(0, "cfg") && p(1, '(') && (id(2, "test") || (id(2, "all") && p(3, '(') && id(4, "test")))
}

/// Index of the bracket closing the one at `open` (`[`, `{` or `(`).
fn matching(toks: &[(usize, Tok)], open: usize) -> usize {
    let mut depth = 0i32;
    for (j, (_, t)) in toks.iter().enumerate().skip(open) {
        match t {
            Tok::Punct('[' | '{' | '(') => depth += 1,
            Tok::Punct(']' | '}' | ')') => {
                depth -= 1;
                if depth == 0 {
                    return j;
                }
            }
            _ => {}
        }
    }
    toks.len() - 1
}

// ---------------------------------------------------------------- modules

/// Reads every module of the crate below `src`.
fn read_modules(src: &Path) -> Vec<Module> {
    let mut files = Vec::new();
    walk(src, &mut files);
    let test_only = test_only_top_modules(src);
    files.retain(|f| !test_only.iter().any(|m| f.starts_with(src.join(m)) || f == &src.join(format!("{m}.rs"))));
    files.sort();
    let paths: Vec<String> = files.iter().map(|f| module_path(src, f)).collect();
    let known: BTreeSet<String> = paths.iter().cloned().collect();
    files
        .iter()
        .zip(paths)
        .map(|(f, path)| {
            let text = std::fs::read_to_string(f).unwrap();
            let toks = drop_test_items(tokenize(&blank_comments_and_literals(&text)));
            let file = format!("src/{}", f.strip_prefix(src).unwrap().display());
            parse_module(path, file, &toks, &known)
        })
        .collect()
}

/// The modules lib.rs declares under `#[cfg(test)]` (`mod tests;`): test
/// code that may reach any layer, as the unit tests it gathers.
fn test_only_top_modules(src: &Path) -> Vec<String> {
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let mut out = Vec::new();
    let mut after_cfg_test = false;
    for line in lib.lines().map(str::trim) {
        if line == "#[cfg(test)]" {
            after_cfg_test = true;
            continue;
        }
        if after_cfg_test {
            if let Some(name) = line.strip_prefix("mod ").and_then(|r| r.strip_suffix(';')) {
                out.push(name.trim().to_string());
            }
        }
        after_cfg_test = line.starts_with("#[");
    }
    out
}

fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            walk(&p, files);
        } else if p.extension().is_some_and(|x| x == "rs") {
            files.push(p);
        }
    }
}

/// `src/fs/mount.rs` -> `fs::mount`; `src/fs/mod.rs` -> `fs`; lib.rs -> "".
fn module_path(src: &Path, f: &Path) -> String {
    let rel = f.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel.iter().map(|s| s.to_string_lossy().into_owned()).collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts.join("::")
}

fn parse_module(path: String, file: String, toks: &[(usize, Tok)], known: &BTreeSet<String>) -> Module {
    let here: Vec<String> = if path.is_empty() { vec![] } else { path.split("::").map(String::from).collect() };
    let mut m = Module { path, file, items: BTreeSet::new(), reexports: BTreeMap::new(), globs: vec![], refs: vec![] };
    let mut i = 0;
    while i < toks.len() {
        let prev_dollar = i > 0 && is_punct(toks.get(i - 1), '$');
        match &toks[i].1 {
            Tok::Ident(kw)
                if matches!(
                    kw.as_str(),
                    "struct" | "enum" | "fn" | "trait" | "type" | "const" | "static" | "union" | "mod"
                ) =>
            {
                if let Some((_, Tok::Ident(name))) = toks.get(i + 1) {
                    m.items.insert(name.clone());
                }
                i += 1;
            }
            Tok::Ident(kw) if kw == "macro_rules" => {
                if let Some((_, Tok::Ident(name))) = toks.get(i + 2) {
                    m.items.insert(name.clone());
                }
                i += 1;
            }
            Tok::Ident(kw) if kw == "use" => {
                let public = use_is_pub(toks, i);
                let mut leaves = Vec::new();
                let end = use_tree(toks, i + 1, &mut Vec::new(), &mut leaves);
                for (line, segs, leaf) in leaves {
                    let Some(abs) = absolute(&here, &segs, known) else { continue };
                    if public {
                        match leaf {
                            Leaf::Glob => m.globs.push(abs.clone()),
                            Leaf::Name(name) => {
                                m.reexports.insert(name, abs.clone());
                            }
                        }
                    }
                    m.refs.push((line, abs));
                }
                i = end;
            }
            Tok::Ident(kw)
                if is_ident(toks.get(i.wrapping_sub(1)), "in") && is_punct(toks.get(i.wrapping_sub(2)), '(') =>
            {
                // `pub(in crate::fs)`: a visibility, not a use.
                i += 1;
                while matches!(toks.get(i), Some((_, Tok::Sep | Tok::Ident(_)))) {
                    i += 1;
                }
            }
            Tok::Ident(kw) if (kw == "crate" && !prev_dollar) || kw == "super" => {
                // A path in code: crate::a::b / super::a, as far as it goes.
                let line = toks[i].0;
                let mut segs = vec![kw.clone()];
                let mut j = i + 1;
                while matches!(toks.get(j), Some((_, Tok::Sep))) {
                    match toks.get(j + 1) {
                        Some((_, Tok::Ident(s))) => {
                            segs.push(s.clone());
                            j += 2;
                        }
                        _ => break,
                    }
                }
                if segs.len() > 1 {
                    if let Some(abs) = absolute(&here, &segs, known) {
                        m.refs.push((line, abs));
                    }
                }
                i = j.max(i + 1);
            }
            _ => i += 1,
        }
    }
    m
}

/// `pub use`, `pub(crate) use`, `pub(super) use`, `pub(in ..) use`.
fn use_is_pub(toks: &[(usize, Tok)], use_at: usize) -> bool {
    if use_at >= 1 && is_ident(toks.get(use_at - 1), "pub") {
        return true;
    }
    if use_at >= 1 && is_punct(toks.get(use_at - 1), ')') {
        // Walk back over the visibility's parentheses.
        let mut j = use_at - 1;
        while j > 0 && !is_punct(toks.get(j), '(') {
            j -= 1;
        }
        return j >= 1 && is_ident(toks.get(j - 1), "pub");
    }
    false
}

enum Leaf {
    Name(String),
    Glob,
}

/// Parses a use tree from `i`; pushes (line, path, leaf) per leaf and
/// returns the index after the tree (after `;` at top level).
fn use_tree(
    toks: &[(usize, Tok)],
    mut i: usize,
    prefix: &mut Vec<String>,
    leaves: &mut Vec<(usize, Vec<String>, Leaf)>,
) -> usize {
    let depth0 = prefix.len();
    loop {
        match toks.get(i) {
            Some((_, Tok::Sep)) => i += 1, // leading `::` or separator
            Some((line, Tok::Ident(s))) => {
                let line = *line;
                if s == "self" && !prefix.is_empty() && !matches!(toks.get(i + 1), Some((_, Tok::Sep))) {
                    // `a::{self}`: the module a itself.
                    let name = prefix.last().unwrap().clone();
                    let name = rename(toks, i + 1).unwrap_or(name);
                    leaves.push((line, prefix.clone(), Leaf::Name(name)));
                    i = skip_rename(toks, i + 1);
                    break;
                }
                prefix.push(s.clone());
                i += 1;
                if !matches!(toks.get(i), Some((_, Tok::Sep))) {
                    let name = rename(toks, i).unwrap_or_else(|| s.clone());
                    leaves.push((line, prefix.clone(), Leaf::Name(name)));
                    i = skip_rename(toks, i);
                    break;
                }
            }
            Some((line, Tok::Punct('*'))) => {
                leaves.push((*line, prefix.clone(), Leaf::Glob));
                i += 1;
                break;
            }
            Some((_, Tok::Punct('{'))) => {
                i += 1;
                loop {
                    if is_punct(toks.get(i), '}') {
                        i += 1;
                        break;
                    }
                    if is_punct(toks.get(i), ',') {
                        i += 1;
                        continue;
                    }
                    if i >= toks.len() {
                        break;
                    }
                    let mut sub = prefix.clone();
                    i = use_tree(toks, i, &mut sub, leaves);
                }
                break;
            }
            _ => break,
        }
    }
    prefix.truncate(depth0);
    if depth0 == 0 && is_punct(toks.get(i), ';') {
        i += 1;
    }
    i
}

fn rename(toks: &[(usize, Tok)], i: usize) -> Option<String> {
    if is_ident(toks.get(i), "as") {
        if let Some((_, Tok::Ident(n))) = toks.get(i + 1) {
            return Some(n.clone());
        }
    }
    None
}

fn skip_rename(toks: &[(usize, Tok)], i: usize) -> usize {
    if is_ident(toks.get(i), "as") {
        i + 2
    } else {
        i
    }
}

/// A path as written in module `here`, made absolute from the crate root;
/// `None` for other crates (std, parking_lot, ...).
fn absolute(here: &[String], segs: &[String], known: &BTreeSet<String>) -> Option<Vec<String>> {
    let mut base: Vec<String> = here.to_vec();
    let mut rest = segs;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            base.clear();
            rest = &rest[1..];
        }
        Some("self") => rest = &rest[1..],
        Some("super") => {
            while rest.first().map(String::as_str) == Some("super") {
                base.pop();
                rest = &rest[1..];
            }
        }
        Some(first) => {
            // 2018 paths: a child module of this one (`use types::*`).
            let mut child = here.to_vec();
            child.push(first.to_string());
            if !known.contains(&child.join("::")) {
                return None;
            }
        }
        None => return None,
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

/// The module that defines what `path` names, following re-exports.
fn resolve(path: &[String], mods: &HashMap<String, &Module>, depth: usize) -> String {
    let mut k = path.len();
    while k > 0 && !mods.contains_key(&path[..k].join("::")) {
        k -= 1;
    }
    let m = mods[&path[..k].join("::")];
    if k == path.len() || depth > 8 {
        return m.path.clone();
    }
    let name = &path[k];
    if m.items.contains(name) {
        return m.path.clone();
    }
    if let Some(target) = m.reexports.get(name) {
        let mut t = target.clone();
        t.extend(path[k + 1..].iter().cloned());
        return resolve(&t, mods, depth + 1);
    }
    for g in &m.globs {
        let mut t = g.clone();
        t.extend(path[k..].iter().cloned());
        let r = resolve(&t, mods, depth + 1);
        if mods[&r].items.contains(name) || r != g.join("::") {
            return r;
        }
    }
    m.path.clone()
}

// ---------------------------------------------------------------- the table

/// The rows of "Who may call whom": module prefixes -> allowed prefixes.
/// The row whose first column is `` `*` `` lists what every module may use.
struct Table {
    rows: Vec<(Vec<String>, Vec<String>, usize)>,
    everyone: Vec<String>,
}

fn read_table(doc: &str) -> Table {
    let start = doc.find("Who may call whom").expect("docs/ARCHITECTURE.md has no \"Who may call whom\"");
    let mut rows = Vec::new();
    let mut everyone = Vec::new();
    let mut in_table = false;
    for (n, line) in doc[start..].lines().enumerate() {
        let line = line.trim();
        if !line.starts_with('|') {
            if in_table {
                break;
            }
            continue;
        }
        in_table = true;
        let cols: Vec<&str> = line.trim_matches('|').split('|').collect();
        if cols.len() < 2 {
            continue;
        }
        let (who, whom) = (backticked(cols[0]), backticked(cols[1]));
        let doc_line = doc[..start].lines().count() + 1 + n;
        if who == ["*"] {
            // The bottom layer: what everyone may use is a row of its own.
            everyone = whom.clone();
            rows.push((whom.clone(), whom, doc_line));
        } else if !who.is_empty() {
            rows.push((who, whom, doc_line));
        }
    }
    assert!(!rows.is_empty(), "no rows read from the table under \"Who may call whom\"");
    Table { rows, everyone }
}

/// The backticked paths of a cell (`fs`, `alloc::delalloc`, `*`, or an
/// item: `dir::DirEntry`); other backticked words (a lone type name, a
/// file name) are prose.
fn backticked(s: &str) -> Vec<String> {
    let is_path = |x: &str| {
        let segs: Vec<&str> = x.split("::").collect();
        let module = |seg: &&str| {
            !seg.is_empty() && seg.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        };
        let item = |seg: &&str| !seg.is_empty() && seg.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        x == "*" || (module(&segs[0]) && segs[1..].iter().all(item))
    };
    s.split('`').skip(1).step_by(2).map(str::trim).filter(|x| is_path(x)).map(String::from).collect()
}

fn under(module: &str, prefix: &str) -> bool {
    module == prefix || module.starts_with(&format!("{prefix}::"))
}

impl Table {
    /// The row (its index) of a module: the longest prefix that is a row.
    fn row_of(&self, module: &str) -> Option<usize> {
        let mut best: Option<(usize, usize)> = None;
        for (r, (who, _, _)) in self.rows.iter().enumerate() {
            for p in who {
                if under(module, p) && best.is_none_or(|(len, _)| p.len() > len) {
                    best = Some((p.len(), r));
                }
            }
        }
        best.map(|(_, r)| r)
    }

    /// Whether a module of row `from_row` may use module `to`, reached
    /// by `path` (an entry may also name one item: `dir::DirEntry`).
    fn allows(&self, from_row: usize, to: &str, path: &str) -> bool {
        let (who, whom, _) = &self.rows[from_row];
        who.iter().chain(whom).chain(&self.everyone).any(|p| under(to, p) || under(path, p))
    }
}

// ---------------------------------------------------------------- checks

struct Edge {
    from: String,
    to: String,
    /// The path as written, made absolute (`dir::DirEntry`).
    path: String,
    file: String,
    line: usize,
}

fn edges(mods: &[Module]) -> Vec<Edge> {
    let by_path: HashMap<String, &Module> = mods.iter().map(|m| (m.path.clone(), m)).collect();
    let mut out = Vec::new();
    for m in mods {
        for (line, abs) in &m.refs {
            let to = resolve(abs, &by_path, 0);
            if to != m.path && !to.is_empty() {
                out.push(Edge { from: m.path.clone(), to, path: abs.join("::"), file: m.file.clone(), line: *line });
            }
        }
    }
    out
}

/// Imports against the table; modules without a row are reported too.
fn layer_violations(mods: &[Module], table: &Table) -> Vec<String> {
    let mut out = Vec::new();
    for m in mods.iter().filter(|m| !m.path.is_empty()) {
        if table.row_of(&m.path).is_none() {
            out.push(format!("{}: module `{}` has no row in the table", m.file, m.path));
        }
    }
    for e in edges(mods) {
        let Some(r) = table.row_of(&e.from) else { continue };
        if table.row_of(&e.to) == Some(r) {
            continue; // same layer: the circle check below
        }
        if !table.allows(r, &e.to, &e.path) {
            let (who, whom, doc_line) = &table.rows[r];
            out.push(format!(
                "{}:{}: `{}` uses `{}`, against docs/ARCHITECTURE.md:{} (`{}` may call {})",
                e.file,
                e.line,
                e.from,
                e.to,
                doc_line,
                who.join("`, `"),
                if whom.is_empty() { "nothing but `*`".to_string() } else { format!("`{}`", whom.join("`, `")) }
            ));
        }
    }
    out
}

/// Circles between modules (files) of one row: strongly connected
/// components of the same-row import graph, each with one path round.
fn circles(mods: &[Module], table: &Table) -> Vec<String> {
    let mut graph: BTreeMap<String, BTreeMap<String, (String, usize)>> = BTreeMap::new();
    for e in edges(mods) {
        let (Some(a), Some(b)) = (table.row_of(&e.from), table.row_of(&e.to)) else { continue };
        // A module and its ancestors are one directory: its mod.rs holds
        // the types its files implement (`impl` blocks over several
        // files) and re-exports them, so those edges are not circles.
        let family = under(&e.from, &e.to) || under(&e.to, &e.from);
        if a == b && !family {
            graph.entry(e.from.clone()).or_default().entry(e.to.clone()).or_insert((e.file, e.line));
        }
    }
    let mut out = Vec::new();
    for comp in sccs(&graph) {
        if comp.len() < 2 {
            continue;
        }
        let set: BTreeSet<&String> = comp.iter().collect();
        // Walk one cycle inside the component from its first member.
        let start = comp[0].clone();
        let mut path = vec![start.clone()];
        let mut msg = String::new();
        let mut cur = start.clone();
        loop {
            let nexts = &graph[&cur];
            // Prefer closing the cycle, else an unvisited member.
            let next = if nexts.contains_key(&start) && path.len() > 1 {
                start.clone()
            } else {
                nexts.keys().find(|n| set.contains(n) && !path.contains(n)).cloned().unwrap_or_else(|| start.clone())
            };
            let (file, line) = &nexts.get(&next).cloned().unwrap_or_default();
            let _ = write!(msg, "\n    {file}:{line}: `{cur}` uses `{next}`");
            if next == start {
                break;
            }
            path.push(next.clone());
            cur = next;
        }
        let row = &table.rows[table.row_of(&start).unwrap()].0;
        out.push(format!(
            "import circle among {} modules of the layer `{}` ({}):{msg}",
            comp.len(),
            row.join("`, `"),
            comp.join(", ")
        ));
    }
    out
}

/// Tarjan's strongly connected components.
fn sccs(graph: &BTreeMap<String, BTreeMap<String, (String, usize)>>) -> Vec<Vec<String>> {
    struct S<'a> {
        g: &'a BTreeMap<String, BTreeMap<String, (String, usize)>>,
        index: HashMap<&'a str, usize>,
        low: HashMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut S<'a>, v: &'a str) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on.insert(v);
        if let Some(ws) = s.g.get(v) {
            for w in ws.keys() {
                if !s.index.contains_key(w.as_str()) {
                    visit(s, w);
                    let l = s.low[w.as_str()].min(s.low[v]);
                    s.low.insert(v, l);
                } else if s.on.contains(w.as_str()) {
                    let l = s.index[w.as_str()].min(s.low[v]);
                    s.low.insert(v, l);
                }
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on.remove(w);
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            comp.sort();
            s.out.push(comp);
        }
    }
    let mut s =
        S { g: graph, index: HashMap::new(), low: HashMap::new(), stack: vec![], on: BTreeSet::new(), out: vec![] };
    for v in graph.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}

/// The table itself must be an order: no row may reach itself through
/// the rows it may call.
fn table_circles(table: &Table) -> Vec<String> {
    let mut graph: BTreeMap<String, BTreeMap<String, (String, usize)>> = BTreeMap::new();
    for (r, (_, whom, line)) in table.rows.iter().enumerate() {
        for w in whom {
            if let Some(to) = table.row_of(w) {
                if to != r {
                    let name = |k: usize| table.rows[k].0.join(", ");
                    graph.entry(name(r)).or_default().insert(name(to), ("docs/ARCHITECTURE.md".into(), *line));
                }
            }
        }
    }
    sccs(&graph)
        .into_iter()
        .filter(|c| c.len() > 1)
        .map(|c| {
            format!(
                "docs/ARCHITECTURE.md: the table \"Who may call whom\" has a circle among the rows [{}]",
                c.join("] [")
            )
        })
        .collect()
}

/// Every name in the table must be a module (or an item under one): a
/// misspelt row would otherwise check nothing.
fn table_names(table: &Table, mods: &[Module]) -> Vec<String> {
    let known: BTreeSet<&str> = mods.iter().map(|m| m.path.as_str()).collect();
    let mut out = Vec::new();
    for (who, whom, line) in &table.rows {
        for name in who.iter().chain(whom) {
            let module = known.contains(name.as_str());
            let item = name
                .rsplit_once("::")
                .is_some_and(|(m, i)| known.contains(m) && i.starts_with(|c: char| c.is_ascii_uppercase()));
            if !module && !item {
                out.push(format!("docs/ARCHITECTURE.md:{line}: `{name}` names no module of the crate"));
            }
        }
    }
    out
}

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn imports_follow_the_layer_order() {
    let root = crate_dir();
    let doc = std::fs::read_to_string(root.join("../../docs/ARCHITECTURE.md")).unwrap();
    let table = read_table(&doc);
    let mods = read_modules(&root.join("src"));
    let mut problems = table_names(&table, &mods);
    problems.extend(table_circles(&table));
    problems.extend(layer_violations(&mods, &table));
    problems.extend(circles(&mods, &table));
    assert!(
        problems.is_empty(),
        "{} import(s) against the layer order of docs/ARCHITECTURE.md (\"Who may call whom\"):\n  {}",
        problems.len(),
        problems.join("\n  ")
    );
}

// ---------------------------------------------------------------- the reader itself

fn module_from(path: &str, src: &str, known: &[&str]) -> Module {
    let known: BTreeSet<String> = known.iter().map(|s| s.to_string()).collect();
    let toks = drop_test_items(tokenize(&blank_comments_and_literals(src)));
    parse_module(path.into(), format!("src/{path}.rs"), &toks, &known)
}

fn refs(m: &Module) -> Vec<(usize, String)> {
    m.refs.iter().map(|(l, p)| (*l, p.join("::"))).collect()
}

#[test]
fn reader_sees_use_trees_and_paths_but_not_comments_strings_or_tests() {
    let src = r##"
use crate::a::{b, c::{self, D as E}};
use super::x::*;
use std::sync::Arc;
use kid::Thing;
// use crate::comment::Path;
/* crate::block /* nested */ crate::still_comment */
fn f() -> usize { let s = "crate::in_string"; let r = r#"crate::raw"#; let c = '"'; crate::code::call() }
fn g<'a>(x: &'a str) { super::sibling::h(x); $crate::macro_path; let q = ['\'', '\\', 'x']; }
#[cfg(test)]
mod tests { use crate::test_only::X; fn t() { crate::test_only::y(); } }
#[cfg(all(test, debug_assertions))]
fn t2() { crate::test_only2::z() }
#[cfg(not(test))]
fn n() { crate::not_test::w() }
pub(crate) use crate::re::Exported;
"##;
    let m = module_from("p::q", src, &["p", "p::q", "p::q::kid"]);
    assert_eq!(
        refs(&m),
        vec![
            (2, "a::b".into()),
            (2, "a::c".into()),
            (2, "a::c::D".into()),
            (3, "p::x".into()),
            (5, "p::q::kid::Thing".into()),
            (8, "code::call".into()),
            (9, "p::sibling::h".into()),
            (15, "not_test::w".into()),
            (16, "re::Exported".into()),
        ]
    );
    assert_eq!(m.reexports.get("Exported").map(|p| p.join("::")), Some("re::Exported".into()));
    assert!(m.items.contains("f") && m.items.contains("g") && !m.items.contains("t2"));
}

#[test]
fn resolution_follows_reexports_to_the_defining_module() {
    let lib = module_from("", "pub use fs::Filesystem;", &["fs", "fs::types"]);
    let fs = module_from("fs", "pub use types::*; pub struct Filesystem;", &["fs", "fs::types"]);
    let types = module_from("fs::types", "pub struct Stat;", &["fs", "fs::types"]);
    let mods: HashMap<String, &Module> = [&lib, &fs, &types].into_iter().map(|m| (m.path.clone(), m)).collect();
    let p = |s: &str| s.split("::").map(String::from).collect::<Vec<_>>();
    assert_eq!(resolve(&p("fs::Stat"), &mods, 0), "fs::types");
    assert_eq!(resolve(&p("fs::Filesystem"), &mods, 0), "fs");
    assert_eq!(resolve(&p("Filesystem"), &mods, 0), "fs");
    assert_eq!(resolve(&p("fs::types::Stat::new"), &mods, 0), "fs::types");
}
