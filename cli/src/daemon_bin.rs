//! Finding the `ddpcheckd` binary: beside this `ddpcheck` executable (an install or a cargo
//! build puts both in one folder), else on PATH. `config check` and `demo` run it; the CLI does
//! not link the server.

use std::path::{Path, PathBuf};

const NAME: &str = "ddpcheckd";

/// The `ddpcheckd` to run, if there is one.
pub fn find() -> Option<PathBuf> {
    let beside = std::env::current_exe()
        .ok()
        .and_then(|me| me.parent().map(|dir| dir.join(NAME)));
    let on_path: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .map(|dir| dir.join(NAME))
                .collect()
        })
        .unwrap_or_default();
    beside.into_iter().chain(on_path).find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// What to say when it is missing: where it was looked for and how to get it.
pub fn missing(what: &str) -> String {
    format!(
        "{what} needs the {NAME} binary, found neither beside this ddpcheck nor on PATH \
         (`cargo build --release` builds both into target/release)"
    )
}
