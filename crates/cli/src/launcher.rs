//! What the command starts with: an Open MPI or MPICH (Hydra) launcher, srun, or the program
//! itself; and which MPI the job uses.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::flavour::{self, Flavour};

/// How the library and the COMMTUNE_* variables reach the ranks.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Launcher {
    /// Open MPI mpirun/mpiexec/orterun: `-x NAME=VALUE`.
    OpenMpi,
    /// MPICH's Hydra mpiexec: `-genv NAME VALUE`.
    Hydra,
    /// Slurm: `--export=ALL,NAME=VALUE,...`.
    Srun,
    /// No launcher: a singleton MPI run; the child's environment.
    Direct,
}

impl Launcher {
    fn of_flavour(flavour: Flavour) -> Launcher {
        match flavour {
            Flavour::OpenMpi => Launcher::OpenMpi,
            Flavour::Mpich => Launcher::Hydra,
        }
    }

    /// The MPI a launcher belongs to (srun and direct runs belong to none).
    fn flavour(self) -> Option<Flavour> {
        match self {
            Launcher::OpenMpi => Some(Flavour::OpenMpi),
            Launcher::Hydra => Some(Flavour::Mpich),
            Launcher::Srun | Launcher::Direct => None,
        }
    }
}

/// What a command name says about itself.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum NameClass {
    /// A launcher whose name gives its MPI (mpirun.openmpi, orterun, mpiexec.hydra, ...).
    Known(Launcher),
    /// A plain `mpirun`/`mpiexec`: ask it with `--version`.
    GenericMpi,
    /// Not a launcher name: the program itself.
    Program,
}

/// The launcher of the job and the MPI it belongs to (None for srun and direct programs).
#[derive(Debug)]
pub struct Detection {
    pub launcher: Launcher,
    pub flavour: Flavour,
    /// How the flavour was found, for messages.
    pub reason: String,
    pub warnings: Vec<String>,
}

/// Classifies the names a command goes by: the name as typed and every symlink hop, e.g.
/// mpirun → mpirun (alternatives) → mpirun.openmpi → orterun.
pub fn classify_names<S: AsRef<str>>(names: &[S]) -> NameClass {
    let basenames: Vec<&str> = names
        .iter()
        .map(|n| n.as_ref().rsplit('/').next().unwrap_or_default())
        .collect();
    let launcher_like = |n: &&str| {
        ["mpirun", "mpiexec", "orterun", "prterun", "srun"]
            .iter()
            .any(|l| n.starts_with(l))
    };
    let launchers: Vec<&str> = basenames.into_iter().filter(launcher_like).collect();
    if launchers.is_empty() {
        return NameClass::Program;
    }
    let any = |words: &[&str]| {
        launchers
            .iter()
            .any(|n| words.iter().any(|w| n.contains(w)))
    };
    if any(&["openmpi", "orterun", "prterun"]) {
        NameClass::Known(Launcher::OpenMpi)
    } else if any(&["mpich", "hydra"]) {
        NameClass::Known(Launcher::Hydra)
    } else if launchers.contains(&"srun") {
        NameClass::Known(Launcher::Srun)
    } else {
        NameClass::GenericMpi
    }
}

/// The MPI a launcher's `--version` output names.
pub fn flavour_of_version_text(text: &str) -> Option<Flavour> {
    if text.contains("Open MPI") || text.contains("OpenRTE") {
        Some(Flavour::OpenMpi)
    } else if text.contains("HYDRA") || text.contains("MPICH") {
        Some(Flavour::Mpich)
    } else {
        None
    }
}

/// Resolves a command like execvp does: a name with a slash is a path, any other name is looked
/// up in PATH. Returns None when nothing executable is found.
pub fn which(command: &str) -> Option<PathBuf> {
    if command.contains('/') {
        let path = PathBuf::from(command);
        return path.is_file().then_some(path);
    }
    let path_var = std::env::var_os("PATH")?;
    std::env::split_paths(&path_var)
        .map(|dir| dir.join(command))
        .find(|p| is_executable(p))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// The path and every symlink hop after it (bounded, so a loop cannot hang us).
pub fn symlink_chain(path: &Path) -> Vec<PathBuf> {
    let mut chain = vec![path.to_path_buf()];
    while chain.len() < 40 {
        let Some(current) = chain.last() else { break };
        let Ok(target) = std::fs::read_link(current) else {
            break;
        };
        let next = match current.parent() {
            Some(dir) if target.is_relative() => dir.join(target),
            _ => target,
        };
        chain.push(next);
    }
    chain
}

/// Runs `<launcher> --version` and classifies what it prints.
fn ask_version(launcher: &Path) -> Option<Flavour> {
    let output = Command::new(launcher)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .ok()?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    flavour_of_version_text(&text)
}

/// The first word that is an existing ELF file (resolved like a command), skipping options.
pub fn find_program(words: &[String]) -> Option<PathBuf> {
    words
        .iter()
        .filter(|w| !w.starts_with('-'))
        .filter_map(|w| which(w))
        .find(|p| flavour::is_elf(p))
}

/// The first word that names an existing file (resolved like a command), skipping options.
fn first_file(words: &[String]) -> Option<PathBuf> {
    words
        .iter()
        .filter(|w| !w.starts_with('-'))
        .find_map(|w| which(w))
}

/// The MPI a program is linked to, with the reason ("<program> links <soname>").
fn program_flavour(program: &Path) -> Result<Option<(Flavour, String)>, String> {
    let needed = flavour::needed(program)?;
    Ok(flavour::flavour_of_needed(&needed)
        .map(|(f, soname)| (f, format!("{} links {soname}", program.display()))))
}

/// The names `command` goes by: itself, then the path it resolves to (`which`) and each link
/// from there.
pub fn names(command: &str, resolved: Option<&Path>) -> Vec<String> {
    std::iter::once(PathBuf::from(command))
        .chain(resolved.map_or_else(Vec::new, symlink_chain))
        .map(|p| p.to_string_lossy().into_owned())
        .collect()
}

/// The launcher (how to pass variables), the MPI its name or `--version` gives, and the chain of
/// names it goes by (for messages).
fn identify_launcher(
    command: &[String],
    forced: Option<Flavour>,
) -> Result<(Launcher, Option<Flavour>, String), String> {
    let first = command.first().ok_or("no command given")?;
    let resolved = which(first);
    let names = names(first, resolved.as_deref());
    let chain = names.join(" -> ");
    let (launcher, flavour) = match classify_names(&names) {
        NameClass::Known(l) => (l, l.flavour()),
        NameClass::Program => (Launcher::Direct, None),
        NameClass::GenericMpi => match (resolved.as_deref().and_then(ask_version), forced) {
            (Some(f), _) => (Launcher::of_flavour(f), Some(f)),
            (None, Some(f)) => (Launcher::of_flavour(f), None),
            (None, None) => {
                return Err(format!(
                    "cannot tell which MPI `{first}` belongs to ({chain}; its --version output \
                     names neither Open MPI nor MPICH). Pass --mpi openmpi or --mpi mpich."
                ));
            }
        },
    };
    Ok((launcher, flavour, chain))
}

/// Why neither the launcher nor the program tells the MPI.
fn undecided(program: Option<&Path>, words: &[String]) -> String {
    let why = match (program, first_file(words)) {
        (Some(program), _) => format!(
            "{} is not linked to an MPI library (an interpreter such as python3, or linked to MPI \
             only through another library?)",
            program.display()
        ),
        (None, Some(file)) => format!("{} is not an ELF program (a script?)", file.display()),
        (None, None) => format!("found no existing program among `{}`", words.join(" ")),
    };
    format!("{why}; cannot tell which MPI the job uses. Pass --mpi openmpi or --mpi mpich.")
}

/// Finds the launcher and the application's MPI. `forced` is the user's --mpi, which skips
/// looking at the program.
pub fn detect(command: &[String], forced: Option<Flavour>) -> Result<Detection, String> {
    let (launcher, by_launcher, chain) = identify_launcher(command, forced)?;
    if let Some(flavour) = forced {
        return Ok(Detection {
            launcher,
            flavour,
            reason: "--mpi".to_string(),
            warnings: Vec::new(),
        });
    }
    let program_words = match launcher {
        Launcher::Direct => command,
        _ => &command[1..],
    };
    let program = find_program(program_words);
    let mut warnings = Vec::new();
    let by_program = program.as_deref().and_then(|p| {
        program_flavour(p).unwrap_or_else(|e| {
            warnings.push(e);
            None
        })
    });
    let (flavour, reason) = match (by_launcher, by_program) {
        (Some(l), Some((p, why))) if l != p => {
            warnings.push(format!(
                "the launcher ({chain}) is {l} but {why} ({p}); using {p}"
            ));
            (p, why)
        }
        (_, Some((p, why))) => (p, why),
        (Some(l), None) => (l, format!("launcher {chain}")),
        (None, None) => return Err(undecided(program.as_deref(), program_words)),
    };
    Ok(Detection {
        launcher,
        flavour,
        reason,
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launcher_names() {
        use Launcher::*;
        let debian_mpirun = [
            "mpirun",
            "/usr/bin/mpirun",
            "/etc/alternatives/mpirun",
            "/usr/bin/mpirun.openmpi",
            "/usr/bin/orterun",
        ];
        assert_eq!(classify_names(&debian_mpirun), NameClass::Known(OpenMpi));
        let hydra = [
            "mpiexec.mpich",
            "/usr/bin/mpiexec.mpich",
            "/usr/bin/mpiexec.hydra",
        ];
        assert_eq!(classify_names(&hydra), NameClass::Known(Hydra));
        assert_eq!(classify_names(&["mpirun.mpich"]), NameClass::Known(Hydra));
        assert_eq!(classify_names(&["orterun"]), NameClass::Known(OpenMpi));
        assert_eq!(classify_names(&["srun"]), NameClass::Known(Srun));
        assert_eq!(
            classify_names(&["/opt/x/bin/mpirun"]),
            NameClass::GenericMpi
        );
        assert_eq!(classify_names(&["mpiexec"]), NameClass::GenericMpi);
        assert_eq!(classify_names(&["./prog"]), NameClass::Program);
        // A program is not a launcher because of the directory it lives in.
        assert_eq!(
            classify_names(&["/opt/openmpi/bin/app"]),
            NameClass::Program
        );
        assert_eq!(
            classify_names(&["python3", "/usr/bin/python3.11"]),
            NameClass::Program
        );
    }

    #[test]
    fn version_texts() {
        let ompi =
            "mpirun (Open MPI) 4.1.4\n\nReport bugs to http://www.open-mpi.org/community/help/";
        assert_eq!(flavour_of_version_text(ompi), Some(Flavour::OpenMpi));
        assert_eq!(
            flavour_of_version_text("orterun (OpenRTE) 3.1"),
            Some(Flavour::OpenMpi)
        );
        let hydra = "HYDRA build details:\n    Version:                                 4.0.2";
        assert_eq!(flavour_of_version_text(hydra), Some(Flavour::Mpich));
        assert_eq!(flavour_of_version_text("usage: foo"), None);
    }

    #[test]
    fn symlink_chain_follows_relative_links() {
        let dir = std::env::temp_dir().join(format!("commtune-chain-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let target = dir.join("orterun");
        std::fs::write(&target, b"").expect("file");
        let link = dir.join("mpirun.openmpi");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink("orterun", &link).expect("symlink");
        assert_eq!(symlink_chain(&link), vec![link.clone(), target.clone()]);
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn which_needs_slash_or_path() {
        assert!(which("/definitely/not/here").is_none());
        assert!(which("commtune-no-such-command-xyz").is_none());
        assert!(which("sh").is_some());
    }
}
