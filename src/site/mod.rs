//! Call sites: where the application called MPI, identified identically on every rank.
//!
//! A native site is (object file, link-time address of the return address): the same on every
//! rank whatever ASLR did. When the immediate caller is an MPI binding library (Fortran bindings,
//! the C++ bindings, mpi4py) every call would look like one site, so the stack is walked to the
//! first frame outside such libraries; for mpi4py the Python frame gives file and line.
//! Symbolization to `file:line (function)` happens once, at report time (see `symbolize`).

mod frames;
mod python;
mod symbolize;

use std::path::Path;
use std::sync::LazyLock;

use commtune_report::SiteData;
use dashmap::DashMap;
use rustc_hash::FxBuildHasher;

pub use symbolize::Symbolizer;

/// A process-local token for a call site: the return address of a native caller, or a tagged
/// index into the table of Python sites.
pub type SiteRef = usize;

/// Whether a return address is the application's or a binding library's.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Caller {
    Application,
    Binding,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum ObjectKind {
    Application,
    /// Fortran/C++ bindings and the MPI library itself: skip to the caller.
    Binding,
    /// mpi4py: the site is the Python frame.
    Python,
}

/// Object kind per code address, shared by all threads (addresses never change meaning).
static KINDS: LazyLock<DashMap<usize, ObjectKind, FxBuildHasher>> = LazyLock::new(DashMap::default);

/// The object and link-time address of each code address looked up (addresses never change
/// meaning): codes whose message counts change every few steps make a new key at the same site
/// hundreds of times (LAMMPS: about 500 per rank in 500 steps), and each would look it up again.
static LOCATED: LazyLock<DashMap<usize, Option<Located>, FxBuildHasher>> =
    LazyLock::new(DashMap::default);

/// An object's path, and an address in that object's own address space.
type Located = (String, u64);

/// The canonical path of each object a site was found in, by the name the dynamic loader gives
/// it: a process has few, and resolving one costs a getcwd and a readlink per path component.
static CANONICAL: LazyLock<DashMap<String, String, FxBuildHasher>> =
    LazyLock::new(DashMap::default);

/// At MPI_Init: builds the tables and resolves the main program's path, which the first
/// intercepted call would do otherwise.
pub fn prepare() {
    LazyLock::force(&KINDS);
    LazyLock::force(&LOCATED);
    // The dynamic loader names the main program by its argv[0].
    if let Some(program) = std::env::args().next() {
        canonical(program);
    }
}

/// The canonical path of `object`, resolved once per object: the main program's path is as it
/// was started (often relative), and rank 0 may symbolize from another working directory.
fn canonical(object: String) -> String {
    if let Some(path) = CANONICAL.get(&object) {
        return path.clone();
    }
    let path = std::fs::canonicalize(&object)
        .map_or_else(|_| object.clone(), |p| p.to_string_lossy().into_owned());
    CANONICAL.insert(object, path.clone());
    path
}

/// Soname prefixes of the libraries that stand between an application and the C MPI API.
const BINDING_LIBRARIES: &[&str] = &[
    "libmpi_mpifh",
    "libmpi_usempi",
    "libmpi_cxx",
    "libmpi.so",
    "libmpichfort",
    "libmpichcxx",
    "libmpich.so",
    "libcommtune",
];

/// The object containing `addr` and the address it has there, looked up once per address.
fn locate(addr: usize) -> Option<Located> {
    if let Some(located) = LOCATED.get(&addr) {
        return located.clone();
    }
    let located = frames::locate(addr);
    LOCATED.insert(addr, located.clone());
    located
}

fn kind_of(addr: usize) -> ObjectKind {
    if let Some(kind) = KINDS.get(&addr) {
        return *kind;
    }
    let kind = match locate(addr) {
        Some((object, _)) if object.contains("/mpi4py/") => ObjectKind::Python,
        Some((object, _)) => {
            let name = file_name(&object);
            if BINDING_LIBRARIES.iter().any(|b| name.starts_with(b)) {
                ObjectKind::Binding
            } else {
                ObjectKind::Application
            }
        }
        None => ObjectKind::Application,
    };
    KINDS.insert(addr, kind);
    kind
}

/// Classifies the immediate return address of an intercepted call (cached by the caller).
pub fn classify(ra: usize) -> Caller {
    match kind_of(ra) {
        ObjectKind::Application => Caller::Application,
        ObjectKind::Binding | ObjectKind::Python => Caller::Binding,
    }
}

/// The application's site for a call whose immediate caller `ra` is a binding library.
/// Costs a stack walk (a few microseconds), which is why only binding calls pay it.
pub fn application_site(ra: usize) -> SiteRef {
    let mut buf = [0usize; 48];
    let frames = frames::backtrace(&mut buf);
    let Some(start) = frames.iter().position(|&f| f == ra) else {
        return ra;
    };
    for &frame in &frames[start..] {
        match kind_of(frame) {
            ObjectKind::Application => return frame,
            ObjectKind::Python => return python::current_site().unwrap_or(ra),
            ObjectKind::Binding => {}
        }
    }
    ra
}

/// The description of a site that travels to rank 0 in the report.
pub fn describe(site: SiteRef) -> SiteData {
    if let Some(py) = python::describe(site) {
        return py;
    }
    match locate(site) {
        Some((object, address)) => SiteData {
            id: site_id(file_name(&object), address),
            object: canonical(object),
            address,
            python: None,
        },
        None => SiteData {
            id: site_id("?", site as u64),
            object: "?".into(),
            address: site as u64,
            python: None,
        },
    }
}

/// The cross-rank identity of a site: a hash of what is the same on every rank.
fn site_id(object_name: &str, address: u64) -> u64 {
    use std::hash::BuildHasher;
    FxBuildHasher.hash_one((object_name, address))
}

pub fn file_name(path: &str) -> &str {
    Path::new(path)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or(path)
}
