//! Handles: owned local handles and owned permits count as the borrowed
//! ones do; every handle is unwind safe.

use crate::support::*;
use tailguard::clock::ManualClock;
use tailguard::{Breaker, RejectReason};

#[test]
fn local_handles_count_into_the_same_windows() {
    let clock = ManualClock::new();
    let b = builder(&clock).local_handles(2).build().unwrap();
    let h1 = b.local_handle().unwrap();
    let h2 = b.local_handle().unwrap();
    assert!(b.local_handle().is_err());
    for _ in 0..10 {
        h1.allow().unwrap().record_latency(900 * MS, true);
        h2.allow().unwrap().record_latency(MS, false);
        b.allow().unwrap().record_latency(MS, true);
    }
    drop(h2.allow().unwrap());
    next_window(&b, &clock);
    let w = b.snapshot().window;
    assert_eq!((w.calls, w.errors, w.slow, w.cancelled), (30, 10, 10, 1));
    drop(h1);
    let h3 = b.local_handle().unwrap();
    h3.allow().unwrap().record(true);
    next_window(&b, &clock);
    assert_eq!(b.snapshot().window.calls, 1);
}

#[test]
fn owned_permits_count_as_borrowed_ones_and_give_probe_slots_back() {
    let clock = ManualClock::new();
    let b = builder(&clock).half_open_probes(1).success_to_close(2).build().unwrap();
    // CLOSED: verdicts, a drop (cancelled) and an abandon (nothing) count as
    // with a borrowed permit, from another thread too.
    let owned = b.allow_owned().unwrap();
    std::thread::spawn(move || owned.record_latency(900 * MS, true))
        .join()
        .unwrap();
    b.allow_owned().unwrap().record_latency(8 * MS, false);
    drop(b.allow_owned().unwrap());
    b.allow_owned().unwrap().abandon();
    next_window(&b, &clock);
    let w = b.snapshot().window;
    assert_eq!((w.calls, w.slow, w.errors, w.cancelled), (2, 1, 1, 1));
    // HALF_OPEN: a dropped owned probe, and an abandoned one, give the slot
    // back; the breaker dropped meanwhile stays alive for the permit. (The
    // reset clears the sequential test's evidence of the window above, with
    // which the second breaching window would trip already.)
    b.reset();
    trip(&b, &clock);
    clock.advance(60 * SEC);
    let probe = b.allow_owned().unwrap();
    assert!(probe.is_probe());
    assert_eq!(b.allow_owned().unwrap_err().reason(), RejectReason::ProbesBusy);
    drop(probe);
    let probe = b.allow_owned().unwrap();
    probe.abandon();
    let probe = b.allow_owned_at(b.clock().raw()).unwrap();
    assert_eq!(probe.start(), b.clock().raw());
    let weak = b.clone();
    drop(b);
    probe.record_latency(MS, true);
    assert_eq!(weak.snapshot().probe_successes, 1);
}

/// A breaker is usable across `catch_unwind` (and after a panic
/// elsewhere), as are the queue, the emitter, the bulkhead and the
/// registry: their types say so.
#[test]
fn the_crate_s_handles_are_unwind_safe() {
    use std::panic::{catch_unwind, RefUnwindSafe, UnwindSafe};
    fn unwind_safe<T: UnwindSafe + RefUnwindSafe>() {}
    unwind_safe::<Breaker>();
    unwind_safe::<tailguard::Bulkhead>();
    unwind_safe::<tailguard::Registry>();
    unwind_safe::<tailguard::dlq::DeadLetterQueue<String>>();
    unwind_safe::<tailguard::dlq::Producer<String>>();
    unwind_safe::<tailguard::emit::Emitter<String>>();
    let clock = ManualClock::new();
    let b = builder(&clock).on_transition(|_| {}).build().unwrap();
    let panicked = catch_unwind(|| {
        b.allow().unwrap().record(true);
        panic!("a bug elsewhere (expected by this test)");
    });
    assert!(panicked.is_err());
    assert!(catch_unwind(|| b.allow().is_ok()).unwrap(), "still usable");
}
