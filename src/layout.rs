//! Checks of the crate's shape that no compiler makes: modules depend on one another in one
//! direction only, the SQLite backend is the one place that names `rusqlite`, and the module
//! table of `lib.rs` names every module it declares.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).expect("src/ is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            found.extend(sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
    found
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The top-level module a file belongs to (`store` for `src/store/sqlite/writer.rs`), or
/// `None` for the crate roots.
fn module_of(file: &Path) -> Option<String> {
    let relative = file.strip_prefix(src()).expect("a file under src/");
    let first = relative.components().next()?.as_os_str().to_str()?;
    let name = first.trim_end_matches(".rs");
    (!matches!(name, "lib" | "main")).then(|| name.to_owned())
}

/// The code of a file without its comment lines.
fn code(file: &Path) -> String {
    std::fs::read_to_string(file)
        .expect("a readable source file")
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The top-level modules `code` names through `crate::…`, also inside `crate::{a, b}`.
fn named_modules(code: &str) -> BTreeSet<String> {
    let mut named = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let group = &group[..group.find('}').unwrap_or(group.len())];
            for item in group.split(',') {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                named.insert(name);
            }
        } else {
            named.insert(
                rest.chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect(),
            );
        }
    }
    named.retain(|name| !name.is_empty() && name.chars().all(|c| c.is_lowercase() || c == '_'));
    named
}

/// A cycle in `graph`, if it has one, as the path that closes it.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_owned());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
}

#[test]
fn no_two_modules_depend_on_each_other() {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in sources(&src()) {
        let Some(module) = module_of(&file) else {
            continue;
        };
        if matches!(module.as_str(), "layout" | "proptests") {
            continue;
        }
        let mut named = named_modules(&code(&file));
        named.remove(&module);
        graph.entry(module).or_default().extend(named);
    }
    assert!(graph.len() > 10, "the modules were found: {graph:?}");
    assert_eq!(find_cycle(&graph), None, "the module graph: {graph:#?}");
}

#[test]
fn the_cycle_finder_finds_cycles() {
    let graph = |edges: &[(&str, &str)]| {
        let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (from, to) in edges {
            g.entry((*from).into()).or_default().insert((*to).into());
            g.entry((*to).into()).or_default();
        }
        g
    };
    assert_eq!(find_cycle(&graph(&[("a", "b"), ("b", "c")])), None);
    assert!(find_cycle(&graph(&[("a", "b"), ("b", "c"), ("c", "a")])).is_some());
    assert_eq!(
        named_modules("use crate::{a::X, bc}; crate::d::f(); crate::App"),
        ["a", "bc", "d"].into_iter().map(String::from).collect()
    );
}

#[test]
fn only_the_sqlite_backend_names_rusqlite() {
    let backend = src().join("store").join("sqlite");
    for file in sources(&src()) {
        if file.starts_with(&backend) || module_of(&file).as_deref() == Some("layout") {
            continue;
        }
        assert!(
            !code(&file).contains("rusqlite"),
            "{} names rusqlite",
            file.display()
        );
    }
}

/// The modules a crate root declares at top level: `mod x;`, `pub mod x;`, `pub(crate) mod x;`.
fn declared_modules(root: &str) -> BTreeSet<String> {
    root.lines()
        .filter_map(|line| {
            let line = line.trim_end();
            let line = line
                .strip_prefix("pub(crate) ")
                .or_else(|| line.strip_prefix("pub "))
                .unwrap_or(line);
            line.strip_prefix("mod ")?
                .strip_suffix(';')
                .map(str::to_owned)
        })
        .collect()
}

/// The names in the first column of a crate root's `//!` tables, in backticks, as links or not.
fn tabled_modules(root: &str) -> BTreeSet<String> {
    root.lines()
        .filter_map(|line| line.strip_prefix("//! |"))
        .filter_map(|row| row.split('|').next())
        .filter_map(|cell| {
            let cell = cell.trim();
            let cell = cell
                .strip_prefix('[')
                .and_then(|c| c.strip_suffix(']'))
                .unwrap_or(cell);
            cell.strip_prefix('`')?.strip_suffix('`').map(str::to_owned)
        })
        .collect()
}

#[test]
fn the_module_table_of_lib_rs_names_every_module() {
    let root = std::fs::read_to_string(src().join("lib.rs")).expect("src/lib.rs is readable");
    let declared = declared_modules(&root);
    assert!(declared.len() > 10, "the modules were found: {declared:?}");
    let tabled = tabled_modules(&root);
    let missing: Vec<&String> = declared.difference(&tabled).collect();
    assert!(
        missing.is_empty(),
        "the module table in the `//!` comment of src/lib.rs has no row for {missing:?}"
    );
}

#[test]
fn the_module_readers_read_declarations_and_rows() {
    let root = "//! | module | job |\n//! |---|---|\n//! | [`a`] | x |\n//! | `b::c` | y |\n\
                mod a;\npub mod b;\npub(crate) mod d;\n#[cfg(test)]\nmod e;\n\
                pub mod f {\n    mod g;\n}\n";
    let names = |list: &[&str]| {
        list.iter()
            .map(|s| (*s).to_owned())
            .collect::<BTreeSet<_>>()
    };
    assert_eq!(declared_modules(root), names(&["a", "b", "d", "e"]));
    assert_eq!(tabled_modules(root), names(&["a", "b::c"]));
}
