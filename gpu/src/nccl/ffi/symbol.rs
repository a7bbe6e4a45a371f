//! Symbol lookup in an opened library, and C strings read back.

use std::ffi::{c_char, CStr};
use std::path::Path;

use libloading::os::unix::Library;

use crate::nccl::loader::LoadError;

pub(super) fn sym<T: Copy>(lib: &Library, path: &Path, name: &str) -> Result<T, LoadError> {
    let mut cname = name.as_bytes().to_vec();
    cname.push(0);
    // SAFETY: T is the C signature of `name` as declared in cuda.h / nccl.h; the pointer is
    // only used while `lib` (kept in the same table) is loaded.
    unsafe { lib.get::<T>(&cname) }
        .map(|s| *s)
        .map_err(|e| LoadError::Symbol {
            path: path.display().to_string(),
            symbol: name.to_string(),
            detail: e.to_string(),
        })
}

pub(super) fn opt_sym<T: Copy>(lib: &Library, path: &Path, name: &str) -> Option<T> {
    sym(lib, path, name).ok()
}

pub(super) fn cstr(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: the libraries return NUL-terminated static strings.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}
