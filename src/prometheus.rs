//! Prometheus export of every breaker in a [`Registry`] (feature `prometheus`).
//!
//! [`BreakerCollector`] is a [`prometheus_client`] [`Collector`]: it reads
//! each consumer's [`Snapshot`](crate::Snapshot) when Prometheus scrapes, so
//! the hot path (`allow`, `record`, DLQ `push`) pays nothing for it. A scrape
//! takes the registry's read lock to list the consumers, then each breaker's
//! window-close lock for its snapshot, one at a time.
//!
//! Every series carries a `consumer` label (the registry name), and a
//! per-core breaker's ([`ConsumerKey::on_core`](crate::ConsumerKey::on_core))
//! a `core` label too, but the per-bulkhead gauges, labelled `bulkhead`:
//!
//! | series | type | value |
//! |---|---|---|
//! | `breaker_state` | gauge | 0 closed, 1 open, 2 half-open (under `metrics_only`: the state it would be in) |
//! | `breaker_mode{mode}` | gauge | 1 for the current override mode, 0 for the others |
//! | `breaker_trips_total` | counter | transitions into OPEN (trips and re-opens) |
//! | `breaker_open_duration_seconds` | gauge | how long it has been OPEN, 0 when not (and when forced open) |
//! | `breaker_open_seconds_total` | counter | seconds spent OPEN since the breaker was built ([`Snapshot::open_time_total`](crate::Snapshot::open_time_total)): by its own rules (under `metrics_only`, the time it would have been), not forced open; so `increase(...[1h])` is how long a consumer was shed in the last hour |
//! | `breaker_flapping` | gauge | 1 while OPEN → HALF_OPEN → OPEN cycles come too often |
//! | `breaker_calls_total`, `breaker_errors_total`, `breaker_slow_calls_total`, `breaker_cancelled_total` | counter | over every closed window |
//! | `breaker_stale_calls_total` | counter | verdicts of permits admitted before a transition: counted apart, never judged |
//! | `breaker_shadow_rejections_total` | counter | calls a `metrics_only` breaker admitted that it would have rejected |
//! | `breaker_rejected_total{reason}` | counter | calls the breaker rejected: `open` (backoff running), `probes_busy` (half-open, every probe slot taken), `forced` (forced open), `ramping` (in a recovery ramp, beyond the share admitted); counted per thread shard, so the OPEN path writes no shared line |
//! | `breaker_events_lost_total` | counter | transition events the listener never got (its queue of 64 was full) |
//! | `breaker_listener_panics_total` | counter | panics of the transition listener, caught |
//! | `breaker_latency_seconds{quantile}` | gauge | P50/P90/P99/P99.9 of the last closed window; NaN for a window without calls (as while OPEN), as client libraries do for an empty summary. Quantiles of one instance: they cannot be averaged across a fleet (use the histogram) |
//! | `breaker_call_duration_seconds` | histogram | every call measured since the breaker was built ([`LatencyHistogram`]), counted at window close: `le` at the fixed edges ([`LatencyHistogram::edges`]: two per octave, 1.024 µs to 48.6 s), at the latency threshold when it is not one of them, and `+Inf`; exact at every edge, so `_count - _bucket{le="<threshold>"}` is the slow calls among them; `_sum` estimated (within 4.72%). The same edges on every instance: `histogram_quantile(0.99, sum by (le, consumer) (rate(..._bucket[5m])))` is a fleet's P99 per consumer |
//! | `breaker_window_seconds`, `breaker_slow_ratio_limit`, `breaker_trip_windows`, `breaker_min_calls`, `breaker_error_ratio_limit`, `breaker_error_window_seconds` | gauge | the [`Limits`](crate::Limits) windows are judged by, to read the counters against |
//! | `breaker_latency_threshold_seconds` | gauge | the threshold the last closed window was judged by ([`WindowStats::threshold`](crate::WindowStats::threshold)): the latency threshold, or with the relative rule the lower of it and the relative threshold |
//! | `breaker_latency_baseline_seconds` | gauge | the relative rule's baseline ([`Snapshot::latency_baseline`](crate::Snapshot::latency_baseline)); only consumers that have one |
//! | `breaker_ramp_admitted_ratio` | gauge | the share of calls a recovery ramp admits now, 1 when not ramping; only consumers with a ramp |
//! | `breaker_emit_seconds` | histogram | time the router spent per emit, delivered or not (only consumers with an [`Emitter`](crate::emit::Emitter) attached: [`Registry::attach_emitter`](crate::Registry::attach_emitter)); buckets at powers of two from 1.024 µs to 68.7 s |
//! | `breaker_emits_delivered_total`, `breaker_emits_overran_total`, `breaker_emits_cancelled_total` | counter | emits delivered; of those, returned after the timeout; emits dropped unfinished (async emits dropped, panicking calls whose trigger the queue could not take) |
//! | `breaker_emit_panic_drops_total` | counter | triggers dropped as a panicking call unwound (its own, or a lower-class one it displaced): the only triggers an emitter drops; alert on any |
//! | `breaker_emits_diverted_total{reason}` | counter | triggers queued: `open`, `bulkhead_full`, `timed_out`, `failed`, `no_timer` |
//! | `breaker_emits_handed_back_total{reason}` | counter | triggers handed back to the router: `queue_full`, `shut_down` |
//! | `breaker_replayed_total`, `breaker_replay_handed_back_total` | counter | queued triggers delivered by replay / handed back after their last attempt |
//! | `breaker_bulkhead_in_flight{bulkhead}`, `breaker_bulkhead_max_in_flight{bulkhead}` | gauge | calls in a bulkhead / its bound, once per bulkhead: the `bulkhead` label (and no `consumer` label) names the consumers whose emitters share it, joined by `+` (`dispatch+pricing`; a per-core breaker as `name@core`, `pricing@3`; a `+`, `@` or `\` within a name is escaped with `\`), so that a bulkhead shared by several emitters is not counted once per emitter |
//! | `breaker_bulkhead_rejected_total` | counter | calls of the consumer's emitter its bulkhead refused: its own share, so a sum over consumers counts each refusal once |
//! | `breaker_fallback_depth`, `breaker_fallback_capacity` | gauge | items in / size of the attached dead-letter queue (only consumers with one) |
//! | `breaker_fallback_class_depth{class}` | gauge | items of each class (`idle`, `routine`, `critical`) in the queue |
//! | `breaker_fallback_queued_total{class}`, `breaker_fallback_popped_total{class}` | counter | items accepted / taken out for replay |
//! | `breaker_fallback_displaced_total{class}`, `breaker_fallback_handed_back_total{class}` | counter | items handed back to the router: displaced by a higher class / refused because the queue was full |
//!
//! Per class, `queued = popped + displaced + class_depth` (exactly once the
//! queue is quiet; see [`ClassStats`]).
//!
//! Every name starts with `breaker_` unless the collector is given another
//! prefix ([`BreakerCollector::with_prefix`]).
//!
//! # Which `prometheus-client`
//! [`BreakerCollector`] implements the [`Collector`] trait of
//! `prometheus-client` 0.26, re-exported here as [`prometheus_client`]:
//! register it in a registry of that crate (`tailguard::prometheus::prometheus_client::registry::Registry`)
//! and the types agree. An application on another version of
//! `prometheus-client` gets E0277 (`BreakerCollector: Collector` not
//! satisfied, the two crates' traits being different traits) if it
//! registers the collector in its own registry (rustc then notes "multiple
//! different versions of crate `prometheus_client`"). Two ways out: keep
//! the breakers in a registry of the re-exported crate
//! (`tailguard::prometheus::prometheus_client::registry::Registry`) and
//! encode it beside the application's own; or serve [`encode_text`] (or
//! [`BreakerCollector::encode_text`]) on a path of its own, a second
//! scrape target (`/metrics/breakers`, say). Do not append it to an
//! OpenMetrics exposition, which `prometheus-client`'s
//! `encoding::text::encode` writes: that ends with `# EOF` and names
//! counters differently; this is the 0.0.4 text format.
//!
//! Counters and window quantiles move when a window closes (the
//! [`Ticker`](crate::Ticker) or [`Breaker::tick`](crate::Breaker::tick)),
//! not per call. A family with no series (say, no queue attached anywhere)
//! is left out entirely.
//!
//! ```
//! use tailguard::{Breaker, Registry};
//!
//! let registry = Registry::new();
//! registry.get_or_create("pricing", Breaker::builder)?;
//! let text = tailguard::prometheus::encode_text(&registry);
//! assert!(text.contains("breaker_state{consumer=\"pricing\"} 0\n"));
//! assert!(text.contains("# TYPE breaker_trips_total counter\n"));
//! # Ok::<(), tailguard::ConfigError>(())
//! ```

/// The `prometheus-client` crate this module's [`Collector`] is for (its
/// version 0.26): a registry from here accepts a [`BreakerCollector`].
///
/// ```
/// use tailguard::prometheus::{prometheus_client, BreakerCollector};
///
/// let mut metrics = prometheus_client::registry::Registry::default();
/// metrics.register_collector(Box::new(BreakerCollector::new(tailguard::Registry::new())));
/// let mut text = String::new();
/// prometheus_client::encoding::text::encode(&mut text, &metrics)?;
/// # Ok::<(), std::fmt::Error>(())
/// ```
pub use prometheus_client;

use crate::dlq::{ClassStats, Priority};
use crate::emit::{EmitterStats, Exported, EXPORTED};
use crate::registry::{BulkheadRow, ConsumerSnapshot, Registry};
use crate::report::Mode;
use crate::LatencyHistogram;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabel, EncodeLabelSet, EncodeMetric, LabelSetEncoder};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use std::fmt;

/// The `Content-Type` of [`encode_text`]'s output: the Prometheus text
/// format, version 0.0.4 (what every Prometheus server accepts).
///
/// ```
/// assert_eq!(tailguard::prometheus::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8");
/// ```
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// A [`Collector`] that exports every breaker of a [`Registry`], read at
/// scrape time (see the [module documentation](self) for the series).
///
/// Consumers created or removed after registration show up or disappear on
/// the next scrape: the collector holds a clone of the registry, which
/// shares it.
///
/// ```
/// use prometheus_client::encoding::prometheus_text;
/// use tailguard::prometheus::BreakerCollector;
/// use tailguard::{Breaker, Registry};
///
/// let breakers = Registry::new();
/// let mut metrics = prometheus_client::registry::Registry::default();
/// metrics.register_collector(Box::new(BreakerCollector::new(breakers.clone())));
///
/// breakers.get_or_create("compliance", Breaker::builder)?; // after registration: still exported
/// let mut text = String::new();
/// prometheus_text::encode(&mut text, &metrics).unwrap();
/// assert!(text.contains("breaker_calls_total{consumer=\"compliance\"} 0\n"));
/// # Ok::<(), tailguard::ConfigError>(())
/// ```
#[derive(Debug, Clone)]
pub struct BreakerCollector {
    registry: Registry,
    prefix: std::sync::Arc<str>,
    histogram: HistogramExport,
}

/// How much of each breaker's latency histogram a [`BreakerCollector`]
/// exports as `breaker_call_duration_seconds`
/// ([`BreakerCollector::with_histogram`]): its buckets are most of a
/// scrape (measured in `docs/figures.md`).
///
/// Every instance of a fleet must export the same: `sum by (le)` over
/// instances with different edges is no histogram. Dropping edges never
/// changes the counts at the edges kept, nor the sum and count.
///
/// ```
/// use tailguard::prometheus::{BreakerCollector, HistogramExport};
/// let registry = tailguard::Registry::new();
/// registry.get_or_create("pricing", tailguard::Breaker::builder)?;
/// let buckets = |export| {
///     let text = BreakerCollector::new(registry.clone()).with_histogram(export).encode_text();
///     text.lines().filter(|l| l.starts_with("breaker_call_duration_seconds_bucket")).count()
/// };
/// // 52 fixed edges, the 50 ms threshold's, +Inf; every other one; none.
/// assert_eq!(buckets(HistogramExport::HalfOctaves), 54);
/// assert_eq!(buckets(HistogramExport::Octaves), 28);
/// assert_eq!(buckets(HistogramExport::Off), 0);
/// # Ok::<(), tailguard::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum HistogramExport {
    /// Every fixed edge ([`LatencyHistogram::edges`], two per octave), the
    /// threshold's, +Inf: the default.
    #[default]
    HalfOctaves,
    /// One edge per octave (every other fixed edge: 1.024 µs × 2^k), the
    /// threshold's, +Inf: half the series, a fleet P99 within a factor of
    /// 2 instead of √2.
    Octaves,
    /// No `breaker_call_duration_seconds` at all.
    Off,
}

impl BreakerCollector {
    /// A collector over `registry` (a clone shares it).
    ///
    /// ```
    /// let collector = tailguard::prometheus::BreakerCollector::new(tailguard::Registry::new());
    /// # drop(collector);
    /// ```
    pub fn new(registry: Registry) -> Self {
        Self {
            registry,
            prefix: std::sync::Arc::from(DEFAULT_PREFIX),
            histogram: HistogramExport::default(),
        }
    }

    /// The same collector exporting `export` of each breaker's latency
    /// histogram (see [`HistogramExport`]).
    ///
    /// ```
    /// use tailguard::prometheus::{BreakerCollector, HistogramExport};
    /// let c = BreakerCollector::new(tailguard::Registry::new()).with_histogram(HistogramExport::Octaves);
    /// assert_eq!(c.histogram(), HistogramExport::Octaves);
    /// ```
    pub fn with_histogram(mut self, export: HistogramExport) -> Self {
        self.histogram = export;
        self
    }

    /// What it exports of each latency histogram.
    ///
    /// ```
    /// use tailguard::prometheus::{BreakerCollector, HistogramExport};
    /// let c = BreakerCollector::new(tailguard::Registry::new());
    /// assert_eq!(c.histogram(), HistogramExport::HalfOctaves);
    /// ```
    pub fn histogram(&self) -> HistogramExport {
        self.histogram
    }

    /// The same collector with every series named `prefix` + the rest of
    /// its name instead of `breaker_` + the rest (`prefix` `"tailguard_"`:
    /// `tailguard_state`, `tailguard_calls_total`, …). The rules in `ops/`
    /// name the default series: rewrite them with the same prefix.
    ///
    /// # Errors
    /// [`InvalidPrefix`] if a name it would make is not a valid Prometheus
    /// metric name: the prefix must match `[a-zA-Z_:][a-zA-Z0-9_:]*` (or be
    /// empty).
    ///
    /// ```
    /// use tailguard::prometheus::BreakerCollector;
    /// use tailguard::{Breaker, Registry};
    ///
    /// let registry = Registry::new();
    /// registry.get_or_create("pricing", Breaker::builder)?;
    /// let collector = BreakerCollector::new(registry).with_prefix("router_breaker_")?;
    /// let text = collector.encode_text();
    /// assert!(text.contains("router_breaker_state{consumer=\"pricing\"} 0\n"));
    /// assert!(!text.contains("\nbreaker_"));
    ///
    /// let err = BreakerCollector::new(Registry::new()).with_prefix("9lives-").unwrap_err();
    /// assert_eq!(err.prefix(), "9lives-");
    /// assert!(err.to_string().contains("'9'"), "{err}");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_prefix(mut self, prefix: &str) -> Result<Self, InvalidPrefix> {
        let bad = prefix.char_indices().find(|&(i, c)| {
            let allowed = c.is_ascii_alphabetic() || c == '_' || c == ':' || (i > 0 && c.is_ascii_digit());
            !allowed
        });
        if let Some((at, c)) = bad {
            return Err(InvalidPrefix {
                prefix: prefix.to_owned(),
                at,
                found: c,
            });
        }
        self.prefix = std::sync::Arc::from(prefix);
        Ok(self)
    }

    /// The prefix of every series' name (`breaker_` unless set with
    /// [`with_prefix`](Self::with_prefix)).
    ///
    /// ```
    /// let c = tailguard::prometheus::BreakerCollector::new(tailguard::Registry::new());
    /// assert_eq!(c.prefix(), "breaker_");
    /// ```
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// This collector's series in the Prometheus text format, as
    /// [`encode_text`] gives a registry's (with this collector's prefix).
    ///
    /// ```
    /// let registry = tailguard::Registry::new();
    /// registry.get_or_create("pricing", tailguard::Breaker::builder)?;
    /// let c = tailguard::prometheus::BreakerCollector::new(registry.clone());
    /// assert_eq!(c.encode_text(), tailguard::prometheus::encode_text(&registry));
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn encode_text(&self) -> String {
        let mut metrics = prometheus_client::registry::Registry::default();
        metrics.register_collector(Box::new(self.clone()));
        let mut text = String::new();
        // Writing to a `String` cannot fail, and the collector fails only
        // when its writer does.
        prometheus_client::encoding::prometheus_text::encode(&mut text, &metrics)
            .expect("encoding into a String never fails");
        text
    }

    /// A series' full name: the prefix, then `rest`.
    fn name(&self, rest: &str) -> String {
        let mut name = String::with_capacity(self.prefix.len() + rest.len());
        name.push_str(&self.prefix);
        name.push_str(rest);
        name
    }

    /// The registry this collector reads.
    ///
    /// ```
    /// let registry = tailguard::Registry::new();
    /// let collector = tailguard::prometheus::BreakerCollector::new(registry.clone());
    /// registry.get_or_create("a", tailguard::Breaker::builder).unwrap();
    /// assert_eq!(collector.registry().len(), 1);
    /// ```
    pub fn registry(&self) -> &Registry {
        &self.registry
    }
}

/// Encodes every breaker of `registry` in the Prometheus text format
/// (version 0.0.4, served as [`CONTENT_TYPE`]): a fresh
/// `prometheus_client` registry holding one [`BreakerCollector`], encoded
/// with [`prometheus_text::encode`](prometheus_client::encoding::prometheus_text::encode).
///
/// To serve the breakers next to other metrics, register a
/// [`BreakerCollector`] in your own `prometheus_client` registry instead.
///
/// ```
/// use std::time::Duration;
/// use tailguard::{Breaker, Registry};
/// use tailguard::clock::ManualClock;
///
/// let clock = ManualClock::new();
/// let registry = Registry::new();
/// let b = registry.get_or_create("pricing", || Breaker::builder().clock(clock.clone()).ticker(false))?;
/// b.allow()?.record_latency(Duration::from_millis(120), false);
/// clock.advance(Duration::from_secs(1));
/// b.tick();
///
/// let text = tailguard::prometheus::encode_text(&registry);
/// assert!(text.contains("breaker_calls_total{consumer=\"pricing\"} 1\n"));
/// assert!(text.contains("breaker_slow_calls_total{consumer=\"pricing\"} 1\n"));
/// assert!(text.contains("breaker_latency_seconds{consumer=\"pricing\",quantile=\"0.99\"} "));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn encode_text(registry: &Registry) -> String {
    BreakerCollector::new(registry.clone()).encode_text()
}

/// The prefix of every series' name unless a collector sets its own
/// ([`BreakerCollector::with_prefix`]).
pub const DEFAULT_PREFIX: &str = "breaker_";

/// A prefix that would not make valid Prometheus metric names
/// ([`BreakerCollector::with_prefix`]): names the prefix, and the first
/// character that is not allowed where it stands.
///
/// ```
/// use tailguard::prometheus::BreakerCollector;
/// let err = BreakerCollector::new(tailguard::Registry::new()).with_prefix("my-app_").unwrap_err();
/// assert_eq!(
///     err.to_string(),
///     "invalid metric prefix \"my-app_\": '-' at byte 2 (a Prometheus metric name is [a-zA-Z_:][a-zA-Z0-9_:]*)"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidPrefix {
    prefix: String,
    at: usize,
    found: char,
}

impl InvalidPrefix {
    /// The prefix refused.
    ///
    /// ```
    /// let c = tailguard::prometheus::BreakerCollector::new(tailguard::Registry::new());
    /// assert_eq!(c.with_prefix("a b").unwrap_err().prefix(), "a b");
    /// ```
    pub fn prefix(&self) -> &str {
        &self.prefix
    }
}

impl fmt::Display for InvalidPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid metric prefix {:?}: {:?} at byte {} (a Prometheus metric name is [a-zA-Z_:][a-zA-Z0-9_:]*)",
            self.prefix, self.found, self.at
        )
    }
}

impl std::error::Error for InvalidPrefix {}

/// A breaker's own labels: `consumer`, and `core` for a per-core breaker
/// ([`ConsumerKey::on_core`](crate::ConsumerKey::on_core)).
#[derive(Clone, Copy)]
struct Who<'a> {
    consumer: &'a str,
    core: Option<u32>,
}

impl<'a> Who<'a> {
    fn of(r: &'a ConsumerSnapshot) -> Self {
        Who {
            consumer: &r.name,
            core: r.core,
        }
    }
}

impl EncodeLabelSet for Who<'_> {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> fmt::Result {
        ("consumer", self.consumer).encode(encoder.encode_label())?;
        if let Some(core) = self.core {
            ("core", core).encode(encoder.encode_label())?;
        }
        Ok(())
    }
}

/// The `mode` label of `breaker_mode`.
fn mode_label(mode: Mode) -> &'static str {
    match mode {
        Mode::Normal => "normal",
        Mode::ForcedOpen => "forced_open",
        Mode::ForcedClosed => "forced_closed",
        Mode::Disabled => "disabled",
        Mode::MetricsOnly => "metrics_only",
    }
}

const MODES: [Mode; 5] = [
    Mode::Normal,
    Mode::ForcedOpen,
    Mode::ForcedClosed,
    Mode::Disabled,
    Mode::MetricsOnly,
];

/// Writes one family: a descriptor, then one sample per consumer for which
/// `value` is `Some`; nothing at all when it is `None` for every consumer.
fn family<M: EncodeMetric>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    rows: &[ConsumerSnapshot],
    value: impl Fn(&ConsumerSnapshot) -> Option<M>,
) -> fmt::Result {
    let samples: Vec<(Who<'_>, M)> = rows.iter().filter_map(|r| Some((Who::of(r), value(r)?))).collect();
    let Some((_, first)) = samples.first() else {
        return Ok(());
    };
    let mut metric = encoder.encode_descriptor(name, help, None, first.metric_type())?;
    for (who, sample) in &samples {
        sample.encode(metric.encode_family(who)?)?;
    }
    Ok(())
}

/// Writes one family with a sample per class for each consumer with a
/// dead-letter queue attached; nothing at all if none has one.
fn by_class<M: EncodeMetric>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    rows: &[ConsumerSnapshot],
    value: impl Fn(&ClassStats) -> M,
) -> fmt::Result {
    let mut queues = rows
        .iter()
        .filter_map(|r| Some((Who::of(r), r.fallback_stats?)))
        .peekable();
    let Some((_, first)) = queues.peek() else {
        return Ok(());
    };
    let kind = value(&first.idle).metric_type();
    let mut metric = encoder.encode_descriptor(name, help, None, kind)?;
    for (who, stats) in queues {
        for class in Priority::ALL {
            let labels = (who, [("class", class_label(class))]);
            value(stats.class(class)).encode(metric.encode_family(&labels)?)?;
        }
    }
    Ok(())
}

/// The `class` label of the `breaker_fallback_*{class}` families.
fn class_label(class: Priority) -> &'static str {
    match class {
        Priority::Idle => "idle",
        Priority::Routine => "routine",
        Priority::Critical => "critical",
    }
}

/// Writes a histogram from its cumulative counts at its finite edges
/// (seconds, increasing), its count (the +Inf bucket) and its sum: the
/// encoder sums the buckets itself, so it is handed each bucket's own
/// count.
fn encode_cumulative(
    mut encoder: prometheus_client::encoding::MetricEncoder,
    sum: f64,
    count: u64,
    finite: impl Iterator<Item = (f64, u64)>,
) -> fmt::Result {
    let mut below = 0;
    let mut buckets: Vec<(f64, u64)> = finite
        .map(|(le, n)| {
            let own = n.saturating_sub(below);
            below = below.max(n);
            (le, own)
        })
        .collect();
    buckets.push((f64::INFINITY, count.saturating_sub(below)));
    encoder.encode_histogram::<prometheus_client::encoding::NoLabelSet>(sum, count, &buckets, None)
}

/// An emitter's emit-time histogram, as a Prometheus histogram in seconds.
struct EmitSeconds(crate::emit::EmitTimes);

impl EncodeMetric for EmitSeconds {
    fn encode(&self, encoder: prometheus_client::encoding::MetricEncoder) -> fmt::Result {
        let t = &self.0;
        // The encoder sums the buckets itself: hand it each bucket's own
        // count. The last bound also counts every slower emit: it is +Inf.
        // Its last bound also counts every slower emit: it is +Inf, and
        // its count the emits'.
        let cumulative = t.cumulative();
        let finite = &cumulative[..cumulative.len().saturating_sub(1)];
        encode_cumulative(
            encoder,
            t.sum().as_secs_f64(),
            t.count(),
            finite.iter().map(|&(le, n)| (le.as_secs_f64(), n)),
        )
    }

    fn metric_type(&self) -> prometheus_client::metrics::MetricType {
        prometheus_client::metrics::MetricType::Histogram
    }
}

/// A breaker's cumulative latency histogram, as a Prometheus histogram in
/// seconds: the fixed edges, the threshold's if it has one, then +Inf.
struct CallSeconds(LatencyHistogram, HistogramExport);

impl EncodeMetric for CallSeconds {
    fn encode(&self, encoder: prometheus_client::encoding::MetricEncoder) -> fmt::Result {
        let h = &self.0;
        // Under `Octaves`, every other fixed edge (the even ones from the
        // first) and the threshold's.
        let threshold = h.threshold_edge();
        let mut fixed = 0usize;
        let mut kept = |le: std::time::Duration| {
            if Some(le) == threshold {
                return true;
            }
            fixed += 1;
            self.1 != HistogramExport::Octaves || fixed % 2 == 1
        };
        encode_cumulative(
            encoder,
            h.sum().as_secs_f64(),
            h.count(),
            h.buckets()
                .filter(|&(le, _)| kept(le))
                .map(|(le, n)| (le.as_secs_f64(), n)),
        )
    }

    fn metric_type(&self) -> prometheus_client::metrics::MetricType {
        prometheus_client::metrics::MetricType::Histogram
    }
}

/// Writes the exported emitter counters ([`EXPORTED`], one line of the
/// emitter's counter table each) of the families `which` picks: a family
/// per name, with a sample per consumer with an emitter attached (per label
/// value, in a labelled family); nothing at all if no consumer has one.
fn emitter_counters(
    encoder: &mut DescriptorEncoder<'_>,
    collector: &BreakerCollector,
    rows: &[ConsumerSnapshot],
    which: impl Fn(&str) -> bool,
) -> fmt::Result {
    let emitters: Vec<(Who<'_>, &EmitterStats)> = rows
        .iter()
        .filter_map(|r| Some((Who::of(r), r.emitter.as_ref()?)))
        .collect();
    if emitters.is_empty() {
        return Ok(());
    }
    for series in families(EXPORTED).filter(|series| which(series[0].family)) {
        let family = series[0].family;
        let name = collector.name(family.strip_prefix(DEFAULT_PREFIX).unwrap_or(family));
        let mut metric = encoder.encode_descriptor(
            &name,
            series[0].help,
            None,
            prometheus_client::metrics::MetricType::Counter,
        )?;
        for (who, stats) in &emitters {
            for s in series {
                let v = ConstCounter::new((s.value)(stats));
                match s.label {
                    None => v.encode(metric.encode_family(who)?)?,
                    Some(label) => v.encode(metric.encode_family(&(*who, [label]))?)?,
                }
            }
        }
    }
    Ok(())
}

/// The series of `exported`, a family at a time (a family's series stand
/// together in the table).
fn families(exported: &'static [Exported]) -> impl Iterator<Item = &'static [Exported]> {
    let mut rest = exported;
    core::iter::from_fn(move || {
        let first = rest.first()?;
        let n = rest.iter().take_while(|s| s.family == first.family).count();
        let (family, tail) = rest.split_at(n);
        rest = tail;
        Some(family)
    })
}

/// Writes one gauge family with a sample per distinct bulkhead, labelled
/// `bulkhead`; nothing at all if no emitter has one.
fn bulkhead_family(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    bulkheads: &[BulkheadRow],
    value: impl Fn(&BulkheadRow) -> usize,
) -> fmt::Result {
    if bulkheads.is_empty() {
        return Ok(());
    }
    let mut metric = encoder.encode_descriptor(name, help, None, prometheus_client::metrics::MetricType::Gauge)?;
    for b in bulkheads {
        let labels = [("bulkhead", b.label.as_str())];
        ConstGauge::new(value(b) as i64).encode(metric.encode_family(&labels)?)?;
    }
    Ok(())
}

fn counter(v: u64) -> Option<ConstCounter<u64>> {
    Some(ConstCounter::new(v))
}

fn gauge(v: i64) -> Option<ConstGauge<i64>> {
    Some(ConstGauge::new(v))
}

impl Collector for BreakerCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let rows = self.registry.consumers();
        let e = &mut encoder;
        let p = self;

        family(
            e,
            &p.name("state"),
            "Breaker state: 0 closed, 1 open, 2 half-open.",
            &rows,
            |r| gauge(i64::from(r.snapshot.state.as_metric())),
        )?;
        if !rows.is_empty() {
            let name = p.name("mode");
            let mut metric = e.encode_descriptor(
                &name,
                "Operator override mode: 1 for the current mode, 0 for the others.",
                None,
                prometheus_client::metrics::MetricType::Gauge,
            )?;
            for r in &rows {
                for mode in MODES {
                    let labels = (Who::of(r), [("mode", mode_label(mode))]);
                    ConstGauge::new(i64::from(r.snapshot.mode == mode)).encode(metric.encode_family(&labels)?)?;
                }
            }
        }
        // Counters: the encoder appends `_total`.
        family(
            e,
            &p.name("trips"),
            "Transitions into OPEN (trips and re-opens).",
            &rows,
            |r| counter(r.snapshot.trip_count),
        )?;
        family(
            e,
            &p.name("open_duration_seconds"),
            "How long the breaker has been OPEN; 0 when it is not.",
            &rows,
            |r| Some(ConstGauge::new(r.snapshot.open_for.map_or(0.0, |d| d.as_secs_f64()))),
        )?;
        family(
            e,
            &p.name("open_seconds"),
            "Seconds spent OPEN since the breaker was built (under metrics_only: would have been; not forced open).",
            &rows,
            |r| Some(ConstCounter::new(r.snapshot.open_time_total.as_secs_f64())),
        )?;
        family(
            e,
            &p.name("flapping"),
            "1 while OPEN -> HALF_OPEN -> OPEN cycles come faster than the flapping limit.",
            &rows,
            |r| gauge(i64::from(r.snapshot.flapping)),
        )?;
        family(
            e,
            &p.name("calls"),
            "Calls measured, over every closed window.",
            &rows,
            |r| counter(r.snapshot.totals.calls),
        )?;
        family(
            e,
            &p.name("errors"),
            "Calls recorded as failures, over every closed window.",
            &rows,
            |r| counter(r.snapshot.totals.errors),
        )?;
        family(
            e,
            &p.name("slow_calls"),
            "Calls slower than the latency threshold, over every closed window.",
            &rows,
            |r| counter(r.snapshot.totals.slow),
        )?;
        family(
            e,
            &p.name("cancelled"),
            "Permits dropped without a verdict, over every closed window.",
            &rows,
            |r| counter(r.snapshot.totals.cancelled),
        )?;
        family(
            e,
            &p.name("stale_calls"),
            "Verdicts of permits admitted before a transition: counted apart, never judged.",
            &rows,
            |r| counter(r.snapshot.totals.stale),
        )?;
        family(
            e,
            &p.name("events_lost"),
            "Transition events the listener never got: its queue was full.",
            &rows,
            |r| counter(r.snapshot.events_lost),
        )?;
        family(
            e,
            &p.name("listener_panics"),
            "Panics of the transition listener, caught.",
            &rows,
            |r| counter(r.snapshot.listener_panics),
        )?;
        family(
            e,
            &p.name("shadow_rejections"),
            "Calls a metrics-only breaker admitted that it would have rejected.",
            &rows,
            |r| counter(r.snapshot.shadow_rejections),
        )?;
        if !rows.is_empty() {
            let name = p.name("rejected");
            let mut metric = e.encode_descriptor(
                &name,
                "Calls the breaker rejected, by reason.",
                None,
                prometheus_client::metrics::MetricType::Counter,
            )?;
            for r in &rows {
                let j = r.snapshot.rejections;
                for (reason, value) in [
                    ("open", j.open),
                    ("probes_busy", j.probes_busy),
                    ("forced", j.forced),
                    ("ramping", j.ramping),
                ] {
                    let labels = (Who::of(r), [("reason", reason)]);
                    ConstCounter::new(value).encode(metric.encode_family(&labels)?)?;
                }
            }
        }
        if !rows.is_empty() {
            let name = p.name("latency_seconds");
            let mut metric = e.encode_descriptor(
                &name,
                "Latency quantiles of the last closed window; NaN if it had no calls.",
                None,
                prometheus_client::metrics::MetricType::Gauge,
            )?;
            for r in &rows {
                let q = r.snapshot.window.latency;
                let seconds = |pick: fn(&crate::LatencyQuantiles) -> std::time::Duration| {
                    q.as_ref().map_or(f64::NAN, |q| pick(q).as_secs_f64())
                };
                for (quantile, value) in [
                    ("0.5", seconds(|q| q.p50)),
                    ("0.9", seconds(|q| q.p90)),
                    ("0.99", seconds(|q| q.p99)),
                    ("0.999", seconds(|q| q.p999)),
                ] {
                    let labels = (Who::of(r), [("quantile", quantile)]);
                    ConstGauge::new(value).encode(metric.encode_family(&labels)?)?;
                }
            }
        }
        family(
            e,
            &p.name("call_duration_seconds"),
            "Latency of every call measured since the breaker was built, counted at window close; fixed edges, two per octave, plus the latency threshold.",
            &rows,
            |r| (p.histogram != HistogramExport::Off).then(|| CallSeconds(r.latency_histogram.clone(), p.histogram)),
        )?;
        let limit =
            |f: fn(&crate::Limits) -> f64| move |r: &ConsumerSnapshot| Some(ConstGauge::new(f(&r.snapshot.limits)));
        family(
            e,
            &p.name("window_seconds"),
            "Length of one measurement window.",
            &rows,
            limit(|l| l.window.as_secs_f64()),
        )?;
        family(
            e,
            &p.name("latency_threshold_seconds"),
            "The threshold the last closed window was judged by: calls slower than this were slow (with the relative rule, the lower of the absolute and the relative threshold).",
            &rows,
            |r| Some(ConstGauge::new(r.snapshot.window.threshold.as_secs_f64())),
        )?;
        family(
            e,
            &p.name("latency_baseline_seconds"),
            "The relative rule's baseline: the consumer's own latency at the rule's quantile, learned from its healthy windows.",
            &rows,
            |r| r.snapshot.latency_baseline.map(|d| ConstGauge::new(d.as_secs_f64())),
        )?;
        family(
            e,
            &p.name("ramp_admitted_ratio"),
            "The share of calls a recovery ramp admits now: 1 when not ramping (breakers with a ramp only).",
            &rows,
            |r| {
                r.snapshot
                    .limits
                    .recovery_ramp
                    .map(|_| ConstGauge::new(r.snapshot.ramp.map_or(1.0, |ramp| ramp.admitted)))
            },
        )?;
        family(
            e,
            &p.name("slow_ratio_limit"),
            "A window breaches when more than this fraction of its calls is slow.",
            &rows,
            limit(|l| l.slow_fraction),
        )?;
        family(
            e,
            &p.name("trip_windows"),
            "Consecutive breaching windows that trip the breaker.",
            &rows,
            limit(|l| f64::from(l.trip_windows)),
        )?;
        family(
            e,
            &p.name("min_calls"),
            "Windows (and error spans) with fewer calls are not judged.",
            &rows,
            limit(|l| l.min_calls as f64),
        )?;
        family(
            e,
            &p.name("error_ratio_limit"),
            "The breaker trips when the error rate over the error window is above this.",
            &rows,
            limit(|l| l.error_rate),
        )?;
        family(
            e,
            &p.name("error_window_seconds"),
            "The span the error rate is taken over.",
            &rows,
            limit(|l| l.error_window.as_secs_f64()),
        )?;
        family(
            e,
            &p.name("fallback_depth"),
            "Items in the consumer's dead-letter queue.",
            &rows,
            |r| r.fallback_depth.map(ConstGauge::new),
        )?;
        family(
            e,
            &p.name("fallback_capacity"),
            "Capacity of the consumer's dead-letter queue.",
            &rows,
            |r| r.fallback_capacity.map(ConstGauge::new),
        )?;
        family(
            e,
            &p.name("emit_seconds"),
            "Time the router spent per emit to this consumer, delivered or not.",
            &rows,
            |r| r.emitter.as_ref().map(|s| EmitSeconds(s.emit_times)),
        )?;
        // The bulkhead's families stand together: its gauges, then each
        // emitter's share of its refusals.
        let bulkhead = |family: &str| family.starts_with("breaker_bulkhead");
        emitter_counters(e, p, &rows, |f| !bulkhead(f))?;
        let bulkheads = self.registry.bulkheads();
        bulkhead_family(
            e,
            &p.name("bulkhead_in_flight"),
            "Calls in flight in a bulkhead, once per bulkhead (label: the consumers sharing it).",
            &bulkheads,
            |b| b.in_flight,
        )?;
        bulkhead_family(
            e,
            &p.name("bulkhead_max_in_flight"),
            "The bound of a bulkhead, once per bulkhead (label: the consumers sharing it).",
            &bulkheads,
            |b| b.max_in_flight,
        )?;
        emitter_counters(e, p, &rows, bulkhead)?;
        by_class(
            e,
            &p.name("fallback_class_depth"),
            "Items of each class in the consumer's dead-letter queue.",
            &rows,
            |c| ConstGauge::new(c.depth as i64),
        )?;
        by_class(
            e,
            &p.name("fallback_queued"),
            "Items of each class accepted into the dead-letter queue.",
            &rows,
            |c| ConstCounter::new(c.queued),
        )?;
        by_class(
            e,
            &p.name("fallback_popped"),
            "Items of each class taken out of the dead-letter queue (for replay).",
            &rows,
            |c| ConstCounter::new(c.popped),
        )?;
        by_class(
            e,
            &p.name("fallback_displaced"),
            "Items of each class handed back to the router to make room for a higher class.",
            &rows,
            |c| ConstCounter::new(c.displaced),
        )?;
        by_class(
            e,
            &p.name("fallback_handed_back"),
            "Items of each class handed back to the router because the queue was full.",
            &rows,
            |c| ConstCounter::new(c.handed_back),
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{families, EXPORTED};

    /// Every exported emitter counter is in the series table of the module
    /// docs (its family as `<name>_total`, its label value in backticks on
    /// that row), and every family has its help once, on its first series:
    /// so a counter added to the emitter's table cannot be left out of the
    /// docs, nor its family's help.
    #[test]
    fn every_exported_emitter_counter_is_in_the_docs_table_with_one_help() {
        let source = include_str!("prometheus.rs");
        let table: Vec<&str> = source.lines().filter(|l| l.starts_with("//! | `")).collect();
        let mut seen = Vec::new();
        for series in families(EXPORTED) {
            let family = series[0].family;
            assert!(
                !seen.contains(&family),
                "{family}: its series are not together in the table"
            );
            seen.push(family);
            assert!(!series[0].help.is_empty(), "{family}: no help on its first series");
            assert!(
                series[1..].iter().all(|s| s.help.is_empty()),
                "{family}: help given twice"
            );
            let name = format!("`{family}_total");
            let row = table
                .iter()
                .find(|l| l.contains(&name))
                .unwrap_or_else(|| panic!("{family}: not in the module docs' table"));
            for s in series {
                if let Some((label, value)) = s.label {
                    assert!(
                        row.contains(&format!("{{{label}}}")),
                        "{family}: its label `{label}` not on its row"
                    );
                    assert!(
                        row.contains(&format!("`{value}`")),
                        "{family}: its value `{value}` not on its row"
                    );
                }
            }
        }
    }
}
