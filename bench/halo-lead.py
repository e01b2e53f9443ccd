#!/usr/bin/env python3
"""Replays a rank's halo tuning over per-exchange times of each codelet forced alone.

    bench/halo-lead.py [DIR] [--runs N] [--exchanges N] [--block N]

DIR holds CODELET.REP files, one time per exchange in microseconds (rank 0 of `bench/loop.c
halo BYTES CALLS` run with LOOP_EPISODES=DIR/CODELET.REP and COMMTUNE_FORCE=halo=CODELET; the
default, bench/data/halo-rig-64k, is 64 KiB faces on `scripts/cluster up --hosts 4 --rate 1gbit`,
2000 exchanges, two runs per codelet). Each replayed run draws every exchange at random from the
codelet's times (both runs pooled, the first 20 exchanges of each left out) and does what the
library's halo tuner does with the default knobs: native until do no harm lets the search start
(twice its first round: exchange 40), two rounds of blocks of 4 (--block; the first of each not measured)
over the five codelets, the winner by the least estimate, each codelet's median less its own mean
shortfall below it plus the mean excess above their medians of the episodes of every codelet that bursts (all but `pairwise`,
`Sampler::estimates_sharing_tails`; "own tails": each codelet's mean), the self-check (a window of 16 after one unmeasured exchange: a
winner more than 25 % over its estimate and slower than the runner-up's puts the runner-up on
trial for a window; a runner-up faster by the minimum gain replaces it), then, with lead checks,
a window of 32 of the winner after which the codelet with the least latest time runs if it is
more than 25 % faster (`check::Lead`; a window leaves out episodes beyond 50 times its median,
`check::LeadWindow`). It prints each variant's time over the time of the codelet with the least
mean, averaged over the runs, and at the 90th percentile. What it leaves out: ranks (every exchange is
one draw, as if all ranks ran the same codelet), the search's second round cut (no codelet here
is twice the leader's), and the drift checks.
"""

import argparse
import os
import random
import statistics

CODELETS = ["native", "pairwise", "pack", "persistent", "irecv_first"]
MIN_GAIN = 0.02
MARGIN = 0.25
STALL = 50.0


def load(directory):
    times = {}
    for codelet in CODELETS:
        pooled = []
        for name in sorted(os.listdir(directory)):
            if name.split(".")[0] == codelet:
                with open(os.path.join(directory, name)) as f:
                    pooled += [float(line) for line in f][20:]
        times[codelet] = pooled
    return times


def estimates(episodes, shared):
    """Each codelet's estimate from its measured episodes: its mean, or with `shared` tails its
    median, less its own mean shortfall below it, plus the mean excess of the episodes of its
    kind (bursting or not) above their own codelets' medians."""
    if not shared:
        return {c: statistics.mean(e) for c, e in episodes.items() if e}
    median = {c: statistics.median(e) for c, e in episodes.items() if e}
    estimate = {}
    for kind in ({"pairwise"}, set(CODELETS) - {"pairwise"}):
        excess = [max(0.0, x - median[c]) for c in kind if c in median for x in episodes[c]]
        tail = statistics.mean(excess) if excess else 0.0
        estimate.update({
            c: median[c] - statistics.mean(max(0.0, median[c] - x) for x in episodes[c]) + tail
            for c in kind if c in median
        })
    return estimate


def mean_of(episodes):
    return statistics.mean(episodes) if episodes else None


def lead_mean(episodes):
    """A lead check's window: its mean, episodes beyond STALL times its median left out
    (`check::LeadWindow`)."""
    if not episodes:
        return None
    median = sorted(episodes)[len(episodes) // 2]
    return statistics.mean(x for x in episodes if x <= STALL * median)


def replay(times, exchanges, lead, shared, rng, rounds=2, block=4, window=16, lead_window=32):
    clock = 0.0
    done = 0

    def run(codelet, count):
        nonlocal clock, done
        count = min(count, exchanges - done)
        drawn = [rng.choice(times[codelet]) for _ in range(count)]
        clock += sum(drawn)
        done += count
        return drawn[1:]

    run("native", 2 * len(CODELETS) * block)
    episodes = {c: [] for c in CODELETS}
    for _ in range(rounds):
        for codelet in CODELETS:
            episodes[codelet] += run(codelet, block)
    estimate = estimates(episodes, shared)
    chosen = min(estimate, key=estimate.get)
    ranked = sorted(estimate, key=estimate.get)
    winner, runner_up = ranked[0], ranked[1]
    latest = dict(estimate)
    realised = mean_of(run(winner, window + 1))
    if realised is not None:
        latest[winner] = realised
        if realised > estimate[winner] * (1 + MARGIN) and realised > estimate[runner_up] * (1 + MIN_GAIN):
            trial = mean_of(run(runner_up, window + 1))
            if trial is not None:
                latest[runner_up] = trial
                if trial < realised * (1 - MIN_GAIN):
                    winner = runner_up
    switched = True
    while lead and done < exchanges:
        realised = lead_mean(run(winner, lead_window + 1 if switched else lead_window))
        if realised is None:
            break
        latest[winner] = realised
        ahead = [c for c in latest if c != winner and latest[c] * (1 + MARGIN) < realised]
        switched = bool(ahead)
        if ahead:
            winner = min(ahead, key=latest.get)
    run(winner, exchanges - done)
    return clock / exchanges, chosen


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("dir", nargs="?", default=os.path.join(here, "data", "halo-rig-64k"))
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--exchanges", type=int, default=2000)
    parser.add_argument("--block", type=int, default=4, help="COMMTUNE_HALO_BLOCK")
    args = parser.parse_args()
    times = load(args.dir)
    best = min(statistics.mean(t) for t in times.values())
    print("mean us per exchange: " + ", ".join(f"{c} {statistics.mean(times[c]):.0f}" for c in CODELETS))
    rng = random.Random(1)
    variants = [
        ("own tails, self-check alone", False, False),
        ("own tails, with lead checks", True, False),
        ("shared tails, with lead checks (the library)", True, True),
    ]
    for name, lead, shared in variants:
        replays = [replay(times, args.exchanges, lead, shared, rng, block=args.block) for _ in range(args.runs)]
        runs = sorted(r / best for r, _ in replays)
        p90 = runs[int(0.9 * len(runs))]
        chose = sum(chosen == "pairwise" for _, chosen in replays) / len(replays)
        print(f"{name}: {statistics.mean(runs):.3f} of the best on average, {p90:.3f} at the 90th "
              f"percentile; the search chose pairwise in {100 * chose:.0f} %")


if __name__ == "__main__":
    main()
