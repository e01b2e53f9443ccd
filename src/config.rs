//! COMMTUNE_* knobs: parsed once when the library loads. A bad name or value yields one message
//! naming the knob and what it accepts, and the default is used; nothing here can fail.

use std::path::PathBuf;

use commtune_report::Op;

use crate::codelets;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    /// Every call is a plain pass-through to PMPI.
    Off,
    /// Calls run natively and are measured; the report says where time went.
    Profile,
}

#[derive(Clone, PartialEq, Eq, Debug)]
pub enum ReportTarget {
    /// `commtune-<job id or pid>.json` in the working directory.
    Default,
    Path(PathBuf),
    Disabled,
}

#[derive(Clone, Debug)]
pub struct Config {
    pub mode: Mode,
    pub report: ReportTarget,
    pub verbose: u8,
    /// Forced codelet per operation (index in the operation's registry), COMMTUNE_FORCE.
    pub force: Vec<(Op, usize)>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            mode: Mode::Profile,
            report: ReportTarget::Default,
            verbose: 0,
            force: Vec::new(),
        }
    }
}

impl Config {
    /// The codelet COMMTUNE_FORCE names for `op`, as an index in its registry.
    pub fn forced(&self, op: Op) -> Option<usize> {
        self.force.iter().find(|(o, _)| *o == op).map(|(_, i)| *i)
    }
}

/// One knob as users see it (LD_PRELOAD.md documents the same table).
pub struct Knob {
    pub name: &'static str,
    pub default: &'static str,
    pub accepted: &'static str,
}

pub const KNOBS: &[Knob] = &[
    Knob {
        name: "COMMTUNE_MODE",
        default: "profile",
        accepted: "off, profile",
    },
    Knob {
        name: "COMMTUNE_REPORT",
        default: "commtune-<jobid or pid>.json",
        accepted: "a file path, or none",
    },
    Knob {
        name: "COMMTUNE_FORCE",
        default: "(none)",
        accepted: "op=codelet,... with op allreduce, alltoall or allgatherv (see `commtune codelets`)",
    },
    Knob {
        name: "COMMTUNE_VERBOSE",
        default: "0",
        accepted: "0, 1, 2",
    },
];

/// Parses the COMMTUNE_* variables among `vars`; returns the configuration and one message per
/// problem found.
pub fn parse<I, K, V>(vars: I) -> (Config, Vec<String>)
where
    I: IntoIterator<Item = (K, V)>,
    K: AsRef<str>,
    V: AsRef<str>,
{
    let mut config = Config::default();
    let mut problems = Vec::new();
    for (name, value) in vars {
        let (name, value) = (name.as_ref(), value.as_ref().trim());
        if !name.starts_with("COMMTUNE_") || is_launcher_variable(name) {
            continue;
        }
        let Some(knob) = KNOBS.iter().find(|k| k.name == name) else {
            problems.push(format!(
                "commtune: unknown knob {name} ignored (known: {})",
                KNOBS.iter().map(|k| k.name).collect::<Vec<_>>().join(", ")
            ));
            continue;
        };
        let valid = match name {
            "COMMTUNE_MODE" => set(&mut config.mode, parse_mode(value)),
            "COMMTUNE_REPORT" => set(&mut config.report, parse_report(value)),
            "COMMTUNE_VERBOSE" => set(
                &mut config.verbose,
                value.parse::<u8>().ok().filter(|v| *v <= 2),
            ),
            "COMMTUNE_FORCE" => {
                let (force, bad) = parse_force(value);
                config.force = force;
                for item in &bad {
                    problems.push(format!("commtune: COMMTUNE_FORCE: {item}; ignored"));
                }
                true
            }
            _ => unreachable!("every knob in KNOBS is parsed above"),
        };
        if !valid {
            problems.push(format!(
                "commtune: {name}={value:?} is not valid (accepted: {}); using the default {}",
                knob.accepted, knob.default
            ));
        }
    }
    (config, problems)
}

fn set<T>(slot: &mut T, value: Option<T>) -> bool {
    value.map(|v| *slot = v).is_some()
}

fn parse_mode(value: &str) -> Option<Mode> {
    match value {
        "off" => Some(Mode::Off),
        "profile" => Some(Mode::Profile),
        _ => None,
    }
}

fn parse_report(value: &str) -> Option<ReportTarget> {
    match value {
        "" => None,
        "none" => Some(ReportTarget::Disabled),
        path => Some(ReportTarget::Path(PathBuf::from(path))),
    }
}

/// `allreduce=ring,alltoall=bruck`: the valid assignments, and a message per invalid one.
fn parse_force(value: &str) -> (Vec<(Op, usize)>, Vec<String>) {
    let (mut force, mut bad) = (Vec::new(), Vec::new());
    for item in value.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let Some((op_name, codelet)) = item.split_once('=') else {
            bad.push(format!("`{item}` is not op=codelet"));
            continue;
        };
        let (op_name, codelet) = (op_name.trim(), codelet.trim());
        let Some(op) = [Op::Allreduce, Op::Alltoall, Op::Allgatherv]
            .into_iter()
            .find(|o| o.name() == op_name)
        else {
            bad.push(format!(
                "unknown operation `{op_name}` (operations: allreduce, alltoall, allgatherv)"
            ));
            continue;
        };
        let names = codelets::names(op);
        match names.iter().position(|n| *n == codelet) {
            Some(index) => {
                force.retain(|(o, _)| *o != op);
                force.push((op, index));
            }
            None => bad.push(format!(
                "{op_name} has no codelet `{codelet}` (codelets: {})",
                names.join(", ")
            )),
        }
    }
    (force, bad)
}

/// Variables the `commtune` CLI sets for its own use, not knobs of the library.
fn is_launcher_variable(name: &str) -> bool {
    name.starts_with("COMMTUNE_LIB_")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_without_variables() {
        let (c, problems) = parse(Vec::<(String, String)>::new());
        assert_eq!(c.mode, Mode::Profile);
        assert_eq!(c.report, ReportTarget::Default);
        assert!(problems.is_empty());
    }

    #[test]
    fn valid_values_are_taken() {
        let (c, problems) = parse([
            ("COMMTUNE_MODE", "off"),
            ("COMMTUNE_REPORT", "/tmp/r.json"),
            ("COMMTUNE_VERBOSE", "2"),
            ("PATH", "/bin"),
        ]);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(c.mode, Mode::Off);
        assert_eq!(c.report, ReportTarget::Path("/tmp/r.json".into()));
        assert_eq!(c.verbose, 2);
        let (c, _) = parse([("COMMTUNE_REPORT", "none")]);
        assert_eq!(c.report, ReportTarget::Disabled);
    }

    #[test]
    fn bad_value_names_knob_and_accepted_values_and_keeps_default() {
        let (c, problems) = parse([("COMMTUNE_MODE", "fast"), ("COMMTUNE_VERBOSE", "7")]);
        assert_eq!(c.mode, Mode::Profile);
        assert_eq!(c.verbose, 0);
        assert_eq!(problems.len(), 2);
        assert!(problems[0].contains("COMMTUNE_MODE") && problems[0].contains("off, profile"));
        assert!(problems[1].contains("COMMTUNE_VERBOSE") && problems[1].contains("0, 1, 2"));
    }

    #[test]
    fn every_knob_is_documented_with_its_default() {
        let manual = include_str!("../LD_PRELOAD.md");
        for knob in KNOBS {
            let row = manual
                .lines()
                .find(|l| l.starts_with(&format!("| `{}` |", knob.name)))
                .unwrap_or_else(|| panic!("LD_PRELOAD.md has no row for {}", knob.name));
            assert!(
                row.contains(&format!("`{}`", knob.default)),
                "{}: default",
                knob.name
            );
        }
    }

    #[test]
    fn force_names_codelets_per_operation() {
        let (c, problems) = parse([(
            "COMMTUNE_FORCE",
            "allreduce=ring, alltoall=native,allgatherv=nosuch,bcast=x,junk",
        )]);
        assert_eq!(
            c.forced(Op::Allreduce),
            codelets::names(Op::Allreduce)
                .iter()
                .position(|n| *n == "ring")
        );
        assert_eq!(c.forced(Op::Alltoall), Some(0));
        assert_eq!(c.forced(Op::Allgatherv), None);
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(problems[0].contains("allgatherv has no codelet `nosuch` (codelets: native"));
        assert!(problems[1].contains("unknown operation `bcast`"));
        assert!(problems[2].contains("`junk` is not op=codelet"));
    }

    #[test]
    fn unknown_knob_is_named() {
        let (_, problems) = parse([("COMMTUNE_MODEE", "off"), ("COMMTUNE_LIB_MPICH", "/x")]);
        assert_eq!(problems.len(), 1);
        assert!(problems[0].contains("unknown knob COMMTUNE_MODEE"));
    }
}
