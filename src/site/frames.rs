//! Reading the process's own code: which object an address belongs to (from the loaded objects'
//! program headers) and the calling thread's return addresses (glibc's backtrace, through the
//! shim).

use std::ffi::{CStr, c_int, c_void};

unsafe extern "C" {
    fn commtune_backtrace(frames: *mut *mut c_void, max: c_int) -> c_int;
}

/// What `locate` looks for, and what it found: the object's name (None: the main program) and
/// the address in that object's own address space.
struct Lookup {
    addr: usize,
    found: Option<(Option<String>, u64)>,
}

/// dl_iterate_phdr's callback: stops at the object one of whose loaded segments holds the address.
extern "C" fn find_segment(
    info: *mut libc::dl_phdr_info,
    _size: usize,
    data: *mut c_void,
) -> c_int {
    // SAFETY: dl_iterate_phdr passes a valid description of one object for the duration of the
    // call, and `data` is the `Lookup` that `locate` gave it.
    let (info, lookup) = unsafe { (&*info, &mut *data.cast::<Lookup>()) };
    let base = info.dlpi_addr as usize;
    let headers = match usize::from(info.dlpi_phnum) {
        0 => &[][..],
        // SAFETY: dlpi_phdr points to the object's dlpi_phnum program headers.
        n => unsafe { std::slice::from_raw_parts(info.dlpi_phdr, n) },
    };
    let inside = headers.iter().any(|h| {
        h.p_type == libc::PT_LOAD
            && lookup
                .addr
                .wrapping_sub(base.wrapping_add(h.p_vaddr as usize))
                < h.p_memsz as usize
    });
    if !inside {
        return 0;
    }
    let name = if info.dlpi_name.is_null() {
        None
    } else {
        // SAFETY: a NUL-terminated name owned by the dynamic loader.
        let name = unsafe { CStr::from_ptr(info.dlpi_name) };
        (!name.is_empty()).then(|| name.to_string_lossy().into_owned())
    };
    lookup.found = Some((name, lookup.addr.wrapping_sub(base) as u64));
    1
}

/// The object containing `addr` and the address it has in that object's own address space.
/// dladdr would tell the same, but it also searches the object's whole symbol table for the
/// nearest symbol, which we never use: about 450 000 instructions in LAMMPS's library (16 000
/// symbols), 100 µs or more once the application's work has evicted the table from the cache.
pub fn locate(addr: usize) -> Option<(String, u64)> {
    let mut lookup = Lookup { addr, found: None };
    // SAFETY: the callback only reads what the loader passes it and writes `lookup`, which
    // outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(find_segment), (&raw mut lookup).cast()) };
    let (name, link) = lookup.found?;
    // The loader names the main program "": dladdr calls it by its argv[0], and so do we.
    let path = match name {
        Some(name) => name,
        None => std::env::args_os().next()?.to_string_lossy().into_owned(),
    };
    Some((path, link))
}

/// Return addresses of the calling thread's stack, innermost first.
pub fn backtrace(frames: &mut [usize]) -> &[usize] {
    let max = c_int::try_from(frames.len()).unwrap_or(c_int::MAX);
    // SAFETY: glibc writes at most `max` pointers into the slice.
    let n = unsafe { commtune_backtrace(frames.as_mut_ptr().cast(), max) };
    &frames[..n.max(0) as usize]
}

#[cfg(test)]
mod tests {
    use std::ffi::{CStr, c_void};

    use super::locate;

    /// What dladdr says of `addr`: the object's name and the address relative to where the object
    /// is mapped (its link-time address for objects linked at 0: shared libraries and PIE
    /// programs, such as this test).
    fn dladdr(addr: usize) -> Option<(String, u64)> {
        // SAFETY: Dl_info is plain data (pointers and integers): all zeros is a valid value.
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        // SAFETY: dladdr accepts any address and fills `info` on success, or returns 0.
        if unsafe { libc::dladdr(addr as *const c_void, &mut info) } == 0 {
            return None;
        }
        // SAFETY: on success dli_fname is a NUL-terminated path owned by the dynamic linker.
        let name = unsafe { CStr::from_ptr(info.dli_fname) };
        let base = info.dli_fbase as usize;
        Some((name.to_string_lossy().into_owned(), (addr - base) as u64))
    }

    #[test]
    fn locate_finds_what_dladdr_finds() {
        let in_program = locate_finds_what_dladdr_finds as fn() as usize;
        let in_libc = libc::getpid as unsafe extern "C" fn() -> libc::pid_t as usize;
        let in_mpi = mpi_sys::PMPI_Initialized as unsafe extern "C" fn(*mut i32) -> i32 as usize;
        for addr in [in_program, in_libc, in_mpi] {
            let found = locate(addr);
            assert!(found.is_some(), "{addr:#x} is in no object");
            assert_eq!(found, dladdr(addr), "{addr:#x}");
        }
        assert_eq!(locate(16), None, "the first page is mapped by no object");
    }
}
