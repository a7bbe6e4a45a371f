//! The symlinked lock: where /run/ddpcheck is not writable and `XDG_RUNTIME_DIR` is unset, a
//! user's node lock falls back to `ddpcheck-<uid>` in the temporary folder, a name anyone can
//! predict. Another user who made that folder first and put a link at `test.lock` must not make
//! a local `ddpcheck check` write through it: the run is refused with one line naming the folder
//! and its owner, and the file is unchanged. Root's runs fall back to /run/ddpcheck-0 instead,
//! where nobody else can plant anything, so a planted folder does not make them UNKNOWN.

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

/// The folder root's local runs keep their lock in when /run/ddpcheck is missing: under /run,
/// where nobody but root can plant anything.
const ROOTS_FALLBACK: &str = "/run/ddpcheck-0";

/// Plants, as user 65534, a folder at `uid`'s predictable name in `tmp` with a link at
/// `test.lock` to `victim`.
fn plant_folder(tmp: &Path, uid: u32, victim: &Path) -> std::path::PathBuf {
    let planted = tmp.join(format!("ddpcheck-{uid}"));
    std::fs::DirBuilder::new()
        .mode(0o755)
        .create(&planted)
        .unwrap();
    std::os::unix::fs::symlink(victim, planted.join("test.lock")).unwrap();
    std::os::unix::fs::lchown(planted.join("test.lock"), Some(65534), Some(65534)).unwrap();
    std::os::unix::fs::chown(&planted, Some(65534), Some(65534)).unwrap();
    planted
}

/// Root's local checks do not look in the temporary folder at all, so what another user plants
/// there (a folder of theirs, or a link at the name) neither turns them into UNKNOWN nor is
/// written through; and the folder root does use is private.
#[test]
fn what_another_user_plants_in_tmp_does_not_touch_roots_checks() {
    if !fallback_is_taken() {
        return;
    }
    if euid() != 0 {
        eprintln!("not root: cannot plant a folder of another user; skipped");
        return;
    }
    let victim_home = tempfile::tempdir().unwrap();
    let victim = victim_home.path().join("thesis.tex");
    std::fs::write(&victim, "three years of work\n").unwrap();
    let as_folder = shared_tmp();
    plant_folder(as_folder.path(), 0, &victim);
    let as_link = shared_tmp();
    std::os::unix::fs::symlink(victim_home.path(), as_link.path().join("ddpcheck-0")).unwrap();
    for tmp in [as_folder.path(), as_link.path()] {
        let o = output_within(&mut local_check(tmp), Duration::from_secs(60));
        let said = format!("{}{}", stdout(&o), stderr(&o));
        assert_eq!(
            std::fs::read_to_string(&victim).unwrap(),
            "three years of work\n",
            "the victim's file was written through the planted link: {said}"
        );
        assert!(!said.contains("runtime folder"), "{said}");
        assert!(!victim_home.path().join("test.lock").exists(), "{said}");
        let m = std::fs::symlink_metadata(ROOTS_FALLBACK).unwrap_or_else(|e| panic!("{e}: {said}"));
        assert!(m.is_dir() && m.uid() == 0, "{said}");
        assert_eq!(m.permissions().mode() & 0o022, 0, "{said}");
        assert!(
            Path::new(ROOTS_FALLBACK).join("test.lock").is_file(),
            "{said}"
        );
    }
}

/// Another user's runs still use the predictable name in the temporary folder: a planted one
/// is refused with one line that names the folder and its owner, and nothing is written.
#[test]
fn a_planted_folder_in_tmp_is_refused_naming_its_owner() {
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
    // The run is user 1000's, as root's child with its ids changed.
    let planted = plant_folder(tmp.path(), 1000, &victim);
    std::fs::set_permissions(victim_home.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o666)).unwrap();
    let mut cmd = local_check(tmp.path());
    std::os::unix::process::CommandExt::uid(&mut cmd, 1000);
    std::os::unix::process::CommandExt::gid(&mut cmd, 1000);
    let o = output_within(&mut cmd, Duration::from_secs(60));
    let said = format!("{}{}", stdout(&o), stderr(&o));
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "three years of work\n",
        "the victim's file was written through the planted link: {said}"
    );
    assert_eq!(code(&o), 1, "{said}");
    assert_eq!(said.trim().lines().count(), 1, "{said}");
    assert!(
        said.contains(&format!(
            "refusing the runtime folder {}",
            planted.display()
        )),
        "{said}"
    );
    assert!(said.contains("owned by uid 65534"), "{said}");
}

/// The same run without anything planted makes the folder itself, private (0700, ours), and
/// takes the lock there (as user 1000 where the tests run as root, whose runs use /run).
#[test]
fn the_fallback_folder_is_made_private() {
    if !fallback_is_taken() {
        return;
    }
    let tmp = shared_tmp();
    let mut cmd = local_check(tmp.path());
    let uid = if euid() == 0 {
        std::os::unix::process::CommandExt::uid(&mut cmd, 1000);
        std::os::unix::process::CommandExt::gid(&mut cmd, 1000);
        1000
    } else {
        euid()
    };
    let o = output_within(&mut cmd, Duration::from_secs(60));
    let said = format!("{}{}", stdout(&o), stderr(&o));
    let dir = tmp.path().join(format!("ddpcheck-{uid}"));
    let m = std::fs::symlink_metadata(&dir).unwrap_or_else(|e| panic!("{e}: {said}"));
    assert!(m.is_dir(), "{said}");
    assert_eq!(m.uid(), uid);
    assert_eq!(m.permissions().mode() & 0o777, 0o700, "{said}");
    assert!(dir.join("test.lock").is_file(), "{said}");
    assert!(!said.contains("refusing"), "{said}");
}
