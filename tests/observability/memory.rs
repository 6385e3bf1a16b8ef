//! The memory a breaker takes, and the figures the docs state for it.

use tailguard::Breaker;

/// Bytes of one shared shard (buckets, carries and counters, cache-padded
/// to 128 bytes on x86-64).
const SHARD: usize = 640;

/// A breaker built on `b`, called once from the calling thread and once
/// from another thread, and how many shards those two calls built: one
/// each, or one for both when the two threads' indices map to the same
/// shard (indices are handed out round-robin to every thread of the
/// process, and this binary's other tests start threads too).
#[cfg(target_arch = "x86_64")]
fn used_by_two(b: tailguard::BreakerBuilder) -> (Breaker, usize) {
    let breaker = b.ticker(false).build().unwrap();
    let fresh = breaker.memory_bytes();
    breaker.allow().unwrap().record(true);
    let other = breaker.clone();
    std::thread::spawn(move || other.allow().unwrap().record(true))
        .join()
        .unwrap();
    let grown = breaker.memory_bytes() - fresh;
    assert!(
        grown == SHARD || grown == 2 * SHARD,
        "{grown} bytes: one shard per thread that called"
    );
    (breaker, grown / SHARD)
}

/// Default settings: with the `tracing` feature every breaker also keeps a
/// 64-event queue (about 3 KB), so the figure is for a build without it.
/// (The exact figures are checked against the docs below.)
#[test]
#[cfg(all(target_arch = "x86_64", not(feature = "tracing")))]
fn one_breaker_is_about_two_and_a_half_kilobytes_at_default_settings_on_two_shards() {
    let (b, built) = used_by_two(Breaker::builder().shards(2));
    let two = b.memory_bytes() + (2 - built) * SHARD;
    assert!(two <= 2560 + 128, "{two} bytes");
    assert!(50 * two <= 129 * 1024, "50 consumers in about 129 KB");
}

/// The shards a breaker holds are those its threads use, not the shard
/// count it was configured with (the machine's cores by default): 64
/// shards used by two threads cost at most two shards and 64 slots.
#[test]
#[cfg(target_arch = "x86_64")]
fn a_breaker_holds_the_shards_its_threads_use_not_the_machine_s() {
    let fresh = Breaker::builder().ticker(false).shards(64).build().unwrap();
    let empty = fresh.memory_bytes();
    assert_eq!(
        empty
            - Breaker::builder()
                .ticker(false)
                .shards(1)
                .build()
                .unwrap()
                .memory_bytes(),
        63 * 8,
        "a slot per shard it may grow, nothing more"
    );
    fresh.allow().unwrap().record(true);
    let one = fresh.memory_bytes();
    assert_eq!(one - empty, SHARD, "the first call builds the calling thread's shard");
    for _ in 0..1000 {
        fresh.allow().unwrap().record(false);
        let _ = fresh.allow().unwrap();
    }
    assert!(fresh.allow().is_ok());
    assert_eq!(fresh.memory_bytes(), one, "later calls build nothing");
    let (wide, built) = used_by_two(Breaker::builder().shards(64));
    let narrow = Breaker::builder()
        .ticker(false)
        .shards(2)
        .build()
        .unwrap()
        .memory_bytes();
    assert_eq!(
        wide.memory_bytes(),
        narrow + 62 * 8 + built * SHARD,
        "64 shards used by two threads: their shards and 62 more empty slots"
    );
    assert!(wide.memory_bytes() < 2 * (narrow + 2 * SHARD));
}

/// The memory figures `docs/figures.md` states are the code's, exactly, on the
/// target they are stated for (x86-64, without `tracing`, whose event
/// queue every breaker then keeps).
#[test]
#[cfg(all(target_arch = "x86_64", not(feature = "tracing")))]
fn the_stated_memory_figures_are_the_code_s() {
    let bytes = |b: tailguard::BreakerBuilder| b.ticker(false).build().unwrap().memory_bytes();
    // Called from this thread alone: exactly one shard built.
    let used = |b: tailguard::BreakerBuilder| {
        let b = b.ticker(false).build().unwrap();
        b.allow().unwrap().record(true);
        b.memory_bytes()
    };
    let one = bytes(Breaker::builder().shards(1));
    let slot = bytes(Breaker::builder().shards(2)) - one;
    let base = one - slot;
    let per_shard = used(Breaker::builder().shards(1)) - one;
    assert_eq!(per_shard, SHARD);
    let two = bytes(Breaker::builder().shards(2));
    // Both shards of a 2-core machine in use.
    let two_used = two + 2 * per_shard;
    let local = bytes(Breaker::builder().shards(2).local_handles(1)) - two;
    let in_flight = used(Breaker::builder().shards(2).track_in_flight(true)) - used(Breaker::builder().shards(2));
    let listener = bytes(Breaker::builder().shards(2).on_transition(|_| {})) - two;
    let relative = bytes(
        Breaker::builder()
            .shards(2)
            .relative_latency(tailguard::RelativeLatency::new()),
    ) - two;
    let ramp = bytes(
        Breaker::builder()
            .shards(2)
            .recovery_ramp(std::time::Duration::from_secs(10)),
    ) - two;
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/figures.md")).unwrap();
    let thousands = |n: usize| {
        let s = n.to_string();
        if n < 1000 {
            s
        } else {
            format!("{},{}", &s[..s.len() - 3], &s[s.len() - 3..])
        }
    };
    let kb = |n: usize| format!("{:.1} KB", n as f64 / 1024.0);
    let stated = [
        format!("x86-64: {} bytes", thousands(base)),
        format!("plus {slot} per shard slot and {per_shard} per shard in use"),
        format!("**{} bytes**", thousands(two_used)),
        format!("local handle adds about {}", kb(local)),
        format!("in-flight tracking {in_flight} bytes per shard"),
        format!("64-event queue of about {}", kb(listener)),
        format!("relative latency rule adds about {}", kb(relative)),
        format!("a recovery ramp {ramp} bytes"),
    ];
    let flat = readme.split_whitespace().collect::<Vec<_>>().join(" ");
    for s in stated {
        assert!(flat.contains(&s), "docs/figures.md should state {s:?}");
    }
}
