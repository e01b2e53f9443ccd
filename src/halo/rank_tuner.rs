//! The halo tuner (COMMTUNE_MODE=tune): each rank tunes its own episodes. A repeating episode key
//! searches the halo codelets and keeps the fastest.
//!
//! Halo codelets only reorder or repackage the same messages, so they match whatever codelet the
//! peers run: every rank searches and decides alone, from its own samples, with no agreement and
//! no collective. A sample is the episode's time (first post to last completion) or, with
//! `COMMTUNE_TIMING=period`, the time from the previous completion of the same key to this one (an
//! application iteration; each codelet then runs twice in a row and the first run is discarded).
//! A codelet that posted some of an episode's messages natively (its requirements, see
//! `CODELETS`) gives no sample; one that never manages to is dropped from the search, with a
//! note in the report. `neighbor` is not searched here: ranks try it together once each has
//! decided (`agreement`), and the samples of its instances go there.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};

use commtune_report::{Op, TuningData};
use dashmap::DashMap;
use rustc_hash::FxBuildHasher;

use super::agreement;
use commtune_tune::report::{Progress, Stage, not_worth_reason, warmup_reason};
use commtune_tune::stats::Samples;
use commtune_tune::timeline::{Mark, Timeline};
use commtune_tune::{Agreed, Candidate, Next, Partners, Plan, Timing};
use commtune_tune::{budget, sampling};

use crate::codelets;
use crate::codelets::halo::{CODELETS, NEIGHBOR};
use crate::keys::{Entry, Measured};
use crate::runtime;

/// Instances in a row a codelet may fail to give a sample before it leaves the search.
const MAX_MISSES: u32 = 4;

#[derive(Default)]
struct EpisodeTuner {
    instances: u64,
    search: Option<Search>,
    /// The winner, once decided.
    production: Option<usize>,
    /// The decided search, for the report.
    decided: Option<Plan>,
    search_instances: u64,
    /// The previous completion's clock ticks and codelet (period timing).
    last: Option<(u64, usize)>,
    timeline: Timeline,
    /// The rank's episode count at the class's first instance, and the latest check that found
    /// a search would not pay for itself yet (its instances, the instances expected to come).
    born: Option<u64>,
    not_worth: Option<(u64, f64)>,
}

/// Halo episodes this rank completed, all classes: the run's clock for do no harm (counted, like
/// a communicator's collectives, so that a long set-up before the first exchange does not count).
static EPISODES: AtomicU64 = AtomicU64::new(0);

/// Do no harm (`commtune_tune::budget`), per rank: the instances to come are estimated from the
/// class's rate since its first instance and the rank's episodes so far, at episode `now`.
fn worth_searching(t: &mut EpisodeTuner, born: u64, now: u64) -> bool {
    let settings = runtime::config().tuning;
    let instances = sampling::search_instances(
        Search::candidates().len(),
        settings.timing,
        1,
        settings.samples,
    );
    t.not_worth = budget::ready(settings.budget, t.instances, born, now, instances).err();
    t.not_worth.is_none()
}

struct Search {
    plan: Plan,
    /// Instances of the current round so far.
    step: usize,
    samples: Samples,
    misses: u32,
}

/// Keyed by the episode's size class (`Description::class`): episodes whose messages differ
/// only a little in size share one search.
static TUNING: LazyLock<DashMap<u64, EpisodeTuner, FxBuildHasher>> =
    LazyLock::new(DashMap::default);

fn class(entry: &Entry) -> u64 {
    entry.description.class.unwrap_or(entry.id() as u64)
}

/// Runs of each codelet in a row per round.
fn repeat() -> usize {
    runtime::config().tuning.timing.repeat()
}

/// The codelet the next instance of `entry` runs.
pub fn choose(entry: &'static Entry) -> usize {
    let Some(t) = TUNING.get(&class(entry)) else {
        return 0;
    };
    if let Some(winner) = t.production {
        return winner;
    }
    t.search
        .as_ref()
        .and_then(|s| s.plan.candidates.get(s.step / repeat()))
        .map_or(0, |c| c.index)
}

/// An instance of `entry` completed at clock `now` after `ticks`: it was to run `chosen` (None
/// when it was not predicted to be this key) and ran `ran` (native when the chosen codelet left
/// every message as it was: `unchanged`). Returns what the instance was for the report.
pub fn completed(
    entry: &'static Entry,
    chosen: Option<usize>,
    ran: usize,
    unchanged: bool,
    ticks: u64,
    now: u64,
) -> Measured {
    let now_episode = EPISODES.fetch_add(1, Ordering::Relaxed);
    let mut t = TUNING.entry(class(entry)).or_default();
    let t = &mut *t;
    t.instances += 1;
    let previous = t.last.replace((now, ran));
    if t.production.is_some() {
        // A `neighbor` trial compares the collective with this rank's winner, instance by
        // instance.
        let sample = match runtime::config().tuning.timing {
            Timing::Period => previous
                .filter(|&(_, codelet)| codelet == ran)
                .map(|(at, _)| now.saturating_sub(at)),
            Timing::Local | Timing::Barrier => Some(ticks),
        };
        sample
            .into_iter()
            .for_each(|s| agreement::sample(entry, ran == NEIGHBOR, s));
        return Measured::Sample;
    }
    let Some(search) = &mut t.search else {
        let born = *t.born.get_or_insert(now_episode);
        if t.instances >= runtime::config().tuning.warmup && worth_searching(t, born, now_episode) {
            t.search = Some(Search::new());
            t.timeline.push(Mark::Search {
                call: t.instances + 1,
                search: 1,
            });
        }
        return Measured::Other;
    };
    t.search_instances += 1;
    let Some(chosen) = chosen.filter(|&c| search.current() == Some(c)) else {
        return Measured::Search;
    };
    if unchanged {
        // Its samples would be native's.
        entry.note(format!(
            "halo codelet {} left the search: it changes nothing in this episode",
            CODELETS[chosen].name
        ));
        search.drop_current();
    }
    let sample = match runtime::config().tuning.timing {
        Timing::Period => previous
            .filter(|&(_, codelet)| codelet == chosen && ran == chosen)
            .map(|(at, _)| now.saturating_sub(at)),
        Timing::Local | Timing::Barrier => (ran == chosen).then_some(ticks),
    };
    let last_of_codelet = runtime::config().tuning.timing.samples_at(search.step);
    match sample {
        _ if unchanged => {}
        Some(ticks) if last_of_codelet => {
            search.misses = 0;
            search.samples.of(chosen).push(ticks as f64);
            search.step += 1;
            t.timeline.push(Mark::Sample {
                call: t.instances,
                codelet: chosen,
                ticks: ticks as f64,
            });
        }
        // The first run of a pair (period timing); the second then measures a whole period.
        _ if ran == chosen && !last_of_codelet => search.step += 1,
        // The second run of a pair whose first run did not count: run again.
        _ if ran == chosen => {}
        _ => {
            search.misses += 1;
            if search.misses >= MAX_MISSES {
                entry.note(format!(
                    "halo codelet {} did not apply to this episode's messages (requires {})",
                    CODELETS[chosen].name,
                    CODELETS[chosen].requirements()
                ));
                search.drop_current();
            }
        }
    }
    if search.step >= search.plan.candidates.len() * repeat()
        && let Some(winner) = search.end_round()
    {
        t.production = Some(winner);
        t.decided = t.search.take().map(|s| s.plan);
        t.timeline.push(Mark::Decision {
            call: t.instances,
            winner,
        });
    }
    Measured::Search
}

impl Search {
    /// The halo codelets a search tries (`neighbor` is tried by agreement, see `agreement`).
    fn candidates() -> Vec<Candidate> {
        let config = runtime::config();
        (0..CODELETS.len())
            .filter(|&c| c == 0 || (c != NEIGHBOR && !config.excluded(Op::Halo, c)))
            .map(|index| Candidate {
                index,
                partners: Partners::Pair,
                collectives: false,
            })
            .collect()
    }

    fn new() -> Search {
        let config = runtime::config();
        Search {
            plan: Plan::new(
                config.tuning.search,
                Search::candidates(),
                config.tuning.samples,
            ),
            step: 0,
            samples: Samples::default(),
            misses: 0,
        }
    }

    fn current(&self) -> Option<usize> {
        self.plan
            .candidates
            .get(self.step / repeat())
            .map(|c| c.index)
    }

    /// The codelet being tried cannot run this episode: it leaves the race (native never does:
    /// it always applies).
    fn drop_current(&mut self) {
        let at = self.step / repeat();
        self.plan.candidates.remove(at);
        let candidates = &self.plan.candidates;
        self.samples
            .retain(|c| candidates.iter().any(|k| k.index == c));
        self.step = at * repeat();
        self.misses = 0;
    }

    /// Ends a round: the winner, or None for another round.
    fn end_round(&mut self) -> Option<usize> {
        self.step = 0;
        let config = runtime::config();
        let estimates: Vec<Agreed> = self
            .plan
            .candidates
            .iter()
            .map(|c| self.samples.estimate(config.tuning.filter, c.index))
            .collect();
        match self
            .plan
            .after_round(&estimates, false, config.tuning.min_gain)
        {
            Next::Decide(winner) => Some(winner),
            Next::Round => None,
        }
    }
}

/// Whether this rank decided its codelet for `entry`.
pub fn is_settled(entry: &Entry) -> bool {
    TUNING
        .get(&class(entry))
        .is_some_and(|t| t.production.is_some())
}

/// The report's view of `entry`'s tuning (this rank's: halo decisions are per rank).
pub fn report(entry: &Entry, ns_per_tick: f64) -> TuningData {
    let warmup = runtime::config().tuning.warmup;
    let names = codelets::names(Op::Halo);
    let Some(t) = TUNING.get(&class(entry)) else {
        return Progress {
            stage: Stage::Warmup,
            reason: Some(warmup_reason(0, warmup)),
            plan: None,
            search_instances: 0,
            searches: 0,
            timeline: None,
        }
        .data(&names, ns_per_tick);
    };
    let stage = match (&t.production, &t.search) {
        // `neighbor` is chosen by the ranks together, over this rank's own winner.
        (Some(_), _) if agreement::chosen(entry) => Stage::Production(NEIGHBOR),
        (Some(winner), _) => Stage::Production(*winner),
        (None, Some(_)) => Stage::Search,
        (None, None) => Stage::Warmup,
    };
    Progress {
        stage,
        reason: (stage == Stage::Warmup).then(|| match t.not_worth {
            Some((instances, remaining)) if t.instances >= warmup => {
                not_worth_reason(instances, remaining)
            }
            _ => warmup_reason(t.instances, warmup),
        }),
        plan: t.search.as_ref().map(|s| &s.plan).or(t.decided.as_ref()),
        search_instances: t.search_instances,
        searches: u32::from(t.search.is_some() || t.decided.is_some()),
        timeline: Some(&t.timeline),
    }
    .data(&names, ns_per_tick)
}
