//! Which MPI an ELF file (program or libcommtune.so build) is linked to, from its DT_NEEDED entries.

use std::fmt;
use std::fs::File;
use std::io::Read;
use std::path::Path;

use object::Object;

/// The two MPI implementations commtune is built for.
#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
pub enum Flavour {
    #[value(name = "openmpi")]
    OpenMpi,
    #[value(name = "mpich")]
    Mpich,
}

impl Flavour {
    /// Lower-case name used in paths and on the command line.
    pub fn key(self) -> &'static str {
        match self {
            Flavour::OpenMpi => "openmpi",
            Flavour::Mpich => "mpich",
        }
    }

    /// The variable that names this flavour's libcommtune.so explicitly.
    pub fn lib_variable(self) -> &'static str {
        match self {
            Flavour::OpenMpi => "COMMTUNE_LIB_OPENMPI",
            Flavour::Mpich => "COMMTUNE_LIB_MPICH",
        }
    }

    /// The srun MPI plugin that starts this flavour's ranks as one job: Debian's Open MPI 4
    /// wires up through PMIx, its MPICH (Hydra's PMI client) through PMI-2. Without one, a
    /// cluster whose `MpiDefault` is `none` starts MPICH ranks as separate singletons and Open
    /// MPI ranks abort in MPI_Init.
    pub fn srun_plugin(self) -> &'static str {
        match self {
            Flavour::OpenMpi => "pmix",
            Flavour::Mpich => "pmi2",
        }
    }

    /// How to build this flavour's library from the source tree.
    pub fn build_command(self) -> &'static str {
        match self {
            Flavour::OpenMpi => "cargo build --release",
            Flavour::Mpich => "MPICC=mpicc.mpich cargo build --release --target-dir target/mpich",
        }
    }
}

impl fmt::Display for Flavour {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Flavour::OpenMpi => "Open MPI",
            Flavour::Mpich => "MPICH",
        })
    }
}

/// The flavour a shared-library name (a DT_NEEDED entry) belongs to, if it is an MPI library.
/// `libmpich*` (libmpich.so.12, libmpichfort.so.12) is MPICH; `libmpi.so.*` and Open MPI's
/// `libmpi_*` bindings (libmpi_mpifh.so.40, libmpi_cxx.so.40) are Open MPI.
pub fn flavour_of_soname(name: &str) -> Option<Flavour> {
    if name.starts_with("libmpich") {
        Some(Flavour::Mpich)
    } else if name.starts_with("libmpi.so") || name.starts_with("libmpi_") {
        Some(Flavour::OpenMpi)
    } else {
        None
    }
}

/// The MPI flavour among a list of DT_NEEDED entries, with the entry that decided it.
pub fn flavour_of_needed(needed: &[String]) -> Option<(Flavour, &str)> {
    needed
        .iter()
        .find_map(|n| flavour_of_soname(n).map(|f| (f, n.as_str())))
}

/// True when `path` is a regular file starting with the ELF magic number.
pub fn is_elf(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    path.is_file()
        && File::open(path)
            .and_then(|mut f| f.read_exact(&mut magic))
            .is_ok()
        && magic == *b"\x7fELF"
}

/// The DT_NEEDED entries of an ELF file.
pub fn needed(path: &Path) -> Result<Vec<String>, String> {
    let data = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let file = object::File::parse(&*data)
        .map_err(|e| format!("{} is not a readable ELF file: {e}", path.display()))?;
    let libraries = file
        .import_libraries()
        .map_err(|e| format!("cannot read the dynamic section of {}: {e}", path.display()))?;
    Ok(libraries
        .filter_map(Result::ok)
        .map(|lib| String::from_utf8_lossy(lib.name()).into_owned())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sonames() {
        assert_eq!(flavour_of_soname("libmpi.so.40"), Some(Flavour::OpenMpi));
        assert_eq!(flavour_of_soname("libmpi.so.20"), Some(Flavour::OpenMpi));
        assert_eq!(
            flavour_of_soname("libmpi_mpifh.so.40"),
            Some(Flavour::OpenMpi)
        );
        assert_eq!(flavour_of_soname("libmpich.so.12"), Some(Flavour::Mpich));
        assert_eq!(
            flavour_of_soname("libmpichfort.so.12"),
            Some(Flavour::Mpich)
        );
        assert_eq!(flavour_of_soname("libm.so.6"), None);
        assert_eq!(flavour_of_soname("libmpfr.so.6"), None);
    }

    #[test]
    fn needed_list() {
        let list = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let ompi = list(&["libc.so.6", "libmpi.so.40"]);
        assert_eq!(
            flavour_of_needed(&ompi),
            Some((Flavour::OpenMpi, "libmpi.so.40"))
        );
        assert_eq!(flavour_of_needed(&list(&["libpython3.11.so.1.0"])), None);
    }

    #[test]
    fn own_executable_is_elf_without_mpi() {
        let exe = std::env::current_exe().expect("test executable path");
        assert!(is_elf(&exe));
        let needed = needed(&exe).expect("NEEDED entries");
        assert!(needed.iter().any(|n| n.starts_with("libc.so")));
        assert_eq!(flavour_of_needed(&needed), None);
        assert!(!is_elf(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("Cargo.toml")
                .as_path()
        ));
    }
}
