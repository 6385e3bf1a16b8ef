//! The memory a breaker takes, and the figures the docs state for it.

use tailguard::Breaker;

/// A breaker built on `b`, called once from the calling thread and once
/// from each of `threads - 1` more, one after another: each thread's first
/// call builds its shard.
fn used_by(b: tailguard::BreakerBuilder, threads: usize) -> Breaker {
    let breaker = b.ticker(false).build().unwrap();
    breaker.allow().unwrap().record(true);
    for _ in 1..threads {
        let breaker = breaker.clone();
        std::thread::spawn(move || breaker.allow().unwrap().record(true))
            .join()
            .unwrap();
    }
    breaker
}

/// Default settings: with the `tracing` feature every breaker also keeps a
/// 64-event queue (about 3 KB), so the figure is for a build without it.
/// (The exact figures are checked against the docs below.)
#[test]
#[cfg(all(target_pointer_width = "64", not(feature = "tracing")))]
fn one_breaker_is_about_two_and_a_half_kilobytes_at_default_settings_on_two_shards() {
    let bytes = |shards, threads| used_by(Breaker::builder().shards(shards), threads).memory_bytes();
    let two = bytes(2, 2);
    assert!(two <= 2560 + 128, "{two} bytes");
    assert_eq!(
        bytes(2, 2) - bytes(2, 1),
        640,
        "one shard: buckets, carries and counters, cache-padded"
    );
    assert!(50 * two <= 128 * 1024, "50 consumers in about 128 KB");
}

/// The shards a breaker holds are those its threads use, not the shard
/// count it was configured with (the machine's cores by default): 64
/// shards used by two threads cost two shards and 64 empty slots.
#[test]
#[cfg(target_pointer_width = "64")]
fn a_breaker_holds_the_shards_its_threads_use_not_the_machine_s() {
    let fresh = Breaker::builder().ticker(false).shards(64).build().unwrap();
    let empty = fresh.memory_bytes();
    fresh.allow().unwrap().record(true);
    let one = fresh.memory_bytes();
    assert_eq!(one - empty, 640, "the first call builds the calling thread's shard");
    for _ in 0..1000 {
        fresh.allow().unwrap().record(false);
        let _ = fresh.allow().unwrap();
    }
    assert_eq!(fresh.memory_bytes(), one, "later calls build nothing");
    let wide = used_by(Breaker::builder().shards(64), 2).memory_bytes();
    let narrow = used_by(Breaker::builder().shards(2), 2).memory_bytes();
    assert_eq!(
        wide - narrow,
        62 * 8,
        "64 shards used by two threads: two shards and 62 more empty slots"
    );
    assert!(wide < 2 * narrow, "{wide} vs {narrow}");
}

/// The memory figures `docs/figures.md` states are the code's, exactly, on the
/// target they are stated for (x86-64, without `tracing`, whose event
/// queue every breaker then keeps).
#[test]
#[cfg(all(target_arch = "x86_64", not(feature = "tracing")))]
fn the_stated_memory_figures_are_the_code_s() {
    let bytes = |b: tailguard::BreakerBuilder| b.ticker(false).build().unwrap().memory_bytes();
    let used = |b: tailguard::BreakerBuilder, threads| used_by(b, threads).memory_bytes();
    let one = bytes(Breaker::builder().shards(1));
    let slot = bytes(Breaker::builder().shards(2)) - one;
    let base = one - slot;
    let per_shard = used(Breaker::builder().shards(1), 1) - one;
    let two = bytes(Breaker::builder().shards(2));
    let two_used = used(Breaker::builder().shards(2), 2);
    let local = bytes(Breaker::builder().shards(2).local_handles(1)) - two;
    let in_flight = used(Breaker::builder().shards(2).track_in_flight(true), 1) - used(Breaker::builder().shards(2), 1);
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
