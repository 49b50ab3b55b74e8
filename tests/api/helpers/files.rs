//! Files the tests write or search: private token files, permission bits, secrets left in
//! a directory.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Writes `contents` to `path` with mode 0600.
pub fn write_private(path: &Path, contents: &str) {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .expect("creating a private file");
    f.write_all(contents.as_bytes())
        .expect("writing a private file");
}

/// The permission bits of a file.
pub fn file_mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("stat {}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

/// The names of the files in `dir` whose bytes contain `needle`; with a database there,
/// that covers the file, its `-wal` and its `-shm`.
pub fn files_holding(dir: &Path, needle: &[u8]) -> Vec<String> {
    let mut holding: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("listing {}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.is_file())
        .filter(|path| contains_bytes(&std::fs::read(path).unwrap_or_default(), needle))
        .map(|path| {
            path.file_name()
                .expect("a file name")
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    holding.sort();
    holding
}

/// Whether `needle` occurs in `haystack`.
pub fn contains_bytes(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}
