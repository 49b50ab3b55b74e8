//! Checks of the house's shape that no compiler makes, each shown to fail when broken:
//! - no file in `src/` or `benches/` is over [`FILE_LINES_MAX`] lines, not counting its
//!   trailing tests block (files that are only tests are exempt), but for the reasoned
//!   [`LONG_FILES`];
//! - inside every folder of `src/`, `benches/load/` and `tests/api/`, the entries (each file,
//!   and each subfolder taken whole) name one another in one direction only;
//! - the SQLite backend is the one place that names `rusqlite`;
//! - the module table of `lib.rs` names every module it declares.
//!
//! The reading is lexical, not the compiler's: comments and string literals are blanked, then
//! every path that starts with `crate::`, `super::` or `self::` (use trees included), and every
//! `child::` naming one of the file's own submodules, is resolved to the deepest module it
//! names.

mod read;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use read::{
    ModPath, blank, declared_modules, lines_without_tests, module_path, named_modules,
    tabled_modules, test_modules,
};

/// The most lines a source file may have before its trailing `#[cfg(test)] mod tests { … }`:
/// what a newcomer reads in one sitting.
const FILE_LINES_MAX: usize = 600;

/// Files allowed past [`FILE_LINES_MAX`], each with its reason. A file here that has come
/// back under the bound fails the check, so the list only shrinks.
const LONG_FILES: &[(&str, &str)] = &[];

/// Folders allowed to hold an import cycle, each with its reason. A folder here that has
/// no cycle left fails the check, so the list only shrinks.
const CYCLIC_FOLDERS: &[(&str, &str)] = &[];

/// The folders whose files form one crate each, with the crate's root file.
const CRATES: &[&str] = &["src", "benches/load", "tests/api"];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `dir`, sorted.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).expect("a readable source folder") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            found.extend(sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
    found.sort();
    found
}

fn read(file: &Path) -> String {
    std::fs::read_to_string(file).expect("a readable source file")
}

/// The entry of `folder` that `module` lies in: the child's name, or `mod` for the folder's
/// own module.
fn entry_of(folder: &[String], module: &[String]) -> String {
    module
        .get(folder.len())
        .cloned()
        .unwrap_or_else(|| "mod".to_owned())
}

/// For each folder of a crate given as (module path, blanked code), the edges between its
/// entries. A module naming one of its ancestors' own items (an edge into `mod`) is the
/// one direction every child may take, so it is left out.
fn folder_graphs(files: &[(ModPath, String)]) -> BTreeMap<ModPath, Graph> {
    let modules: BTreeSet<ModPath> = files.iter().map(|(path, _)| path.clone()).collect();
    let mut graphs: BTreeMap<ModPath, Graph> = BTreeMap::new();
    for (me, code) in files {
        for target in named_modules(code, me, &modules) {
            let shared = me.iter().zip(&target).take_while(|(a, b)| a == b).count();
            let folder = me[..shared].to_vec();
            let (from, to) = (entry_of(&folder, me), entry_of(&folder, &target));
            if from == to || to == "mod" {
                continue;
            }
            let graph = graphs.entry(folder).or_default();
            graph.entry(from).or_default().insert(to.clone());
            graph.entry(to).or_default();
        }
    }
    graphs
}

type Graph = BTreeMap<String, BTreeSet<String>>;

/// A cycle in `graph`, if it has one, as the path that closes it.
fn find_cycle(graph: &Graph) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &Graph,
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

/// Every folder of the crate in `dir` (relative to the package) that holds a cycle, as
/// (folder, the cycle).
fn cycles_in(dir: &str) -> Vec<(String, Vec<String>)> {
    let absolute = root().join(dir);
    let files: Vec<(ModPath, String)> = sources(&absolute)
        .iter()
        .map(|file| {
            let relative = file
                .strip_prefix(&absolute)
                .expect("a file under its crate");
            (module_path(relative), blank(&read(file)))
        })
        .collect();
    assert!(files.len() > 3, "{dir} has its files");
    folder_graphs(&files)
        .into_iter()
        .filter_map(|(folder, graph)| {
            let cycle = find_cycle(&graph)?;
            let name = std::iter::once(dir.to_owned())
                .chain(folder)
                .collect::<Vec<_>>()
                .join("/");
            Some((name, cycle))
        })
        .collect()
}

#[test]
fn no_folder_holds_an_import_cycle() {
    let mut found = Vec::new();
    for dir in CRATES {
        found.extend(cycles_in(dir));
    }
    let cyclic: BTreeSet<&str> = found.iter().map(|(folder, _)| folder.as_str()).collect();
    let unexpected: Vec<&(String, Vec<String>)> = found
        .iter()
        .filter(|(folder, _)| !CYCLIC_FOLDERS.iter().any(|(known, _)| known == folder))
        .collect();
    assert!(
        unexpected.is_empty(),
        "entries of a folder name one another both ways (move what both need into a file \
         of its own, or into the parent): {unexpected:?}"
    );
    for (folder, _) in CYCLIC_FOLDERS {
        assert!(
            cyclic.contains(folder),
            "{folder} has no cycle left: take it off CYCLIC_FOLDERS"
        );
    }
}

/// The files of `files` (path, text) over [`FILE_LINES_MAX`] lines without their trailing
/// tests block, with their counts; files that are only tests are left out.
fn long_files(files: &[(PathBuf, String)]) -> BTreeMap<PathBuf, usize> {
    let mut test_only = BTreeSet::new();
    for (file, text) in files {
        let folder = file.parent().expect("a file in a folder");
        let stem = file.file_stem().expect("a file name").to_string_lossy();
        let own = if matches!(&*stem, "mod" | "lib" | "main") {
            folder.to_path_buf()
        } else {
            folder.join(&*stem)
        };
        for name in test_modules(text) {
            test_only.insert(own.join(format!("{name}.rs")));
            test_only.insert(own.join(&name).join("mod.rs"));
        }
    }
    files
        .iter()
        .filter(|(file, _)| !test_only.contains(file))
        .map(|(file, text)| (file.clone(), lines_without_tests(text)))
        .filter(|(_, lines)| *lines > FILE_LINES_MAX)
        .collect()
}

#[test]
fn no_file_is_over_the_bound() {
    let root = root();
    let mut files = Vec::new();
    for dir in ["src", "benches"] {
        for file in sources(&root.join(dir)) {
            let text = read(&file);
            let relative = file
                .strip_prefix(&root)
                .expect("under the root")
                .to_path_buf();
            files.push((relative, text));
        }
    }
    assert!(files.len() > 50, "the sources were found");
    let long = long_files(&files);
    let over: Vec<(&PathBuf, &usize)> = long
        .iter()
        .filter(|(file, _)| {
            !LONG_FILES
                .iter()
                .any(|(known, _)| Path::new(known) == *file)
        })
        .collect();
    assert!(
        over.is_empty(),
        "files over {FILE_LINES_MAX} lines without their tests (split them by job): {over:?}"
    );
    for (known, _) in LONG_FILES {
        assert!(
            long.contains_key(Path::new(known)),
            "{known} is within the bound now: take it off LONG_FILES"
        );
    }
}

#[test]
fn only_the_sqlite_backend_names_rusqlite() {
    let src = root().join("src");
    let backend = src.join("store").join("sqlite");
    let this = src.join("layout.rs");
    for file in sources(&src) {
        if file.starts_with(&backend) || file == this {
            continue;
        }
        assert!(
            !blank(&read(&file)).contains("rusqlite"),
            "{} names rusqlite",
            file.display()
        );
    }
}

#[test]
fn the_module_table_of_lib_rs_names_every_module() {
    let lib = read(&root().join("src").join("lib.rs"));
    let declared = declared_modules(&lib);
    assert!(declared.len() > 10, "the modules were found: {declared:?}");
    let tabled = tabled_modules(&lib);
    let missing: Vec<&String> = declared.difference(&tabled).collect();
    assert!(
        missing.is_empty(),
        "the module table in the `//!` comment of src/lib.rs has no row for {missing:?}"
    );
}

// The rules above, each shown to fail when broken, on made-up files.

fn names(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

fn crate_of(files: &[(&str, &str)]) -> Vec<(ModPath, String)> {
    files
        .iter()
        .map(|(path, text)| (module_path(Path::new(path)), blank(text)))
        .collect()
}

fn cycles_of(files: &[(&str, &str)]) -> BTreeMap<ModPath, Vec<String>> {
    folder_graphs(&crate_of(files))
        .into_iter()
        .filter_map(|(folder, graph)| Some((folder, find_cycle(&graph)?)))
        .collect()
}

#[test]
fn a_cycle_between_two_files_of_a_folder_is_found() {
    let files = [
        ("lib.rs", "mod store;"),
        ("store/mod.rs", "mod a; mod b; pub struct Error;"),
        ("store/a.rs", "use super::b::B; use crate::store::Error;"),
        ("store/b.rs", "use crate::store::{a::{self, A}, Error};"),
    ];
    let found = cycles_of(&files);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found.keys().next(), Some(&vec!["store".to_owned()]));
    // Children naming their parent's items, and the parent naming its children, is no cycle.
    let files = [
        ("lib.rs", "mod store; use store::a::A;"),
        (
            "store/mod.rs",
            "mod a; mod b; pub struct Error; pub use a::A; fn f() { b::g() }",
        ),
        (
            "store/a.rs",
            "use super::Error; // super::b::B\nconst S: &str = \"crate::store::b\";",
        ),
        ("store/b.rs", "use crate::store::{a::A, Error};"),
    ];
    assert_eq!(cycles_of(&files), BTreeMap::new());
}

#[test]
fn a_cycle_through_subfolders_is_found_in_their_common_folder() {
    let files = [
        ("lib.rs", "mod store;"),
        ("store/mod.rs", "mod write; mod sqlite;"),
        ("store/write/mod.rs", "mod job; "),
        (
            "store/write/job.rs",
            "pub enum AnyJob { Lite(crate::store::sqlite::conn::Conn) }",
        ),
        ("store/sqlite/mod.rs", "mod conn;"),
        (
            "store/sqlite/conn.rs",
            "use super::super::write::job::AnyJob;",
        ),
    ];
    let found = cycles_of(&files);
    let cycle = found
        .get(&vec!["store".to_owned()])
        .expect("a cycle in store/");
    assert_eq!(
        names(&cycle.iter().map(String::as_str).collect::<Vec<_>>()),
        names(&["sqlite", "write"])
    );
}

#[test]
fn a_long_file_is_found_unless_it_is_tests() {
    let long = "fn f() {}\n".repeat(FILE_LINES_MAX + 1);
    let short_with_tests = format!("fn f() {{}}\n#[cfg(test)]\nmod tests {{\n{long}}}\n");
    let files = [
        (
            "src/lib.rs",
            "mod a;\nmod b;\n#[cfg(test)]\nmod c;\n".to_owned(),
        ),
        ("src/a.rs", long.clone()),
        ("src/b.rs", short_with_tests),
        ("src/c.rs", long),
    ]
    .map(|(path, text)| (PathBuf::from(path), text));
    let found = long_files(&files);
    assert_eq!(
        found.into_iter().collect::<Vec<_>>(),
        [(PathBuf::from("src/a.rs"), FILE_LINES_MAX + 1)]
    );
}
