//! Putting the library and the COMMTUNE_* variables into the command line (or environment) of
//! the job, the way each launcher passes environment variables to its ranks.

use std::borrow::Cow;
use std::path::Path;

use crate::flavour::Flavour;
use crate::launcher::Launcher;

/// What to run: the final argument vector and the variables to set in its environment.
#[derive(Debug, PartialEq, Eq)]
pub struct Plan {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
}

/// The variables every rank needs: LD_PRELOAD first (the library in front of an existing
/// LD_PRELOAD), then every COMMTUNE_* variable of `environment` except the CLI's own
/// COMMTUNE_LIB_*, with `overrides` (from --mode/--report) replacing or adding values. Sorted
/// by name so that the command line is reproducible.
pub fn job_variables(
    library: &Path,
    existing_preload: Option<&str>,
    environment: impl IntoIterator<Item = (String, String)>,
    overrides: &[(&str, Option<&str>)],
) -> Vec<(String, String)> {
    let mut knobs: std::collections::BTreeMap<String, String> = environment
        .into_iter()
        .filter(|(name, _)| name.starts_with("COMMTUNE_") && !name.starts_with("COMMTUNE_LIB_"))
        .collect();
    for (name, value) in overrides {
        if let Some(value) = value {
            knobs.insert(name.to_string(), value.to_string());
        }
    }
    let preload = match existing_preload {
        Some(existing) if !existing.is_empty() => format!("{}:{existing}", library.display()),
        _ => library.display().to_string(),
    };
    std::iter::once(("LD_PRELOAD".to_string(), preload))
        .chain(knobs)
        .collect()
}

/// The `--mpi=PLUGIN` srun needs for `flavour`, unless the user chose one: an `--mpi` option in
/// the command, or `slurm_mpi_type` (srun's SLURM_MPI_TYPE). Every word counts, the program's
/// own included: a stray `--mpi` leaves srun to the cluster's default, never overrides a choice.
pub fn srun_mpi(
    flavour: Flavour,
    command: &[String],
    slurm_mpi_type: Option<&str>,
) -> Option<String> {
    let chosen = slurm_mpi_type.is_some_and(|t| !t.is_empty())
        || command
            .iter()
            .any(|w| w == "--mpi" || w.starts_with("--mpi="));
    (!chosen).then(|| format!("--mpi={}", flavour.srun_plugin()))
}

/// Inserts `vars` into `command` for `launcher`, right after the launcher's name; for srun also
/// `srun_mpi` (see `srun_mpi`).
pub fn plan(
    launcher: Launcher,
    command: &[String],
    vars: &[(String, String)],
    srun_mpi: Option<String>,
) -> Plan {
    let Some((first, rest)) = command.split_first() else {
        return Plan {
            argv: Vec::new(),
            env: Vec::new(),
        };
    };
    let mut env = Vec::new();
    let inserted: Vec<String> = match launcher {
        Launcher::OpenMpi => vars
            .iter()
            .flat_map(|(n, v)| ["-x".to_string(), format!("{n}={v}")])
            .collect(),
        Launcher::Hydra => vars
            .iter()
            .flat_map(|(n, v)| ["-genv".to_string(), n.clone(), v.clone()])
            .collect(),
        Launcher::Srun => {
            // srun splits --export at commas, so a value containing one cannot be written
            // there. Such a variable is set in srun's own environment instead and listed by
            // name only (`--export=NAME` takes the value from the environment; ALL exports it
            // anyway). LD_PRELOAD normally has no comma, so srun itself is not preloaded.
            let mut export = vec!["--export=ALL".to_string()];
            for (n, v) in vars {
                if v.contains(',') {
                    env.push((n.clone(), v.clone()));
                    export.push(n.clone());
                } else {
                    export.push(format!("{n}={v}"));
                }
            }
            std::iter::once(export.join(",")).chain(srun_mpi).collect()
        }
        Launcher::Direct => {
            return Plan {
                argv: command.to_vec(),
                env: vars.to_vec(),
            };
        }
    };
    let argv = std::iter::once(first.clone())
        .chain(inserted)
        .chain(rest.iter().cloned())
        .collect();
    Plan { argv, env }
}

/// A word as a POSIX shell would need it written: unchanged when it is made of safe characters,
/// otherwise in single quotes.
pub fn shell_quote(word: &str) -> Cow<'_, str> {
    let safe = |c: char| c.is_ascii_alphanumeric() || "_-+=/.,:@%^".contains(c);
    if !word.is_empty() && word.chars().all(safe) {
        Cow::Borrowed(word)
    } else {
        Cow::Owned(format!("'{}'", word.replace('\'', r"'\''")))
    }
}

/// Words joined into one shell-quoted line.
pub fn shell_line<S: AsRef<str>>(words: &[S]) -> String {
    words
        .iter()
        .map(|w| shell_quote(w.as_ref()).into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn variables_forwarded_and_overridden() {
        let env = pairs(&[
            ("COMMTUNE_VERBOSE", "1"),
            ("COMMTUNE_MODE", "off"),
            ("COMMTUNE_LIB_MPICH", "/x.so"),
            ("HOME", "/root"),
        ]);
        let vars = job_variables(
            Path::new("/l/libcommtune.so"),
            Some("/other.so"),
            env,
            &[
                ("COMMTUNE_MODE", Some("profile")),
                ("COMMTUNE_REPORT", None),
            ],
        );
        assert_eq!(
            vars,
            pairs(&[
                ("LD_PRELOAD", "/l/libcommtune.so:/other.so"),
                ("COMMTUNE_MODE", "profile"),
                ("COMMTUNE_VERBOSE", "1"),
            ])
        );
        let vars = job_variables(Path::new("/l.so"), Some(""), Vec::new(), &[]);
        assert_eq!(vars, pairs(&[("LD_PRELOAD", "/l.so")]));
    }

    #[test]
    fn open_mpi_gets_dash_x() {
        let vars = pairs(&[("LD_PRELOAD", "/l.so"), ("COMMTUNE_MODE", "profile")]);
        let p = plan(
            Launcher::OpenMpi,
            &words("mpirun -np 2 ./prog a"),
            &vars,
            None,
        );
        assert_eq!(
            p.argv,
            words("mpirun -x LD_PRELOAD=/l.so -x COMMTUNE_MODE=profile -np 2 ./prog a")
        );
        assert!(p.env.is_empty());
    }

    #[test]
    fn hydra_gets_genv() {
        let vars = pairs(&[("LD_PRELOAD", "/l.so"), ("COMMTUNE_REPORT", "a b.json")]);
        let p = plan(
            Launcher::Hydra,
            &words("mpiexec.mpich -n 2 ./prog"),
            &vars,
            None,
        );
        let mut expected = words("mpiexec.mpich -genv LD_PRELOAD /l.so -genv COMMTUNE_REPORT");
        expected.push("a b.json".into());
        expected.extend(words("-n 2 ./prog"));
        assert_eq!(p.argv, expected);
        assert!(p.env.is_empty());
    }

    #[test]
    fn srun_gets_export_and_commas_go_to_the_environment() {
        let vars = pairs(&[("LD_PRELOAD", "/l.so"), ("COMMTUNE_MODE", "profile")]);
        let p = plan(Launcher::Srun, &words("srun -n 4 ./prog"), &vars, None);
        assert_eq!(
            p.argv,
            words("srun --export=ALL,LD_PRELOAD=/l.so,COMMTUNE_MODE=profile -n 4 ./prog")
        );
        let vars = pairs(&[("LD_PRELOAD", "/l.so"), ("COMMTUNE_REPORT", "a,b.json")]);
        let p = plan(Launcher::Srun, &words("srun ./prog"), &vars, None);
        assert_eq!(
            p.argv,
            words("srun --export=ALL,LD_PRELOAD=/l.so,COMMTUNE_REPORT ./prog")
        );
        assert_eq!(p.env, pairs(&[("COMMTUNE_REPORT", "a,b.json")]));
    }

    #[test]
    fn srun_gets_the_flavours_mpi_plugin_unless_chosen() {
        let vars = pairs(&[("LD_PRELOAD", "/l.so")]);
        let command = words("srun -n 4 ./prog");
        let mpi = srun_mpi(Flavour::Mpich, &command, None);
        assert_eq!(mpi.as_deref(), Some("--mpi=pmi2"));
        let p = plan(Launcher::Srun, &command, &vars, mpi);
        assert_eq!(
            p.argv,
            words("srun --export=ALL,LD_PRELOAD=/l.so --mpi=pmi2 -n 4 ./prog")
        );
        assert_eq!(
            srun_mpi(Flavour::OpenMpi, &command, Some("")).as_deref(),
            Some("--mpi=pmix")
        );
        assert_eq!(srun_mpi(Flavour::OpenMpi, &command, Some("pmix_v4")), None);
        let chosen = words("srun --mpi=pmix_v4 -n 4 ./prog");
        assert_eq!(srun_mpi(Flavour::OpenMpi, &chosen, None), None);
        let separate = words("srun --mpi none -n 4 ./prog");
        assert_eq!(srun_mpi(Flavour::Mpich, &separate, None), None);
    }

    #[test]
    fn direct_program_gets_environment() {
        let vars = pairs(&[("LD_PRELOAD", "/l.so")]);
        let p = plan(Launcher::Direct, &words("./prog x"), &vars, None);
        assert_eq!(p.argv, words("./prog x"));
        assert_eq!(p.env, vars);
    }

    #[test]
    fn quoting() {
        assert_eq!(shell_quote("-x"), "-x");
        assert_eq!(
            shell_quote("LD_PRELOAD=/a/b.so:/c.so"),
            "LD_PRELOAD=/a/b.so:/c.so"
        );
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote("$HOME"), "'$HOME'");
        assert_eq!(shell_line(&["echo", "a b", "*"]), "echo 'a b' '*'");
    }
}
