//! Finding the libcommtune.so built for the application's MPI.

use std::path::{Path, PathBuf};

use crate::flavour::{self, Flavour};

/// Where a build of `flavour` may be, relative to the directory of the commtune executable:
/// the cargo layout (target/release for Open MPI, target/mpich/release for MPICH) and the
/// installed layout (<prefix>/bin/commtune, <prefix>/lib/commtune/<flavour>/libcommtune.so).
pub fn candidates(flavour: Flavour, exe_dir: &Path) -> Vec<PathBuf> {
    let lib = "libcommtune.so";
    let mut list = match flavour {
        Flavour::OpenMpi => vec![exe_dir.join(lib)],
        Flavour::Mpich => vec![
            exe_dir.join("../mpich/release").join(lib),
            exe_dir.join("mpich").join(lib),
        ],
    };
    list.push(
        exe_dir
            .join("../lib/commtune")
            .join(flavour.key())
            .join(lib),
    );
    list
}

/// Checks that `path` is a library linked to `flavour`'s MPI; returns its absolute path.
fn verify(path: &Path, flavour: Flavour) -> Result<PathBuf, String> {
    if !path.is_file() {
        return Err("not found".to_string());
    }
    let needed = flavour::needed(path)?;
    match flavour::flavour_of_needed(&needed) {
        Some((f, _)) if f == flavour => path
            .canonicalize()
            .map_err(|e| format!("cannot resolve the path: {e}")),
        Some((f, soname)) => Err(format!("built for {f} (links {soname}), not {flavour}")),
        None => Err("not linked to any MPI library".to_string()),
    }
}

/// The library for `flavour`: the path in COMMTUNE_LIB_<FLAVOUR> if set (and only that one: an
/// explicit choice that is wrong is an error, not a reason to pick another build), else the first
/// candidate next to the executable that is built for `flavour`.
pub fn find(
    flavour: Flavour,
    explicit: Option<PathBuf>,
    exe_dir: &Path,
) -> Result<PathBuf, String> {
    let variable = flavour.lib_variable();
    let build = flavour.build_command();
    if let Some(path) = explicit {
        return verify(&path, flavour).map_err(|why| {
            format!(
                "{variable}={}: {why}.\nBuild the {flavour} library with `{build}` and point \
                 {variable} at it (or unset {variable}).",
                path.display()
            )
        });
    }
    let mut tried = Vec::new();
    for candidate in candidates(flavour, exe_dir) {
        match verify(&candidate, flavour) {
            Ok(found) => return Ok(found),
            Err(why) => tried.push(format!("  {}: {why}", candidate.display())),
        }
    }
    Err(format!(
        "no libcommtune.so for {flavour} found. Looked at:\n{}\nBuild it in the source tree with\n  \
         {build}\nor set {variable} to its path.",
        tried.join("\n")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cargo_and_installed_layouts() {
        let dir = Path::new("/src/target/release");
        assert_eq!(
            candidates(Flavour::OpenMpi, dir),
            vec![
                PathBuf::from("/src/target/release/libcommtune.so"),
                PathBuf::from("/src/target/release/../lib/commtune/openmpi/libcommtune.so"),
            ]
        );
        let mpich = candidates(Flavour::Mpich, dir);
        assert_eq!(
            mpich[0],
            PathBuf::from("/src/target/release/../mpich/release/libcommtune.so")
        );
        assert!(mpich.contains(&PathBuf::from(
            "/src/target/release/../lib/commtune/mpich/libcommtune.so"
        )));
    }

    #[test]
    fn missing_library_names_the_build_command() {
        let dir = Path::new("/nonexistent/commtune/bin");
        let err = find(Flavour::Mpich, None, dir).expect_err("nothing there");
        assert!(err.contains("MPICC=mpicc.mpich cargo build --release --target-dir target/mpich"));
        assert!(
            err.contains("/nonexistent/commtune/bin/../mpich/release/libcommtune.so: not found")
        );
        let err =
            find(Flavour::OpenMpi, Some("/nonexistent.so".into()), dir).expect_err("explicit");
        assert!(err.starts_with("COMMTUNE_LIB_OPENMPI=/nonexistent.so: not found"));
    }

    #[test]
    fn library_without_mpi_is_rejected() {
        // The test executable itself is an ELF file linked to no MPI.
        let exe = std::env::current_exe().expect("test executable path");
        let err = find(Flavour::OpenMpi, Some(exe), Path::new("/")).expect_err("no MPI");
        assert!(err.contains("not linked to any MPI library"), "{err}");
    }
}
