//! The symlinked lock: where /run/ddpcheck is not writable and `XDG_RUNTIME_DIR` is unset, the
//! node lock falls back to `ddpcheck-<uid>` in the temporary folder, a name anyone can predict.
//! Another user who made that folder first and put a link at `test.lock` must not make a local
//! `ddpcheck check` write through it: the run is refused with one line and the file is unchanged.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common::{code, output_within, stderr, stdout};

/// `ddpcheck check` as a local run on real GPUs (none here: it needs none to take the lock
/// first), with `tmp` as its temporary folder and no other runtime folder to pick.
fn local_check(tmp: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ddpcheck"));
    cmd.args(["check", "--prolog"])
        .env_remove("DDPCHECK_SIM")
        .env_remove("DDPCHECK_DAEMON")
        .env_remove("DDPCHECK_RUNTIME_DIR")
        .env_remove("XDG_RUNTIME_DIR")
        .env("TMPDIR", tmp);
    cmd
}

/// A folder every user can write, as /tmp (sticky, 1777).
fn shared_tmp() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    d
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Where /run/ddpcheck can be written (a daemon installed here, as root), the fallback is not
/// taken and there is nothing to probe.
fn fallback_is_taken() -> bool {
    let run = Path::new("/run/ddpcheck");
    if run.exists() {
        eprintln!("/run/ddpcheck exists: the fallback folder is not used; skipped");
        return false;
    }
    true
}

#[test]
fn a_planted_folder_with_a_link_at_the_lock_is_refused_and_the_target_kept() {
    if !fallback_is_taken() {
        return;
    }
    if euid() != 0 {
        eprintln!("not root: cannot plant a folder of another user; skipped");
        return;
    }
    let tmp = shared_tmp();
    let victim_home = tempfile::tempdir().unwrap();
    let victim = victim_home.path().join("thesis.tex");
    std::fs::write(&victim, "three years of work\n").unwrap();
    // As user B (65534): the folder at A's predictable name, and a link to A's file in it.
    let planted = tmp.path().join(format!("ddpcheck-{}", euid()));
    std::fs::DirBuilder::new()
        .mode(0o755)
        .create(&planted)
        .unwrap();
    std::os::unix::fs::symlink(&victim, planted.join("test.lock")).unwrap();
    std::os::unix::fs::lchown(planted.join("test.lock"), Some(65534), Some(65534)).unwrap();
    std::os::unix::fs::chown(&planted, Some(65534), Some(65534)).unwrap();

    let o = output_within(&mut local_check(tmp.path()), Duration::from_secs(60));
    let said = format!("{}{}", stdout(&o), stderr(&o));
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "three years of work\n",
        "the victim's file was written through the planted link: {said}"
    );
    assert_eq!(code(&o), 1, "{said}");
    assert_eq!(said.trim().lines().count(), 1, "{said}");
    assert!(
        said.starts_with("ddpcheck: UNKNOWN: refusing the runtime folder"),
        "{said}"
    );
    assert!(said.contains("owned by uid 65534"), "{said}");
}

/// The same run without anything planted makes the folder itself, private (0700, ours), and
/// takes the lock there.
#[test]
fn the_fallback_folder_is_made_private() {
    if !fallback_is_taken() {
        return;
    }
    let tmp = shared_tmp();
    let o = output_within(&mut local_check(tmp.path()), Duration::from_secs(60));
    let said = format!("{}{}", stdout(&o), stderr(&o));
    let dir = tmp.path().join(format!("ddpcheck-{}", euid()));
    let m = std::fs::symlink_metadata(&dir).unwrap_or_else(|e| panic!("{e}: {said}"));
    assert!(m.is_dir(), "{said}");
    assert_eq!(m.uid(), euid());
    assert_eq!(m.permissions().mode() & 0o777, 0o700, "{said}");
    assert!(dir.join("test.lock").is_file(), "{said}");
    assert!(!said.contains("refusing"), "{said}");
}
