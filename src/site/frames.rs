//! The two C helpers of the shim that read the process's own code: which object an address
//! belongs to (by the loaded objects' program headers) and the calling thread's return addresses (glibc's backtrace).

use std::ffi::{CStr, c_char, c_int, c_void};

unsafe extern "C" {
    fn commtune_locate(addr: *const c_void, object: *mut *const c_char, link: *mut usize) -> c_int;
    fn commtune_backtrace(frames: *mut *mut c_void, max: c_int) -> c_int;
}

/// The object containing `addr` and the address it has in that object's own address space.
pub fn locate(addr: usize) -> Option<(String, u64)> {
    let mut object: *const c_char = std::ptr::null();
    let mut link = 0usize;
    // SAFETY: any address may be looked up; the two out-parameters are written on success.
    let found = unsafe { commtune_locate(addr as *const c_void, &mut object, &mut link) };
    if found == 0 || object.is_null() {
        return None;
    }
    // SAFETY: a NUL-terminated path owned by the dynamic linker (or argv[0]).
    let path = unsafe { CStr::from_ptr(object) }
        .to_string_lossy()
        .into_owned();
    Some((path, link as u64))
}

/// Return addresses of the calling thread's stack, innermost first.
pub fn backtrace(frames: &mut [usize]) -> &[usize] {
    let max = c_int::try_from(frames.len()).unwrap_or(c_int::MAX);
    // SAFETY: glibc writes at most `max` pointers into the slice.
    let n = unsafe { commtune_backtrace(frames.as_mut_ptr().cast(), max) };
    &frames[..n.max(0) as usize]
}
