#!/usr/bin/env python3
"""Replays a rank's halo tuning over per-exchange times of each codelet forced alone.

    bench/halo-lead.py [DIR] [--runs N] [--exchanges N]

DIR holds CODELET.REP files, one time per exchange in microseconds (rank 0 of `bench/loop.c
halo BYTES CALLS` run with LOOP_EPISODES=DIR/CODELET.REP and COMMTUNE_FORCE=halo=CODELET; the
default, bench/data/halo-rig-64k, is 64 KiB faces on `scripts/cluster up --hosts 4 --rate 1gbit`,
2000 exchanges, two runs per codelet). Each replayed run draws every exchange at random from the
codelet's times (both runs pooled, the first 20 exchanges of each left out) and does what the
library's halo tuner does with the default knobs: native until do no harm lets the search start
(exchange 80), two rounds of blocks of 8 (the first of each not measured) over the five codelets,
the winner by the least mean, the self-check (a window of 16 after one unmeasured exchange: a
winner more than 25 % over its estimate and slower than the runner-up's puts the runner-up on
trial for a window; a runner-up faster by the minimum gain replaces it), then, with lead checks,
a window of 32 of the winner after which the codelet with the least latest time runs if it is
more than 25 % faster (`check::Lead`). It prints each variant's time over the time of the codelet with the least mean,
averaged over the runs, and at the 90th percentile. What it leaves out: ranks (every exchange is
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


def replay(times, exchanges, lead, rng, wait=80, rounds=2, block=8, window=16, lead_window=32):
    clock = 0.0
    done = 0

    def run(codelet, count):
        nonlocal clock, done
        count = min(count, exchanges - done)
        drawn = [rng.choice(times[codelet]) for _ in range(count)]
        clock += sum(drawn)
        done += count
        return statistics.mean(drawn[1:]) if count > 1 else None

    run("native", wait)
    samples = {c: [] for c in CODELETS}
    for _ in range(rounds):
        for codelet in CODELETS:
            sample = run(codelet, block)
            if sample is not None:
                samples[codelet].append(sample)
    estimate = {c: statistics.mean(s) for c, s in samples.items() if s}
    ranked = sorted(estimate, key=estimate.get)
    winner, runner_up = ranked[0], ranked[1]
    latest = dict(estimate)
    realised = run(winner, window + 1)
    if realised is not None:
        latest[winner] = realised
        if realised > estimate[winner] * (1 + MARGIN) and realised > estimate[runner_up] * (1 + MIN_GAIN):
            trial = run(runner_up, window + 1)
            if trial is not None:
                latest[runner_up] = trial
                if trial < realised * (1 - MIN_GAIN):
                    winner = runner_up
    switched = True
    while lead and done < exchanges:
        realised = run(winner, lead_window + 1 if switched else lead_window)
        if realised is None:
            break
        latest[winner] = realised
        ahead = [c for c in latest if c != winner and latest[c] * (1 + MARGIN) < realised]
        switched = bool(ahead)
        if ahead:
            winner = min(ahead, key=latest.get)
    run(winner, exchanges - done)
    return clock / exchanges


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("dir", nargs="?", default=os.path.join(here, "data", "halo-rig-64k"))
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--exchanges", type=int, default=2000)
    args = parser.parse_args()
    times = load(args.dir)
    best = min(statistics.mean(t) for t in times.values())
    print("mean us per exchange: " + ", ".join(f"{c} {statistics.mean(times[c]):.0f}" for c in CODELETS))
    rng = random.Random(1)
    for name, lead in [("self-check alone", False), ("with lead checks", True)]:
        runs = sorted(replay(times, args.exchanges, lead, rng) / best for _ in range(args.runs))
        p90 = runs[int(0.9 * len(runs))]
        print(f"{name}: {statistics.mean(runs):.3f} of the best on average, {p90:.3f} at the 90th percentile")


if __name__ == "__main__":
    main()
