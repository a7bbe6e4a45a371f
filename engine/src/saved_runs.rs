//! `recommend --save-runs DIR`: what a recommendation measured itself, kept as the reports its
//! bench commands write, so `recommend --from` can give the same answer again offline.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::runner::RunError;

/// Where a recommendation's own measurements go (nowhere without `--save-runs`).
pub struct SavedRuns {
    dir: Option<PathBuf>,
    written: Vec<PathBuf>,
    failed: usize,
}

impl SavedRuns {
    /// Checks before any GPU time is spent that `dir` exists (it is created) and takes files.
    pub fn open(dir: Option<&Path>) -> Result<Self, RunError> {
        if let Some(d) = dir {
            let bad =
                |e: std::io::Error| RunError::Usage(format!("--save-runs {}: {e}", d.display()));
            std::fs::create_dir_all(d).map_err(bad)?;
            tempfile::NamedTempFile::new_in(d).map_err(bad)?;
        }
        Ok(SavedRuns {
            dir: dir.map(Path::to_path_buf),
            written: Vec::new(),
            failed: 0,
        })
    }

    /// Writes `report` as DIR/NAME.json, whole or not at all (a temporary file renamed into
    /// place), replacing a file of that name. A failure is said on stderr and counted, not
    /// raised: the measurement is already made, and the recommendation still follows.
    pub fn save<T: Serialize>(&mut self, name: &str, report: &T) {
        let Some(dir) = &self.dir else {
            return;
        };
        let path = dir.join(format!("{name}.json"));
        match write_whole(dir, &path, report) {
            Ok(()) => self.written.push(path),
            Err(e) => {
                eprintln!("ddpcheck: --save-runs: {} not kept: {e}", path.display());
                self.failed += 1;
            }
        }
    }

    /// The files written so far, in order: `--from` them in this order (all but verify.json) to
    /// replay the recommendation.
    pub fn written(&self) -> &[PathBuf] {
        &self.written
    }

    /// How many measurements could not be kept.
    pub fn failed(&self) -> usize {
        self.failed
    }
}

/// The report written to a temporary file in `dir`, synced, then renamed to `path`: a reader
/// finds the whole file or none. A report that does not serialise is `InvalidData`.
fn write_whole<T: Serialize>(dir: &Path, path: &Path, report: &T) -> std::io::Result<()> {
    let text = serde_json::to_string_pretty(report)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(text.as_bytes())?;
    tmp.write_all(b"\n")?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn keeps_whole_files_and_counts_what_it_could_not_keep() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("runs");
        let mut saved = SavedRuns::open(Some(&dir)).unwrap();
        saved.save("sweep", &serde_json::json!({"kind": "bench_collectives"}));
        let text = std::fs::read_to_string(dir.join("sweep.json")).unwrap();
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&text).unwrap()["kind"],
            "bench_collectives"
        );
        assert_eq!((saved.written().len(), saved.failed()), (1, 0));
        // The folder gone (a file in its place) after the check: said and counted, no panic.
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::write(&dir, "not a folder").unwrap();
        saved.save("verify", &serde_json::json!({}));
        assert_eq!((saved.written().len(), saved.failed()), (1, 1));
        // Without --save-runs nothing is written or counted.
        let mut none = SavedRuns::open(None).unwrap();
        none.save("sweep", &serde_json::json!({}));
        assert_eq!((none.written().len(), none.failed()), (0, 0));
    }
}
