//! Tests written for mutants that survived `cargo mutants` (the run on
//! d617b3f): each names the mutant(s) it kills, as `file: code, mutation`.
//! Deterministic: a manual clock (or the hook clock, to put a racing
//! thread's action at the one instant a race needs), no sleeps. The one
//! mutant only a race kills has its loom model in `loom-tests/breaker.rs`
//! (`a_caller_that_loaded_an_earlier_round_retries_in_the_new_one`).

#[cfg(not(tailguard_loom))]
#[path = "support/hook.rs"]
mod hook;

#[cfg(not(tailguard_loom))]
mod api {
    use super::hook::HookClock;
    use std::sync::mpsc;
    use std::time::Duration;
    use tailguard::clock::ManualClock;
    use tailguard::{Breaker, RejectReason, State};

    const MS: Duration = Duration::from_millis(1);
    const SEC: Duration = Duration::from_secs(1);

    /// Kills, in `src/breaker/admission.rs`:
    /// * `Inner::reject_open_fast`: `self.deadline_gen.load(..) != u64::from(word.generation())`,
    ///   `!=` → `==` (the fast path would answer from the previous OPEN's
    ///   deadline: 600 ms here instead of the new OPEN's 1 s);
    /// * `Inner::admit_open`: `if current != word`, `!=` → `==` (a caller
    ///   that finds this OPEN's deadline not yet published would retry until
    ///   it is: here, forever, since the publisher waits for the caller).
    ///
    /// A trip's CAS and the publication of its deadline are two steps; a
    /// caller between them is rejected with the new OPEN's backoff (the loom
    /// model `a_call_racing_a_trip_is_admitted_before_it_or_rejected` says
    /// the same of a racing trip), never with what is left of an earlier
    /// OPEN's deadline, still stored but withdrawn. The hook clock puts the
    /// caller there: `trip_now` reads the clock after its CAS, before it
    /// publishes. The caller runs on a thread of its own, so that a caller
    /// that never answers fails the test instead of hanging it.
    #[test]
    fn a_call_between_a_trip_and_its_deadline_is_told_the_new_backoff() {
        let clock = HookClock::new();
        let b = Breaker::builder()
            .clock(clock.source())
            .ticker(false)
            .base_backoff(SEC)
            .max_backoff(30 * SEC)
            .build()
            .unwrap();
        b.trip_now(); // OPEN at 0: deadline 1 s
        clock.advance(400 * MS);
        b.reset(); // that OPEN is over; its deadline (1 s) stays stored, withdrawn
        let caller = b.clone();
        let (tx, rx) = mpsc::channel();
        let (seen_tx, seen_rx) = mpsc::channel();
        clock.at_read(1, move || {
            // Between the new OPEN's CAS and the publication of its deadline.
            std::thread::spawn(move || {
                let answer = caller.allow().err().map(|r| (r.reason(), r.retry_after()));
                let _ = tx.send(answer);
            });
            let answer = rx.recv_timeout(Duration::from_secs(60));
            seen_tx.send(answer).unwrap();
        });
        b.trip_now(); // OPEN again at 400 ms, level 0 (reset): deadline 1.4 s
        let answer = seen_rx
            .try_recv()
            .expect("the hook ran")
            .expect("a caller between the trip and its deadline is answered at once");
        assert_eq!(answer, Some((RejectReason::Open, Some(SEC))));
        // Published: the same answer from the deadline itself.
        let r = b.allow().unwrap_err();
        assert_eq!((r.reason(), r.retry_after()), (RejectReason::Open, Some(SEC)));
    }

    /// Kills, in `src/breaker/admission.rs`, `Inner::admit_open`:
    /// `i128::from(signed) < i128::from(deadline) - i128::from(self.config.max_ns)`,
    /// `<` → `<=`.
    ///
    /// "A correct clock is never more than the longest backoff before the
    /// deadline": a reading exactly `max_backoff` before it is taken as it
    /// is, and one nanosecond earlier as a step back (time resumes from the
    /// trip). The rejection fast path (`reject_open_fast`, `signed >=
    /// earliest`) draws the line there; so must the slow path, which an OPEN
    /// breaker in metrics-only mode always takes. The mutant takes the
    /// boundary reading for a step back: it moves the breaker's time forward
    /// to the trip (29 s), and the next probe looks 1 s away instead of 30 s.
    #[test]
    fn a_reading_exactly_max_backoff_before_the_deadline_is_not_a_step_back_on_either_path() {
        let build = |clock: &ManualClock| {
            Breaker::builder()
                .clock(clock.clone())
                .ticker(false)
                .base_backoff(SEC)
                .max_backoff(30 * SEC)
                .build()
                .unwrap()
        };
        for (back, next_probe_in) in [(29 * SEC, 30 * SEC), (29 * SEC + Duration::from_nanos(1), SEC)] {
            // The fast path (no override).
            let clock = ManualClock::new();
            let normal = build(&clock);
            clock.set(40 * SEC);
            normal.trip_now(); // deadline 41 s
            clock.rewind(back);
            let r = normal.allow().unwrap_err();
            assert_eq!(r.retry_after(), Some(next_probe_in), "fast path, {back:?} back");
            assert_eq!(
                normal.snapshot().next_probe_in,
                Some(next_probe_in),
                "fast path, {back:?} back"
            );

            // The slow path (metrics-only: the shadow rejection admits).
            let clock = ManualClock::new();
            let shadow = build(&clock);
            shadow.metrics_only();
            clock.set(40 * SEC);
            shadow.trip_now(); // deadline 41 s
            clock.rewind(back);
            assert!(shadow.allow().is_ok());
            let s = shadow.snapshot();
            assert_eq!((s.state, s.shadow_rejections), (State::Open, 1));
            assert_eq!(s.next_probe_in, Some(next_probe_in), "slow path, {back:?} back");
        }
    }

    /// Kills, in `src/breaker/admission.rs`, `Inner::release_lease` → `()`.
    ///
    /// A probe that answered gives its lease entry back at once: the round
    /// goes on (more good probes needed to close), and a quiet spell longer
    /// than the lease before the next probe is no sign of a leaked probe.
    /// The mutant leaves the answered probe's lease stamped, and the next
    /// caller finds it "out" past its lease: the breaker re-opens
    /// (`ProbeLeaseExpired`) though no probe is in flight.
    #[test]
    fn an_answered_probe_s_lease_is_given_back_so_a_quiet_spell_reopens_nothing() {
        let clock = ManualClock::new();
        let b = Breaker::builder()
            .clock(clock.clone())
            .ticker(false)
            .base_backoff(SEC)
            .half_open_probes(1)
            .success_to_close(2)
            .probe_lease(SEC)
            .build()
            .unwrap();
        b.trip_now();
        clock.advance(SEC);
        b.allow().unwrap().record_latency(MS, true); // probe 1 of 2: good
        clock.advance(10 * SEC); // nobody calls for ten leases
        let s = b.snapshot();
        assert_eq!(
            (s.state, s.probes_in_flight, s.probe_successes),
            (State::HalfOpen, 0, 1)
        );
        let probe = b.allow().expect("the second probe is admitted; nothing re-opened");
        probe.record_latency(MS, true);
        let s = b.snapshot();
        assert_eq!((s.state, s.trip_count), (State::Closed, 1), "{s:?}");
    }
}
