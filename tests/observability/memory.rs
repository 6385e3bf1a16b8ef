//! The memory a breaker takes, and the figures the docs state for it.

use tailguard::Breaker;

/// Default settings: with the `tracing` feature every breaker also keeps a
/// 64-event queue (about 3 KB), so the figure is for a build without it.
/// (The exact figures are checked against the README below.)
#[test]
#[cfg(all(target_pointer_width = "64", not(feature = "tracing")))]
fn one_breaker_is_about_two_and_a_half_kilobytes_at_default_settings_on_two_shards() {
    let bytes = |shards| {
        Breaker::builder()
            .ticker(false)
            .shards(shards)
            .build()
            .unwrap()
            .memory_bytes()
    };
    let (one, two, four) = (bytes(1), bytes(2), bytes(4));
    assert!(two <= 2560 + 128, "{two} bytes");
    assert_eq!(two - one, four - two - (two - one), "linear in the shard count");
    assert_eq!(two - one, 640, "one shard: buckets, carries and counters, cache-padded");
    assert!(50 * two <= 128 * 1024, "50 consumers in about 128 KB");
}

/// The memory figures `docs/figures.md` states are the code's, exactly, on the
/// target they are stated for (x86-64, without `tracing`, whose event
/// queue every breaker then keeps).
#[test]
#[cfg(all(target_arch = "x86_64", not(feature = "tracing")))]
fn the_stated_memory_figures_are_the_code_s() {
    let bytes = |b: tailguard::BreakerBuilder| b.ticker(false).build().unwrap().memory_bytes();
    let one = bytes(Breaker::builder().shards(1));
    let two = bytes(Breaker::builder().shards(2));
    let per_shard = two - one;
    let base = one - per_shard;
    let local = bytes(Breaker::builder().shards(2).local_handles(1)) - two;
    let in_flight = (bytes(Breaker::builder().shards(2).track_in_flight(true)) - two) / 2;
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
        format!("plus {per_shard} per shard"),
        format!("**{} bytes**", thousands(two)),
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
