//! The report's view of a key's tuning, built alike for every tuner (collectives agreed across
//! ranks, halo episodes per rank).

use commtune_report::TuningData;

use crate::policy::Plan;
use crate::timeline::Timeline;

/// Where a key's tuning stands.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Stage {
    Warmup,
    Search,
    /// Production with this codelet (index in the operation's registry).
    Production(usize),
    Untuned,
}

impl Stage {
    fn name(self) -> &'static str {
        match self {
            Stage::Warmup => "warmup",
            Stage::Search => "search",
            Stage::Production(_) => "production",
            Stage::Untuned => "untuned",
        }
    }
}

/// What a tuner knows of one key.
pub struct Progress<'p> {
    pub stage: Stage,
    /// Why the key is not (yet) tuned, or how its search ended.
    pub reason: Option<String>,
    /// The search in progress, or the one decided last.
    pub plan: Option<&'p Plan>,
    /// Instances spent searching, all searches together.
    pub search_instances: u64,
    pub searches: u32,
    pub timeline: Option<&'p Timeline>,
}

/// Why a key called `instances` times is still warming up.
pub fn warmup_reason(instances: u64, warmup: u64) -> String {
    format!("called {instances} times, fewer than COMMTUNE_WARMUP={warmup}")
}

/// Why a warm key is not searched yet on a rank that found its search worth it: each rank
/// weighs a search with its own times, and one starts only where every rank finds it worth it.
pub const NOT_WORTH_ELSEWHERE: &str = "not searched yet: a search would pay for itself on this \
     rank, not yet on every rank (each weighs its cost with its own times, and a search starts \
     only where every rank finds it worth it)";

/// Why a warm key is not searched yet (do no harm, `budget`).
pub fn not_worth_reason(not_worth: &crate::budget::NotWorth) -> String {
    let crate::budget::NotWorth {
        instances,
        remaining,
        times,
    } = not_worth;
    format!(
        "not searched yet: a search's first rounds cost as much as {instances} calls of mostly \
         slower codelets (its own barriers and reductions counted in), and about {remaining:.0} \
         more calls are expected (as many as so far, at this call's rate), fewer than {times:.1} \
         times that (fewer times where the calls so far have a tail a winner may save); a \
         search starts when the run has gone on long enough to pay for them \
         (COMMTUNE_BUDGET=1: at once)"
    )
}

impl Progress<'_> {
    /// The report's tuning data (`names`: the operation's codelets; durations converted with
    /// `ns_per_tick`). What a winner saved is measured per site, from the calls, not here.
    pub fn data(&self, names: &[&str], ns_per_tick: f64) -> TuningData {
        TuningData {
            phase: self.stage.name().to_string(),
            reason: self.reason.clone(),
            winner: match self.stage {
                Stage::Production(w) => Some(names[w].to_string()),
                _ => None,
            },
            search_instances: self.search_instances,
            searches: self.searches,
            rounds: self.plan.map_or(0, |p| p.rounds),
            codelets: self
                .plan
                .map_or_else(Vec::new, |p| p.report_estimates(names, ns_per_tick)),
            timeline: self
                .timeline
                .map_or_else(Vec::new, |t| t.events(names, ns_per_tick)),
            timeline_dropped: self.timeline.map_or(0, |t| t.dropped),
            saved_s: None,
            saving: None,
            check: None,
            prediction: None,
            search_timing: None,
            collective_over_call: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn production_names_its_winner_and_warmup_says_why() {
        let names = ["native", "ring"];
        let data = Progress {
            stage: Stage::Production(1),
            reason: None,
            plan: None,
            search_instances: 12,
            searches: 1,
            timeline: None,
        }
        .data(&names, 1.0);
        assert_eq!(data.phase, "production");
        assert_eq!(data.winner.as_deref(), Some("ring"));
        assert_eq!(data.search_instances, 12);
        let warm = Progress {
            stage: Stage::Warmup,
            reason: Some(warmup_reason(2, 3)),
            plan: None,
            search_instances: 0,
            searches: 0,
            timeline: None,
        }
        .data(&names, 1.0);
        assert_eq!(warm.winner, None);
        assert_eq!(
            warm.reason.as_deref(),
            Some("called 2 times, fewer than COMMTUNE_WARMUP=3")
        );
    }
}
