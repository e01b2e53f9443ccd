//! The symbols the C side calls besides the MPI entry points: the shim's generated wrappers
//! (`commtune_post_deferred`) and the CLI's `catalogue` command (`commtune_catalogue`).

use std::ffi::c_char;

use crate::{codelets, halo};

/// Posts the operations halo episodes hold, before another MPI call can block (shim/commtune.h).
#[unsafe(no_mangle)]
pub extern "C" fn commtune_post_deferred() {
    halo::post_deferred_now();
}

/// The catalogue as a NUL-terminated JSON string owned by the library.
#[unsafe(no_mangle)]
pub extern "C" fn commtune_catalogue() -> *const c_char {
    codelets::catalogue::json().as_ptr()
}
