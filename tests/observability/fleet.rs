//! What a fleet adds up: the cumulative latency histogram (exact at every
//! edge, whatever the breaker went through) and the time spent OPEN (exact
//! on the manual clock, never decreasing).

use crate::support::hook::HookClock;
use crate::support::{builder, next_window, MS, SEC};
use std::sync::{Arc, Barrier};
use std::time::Duration;
use tailguard::clock::ManualClock;
use tailguard::{Breaker, BreakerBuilder, Jitter, LatencyHistogram, Mode, RelativeLatency, State};

/// xorshift64: the same draws on every run.
struct Draws(u64);

impl Draws {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A latency: mostly 1-40 ms, one call in `slow_one_in` 80-600 ms;
    /// now and then one exactly at an edge, a nanosecond either side of
    /// one, or at the threshold.
    fn latency(&mut self, slow_one_in: u64, threshold: Duration) -> Duration {
        let r = self.next();
        let edges: Vec<Duration> = LatencyHistogram::edges().collect();
        match r % 50 {
            0 => edges[(r >> 8) as usize % edges.len()],
            1 => edges[(r >> 8) as usize % edges.len()] + Duration::from_nanos(1),
            2 => edges[(r >> 8) as usize % edges.len()] - Duration::from_nanos(1),
            3 => threshold,
            4 => threshold + Duration::from_nanos(1),
            _ if slow_one_in > 0 && (r >> 8) % slow_one_in == 0 => Duration::from_micros(80_000 + (r >> 20) % 520_000),
            _ => Duration::from_micros(1_000 + (r >> 20) % 39_000),
        }
    }
}

/// Every count of `h` is the exact count of `truth` at or below its edge,
/// and the +Inf bucket holds the rest.
fn assert_exact(h: &LatencyHistogram, truth: &[Duration]) {
    assert_eq!(h.count(), truth.len() as u64);
    for (le, n) in h.buckets() {
        let exact = truth.iter().filter(|&&d| d <= le).count() as u64;
        assert_eq!(n, exact, "at {le:?}");
    }
}

/// A life of healthy windows, a slowdown that trips the breaker, rejected
/// calls while OPEN, probes (one failing), the close, calls counted then
/// forgotten by a reset: at every close, every edge of the histogram is the
/// exact count of the latencies recorded; its count is the calls, and (with
/// the absolute rule) the calls above the threshold's edge are the slow
/// calls. With the relative rule the histogram is the same; only the slow
/// count (judged by the lower threshold) differs.
#[test]
fn the_histogram_is_exact_at_every_edge_through_trips_probes_and_resets() {
    for relative in [false, true] {
        let clock = ManualClock::new();
        let threshold = 50 * MS;
        let mut b = builder(&clock)
            .latency_threshold(threshold)
            .base_backoff(2 * SEC)
            .jitter(Jitter::None)
            .min_calls(20);
        if relative {
            b = b.relative_latency(RelativeLatency::new().warmup(2));
        }
        let b = b.build().unwrap();
        let mut draws = Draws(0x9e37_79b9_7f4a_7c15);
        let mut truth: Vec<Duration> = Vec::new();
        let mut tripped = false;
        for window in 0..60u32 {
            let slow_one_in = if (20..26).contains(&window) { 3 } else { 0 };
            for _ in 0..150 {
                let d = draws.latency(slow_one_in, threshold);
                if let Ok(p) = b.allow() {
                    let probe = p.is_probe();
                    // A probe in the slowdown fails: a re-open.
                    let ok = !(probe && slow_one_in > 0);
                    p.record_latency(d, ok);
                    truth.push(d);
                }
            }
            if window == 40 {
                b.reset(); // forgets the window's counts: into the totals all the same
            }
            next_window(&b, &clock);
            tripped |= b.state() != State::Closed;
            let h = b.latency_histogram();
            assert_exact(&h, &truth);
            let s = b.snapshot();
            assert_eq!(h.count(), s.totals.calls, "window {window}");
            let at = h.count_at_or_below(threshold).expect("50 ms is an edge of its own");
            if relative {
                assert!(s.totals.slow >= h.count() - at);
            } else {
                assert_eq!(h.count() - at, s.totals.slow, "window {window}");
            }
        }
        assert!(tripped, "the slowdown tripped it");
        assert_eq!(b.state(), State::Closed);
        assert!(b.snapshot().rejections.open > 0, "rejected calls are not in it");
    }
}

/// Calls a close counted slow while still in flight have no latency: the
/// histogram leaves them out (and their latency when they end), so its
/// count is the calls less those.
#[test]
fn hung_calls_counted_in_flight_are_left_out() {
    let clock = ManualClock::new();
    let b = builder(&clock)
        .latency_threshold(100 * MS)
        .track_in_flight(true)
        .build()
        .unwrap();
    let hung: Vec<_> = (0..3).map(|_| b.allow().unwrap()).collect();
    for _ in 0..200 {
        b.allow().unwrap().record_latency(5 * MS, true);
    }
    let mut in_flight_slow = 0;
    for _ in 0..3 {
        next_window(&b, &clock);
        in_flight_slow += b.snapshot().window.in_flight_slow;
    }
    assert_eq!(in_flight_slow, 3, "each hung call counted once, slow");
    for p in hung {
        p.record_latency(3 * SEC, true); // counted already: not again
    }
    next_window(&b, &clock);
    let h = b.latency_histogram();
    let s = b.snapshot();
    assert_eq!(s.totals.calls, 203);
    assert_eq!(h.count(), s.totals.calls - in_flight_slow);
    assert_eq!(h.count_at_or_below(100 * MS), Some(200));
}

/// A local handle's calls, a timed-out call (slow whatever its elapsed
/// time: just over the threshold) and calls under 1 µs and over 68.7 s
/// land where they are stated to.
#[test]
fn local_handles_timeouts_and_the_ends_of_the_range() {
    let clock = ManualClock::new();
    let b = builder(&clock)
        .latency_threshold(20 * MS)
        .local_handles(1)
        .build()
        .unwrap();
    let local = b.local_handle().unwrap();
    for _ in 0..10 {
        local.allow().unwrap().record_latency(3 * MS, true);
    }
    b.allow().unwrap().record_timeout(5 * MS);
    b.allow().unwrap().record_latency(Duration::from_nanos(10), true);
    b.allow().unwrap().record_latency(Duration::from_secs(100), true);
    next_window(&b, &clock);
    let h = b.latency_histogram();
    assert_eq!(h.count(), 13);
    assert_eq!(h.count_at_or_below(Duration::from_nanos(1024)), Some(1));
    assert_eq!(
        h.count_at_or_below(20 * MS),
        Some(11),
        "the timeout is above the threshold"
    );
    let (last, below) = h.buckets().last().unwrap();
    assert!(last < Duration::from_secs(49));
    assert_eq!(h.count() - below, 1, "100 s: in +Inf");
}

/// Two threads record while a third closes windows: at the end every edge
/// holds exactly what the two recorded.
#[test]
#[cfg_attr(miri, ignore = "40,000 calls and 200 closes: minutes under Miri")]
fn calls_racing_closes_are_each_counted_once() {
    let clock = ManualClock::new();
    let b = builder(&clock).latency_threshold(50 * MS).build().unwrap();
    let start = Arc::new(Barrier::new(3));
    let workers: Vec<_> = (0..2u64)
        .map(|t| {
            let (b, start) = (b.clone(), Arc::clone(&start));
            std::thread::spawn(move || {
                let mut draws = Draws(0x1234_5678 + t);
                let mut mine = Vec::new();
                start.wait();
                for _ in 0..20_000 {
                    // Healthy (under the threshold, so nothing trips and no
                    // verdict goes stale): the threshold edge is tested above.
                    let d = Duration::from_micros(1 + draws.next() % 45_000);
                    b.allow().unwrap().record_latency(d, true);
                    mine.push(d);
                }
                mine
            })
        })
        .collect();
    start.wait();
    for _ in 0..200 {
        next_window(&b, &clock);
        std::thread::yield_now();
    }
    let mut truth: Vec<Duration> = workers.into_iter().flat_map(|w| w.join().unwrap()).collect();
    next_window(&b, &clock);
    truth.sort();
    assert_exact(&b.latency_histogram(), &truth);
}

fn timed(clock: &ManualClock) -> BreakerBuilder {
    builder(clock)
        .base_backoff(2 * SEC)
        .max_backoff(60 * SEC)
        .jitter(Jitter::None)
        .success_to_close(1)
}

/// The time OPEN, exactly: up to the transition out of OPEN (not the
/// deadline: OPEN lasts until a caller or a close moves it), summed over
/// re-opens; not HALF_OPEN, not CLOSED, not forced open; metrics-only's
/// shadow OPEN counted; a clock stepped back never takes any away.
#[test]
fn time_open_is_summed_over_opens_and_only_opens() {
    let clock = ManualClock::new();
    let b = timed(&clock).build().unwrap();
    let open = |b: &Breaker| b.snapshot().open_time_total;
    b.trip_now();
    clock.advance(3 * SEC);
    assert_eq!(open(&b), 3 * SEC, "OPEN past its deadline until moved");
    let probe = b.allow().unwrap(); // OPEN -> HALF_OPEN now
    clock.advance(SEC);
    assert_eq!(open(&b), 3 * SEC, "HALF_OPEN is not OPEN");
    probe.record(false); // re-opens, level 1: 4 s
    clock.advance(5 * SEC);
    b.tick(); // -> HALF_OPEN at the close
    assert_eq!(open(&b), 8 * SEC);
    b.allow().unwrap().record(true);
    assert_eq!(b.state(), State::Closed);
    clock.advance(100 * SEC);
    assert_eq!(open(&b), 8 * SEC);

    b.force_open();
    clock.advance(10 * SEC);
    assert_eq!(open(&b), 8 * SEC, "forced open is not counted");
    b.reset();
    b.metrics_only();
    b.trip_now(); // the shadow OPEN of metrics-only
    assert_eq!(b.snapshot().mode, Mode::MetricsOnly);
    clock.advance(2 * SEC);
    assert_eq!(open(&b), 10 * SEC, "metrics-only: the time it would have been OPEN");

    let before = open(&b);
    clock.rewind(Duration::from_secs(3600));
    assert!(open(&b) >= before, "a clock stepped back takes nothing away");
    b.reset();
    assert!(open(&b) >= before);
}

/// A snapshot between a transition out of OPEN and the withdrawal of its
/// deadline reads the OPEN as still running, past the transition's time:
/// the total it reports never goes back below that afterwards (a counter
/// Prometheus would read as a reset otherwise).
#[test]
fn a_snapshot_racing_the_end_of_an_open_never_sees_the_total_go_back() {
    let clock = HookClock::new();
    let b = Breaker::builder()
        .clock(clock.source())
        .ticker(false)
        .base_backoff(20 * SEC)
        .build()
        .unwrap();
    b.trip_now();
    clock.advance(5 * SEC);
    let seen = Arc::new(std::sync::Mutex::new(None));
    {
        let (b, seen, clock2) = (b.clone(), Arc::clone(&seen), clock.clone());
        // The override's one clock read, after its CAS and before the OPEN's
        // deadline is withdrawn: a second later, another thread reads.
        clock.at_read(1, move || {
            clock2.advance(SEC);
            let s = std::thread::spawn(move || b.snapshot()).join().unwrap();
            *seen.lock().unwrap() = Some(s);
        });
    }
    b.force_closed();
    assert!(clock.fired());
    let during = seen.lock().unwrap().take().unwrap();
    assert_eq!(during.mode, Mode::ForcedClosed, "read after the transition");
    assert_eq!(during.open_time_total, 6 * SEC, "the OPEN read as still running");
    let after = b.snapshot().open_time_total;
    assert!(
        after >= during.open_time_total,
        "{after:?} < {:?}",
        during.open_time_total
    );
    clock.advance(Duration::from_secs(3600));
    assert_eq!(b.snapshot().open_time_total, after, "closed: it stays");
}

/// The export: the slow calls read off the histogram (`_count` less the
/// threshold's bucket) are `breaker_slow_calls_total`, and the time OPEN is
/// `breaker_open_seconds_total`; with a prefix, no series keeps `breaker_`.
#[cfg(feature = "prometheus")]
#[test]
fn the_export_reads_slow_calls_and_time_open_and_takes_a_prefix() {
    use tailguard::dlq::{DeadLetterQueue, Priority};
    use tailguard::emit::Emitter;
    use tailguard::prometheus::{BreakerCollector, HistogramExport};
    use tailguard::Registry;

    let clock = ManualClock::new();
    let registry = Registry::new();
    let b = registry
        .get_or_create("pricing", || timed(&clock).latency_threshold(100 * MS))
        .unwrap();
    for i in 0..300u32 {
        let d = if i % 10 == 0 { 150 * MS } else { (1 + i % 90) * MS };
        b.allow().unwrap().record_latency(d, true);
    }
    next_window(&b, &clock);
    b.trip_now();
    clock.advance(1500 * MS);
    let e = Emitter::builder(b.clone(), DeadLetterQueue::with_capacity(8).unwrap())
        .bulkhead(2)
        .unwrap()
        .build()
        .unwrap();
    registry.attach_emitter("pricing", &e).unwrap();
    let _ = e.emit_blocking(1u32, Priority::Routine, |_, _| Ok::<_, ()>(()));

    let text = tailguard::prometheus::encode_text(&registry);
    let value = |series: &str| -> f64 {
        let line = text
            .lines()
            .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
            .unwrap_or_else(|| panic!("no {series} in\n{text}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    let count = value("breaker_call_duration_seconds_count{consumer=\"pricing\"}");
    let at_threshold = value("breaker_call_duration_seconds_bucket{consumer=\"pricing\",le=\"0.1\"}");
    let slow = value("breaker_slow_calls_total{consumer=\"pricing\"}");
    assert_eq!((count, count - at_threshold), (300.0, slow));
    assert_eq!(slow, 30.0);
    assert_eq!(value("breaker_open_seconds_total{consumer=\"pricing\"}"), 1.5);

    let prefixed = BreakerCollector::new(registry.clone())
        .with_prefix("edge_router_")
        .unwrap()
        .encode_text();
    let names: Vec<&str> = prefixed
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    assert!(names.len() > 40, "every family: {names:?}");
    for name in names {
        assert!(name.starts_with("edge_router_"), "{name}");
    }
    let stripped = prefixed.replace("edge_router_", "breaker_");
    assert_eq!(stripped, tailguard::prometheus::encode_text(&registry));

    // One edge an octave: the edges kept (the threshold's among them) and
    // the sum and count are the full export's lines, exactly.
    let full = tailguard::prometheus::encode_text(&registry);
    let octaves = BreakerCollector::new(registry.clone())
        .with_histogram(HistogramExport::Octaves)
        .encode_text();
    let histogram_lines = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.starts_with("breaker_call_duration_seconds"))
            .map(str::to_owned)
            .collect()
    };
    let (full, octaves) = (histogram_lines(&full), histogram_lines(&octaves));
    assert_eq!((full.len(), octaves.len()), (56, 30));
    for line in &octaves {
        assert!(full.contains(line), "{line}");
    }
    assert!(
        octaves.iter().any(|l| l.contains("le=\"0.1\"")),
        "the threshold's edge is kept"
    );
    assert!(octaves.iter().any(|l| l.contains("le=\"0.134217727\"")), "2^27 ns - 1");
    let off = BreakerCollector::new(registry)
        .with_histogram(HistogramExport::Off)
        .encode_text();
    assert!(!off.contains("call_duration"));
}
