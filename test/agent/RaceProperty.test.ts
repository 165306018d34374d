/**
 * Races across agent lifetimes: random follow-ups, steers, injections, quiet queueing, inbox
 * removals, replacements and splices, cancels in both modes aimed at every phase, and
 * dispose/resume, against an agent whose every slow point waits a random virtual time.
 *
 * Invariants after quiescence (checked by `judge` in raceHarness.ts, which cites the rules): the log
 * checks (SPEC 5.2) and durable equals live; every accepted message is inserted once and is exactly
 * one of pending, entered once, claimed-then-blocked/aborted, or discarded (3.9); turn numbers are
 * contiguous; and no wake is stranded, across dispose and reopen: every `turn/end` continues the
 * chain exactly when waking (or, after `aborted`, latched) work is pending and nobody is disposing
 * (4.2, 4.8, 7.6, 3.7), a waking delivery to an idle agent opens a turn at once (3.3), and whatever
 * waking work is still pending at the end was parked by an abort, by disposal and resume (3.7, 6.4),
 * or queued without waking while idle (3.8).
 *
 * `TILLER_RACE_RUNS` sets the number of programs (default 2000), run as two suites of half each,
 * each with its own coverage check; a failure prints `TILLER_RACE_SEED=<n>`, which replays that one
 * program.
 */
import { raceSuite } from "./raceHarness.js"

raceSuite(1)
raceSuite(2)
