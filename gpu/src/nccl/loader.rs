//! Where libnccl and libcuda are found at run time, in a fixed, reported search order.
//!
//! NCCL: `RealConfig::nccl_lib` / `DDPCHECK_NCCL_LIB`; then `libnccl.so.2` on the loader path;
//! then system folders; then the pip package `nvidia/nccl/lib/libnccl.so.2` in Python
//! site-packages (the only NCCL on our H200 machines). An explicit path that fails is an error,
//! never silently replaced by another library.

use std::ffi::c_void;
use std::path::{Path, PathBuf};

use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};

pub const NCCL_SONAME: &str = "libnccl.so.2";
pub const CUDA_SONAME: &str = "libcuda.so.1";
pub const NCCL_ENV: &str = "DDPCHECK_NCCL_LIB";
pub const CUDA_ENV: &str = "DDPCHECK_CUDA_LIB";
/// Where the pip wheel (nvidia-nccl-cu12/cu13) puts the library, under site-packages.
pub const NCCL_PIP_REL: &str = "nvidia/nccl/lib/libnccl.so.2";

/// Why a library or one of its symbols could not be used. One line each.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    #[error("{lib} not found; searched: {searched}")]
    NotFound { lib: String, searched: String },
    #[error("{path} ({how}) could not be loaded: {detail}")]
    Open {
        path: String,
        how: String,
        detail: String,
    },
    #[error("{path} has no symbol {symbol} ({detail}); is it a different library or too old?")]
    Symbol {
        path: String,
        symbol: String,
        detail: String,
    },
}

/// A loaded library and how it was found.
pub struct Found {
    pub lib: Library,
    /// The file actually loaded (resolved through the loader for a plain soname).
    pub path: PathBuf,
    pub found_by: String,
}

/// Where to look; [`SearchPlan::nccl`] and [`SearchPlan::cuda`] build the real ones, tests build
/// their own over a temporary tree.
#[derive(Clone, Debug, Default)]
pub struct SearchPlan {
    pub lib: String,
    /// Explicit path and the name of the setting it came from.
    pub explicit: Option<(PathBuf, String)>,
    /// Try the plain soname through the dynamic loader (LD_LIBRARY_PATH, ld.so.cache).
    pub loader_name: Option<String>,
    /// Folders to look in for `lib`.
    pub dirs: Vec<PathBuf>,
    /// Site-packages patterns (`*` matches within one path segment) and the relative path
    /// inside each.
    pub site_globs: Vec<String>,
    pub site_rel: String,
}

fn system_dirs() -> Vec<PathBuf> {
    let mut v = vec![
        PathBuf::from("/usr/lib/x86_64-linux-gnu"),
        PathBuf::from("/usr/lib/aarch64-linux-gnu"),
        PathBuf::from("/usr/local/cuda/lib64"),
        PathBuf::from("/usr/lib64"),
        PathBuf::from("/usr/local/lib"),
    ];
    // Keep only the current architecture's multiarch folder.
    if cfg!(target_arch = "x86_64") {
        v.retain(|p| !p.ends_with("aarch64-linux-gnu"));
    } else if cfg!(target_arch = "aarch64") {
        v.retain(|p| !p.ends_with("x86_64-linux-gnu"));
    }
    v
}

fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

impl SearchPlan {
    /// The NCCL search of this process: `explicit` (from RealConfig) wins over the variable.
    pub fn nccl(explicit: Option<&Path>) -> SearchPlan {
        let explicit = explicit
            .map(|p| (p.to_path_buf(), "nccl_lib setting".to_string()))
            .or_else(|| env_path(NCCL_ENV).map(|p| (p, NCCL_ENV.to_string())));
        let mut globs = Vec::new();
        for var in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
            if let Some(p) = env_path(var) {
                globs.push(format!("{}/lib/python3*/site-packages", p.display()));
            }
        }
        globs.extend(
            [
                "/opt/*/.venv/lib/python3*/site-packages",
                "/opt/*/lib/python3*/site-packages",
                "/usr/local/lib/python3*/dist-packages",
                "/usr/local/lib/python3*/site-packages",
                "/usr/lib/python3*/dist-packages",
                "/usr/lib/python3*/site-packages",
            ]
            .map(String::from),
        );
        if let Some(h) = env_path("HOME") {
            globs.push(format!("{}/.local/lib/python3*/site-packages", h.display()));
        }
        SearchPlan {
            lib: NCCL_SONAME.into(),
            explicit,
            loader_name: Some(NCCL_SONAME.into()),
            dirs: system_dirs(),
            site_globs: globs,
            site_rel: NCCL_PIP_REL.into(),
        }
    }

    /// The CUDA driver library: it comes with the driver, on the loader path.
    pub fn cuda(explicit: Option<&Path>) -> SearchPlan {
        let explicit = explicit
            .map(|p| (p.to_path_buf(), "explicit path".to_string()))
            .or_else(|| env_path(CUDA_ENV).map(|p| (p, CUDA_ENV.to_string())));
        let mut dirs = system_dirs();
        dirs.push(PathBuf::from("/usr/lib/wsl/lib"));
        SearchPlan {
            lib: CUDA_SONAME.into(),
            explicit,
            loader_name: Some(CUDA_SONAME.into()),
            dirs,
            site_globs: Vec::new(),
            site_rel: String::new(),
        }
    }

    /// Files to try after the explicit path and the loader: existing files only, in order.
    pub fn candidate_files(&self) -> Vec<(PathBuf, String)> {
        let mut out: Vec<(PathBuf, String)> = Vec::new();
        for d in &self.dirs {
            let p = d.join(&self.lib);
            if p.is_file() {
                out.push((p, format!("system folder {}", d.display())));
            }
        }
        for g in &self.site_globs {
            for site in expand_glob(g) {
                let p = site.join(&self.site_rel);
                if p.is_file() {
                    out.push((p, format!("Python package in {}", site.display())));
                }
            }
        }
        // The same file can match twice (symlinked folders): keep the first.
        let mut seen = std::collections::HashSet::new();
        out.retain(|(p, _)| seen.insert(p.canonicalize().unwrap_or_else(|_| p.clone())));
        out
    }

    /// What the search covers, for the error message.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some((p, how)) = &self.explicit {
            parts.push(format!("{how}={}", p.display()));
        }
        if let Some(n) = &self.loader_name {
            parts.push(format!("loader path ({n})"));
        }
        if !self.dirs.is_empty() {
            let d: Vec<String> = self.dirs.iter().map(|d| d.display().to_string()).collect();
            parts.push(d.join(", "));
        }
        if !self.site_globs.is_empty() {
            parts.push(format!(
                "Python site-packages/{} under {}",
                self.site_rel,
                self.site_globs.join(", ")
            ));
        }
        parts.join("; ")
    }

    /// Opens the first library the plan finds.
    pub fn open(&self, probe_symbol: &str) -> Result<Found, LoadError> {
        if let Some((p, how)) = &self.explicit {
            // An explicit choice is honoured or reported, never replaced.
            let lib = dlopen(p).map_err(|e| LoadError::Open {
                path: p.display().to_string(),
                how: how.clone(),
                detail: e.to_string(),
            })?;
            return Ok(Found {
                lib,
                path: p.clone(),
                found_by: how.clone(),
            });
        }
        let mut failures = Vec::new();
        if let Some(name) = &self.loader_name {
            match dlopen(Path::new(name)) {
                Ok(lib) => {
                    let path =
                        resolved_path(&lib, probe_symbol).unwrap_or_else(|| PathBuf::from(name));
                    return Ok(Found {
                        lib,
                        path,
                        found_by: "dynamic loader path".into(),
                    });
                }
                // "cannot open shared object file" is the expected miss; keep other reasons.
                Err(e) if !e.is_missing() => failures.push(format!("{name}: {e}")),
                Err(_) => {}
            }
        }
        for (p, how) in self.candidate_files() {
            match dlopen(&p) {
                Ok(lib) => {
                    return Ok(Found {
                        lib,
                        path: p,
                        found_by: how,
                    })
                }
                Err(e) => failures.push(format!("{} failed to load: {e}", p.display())),
            }
        }
        let mut searched = self.describe();
        if !failures.is_empty() {
            searched.push_str(&format!(" (found but unusable: {})", failures.join("; ")));
        }
        Err(LoadError::NotFound {
            lib: self.lib.clone(),
            searched,
        })
    }
}

/// Opens NCCL in the documented order.
pub fn open_nccl(explicit: Option<&Path>) -> Result<Found, LoadError> {
    SearchPlan::nccl(explicit).open("ncclGetVersion")
}

/// Opens the CUDA driver library; returns the library and the file it came from.
pub fn open_cuda(explicit: Option<&Path>) -> Result<(Library, PathBuf), LoadError> {
    let f = SearchPlan::cuda(explicit).open("cuInit")?;
    Ok((f.lib, f.path))
}

/// The loader's refusal to open a library: the first line of its message.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct DlopenError(String);

impl DlopenError {
    /// "cannot open shared object file": no such file, the expected miss of a search.
    fn is_missing(&self) -> bool {
        self.0.contains("No such file") || self.0.contains("cannot open shared")
    }
}

fn dlopen(p: &Path) -> Result<Library, DlopenError> {
    // RTLD_NOW: a missing dependency fails here, with a message, not later with a crash.
    // SAFETY: loading a shared library runs its initialisers; these are the vendor's GPU
    // libraries, loaded once per worker process.
    unsafe { Library::open(Some(p), RTLD_NOW | RTLD_LOCAL) }.map_err(|e| {
        let s = e.to_string();
        DlopenError(s.lines().next().unwrap_or("").to_string())
    })
}

/// The file the loader picked for a plain soname, through `dladdr` on one of its symbols.
fn resolved_path(lib: &Library, symbol: &str) -> Option<PathBuf> {
    let mut cname = symbol.as_bytes().to_vec();
    cname.push(0);
    // SAFETY: only the symbol's address is used, never called.
    let addr: *mut c_void = unsafe { lib.get::<*mut c_void>(&cname) }.ok().map(|s| *s)?;
    let mut info: libc::Dl_info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    // SAFETY: addr is inside a loaded object; info is a valid out-struct.
    let ok = unsafe { libc::dladdr(addr as *const c_void, &mut info) };
    if ok == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr returns a NUL-terminated path owned by the loader.
    let s = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
    let p = PathBuf::from(s.to_string_lossy().into_owned());
    Some(p.canonicalize().unwrap_or(p))
}

/// Expands `*` inside path segments (`/opt/*/.venv/lib/python3*/site-packages`), sorted.
pub fn expand_glob(pattern: &str) -> Vec<PathBuf> {
    let mut acc = vec![PathBuf::from(if pattern.starts_with('/') {
        "/"
    } else {
        "."
    })];
    for seg in pattern.split('/').filter(|s| !s.is_empty()) {
        let mut next = Vec::new();
        for base in &acc {
            if let Some((pre, post)) = seg.split_once('*') {
                let Ok(rd) = std::fs::read_dir(base) else {
                    continue;
                };
                let mut names: Vec<String> = rd
                    .filter_map(|e| e.ok())
                    .filter_map(|e| e.file_name().into_string().ok())
                    .filter(|n| {
                        n.len() >= pre.len() + post.len() && n.starts_with(pre) && n.ends_with(post)
                    })
                    .collect();
                names.sort();
                next.extend(names.into_iter().map(|n| base.join(n)));
            } else {
                let p = base.join(seg);
                if p.exists() {
                    next.push(p);
                }
            }
        }
        acc = next;
        if acc.is_empty() {
            break;
        }
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::*;

    fn empty_plan(root: &Path) -> SearchPlan {
        SearchPlan {
            lib: NCCL_SONAME.into(),
            explicit: None,
            loader_name: Some("libddpcheck-no-such-library.so.2".into()),
            dirs: vec![root.join("usr/lib64")],
            site_globs: vec![format!(
                "{}/opt/*/.venv/lib/python3*/site-packages",
                root.display()
            )],
            site_rel: NCCL_PIP_REL.into(),
        }
    }

    #[test]
    fn missing_library_is_a_clean_error_naming_the_search() {
        let tmp = tempfile::tempdir().unwrap();
        let err = empty_plan(tmp.path()).open("ncclGetVersion").err().unwrap();
        let msg = err.to_string();
        assert!(matches!(err, LoadError::NotFound { .. }), "{msg}");
        assert!(
            msg.starts_with("libnccl.so.2 not found; searched:"),
            "{msg}"
        );
        assert!(msg.contains("loader path"), "{msg}");
        assert!(msg.contains("usr/lib64"), "{msg}");
        assert!(
            msg.contains("site-packages/nvidia/nccl/lib/libnccl.so.2"),
            "{msg}"
        );
        assert!(!msg.contains('\n'), "one line: {msg}");
    }

    #[test]
    fn pip_layout_is_found_and_a_broken_file_is_reported() {
        let tmp = tempfile::tempdir().unwrap();
        let site = tmp
            .path()
            .join("opt/torch/.venv/lib/python3.12/site-packages");
        let lib = site.join(NCCL_PIP_REL);
        std::fs::create_dir_all(lib.parent().unwrap()).unwrap();
        std::fs::write(&lib, b"not an ELF file").unwrap();
        let plan = empty_plan(tmp.path());
        let c = plan.candidate_files();
        assert_eq!(c.len(), 1, "{c:?}");
        assert_eq!(c[0].0, lib);
        assert!(c[0].1.contains("python3.12/site-packages"), "{}", c[0].1);
        let msg = plan.open("ncclGetVersion").err().unwrap().to_string();
        assert!(msg.contains("found but unusable"), "{msg}");
        assert!(msg.contains(&lib.display().to_string()), "{msg}");
    }

    #[test]
    fn explicit_path_is_honoured_not_replaced() {
        let tmp = tempfile::tempdir().unwrap();
        let mut plan = empty_plan(tmp.path());
        let p = tmp.path().join("libnccl.so.2");
        plan.explicit = Some((p.clone(), NCCL_ENV.into()));
        let err = plan.open("ncclGetVersion").err().unwrap();
        assert!(matches!(err, LoadError::Open { .. }), "{err}");
        let msg = err.to_string();
        assert!(
            msg.contains(&p.display().to_string()) && msg.contains(NCCL_ENV),
            "{msg}"
        );
    }

    #[test]
    fn real_search_never_panics() {
        // On a machine without NCCL this is the Unavailable path; with NCCL it loads. Either
        // way it must return, and an error must be one line naming the library.
        match open_nccl(None) {
            Ok(f) => assert!(f.path.to_string_lossy().contains("nccl")),
            Err(e) => {
                let m = e.to_string();
                assert!(m.contains("libnccl.so.2") && !m.contains('\n'), "{m}");
            }
        }
        if let Err(e) = open_cuda(None) {
            assert!(e.to_string().contains("libcuda.so.1"), "{e}");
        }
    }

    #[test]
    fn glob_matches_within_segments() {
        let tmp = tempfile::tempdir().unwrap();
        for d in [
            "a/python3.10/x",
            "a/python3.12/x",
            "a/python2.7/x",
            "b/python3.11/y",
        ] {
            std::fs::create_dir_all(tmp.path().join(d)).unwrap();
        }
        let got = expand_glob(&format!("{}/*/python3*/x", tmp.path().display()));
        let want: Vec<PathBuf> = ["a/python3.10/x", "a/python3.12/x"]
            .iter()
            .map(|d| tmp.path().join(d))
            .collect();
        assert_eq!(got, want);
    }
}
