//! Call sites of mpi4py programs: the Python file and line that called the mpi4py method.
//!
//! mpi4py calls MPI with the GIL released, so the interpreter's frame is read under
//! PyGILState_Ensure. The CPython API is looked up at run time: the library must not depend on
//! Python, and only processes that loaded mpi4py ever get here.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::{LazyLock, Mutex, OnceLock};

use commtune_report::{PythonFrame, SiteData};
use dashmap::DashMap;
use rustc_hash::FxBuildHasher;

use super::{SiteRef, file_name, site_id};

const PYTHON_TAG: SiteRef = 1 << (usize::BITS - 1);

type PyObject = c_void;

/// The CPython functions used, resolved in the running interpreter.
struct CPython {
    gil_ensure: unsafe extern "C" fn() -> c_int,
    gil_release: unsafe extern "C" fn(c_int),
    current_frame: unsafe extern "C" fn() -> *mut PyObject,
    frame_line: unsafe extern "C" fn(*mut PyObject) -> c_int,
    frame_code: unsafe extern "C" fn(*mut PyObject) -> *mut PyObject,
    get_attr: unsafe extern "C" fn(*mut PyObject, *const c_char) -> *mut PyObject,
    as_utf8: unsafe extern "C" fn(*mut PyObject) -> *const c_char,
    dec_ref: unsafe extern "C" fn(*mut PyObject),
}

/// The function `name` of the running process, as a pointer of type `F`.
///
/// # Safety
/// `F` is the function pointer type matching the symbol's C signature.
unsafe fn function<F: Copy>(name: &CStr) -> Option<F> {
    const { assert!(size_of::<F>() == size_of::<*mut c_void>()) };
    // SAFETY: dlsym with a NUL-terminated name; a null result is handled.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    // SAFETY: the caller guarantees that F is the symbol's function pointer type.
    (!p.is_null()).then(|| unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
}

fn cpython() -> Option<&'static CPython> {
    static API: OnceLock<Option<CPython>> = OnceLock::new();
    API.get_or_init(|| {
        // SAFETY: each field's type is the signature of the CPython function of that name
        // (stable C API since Python 3.9).
        unsafe {
            Some(CPython {
                gil_ensure: function(c"PyGILState_Ensure")?,
                gil_release: function(c"PyGILState_Release")?,
                current_frame: function(c"PyEval_GetFrame")?,
                frame_line: function(c"PyFrame_GetLineNumber")?,
                frame_code: function(c"PyFrame_GetCode")?,
                get_attr: function(c"PyObject_GetAttrString")?,
                as_utf8: function(c"PyUnicode_AsUTF8")?,
                dec_ref: function(c"Py_DecRef")?,
            })
        }
    })
    .as_ref()
}

/// Interned Python sites: index = SiteRef without the tag.
static SITES: Mutex<Vec<PythonFrame>> = Mutex::new(Vec::new());
static BY_LOCATION: LazyLock<DashMap<(String, u32), SiteRef, FxBuildHasher>> =
    LazyLock::new(DashMap::default);
/// (code object address, line) to site: after the first call from a line no string is read or
/// allocated (each code object in this map is kept alive).
static BY_CODE: LazyLock<DashMap<(usize, u32), SiteRef, FxBuildHasher>> =
    LazyLock::new(DashMap::default);

/// The Python frame calling MPI on this thread; None without a Python interpreter.
pub fn current_site() -> Option<SiteRef> {
    let api = cpython()?;
    // SAFETY: the GIL is held for the whole inspection.
    unsafe {
        let gil = (api.gil_ensure)();
        let site = frame_site(api);
        (api.gil_release)(gil);
        site
    }
}

/// The site of the innermost Python frame.
///
/// # Safety
/// The caller holds the GIL.
unsafe fn frame_site(api: &CPython) -> Option<SiteRef> {
    // SAFETY: (for the block) the GIL is held; the borrowed frame and the code object reference
    // are used only while they live, and the reference is released.
    unsafe {
        let frame = (api.current_frame)();
        if frame.is_null() {
            return None;
        }
        let line = u32::try_from((api.frame_line)(frame)).unwrap_or(0);
        let code = (api.frame_code)(frame);
        if code.is_null() {
            return None;
        }
        let key = (code as usize, line);
        let site = match BY_CODE.get(&key) {
            Some(site) => {
                (api.dec_ref)(code);
                *site
            }
            None => {
                let site = intern(PythonFrame {
                    file: text(api, code, c"co_filename"),
                    line,
                    function: text(api, code, c"co_name"),
                });
                BY_CODE.insert(key, site);
                // The reference is kept: the code object can never be freed and its address
                // reused by another one, which would name another site on this rank only.
                site
            }
        };
        Some(site)
    }
}

/// A string attribute of a code object.
///
/// # Safety
/// The caller holds the GIL and a reference to `code`.
unsafe fn text(api: &CPython, code: *mut PyObject, attr: &CStr) -> String {
    // SAFETY: (for the block) GIL held; the attribute's reference is released after copying.
    unsafe {
        let obj = (api.get_attr)(code, attr.as_ptr());
        if obj.is_null() {
            return String::from("?");
        }
        let utf8 = (api.as_utf8)(obj);
        let s = if utf8.is_null() {
            String::from("?")
        } else {
            CStr::from_ptr(utf8).to_string_lossy().into_owned()
        };
        (api.dec_ref)(obj);
        s
    }
}

fn intern(frame: PythonFrame) -> SiteRef {
    *BY_LOCATION
        .entry((frame.file.clone(), frame.line))
        .or_insert_with(|| {
            let mut sites = SITES.lock().unwrap_or_else(|p| p.into_inner());
            sites.push(frame);
            (sites.len() - 1) | PYTHON_TAG
        })
}

/// The report description of a Python site; None for native sites.
pub fn describe(site: SiteRef) -> Option<SiteData> {
    if site & PYTHON_TAG == 0 {
        return None;
    }
    let frame = SITES.lock().ok()?.get(site & !PYTHON_TAG)?.clone();
    Some(SiteData {
        id: site_id(file_name(&frame.file), u64::from(frame.line)),
        object: frame.file.clone(),
        address: u64::from(frame.line),
        python: Some(frame),
    })
}
