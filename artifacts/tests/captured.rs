//! Every folder of outputs captured on the project's own machines (tests/fixtures/captured/*/)
//! reads without error and is judged: new captures are checked by being dropped in.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use ddpcheck_artifacts::folder::{folder_sources, read_all};
use ddpcheck_artifacts::judge::judge;

#[test]
fn every_captured_folder_reads_and_is_judged() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/captured");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    for dir in dirs {
        let reads = read_all(&folder_sources(&dir).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let r = judge(&reads, "test").unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        assert_ne!(r.verdict, "unknown", "{}: {}", dir.display(), r.reason);
    }
}
