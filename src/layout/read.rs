//! The lexical reading of Rust sources that the house checks need: comments and literals
//! blanked, use trees expanded, paths resolved to the modules they name, tests blocks and
//! test-only files told apart, and the module table of a crate root.

use std::collections::BTreeSet;
use std::path::Path;

/// `text` with its comments removed and its string and character literals emptied, lines
/// kept where they were.
pub(super) fn blank(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        let after_ident = i > 0 && ident(chars[i - 1]);
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
        } else if c == 'r' && !after_ident && matches!(next, Some('#' | '"')) {
            // A raw string: r"…", r#"…"#, also after b.
            let hashes = chars[i + 1..].iter().take_while(|&&c| c == '#').count();
            if chars.get(i + 1 + hashes) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            i += 2 + hashes;
            let closing: Vec<char> = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            while i < chars.len() && !chars[i..].starts_with(&closing) {
                if chars[i] == '\n' {
                    out.push('\n');
                }
                i += 1;
            }
            i += closing.len();
            out.push_str("\"\"");
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                if chars.get(i) == Some(&'\n') {
                    out.push('\n');
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' && next == Some('\\') {
            i += 2;
            while i < chars.len() && chars[i] != '\'' {
                i += 1;
            }
            i += 1;
            out.push_str("' '");
        } else if c == '\'' && chars.get(i + 2) == Some(&'\'') {
            i += 3;
            out.push_str("' '");
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// The lines of `text` before its trailing `#[cfg(test)] mod … {` block.
pub(super) fn lines_without_tests(text: &str) -> usize {
    let lines: Vec<&str> = text.lines().collect();
    lines
        .windows(2)
        .position(|pair| {
            pair[0].trim_end() == "#[cfg(test)]"
                && pair[1].starts_with("mod ")
                && pair[1].trim_end().ends_with('{')
        })
        .unwrap_or(lines.len())
}

/// The submodules a file declares under `#[cfg(test)]`: files that are only tests.
pub(super) fn test_modules(text: &str) -> BTreeSet<String> {
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    lines
        .windows(2)
        .filter(|pair| pair[0] == "#[cfg(test)]")
        .filter_map(|pair| pair[1].strip_prefix("mod ")?.strip_suffix(';'))
        .map(str::to_owned)
        .collect()
}

/// A module's path inside its crate: `["store", "sqlite", "writer"]` for
/// `src/store/sqlite/writer.rs`, `["store"]` for `src/store/mod.rs`, `[]` for the roots.
pub(super) type ModPath = Vec<String>;

pub(super) fn module_path(relative: &Path) -> ModPath {
    let mut parts: ModPath = relative
        .iter()
        .map(|part| part.to_string_lossy().trim_end_matches(".rs").to_owned())
        .collect();
    if parts.last().is_some_and(|last| last == "mod") {
        parts.pop();
    }
    if parts.len() == 1 && matches!(parts[0].as_str(), "lib" | "main") {
        parts.clear();
    }
    parts
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The paths of the use tree that starts at `at` in `code`: `a::{b, c::{d, e}}` gives
/// `a::b`, `a::c::d` and `a::c::e`. Returns them and where the tree ends.
fn use_tree(code: &[char], mut at: usize) -> (Vec<Vec<String>>, usize) {
    let skip_space = |at: &mut usize| {
        while *at < code.len() && code[*at].is_whitespace() {
            *at += 1;
        }
    };
    let mut prefix = Vec::new();
    loop {
        skip_space(&mut at);
        let start = at;
        while at < code.len() && is_ident(code[at]) {
            at += 1;
        }
        if start == at {
            break;
        }
        let word: String = code[start..at].iter().collect();
        let mut look = at;
        skip_space(&mut look);
        if code.get(look) == Some(&':') && code.get(look + 1) == Some(&':') {
            prefix.push(word);
            at = look + 2;
        } else {
            prefix.push(word);
            return (vec![prefix], at);
        }
    }
    let mut paths = Vec::new();
    if code.get(at) == Some(&'{') {
        at += 1;
        loop {
            let (inner, end) = use_tree(code, at);
            paths.extend(
                inner
                    .into_iter()
                    .map(|tail| [prefix.clone(), tail].concat()),
            );
            at = end;
            skip_space(&mut at);
            match code.get(at) {
                Some(',') => at += 1,
                Some('}') => {
                    at += 1;
                    break;
                }
                _ => break,
            }
            skip_space(&mut at);
            if code.get(at) == Some(&'}') {
                at += 1;
                break;
            }
        }
    } else {
        paths.push(prefix);
    }
    (paths, at)
}

/// The modules `code`, the text of module `me`, names, each resolved to the deepest module
/// of `modules` its path goes through.
pub(super) fn named_modules(
    code: &str,
    me: &ModPath,
    modules: &BTreeSet<ModPath>,
) -> BTreeSet<ModPath> {
    let chars: Vec<char> = code.chars().collect();
    let mut named = BTreeSet::new();
    let mut at = 0;
    while at < chars.len() {
        let starts_word =
            at == 0 || !(is_ident(chars[at - 1]) || matches!(chars[at - 1], ':' | '$'));
        if !starts_word || !is_ident(chars[at]) {
            at += 1;
            continue;
        }
        let end = at + chars[at..].iter().take_while(|&&c| is_ident(c)).count();
        if !chars[end..].starts_with(&[':', ':']) {
            at = end;
            continue;
        }
        let word: String = chars[at..end].iter().collect();
        let child = [me.clone(), vec![word.clone()]].concat();
        if matches!(word.as_str(), "crate" | "super" | "self") || modules.contains(&child) {
            let (paths, _) = use_tree(&chars, at);
            for path in paths {
                named.insert(resolve(&path, me, modules));
            }
        }
        at = end;
    }
    named
}

/// The deepest module of `modules` that `path`, written in module `me`, goes through.
fn resolve(path: &[String], me: &ModPath, modules: &BTreeSet<ModPath>) -> ModPath {
    let mut words = path.iter().peekable();
    let mut module: ModPath = me.clone();
    if words.peek().is_some_and(|w| *w == "crate") {
        module.clear();
        words.next();
    }
    while let Some(word) = words.peek() {
        match word.as_str() {
            "super" => {
                module.pop();
            }
            "self" => {}
            _ => break,
        }
        words.next();
    }
    for word in words {
        let deeper = [module.clone(), vec![word.clone()]].concat();
        if !modules.contains(&deeper) {
            break;
        }
        module = deeper;
    }
    module
}

/// The modules a crate root declares at top level: `mod x;`, `pub mod x;`, `pub(crate) mod x;`.
pub(super) fn declared_modules(root: &str) -> BTreeSet<String> {
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
pub(super) fn tabled_modules(root: &str) -> BTreeSet<String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> BTreeSet<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn the_reader_resolves_use_trees_and_blanks_what_is_not_code() {
        let modules: BTreeSet<ModPath> = [
            vec![],
            vec!["a".into()],
            vec!["a".into(), "b".into()],
            vec!["c".into()],
        ]
        .into_iter()
        .collect();
        let code = blank(
            "use crate::{a::b::{X, Y}, c}; // crate::z\nlet s = r#\"crate::q\"#; let c = '\"'; super::S",
        );
        let me: ModPath = vec!["a".into(), "b".into()];
        let found = named_modules(&code, &me, &modules);
        let expected: BTreeSet<ModPath> = [me.clone(), vec!["c".into()], vec!["a".into()]]
            .into_iter()
            .collect();
        assert_eq!(found, expected);
        assert_eq!(blank("a /* b /* c */ d */ e"), "a  e");
    }

    #[test]
    fn the_line_counter_stops_at_the_tests_block_and_finds_test_files() {
        let text = "fn a() {}\nfn b() {}\n#[cfg(test)]\nmod tests {\n    fn c() {}\n}\n";
        assert_eq!(lines_without_tests(text), 2);
        assert_eq!(lines_without_tests("fn a() {}\n"), 1);
        assert_eq!(
            test_modules("mod a;\n#[cfg(test)]\nmod model_tests;\n"),
            names(&["model_tests"])
        );
        assert_eq!(lines_without_tests(&"fn f() {}\n".repeat(601)), 601);
    }

    #[test]
    fn the_module_readers_read_declarations_and_rows() {
        let root = "//! | module | job |\n//! |---|---|\n//! | [`a`] | x |\n//! | `b::c` | y |\n\
                    mod a;\npub mod b;\npub(crate) mod d;\n#[cfg(test)]\nmod e;\n\
                    pub mod f {\n    mod g;\n}\n";
        assert_eq!(declared_modules(root), names(&["a", "b", "d", "e"]));
        assert_eq!(tabled_modules(root), names(&["a", "b::c"]));
        // A module missing from the table is what the check reports.
        assert_eq!(
            declared_modules(root)
                .difference(&tabled_modules(root))
                .count(),
            3
        );
    }
}
