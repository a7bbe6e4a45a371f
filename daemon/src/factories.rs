//! Which model factories and configuration files a gRPC caller may have the daemon read.
//! `ddpcheckd` runs as a service: it never imports code a caller names, nor reads a Hugging Face
//! `config.json` a caller names, unless the file lies in a folder its configuration allows
//! (`factory_dirs`, none by default). Library models (torchvision, timm, Hugging Face model
//! types) run library code only and are always allowed; a module name is never run, since the
//! interpreter's search path, not the configuration, would say which file it is.
//!
//! The folders are held to sshd's StrictModes ([`strict_dir`]), and so is every folder from `/`
//! down to a named file. The path checked is the path used: a caller names the file by its
//! canonical path (absolute, no `.` or `..`, no symbolic link on it), which is checked to lie
//! inside an allowed folder before the file system is touched, so a refused path gets the same
//! answer whether or not it exists. Its components are then checked without following links;
//! none can change after the check except by root or the daemon's own user, who are trusted
//! anyway: each is owned by one of them and writable by nobody else (an ancestor above the
//! folder may be a sticky folder such as /tmp, where only an entry's owner may rename or remove
//! it).

use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use ddpcheck_core::ddp::{DdpRequest, ModelSource, ModelSpec};

/// `Ok` when every factory and configuration file the request names is a file inside one of
/// `allowed`, named by its canonical path; else the one line that says why not.
pub fn check(req: &DdpRequest, allowed: &[PathBuf]) -> Result<(), Refused> {
    admit(req.clone(), allowed).map(|_| ())
}

/// The request the daemon runs: [`check`]'s verdict. Every file it names is named by the path
/// that was checked, which no link can redirect (a path with a link on it is refused).
pub fn admit(req: DdpRequest, allowed: &[PathBuf]) -> Result<DdpRequest, Refused> {
    for model in &req.models {
        let ModelSpec::External { source } = model else {
            continue;
        };
        admit_source(source, allowed)?;
    }
    Ok(req)
}

/// Why the daemon runs no model a caller named (PERMISSION_DENIED): the model, and why.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error("{0}: this daemon runs no module factories; name a .py file inside its factory_dirs, or run the factory locally (ddpcheck bench ddp without --daemon)")]
    Module(String),
    /// The file the model names (`model`, as its text) is not one the daemon reads.
    #[error("{model}: {why}")]
    File { model: String, why: NotAllowed },
}

/// Why a file or folder fails the rules the daemon reads code and configurations by.
#[derive(Debug, thiserror::Error)]
pub enum NotAllowed {
    #[error("this daemon runs no model factories (factory_dirs is unset in its configuration); run it locally, or ask the operator to allow its folder")]
    NoFactoryDirs,
    #[error("this daemon reads no configuration files a caller names (factory_dirs is unset in its configuration); name a model type (hf:llama,...), run it locally, or ask the operator to allow its folder")]
    NoConfigDirs,
    #[error("{} is outside the daemon's factory_dirs ({}): name the file by its absolute path, without links, . or ..", file.display(), joined(allowed))]
    Outside {
        file: PathBuf,
        allowed: Vec<PathBuf>,
    },
    #[error("{} is not a file", .0.display())]
    NotAFile(PathBuf),
    #[error("{} is not an absolute path without . or ..", .0.display())]
    NotAbsolute(PathBuf),
    #[error("/ holds the whole file system: name the folder of the factories")]
    Root,
    #[error("{}: {error}", path.display())]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{} goes through a symbolic link (it is {}): name the folder itself", dir.display(), canonical.display())]
    Linked { dir: PathBuf, canonical: PathBuf },
    #[error("{} is not a folder", .0.display())]
    NotAFolder(PathBuf),
    #[error("{} is a symbolic link", .0.display())]
    Symlink(PathBuf),
    #[error("{} is neither a folder nor a file", .0.display())]
    NotFileOrFolder(PathBuf),
    #[error("{} is owned by uid {uid}, not by root or the daemon's user (uid {me})", path.display())]
    Owner { path: PathBuf, uid: u32, me: u32 },
    #[error("{} is writable by group or others (mode {mode:o}): whoever can write there could run code as the daemon", path.display())]
    Writable { path: PathBuf, mode: u32 },
}

fn joined(dirs: &[PathBuf]) -> String {
    dirs.iter()
        .map(|d| d.display().to_string())
        .collect::<Vec<_>>()
        .join(":")
}

fn io_at(path: &Path) -> impl FnOnce(std::io::Error) -> NotAllowed + '_ {
    move |error| NotAllowed::Io {
        path: path.to_path_buf(),
        error,
    }
}

/// What a file a caller names is, for the daemon's refusals.
#[derive(Clone, Copy)]
enum Named {
    Factory,
    HfConfig,
}

/// Checks the file a source names, if it names one (library models name none).
fn admit_source(source: &ModelSource, allowed: &[PathBuf]) -> Result<(), Refused> {
    let (file, named) = match source {
        ModelSource::Python { .. } => {
            let Some(file) = source.factory_file() else {
                return Err(Refused::Module(source.to_string()));
            };
            (file, Named::Factory)
        }
        ModelSource::HuggingFace {
            config_path: Some(path),
            ..
        } => (path.as_str(), Named::HfConfig),
        _ => return Ok(()),
    };
    admit_file(Path::new(file), allowed, named).map_err(|why| Refused::File {
        model: source.to_string(),
        why,
    })
}

/// A file a caller names: inside an allowed folder by its spelling alone (nothing is looked up
/// before that), then every component held to the strict rules without following links.
fn admit_file(file: &Path, allowed: &[PathBuf], named: Named) -> Result<(), NotAllowed> {
    if allowed.is_empty() {
        return Err(match named {
            Named::Factory => NotAllowed::NoFactoryDirs,
            Named::HfConfig => NotAllowed::NoConfigDirs,
        });
    }
    // Components skip a `.` inside a path: the spelling must be the one they read back.
    let plain = file.is_absolute()
        && file.components().all(is_plain)
        && file.components().collect::<PathBuf>().as_os_str() == file.as_os_str();
    let Some(dir) = allowed
        .iter()
        .find(|dir| plain && file.starts_with(dir) && file != dir.as_path())
    else {
        return Err(NotAllowed::Outside {
            file: file.to_path_buf(),
            allowed: allowed.to_vec(),
        });
    };
    strict_path(file, dir)?;
    if !std::fs::symlink_metadata(file).is_ok_and(|m| m.is_file()) {
        return Err(NotAllowed::NotAFile(file.to_path_buf()));
    }
    Ok(())
}

/// sshd's StrictModes for a folder the daemon may import code from: an absolute path in its
/// canonical form (no symbolic link, no `.` or `..`), not `/` itself, a folder, and every
/// component from `/` down owned by root or the daemon's user and not writable by group or
/// others. Unlike sshd, an ancestor above the folder may be a sticky folder such as /tmp: there
/// nobody but an entry's owner may rename or remove it, and the entry below is checked in turn.
/// The folder itself may not be: anyone could add a file to it.
pub fn strict_dir(dir: &Path) -> Result<(), NotAllowed> {
    if !dir.is_absolute() || dir.components().any(|c| !is_plain(c)) {
        return Err(NotAllowed::NotAbsolute(dir.to_path_buf()));
    }
    if dir.parent().is_none() {
        return Err(NotAllowed::Root);
    }
    let canonical = std::fs::canonicalize(dir).map_err(io_at(dir))?;
    if canonical != dir {
        return Err(NotAllowed::Linked {
            dir: dir.to_path_buf(),
            canonical,
        });
    }
    if !dir.is_dir() {
        return Err(NotAllowed::NotAFolder(dir.to_path_buf()));
    }
    strict_path(dir, dir)
}

fn is_plain(c: Component<'_>) -> bool {
    matches!(c, Component::RootDir | Component::Normal(_))
}

/// Checks each component of `path` (canonical) from `/` down, without following links: owned by
/// root or the daemon's user, and writable by nobody else, except sticky ancestors of `strict`.
fn strict_path(path: &Path, strict: &Path) -> Result<(), NotAllowed> {
    // SAFETY: geteuid(2) cannot fail and touches no memory.
    let me = unsafe { libc::geteuid() };
    let mut parts: Vec<&Path> = path.ancestors().collect();
    parts.reverse();
    for p in parts {
        let m = std::fs::symlink_metadata(p).map_err(io_at(p))?;
        let kind = m.file_type();
        if kind.is_symlink() {
            return Err(NotAllowed::Symlink(p.to_path_buf()));
        }
        if !(kind.is_dir() || kind.is_file()) {
            return Err(NotAllowed::NotFileOrFolder(p.to_path_buf()));
        }
        if m.uid() != 0 && m.uid() != me {
            return Err(NotAllowed::Owner {
                path: p.to_path_buf(),
                uid: m.uid(),
                me,
            });
        }
        let others_write = m.mode() & 0o022 != 0;
        let sticky = m.mode() & 0o1000 != 0;
        if others_write && (p.starts_with(strict) || !sticky) {
            return Err(NotAllowed::Writable {
                path: p.to_path_buf(),
                mode: m.mode() & 0o7777,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn req(models: &[&str]) -> DdpRequest {
        ddpcheck_testkit::ddp_request(models, &["base"], &[1])
    }

    fn chmod(p: &Path, mode: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn library_models_and_presets_are_always_allowed() {
        let r = req(&[
            "torchvision:resnet50",
            "timm:vit_base_patch16_224",
            "hf:llama",
            "gpt2-124m",
        ]);
        check(&r, &[]).unwrap();
    }

    #[test]
    fn factories_run_only_from_allowed_folders() {
        let allowed = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir().unwrap();
        for dir in [allowed.path(), other.path()] {
            std::fs::write(dir.join("f.py"), "def make():\n    pass\n").unwrap();
        }
        let inside = format!("py:{}/f.py:make", allowed.path().display());
        let outside = format!("py:{}/f.py:make", other.path().display());
        let dirs = vec![allowed.path().to_path_buf()];
        check(&req(&[&inside]), &dirs).unwrap();
        let e = check(&req(&[&outside]), &dirs).unwrap_err().to_string();
        assert!(e.contains("outside the daemon's factory_dirs"), "{e}");
        let e = check(&req(&[&inside]), &[]).unwrap_err().to_string();
        assert!(e.contains("factory_dirs is unset"), "{e}");
        // `..` out of the allowed folder is resolved before the check.
        let escape = format!(
            "py:{}/../{}/f.py:make",
            allowed.path().display(),
            other.path().file_name().unwrap().to_str().unwrap()
        );
        assert!(ModelSpec::External {
            source: ModelSource::parse(&escape).unwrap().unwrap()
        }
        .source()
        .is_some());
        assert!(check(&req(&[&escape]), &dirs).is_err());
    }

    #[test]
    fn module_factories_are_never_run() {
        let dir = tempfile::tempdir().unwrap();
        let e = check(&req(&["py:mypkg.models:make"]), &[dir.path().to_path_buf()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("runs no module factories"), "{e}");
    }

    #[test]
    fn a_path_with_a_link_or_dots_on_it_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let allowed = root.path().join("factories");
        std::fs::create_dir(&allowed).unwrap();
        std::fs::write(allowed.join("f.py"), "def make():\n    pass\n").unwrap();
        std::fs::create_dir(allowed.join("sub")).unwrap();
        let link = root.path().join("link");
        std::os::unix::fs::symlink(&allowed, &link).unwrap();
        std::os::unix::fs::symlink(&allowed, allowed.join("inner")).unwrap();
        let dirs = vec![allowed.clone()];
        for spelled in [
            format!("py:{}/f.py:make", link.display()),
            format!("py:{}/sub/../f.py:make", allowed.display()),
            format!("py:{}/./f.py:make", allowed.display()),
        ] {
            let e = check(&req(&[&spelled]), &dirs).unwrap_err().to_string();
            assert!(e.contains("is outside the daemon"), "{spelled}: {e}");
        }
        let through = format!("py:{}/inner/f.py:make", allowed.display());
        let e = check(&req(&[&through]), &dirs).unwrap_err().to_string();
        assert!(e.contains("inner is a symbolic link"), "{e}");
        let plain = format!("py:{}/f.py:make", allowed.display());
        check(&req(&[&plain]), &dirs).unwrap();
    }

    #[test]
    fn an_hf_config_is_read_only_from_allowed_folders() {
        let allowed = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir().unwrap();
        for dir in [allowed.path(), other.path()] {
            std::fs::write(dir.join("config.json"), "{}").unwrap();
        }
        let dirs = vec![allowed.path().to_path_buf()];
        let inside = format!("hf:{}/config.json", allowed.path().display());
        check(&req(&[&inside, "hf:llama"]), &dirs).unwrap();
        let e = check(&req(&[&inside]), &[]).unwrap_err().to_string();
        assert!(e.contains("reads no configuration files"), "{e}");
        // Outside, present or not: the same words, and nothing looked up.
        let outside = |name: &str| {
            let path = other.path().join(name);
            let e = check(&req(&[&format!("hf:{}", path.display())]), &dirs)
                .unwrap_err()
                .to_string();
            e.replace(&path.display().to_string(), "PATH")
        };
        assert_eq!(outside("config.json"), outside("missing/config.json"));
        assert!(outside("config.json").contains("is outside the daemon"));
        let e = check(&req(&["hf:cfg/config.json"]), &dirs)
            .unwrap_err()
            .to_string();
        assert!(e.contains("is outside the daemon"), "{e}");
        std::fs::create_dir(allowed.path().join("d.json")).unwrap();
        let folder = format!("hf:{}/d.json", allowed.path().display());
        let e = check(&req(&[&folder]), &dirs).unwrap_err().to_string();
        assert!(e.contains("is not a file"), "{e}");
    }

    #[test]
    fn the_allowed_folder_itself_is_held_to_the_strict_rules() {
        let root = tempfile::tempdir().unwrap();
        let allowed = root.path().join("factories");
        std::fs::create_dir(&allowed).unwrap();
        let file = allowed.join("f.py");
        std::fs::write(&file, "def make():\n    pass\n").unwrap();
        // A sticky folder anyone may add to is no factory folder.
        chmod(&allowed, 0o1777);
        let r = req(&[&format!("py:{}:make", file.display())]);
        let e = check(&r, std::slice::from_ref(&allowed))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!("{} is writable", allowed.display())),
            "{e}"
        );
    }

    #[test]
    fn a_factory_file_that_is_a_link_is_refused() {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("real.py"), "def make():\n    pass\n").unwrap();
        let link = root.path().join("f.py");
        std::os::unix::fs::symlink(root.path().join("real.py"), &link).unwrap();
        let r = req(&[&format!("py:{}:make", link.display())]);
        let e = check(&r, &[root.path().to_path_buf()])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!("{} is a symbolic link", link.display())),
            "{e}"
        );
    }

    #[test]
    fn a_factory_anyone_could_have_changed_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let sub = root.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        let file = sub.join("f.py");
        std::fs::write(&file, "def make():\n    pass\n").unwrap();
        let r = req(&[&format!("py:{}:make", file.display())]);
        let dirs = vec![root.path().to_path_buf()];
        check(&r, &dirs).unwrap();
        chmod(&file, 0o666);
        let e = check(&r, &dirs).unwrap_err().to_string();
        assert!(e.contains("writable by group or others"), "{e}");
        chmod(&file, 0o644);
        // A sticky folder below the allowed one is no excuse: anyone could add a module there.
        chmod(&sub, 0o1777);
        let e = check(&r, &dirs).unwrap_err().to_string();
        assert!(e.contains(&format!("{} is writable", sub.display())), "{e}");
    }

    #[test]
    fn factory_dirs_are_held_to_strict_modes() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("factories");
        std::fs::create_dir(&dir).unwrap();
        chmod(&dir, 0o755);
        strict_dir(&dir).unwrap();
        for (bad, why) in [
            (PathBuf::from("/"), "whole file system"),
            (PathBuf::from("relative/dir"), "not an absolute path"),
            (dir.join("..").join("factories"), "without . or .."),
            (PathBuf::from("/tmp"), "writable by group or others"),
        ] {
            let e = strict_dir(&bad).unwrap_err().to_string();
            assert!(e.contains(why), "{}: {e}", bad.display());
        }
        let link = root.path().join("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        let e = strict_dir(&link).unwrap_err().to_string();
        assert!(e.contains("goes through a symbolic link"), "{e}");
        for mode in [0o775, 0o757, 0o1777] {
            chmod(&dir, mode);
            let e = strict_dir(&dir).unwrap_err().to_string();
            assert!(e.contains("writable by group or others"), "{mode:o}: {e}");
        }
        chmod(&dir, 0o755);
        // An ancestor anyone may write to, without the sticky bit, could swap the folder.
        chmod(root.path(), 0o777);
        let e = strict_dir(&dir).unwrap_err().to_string();
        assert!(
            e.contains(&format!("{} is writable", root.path().display())),
            "{e}"
        );
        // With the sticky bit (as /tmp) only the owner may rename or remove what it holds.
        chmod(root.path(), 0o1777);
        strict_dir(&dir).unwrap();
        chmod(root.path(), 0o700);
    }

    #[test]
    fn factory_dirs_owned_by_another_user_are_refused() {
        // SAFETY: geteuid(2) cannot fail and touches no memory.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: only root can give a folder to another user");
            return;
        }
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("factories");
        std::fs::create_dir(&dir).unwrap();
        std::os::unix::fs::chown(&dir, Some(65534), None).unwrap();
        let e = strict_dir(&dir).unwrap_err().to_string();
        assert!(e.contains("owned by uid 65534"), "{e}");
    }
}
