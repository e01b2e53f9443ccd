//! `commtune codelets`: the codelet catalogue, read from a library build (the registries live in
//! the library; this executable links no MPI, so it loads the library to ask).

use std::ffi::{CStr, CString, c_char};
use std::fmt::Write;
use std::path::Path;

use serde_json::Value;

/// The catalogue JSON of the library at `path`.
pub fn load(path: &Path) -> Result<Value, String> {
    let name = CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| format!("{}: path contains a NUL byte", path.display()))?;
    // SAFETY: dlopen with a NUL-terminated path; the library's constructor only reads the
    // environment. The handle is never closed: the returned string lives in the library.
    let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        return Err(format!("cannot load {}", path.display()));
    }
    // SAFETY: dlsym with a NUL-terminated name on a valid handle.
    let symbol = unsafe { libc::dlsym(handle, c"commtune_catalogue".as_ptr()) };
    if symbol.is_null() {
        return Err(format!("{} has no codelet catalogue", path.display()));
    }
    // SAFETY: the symbol is `extern "C" fn() -> *const c_char` returning a static C string.
    let text = unsafe {
        let catalogue: extern "C" fn() -> *const c_char = std::mem::transmute(symbol);
        CStr::from_ptr(catalogue()).to_string_lossy().into_owned()
    };
    serde_json::from_str(&text).map_err(|e| format!("bad catalogue in {}: {e}", path.display()))
}

/// The catalogue as a table per operation.
pub fn table(catalogue: &Value) -> String {
    let mut out = String::new();
    let empty = Vec::new();
    for op in catalogue["operations"].as_array().unwrap_or(&empty) {
        let _ = writeln!(out, "{}", op["op"].as_str().unwrap_or("?"));
        let _ = writeln!(
            out,
            "  {:<20} {:<9} {:<12} requires",
            "codelet", "partners", "collectives"
        );
        for c in op["codelets"].as_array().unwrap_or(&empty) {
            let requires: Vec<&str> = c["requires"]
                .as_array()
                .unwrap_or(&empty)
                .iter()
                .filter_map(Value::as_str)
                .collect();
            let _ = writeln!(
                out,
                "  {:<20} {:<9} {:<12} {}",
                c["name"].as_str().unwrap_or("?"),
                c["partners"].as_str().unwrap_or("?"),
                if c["uses_collectives"].as_bool() == Some(true) {
                    "yes"
                } else {
                    "no"
                },
                if requires.is_empty() {
                    "-".to_string()
                } else {
                    requires.join(", ")
                }
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_lists_codelets_with_attributes_and_requirements() {
        let catalogue = serde_json::json!({"operations": [{"op": "allreduce", "codelets": [
            {"name": "native", "partners": "tree", "uses_collectives": true, "requires": []},
            {"name": "ring", "partners": "pair", "uses_collectives": false,
             "requires": ["an intra-communicator", "a commutative operation"]},
        ]}]});
        let text = table(&catalogue);
        assert!(text.starts_with("allreduce\n"));
        assert!(text.contains("native               tree      yes          -"));
        assert!(text.contains(
            "ring                 pair      no           an intra-communicator, a commutative operation"
        ));
    }
}
