//! A history file that is not a database any more (garbage bytes, a truncated file) is moved
//! aside, its name given back for the log, and the daemon starts on a fresh one: the node keeps
//! being checked, and the old file is kept for whoever wants to read what is left of it.

use std::path::{Path, PathBuf};

use rusqlite::ErrorCode;

use crate::history::{History, HistoryError};

/// The history at `path`, and where a corrupted file was moved (none when it was sound).
/// Only corruption moves a file: a locked, unreadable or newer-schema file is an error, kept
/// where it is.
pub fn open_recovering(path: &Path) -> Result<(History, Option<PathBuf>), HistoryError> {
    match History::open(path).and_then(|h| h.quick_check().map(|()| h)) {
        Ok(h) => Ok((h, None)),
        Err(e) if is_corruption(&e) => {
            let aside = aside_name(path, std::time::SystemTime::now());
            move_aside(path, &aside)?;
            tracing::error!(
                "history {} is corrupted ({e}): moved aside to {}; starting a fresh history",
                path.display(),
                aside.display()
            );
            Ok((History::open(path)?, Some(aside)))
        }
        Err(e) => Err(e),
    }
}

/// SQLite's words for a file that is not (or no longer) a database.
fn is_corruption(e: &HistoryError) -> bool {
    match e {
        HistoryError::Sql(rusqlite::Error::SqliteFailure(f, _)) => {
            matches!(f.code, ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt)
        }
        HistoryError::Corrupt(_) => true,
        _ => false,
    }
}

/// `history.db.corrupt-2026-12-06T040512Z`: the moment it was found, without colons.
fn aside_name(path: &Path, now: std::time::SystemTime) -> PathBuf {
    let stamp = humantime::format_rfc3339_seconds(now)
        .to_string()
        .replace(':', "");
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".corrupt-{stamp}"));
    PathBuf::from(name)
}

/// Renames the file and its WAL and shared-memory files (a stale WAL must never be read
/// into the fresh file).
fn move_aside(path: &Path, aside: &Path) -> Result<(), HistoryError> {
    let with = |p: &Path, suffix: &str| {
        let mut s = p.as_os_str().to_owned();
        s.push(suffix);
        PathBuf::from(s)
    };
    for suffix in ["", "-wal", "-shm"] {
        let from = with(path, suffix);
        if from.exists() {
            std::fs::rename(&from, with(aside, suffix)).map_err(|source| HistoryError::Io {
                what: format!("moving the corrupted {} aside", from.display()),
                source,
            })?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filled(path: &Path) {
        let h = History::open(path).unwrap();
        let json = "x".repeat(4000);
        for i in 0..60 {
            let id = h.begin("preflight", "sim", "sim:x", f64::from(i)).unwrap();
            h.complete(id, "complete", Some("OK"), Some(0), None, Some(&json), 1.0)
                .unwrap();
        }
    }

    fn asides(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".corrupt-"))
            .collect();
        v.sort();
        v
    }

    #[test]
    fn garbage_is_moved_aside_and_a_fresh_history_opens() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("history.db");
        std::fs::write(&path, vec![0x5a_u8; 8192]).unwrap();
        let (h, aside) = open_recovering(&path).unwrap();
        let aside = aside.expect("moved aside");
        assert_eq!(std::fs::read(&aside).unwrap(), vec![0x5a_u8; 8192]);
        assert_eq!(h.count().unwrap(), 0);
        h.begin("preflight", "sim", "sim:x", 1.0).unwrap();
        assert_eq!(asides(d.path()).len(), 1, "{:?}", asides(d.path()));
        assert!(asides(d.path())[0].starts_with("history.db.corrupt-2"));
    }

    #[test]
    fn a_truncated_file_is_moved_aside() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("history.db");
        filled(&path);
        let len = std::fs::metadata(&path).unwrap().len();
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(len / 2).unwrap();
        drop(f);
        let (h, aside) = open_recovering(&path).unwrap();
        assert!(aside.is_some());
        assert_eq!(h.count().unwrap(), 0);
    }

    #[test]
    fn a_sound_file_stays() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("history.db");
        filled(&path);
        let (h, aside) = open_recovering(&path).unwrap();
        assert_eq!(aside, None);
        assert_eq!(h.count().unwrap(), 60);
        assert!(asides(d.path()).is_empty());
    }

    #[test]
    fn the_aside_name_carries_the_time_without_colons() {
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_796_529_600);
        let p = aside_name(Path::new("/var/lib/ddpcheck/history.db"), t);
        assert_eq!(
            p,
            Path::new("/var/lib/ddpcheck/history.db.corrupt-2026-12-06T040000Z")
        );
    }
}
