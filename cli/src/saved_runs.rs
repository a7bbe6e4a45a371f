//! `recommend --save-runs DIR`: what a recommendation measured itself, kept as the reports its
//! bench commands write, so `recommend --from` can give the same answer again offline.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::target::CliError;

/// Where a recommendation's own measurements go (nowhere without `--save-runs`).
pub struct SavedRuns {
    dir: Option<PathBuf>,
    written: Vec<PathBuf>,
}

impl SavedRuns {
    /// Checks before any GPU time is spent that `dir` exists (it is created) and takes files.
    pub fn open(dir: Option<&Path>) -> Result<Self, CliError> {
        if let Some(d) = dir {
            let bad =
                |e: std::io::Error| CliError::Usage(format!("--save-runs {}: {e}", d.display()));
            std::fs::create_dir_all(d).map_err(bad)?;
            tempfile::NamedTempFile::new_in(d).map_err(bad)?;
        }
        Ok(SavedRuns {
            dir: dir.map(Path::to_path_buf),
            written: Vec::new(),
        })
    }

    /// Writes `report` as DIR/NAME.json, whole or not at all (a temporary file renamed into
    /// place), replacing a file of that name.
    pub fn save<T: Serialize>(&mut self, name: &str, report: &T) -> Result<(), CliError> {
        let Some(dir) = &self.dir else {
            return Ok(());
        };
        let path = dir.join(format!("{name}.json"));
        let bad = |e: String| CliError::Usage(format!("--save-runs: {}: {e}", path.display()));
        let text = serde_json::to_string_pretty(report).map_err(|e| bad(e.to_string()))?;
        let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(|e| bad(e.to_string()))?;
        tmp.write_all(text.as_bytes())
            .and_then(|()| tmp.write_all(b"\n"))
            .and_then(|()| tmp.as_file().sync_all())
            .map_err(|e| bad(e.to_string()))?;
        tmp.persist(&path).map_err(|e| bad(e.error.to_string()))?;
        self.written.push(path);
        Ok(())
    }

    /// The files written so far, in order: `--from` them in this order to replay.
    pub fn written(&self) -> &[PathBuf] {
        &self.written
    }
}
