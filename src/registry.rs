//! A registry of named breakers, one per consumer.

use crate::breaker::Breaker;
use crate::builder::BreakerBuilder;
use crate::bulkhead::Bulkhead;
use crate::dlq::{Producer, Stats};
use crate::emit::{Emitter, EmitterStats};
use crate::error::ConfigError;
use crate::histogram::LatencyHistogram;
use crate::report::Snapshot;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Reads an attached queue: its depth and per-class counters.
type Fallback = Arc<dyn Fn() -> (usize, Stats) + Send + Sync>;
/// Reads an attached emitter's counters.
type EmitterRead = Arc<dyn Fn() -> EmitterStats + Send + Sync>;
/// A consumer's row as read under the lock: name, breaker, fallback, emitter.
type Row = (Arc<str>, Breaker, Option<(Fallback, usize)>, Option<EmitterRead>);

struct Entry {
    breaker: Breaker,
    fallback: Option<(Fallback, usize)>,
    emitter: Option<EmitterRead>,
    /// The attached emitter's bulkhead, which other consumers may share.
    bulkhead: Option<Bulkhead>,
}

/// One bulkhead as a scrape reads it: the label naming the consumers that
/// share it (their names in order, joined by `+`, a `+` or `\` within a
/// name escaped with `\`), calls in flight, bound.
#[cfg(feature = "prometheus")]
pub(crate) struct BulkheadRow {
    pub(crate) label: String,
    pub(crate) in_flight: usize,
    pub(crate) max_in_flight: usize,
}

/// Named breakers, one per consumer: get-or-create, lookup, removal,
/// iteration, and the consumer's dead-letter queue depth for metrics.
///
/// Creating and looking up take a lock (cold paths: do it once per consumer,
/// keep the [`Breaker`]); the breaker handed out is the same as a lone one,
/// with no registry cost on `allow` or `record`. Every breaker built here is
/// served by the process's one [`Ticker`](crate::Ticker) when it runs.
/// Cloning a registry shares it.
///
/// ```
/// use tailguard::{Breaker, Registry};
/// use tailguard::dlq::DeadLetterQueue;
///
/// let registry = Registry::new();
/// let pricing = registry.get_or_create("pricing", Breaker::builder)?;
/// let again = registry.get_or_create("pricing", Breaker::builder)?;
/// assert!(pricing.ptr_eq(&again));
/// assert_eq!(pricing.name(), Some("pricing"));
///
/// let dlq: DeadLetterQueue<u64> = DeadLetterQueue::with_capacity(64)?;
/// registry.attach_fallback("pricing", dlq.producer());
/// assert_eq!(registry.consumers()[0].fallback_depth, Some(0));
/// assert!(registry.remove("pricing").is_some());
/// assert!(registry.get("pricing").is_none());
/// # Ok::<(), tailguard::ConfigError>(())
/// ```
#[derive(Clone, Default)]
pub struct Registry {
    entries: Arc<parking_lot::RwLock<BTreeMap<Arc<str>, Entry>>>,
}

// Sound after a panic anywhere: its lock guards a map that no panic leaves
// half updated (user code, the `make` of `get_or_create`, runs before the
// insert).
impl std::panic::UnwindSafe for Registry {}
impl std::panic::RefUnwindSafe for Registry {}

impl core::fmt::Debug for Registry {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Registry").field("consumers", &self.len()).finish()
    }
}

/// One consumer's row in [`Registry::consumers`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ConsumerSnapshot {
    /// The consumer's name.
    pub name: Arc<str>,
    /// Its breaker's snapshot.
    pub snapshot: Snapshot,
    /// Its breaker's cumulative latency histogram
    /// ([`Breaker::latency_histogram`]).
    pub latency_histogram: LatencyHistogram,
    /// Items in its dead-letter queue, if one is attached.
    pub fallback_depth: Option<usize>,
    /// Its dead-letter queue's capacity, if one is attached.
    pub fallback_capacity: Option<usize>,
    /// Its dead-letter queue's per-class counters, if one is attached.
    pub fallback_stats: Option<Stats>,
    /// Its emitter's counters, if one is attached
    /// ([`Registry::attach_emitter`]).
    pub emitter: Option<EmitterStats>,
}

impl Registry {
    /// An empty registry.
    ///
    /// ```
    /// assert!(tailguard::Registry::new().is_empty());
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// The breaker named `name`, built from `make()` if there is none yet
    /// (`make` runs only then, under the registry's lock; the name is set
    /// on the builder).
    ///
    /// # Errors
    /// The builder's [`ConfigError`]; nothing is registered then.
    ///
    /// ```
    /// use std::time::Duration;
    /// let r = tailguard::Registry::new();
    /// let b = r.get_or_create("dispatch", || {
    ///     tailguard::Breaker::builder().latency_threshold(Duration::from_millis(20))
    /// })?;
    /// # drop(b);
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn get_or_create(&self, name: &str, make: impl FnOnce() -> BreakerBuilder) -> Result<Breaker, ConfigError> {
        if let Some(b) = self.get(name) {
            return Ok(b);
        }
        let mut entries = self.entries.write();
        if let Some(e) = entries.get(name) {
            return Ok(e.breaker.clone());
        }
        let breaker = make().name(name).build().map_err(|e| e.for_consumer(name))?;
        entries.insert(
            Arc::from(name),
            Entry {
                breaker: breaker.clone(),
                fallback: None,
                emitter: None,
                bulkhead: None,
            },
        );
        Ok(breaker)
    }

    /// The breaker named `name`.
    ///
    /// ```
    /// assert!(tailguard::Registry::new().get("nobody").is_none());
    /// ```
    pub fn get(&self, name: &str) -> Option<Breaker> {
        self.entries.read().get(name).map(|e| e.breaker.clone())
    }

    /// Removes and returns the breaker named `name` (clones held elsewhere
    /// keep working; the registry just forgets it).
    ///
    /// ```
    /// let r = tailguard::Registry::new();
    /// r.get_or_create("a", tailguard::Breaker::builder).unwrap();
    /// assert!(r.remove("a").is_some());
    /// assert!(r.remove("a").is_none());
    /// ```
    pub fn remove(&self, name: &str) -> Option<Breaker> {
        self.entries.write().remove(name).map(|e| e.breaker)
    }

    /// Reports `producer`'s queue as the fallback of consumer `name`: its
    /// depth, capacity and per-class counters appear in
    /// [`consumers`](Self::consumers) and in the `breaker_fallback_*`
    /// metrics.
    ///
    /// # Errors
    /// [`UnknownConsumer`] if there is no consumer `name` (nothing is
    /// attached): it names the nearest registered name, for a typo.
    ///
    /// ```
    /// use tailguard::dlq::{DeadLetterQueue, Priority};
    /// use tailguard::{Breaker, Registry};
    ///
    /// let r = Registry::new();
    /// let q: DeadLetterQueue<u32> = DeadLetterQueue::with_capacity(8)?;
    /// assert!(r.attach_fallback("pricing", q.producer()).is_err(), "no such consumer yet");
    /// r.get_or_create("pricing", Breaker::builder)?;
    /// r.attach_fallback("pricing", q.producer())?;
    /// let typo = r.attach_fallback("pricnig", q.producer()).unwrap_err();
    /// assert_eq!(typo.nearest(), Some("pricing"));
    /// let _ = q.push(7, Priority::Critical);
    /// let row = &r.consumers()[0];
    /// assert_eq!((row.fallback_depth, row.fallback_capacity), (Some(1), Some(8)));
    /// assert_eq!(row.fallback_stats.unwrap().critical.queued, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn attach_fallback<T: Send + 'static>(&self, name: &str, producer: Producer<T>) -> Result<(), UnknownConsumer> {
        let capacity = producer.capacity();
        let mut entries = self.entries.write();
        let Some(e) = entries.get_mut(name) else {
            return Err(UnknownConsumer::new(name, entries.keys()));
        };
        e.fallback = Some((Arc::new(move || (producer.len(), producer.stats())), capacity));
        Ok(())
    }

    /// Reports `emitter` as consumer `name`'s emit path: its counters and
    /// emit-time histogram appear in [`consumers`](Self::consumers) and in
    /// the `breaker_emit_*` and `breaker_bulkhead_*` metrics, and its queue
    /// as the consumer's fallback (as [`attach_fallback`](Self::attach_fallback)).
    ///
    /// # Errors
    /// [`UnknownConsumer`] if there is no consumer `name` (nothing is
    /// attached): it names the nearest registered name, for a typo.
    ///
    /// ```
    /// use tailguard::dlq::{DeadLetterQueue, Priority};
    /// use tailguard::emit::Emitter;
    /// use tailguard::{Breaker, Registry};
    ///
    /// let r = Registry::new();
    /// let b = r.get_or_create("pricing", Breaker::builder)?;
    /// let e = Emitter::builder(b, DeadLetterQueue::with_capacity(8)?).bulkhead(4)?.build()?;
    /// r.attach_emitter("pricing", &e)?;
    /// let err = r.attach_emitter("Pricing", &e).unwrap_err();
    /// assert_eq!(
    ///     err.to_string(),
    ///     "no consumer named \"Pricing\" in this registry (did you mean \"pricing\"?); create it with Registry::get_or_create first"
    /// );
    /// let _ = e.emit_blocking(1u32, Priority::Routine, |_, _| Ok::<_, ()>(()));
    /// let row = &r.consumers()[0];
    /// assert_eq!(row.emitter.as_ref().unwrap().delivered, 1);
    /// assert_eq!(row.fallback_capacity, Some(8));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn attach_emitter<T: Send + 'static>(&self, name: &str, emitter: &Emitter<T>) -> Result<(), UnknownConsumer> {
        let producer = emitter.producer().clone();
        let capacity = producer.capacity();
        let bulkhead = emitter.bulkhead().cloned();
        let emitter = emitter.clone();
        let mut entries = self.entries.write();
        let Some(e) = entries.get_mut(name) else {
            return Err(UnknownConsumer::new(name, entries.keys()));
        };
        e.fallback = Some((Arc::new(move || (producer.len(), producer.stats())), capacity));
        e.emitter = Some(Arc::new(move || emitter.stats()));
        e.bulkhead = bulkhead;
        Ok(())
    }

    /// As [`attach_emitter`](Self::attach_emitter), for a per-core
    /// emitter: its counters and emit times (read through a
    /// [`LocalStatsReader`](crate::emit::LocalStatsReader), with `Relaxed`
    /// loads of what its core stores) and its queue's depth appear under
    /// `name`. Its bulkhead is its core's own count, read in the emitter's
    /// stats (`bulkhead_in_flight`), not exported as a shared bulkhead.
    /// Register each core's breaker under a name of its own (say
    /// `pricing@3`).
    ///
    /// # Errors
    /// [`UnknownConsumer`] if there is no consumer `name`.
    ///
    /// ```
    /// use tailguard::dlq::{DeadLetterQueue, Priority};
    /// use tailguard::emit::LocalEmitter;
    /// use tailguard::{Breaker, Registry};
    ///
    /// let r = Registry::new();
    /// let b = r.get_or_create("pricing@0", || Breaker::builder().local_handles(1))?;
    /// let e = LocalEmitter::builder(b, DeadLetterQueue::with_capacity(8)?).build_local()?;
    /// r.attach_local_emitter("pricing@0", &e)?;
    /// let _ = e.emit_blocking(1u32, Priority::Routine, |_, _| Ok::<_, ()>(()));
    /// assert_eq!(r.consumers()[0].emitter.as_ref().unwrap().delivered, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn attach_local_emitter<T: Send + 'static>(
        &self,
        name: &str,
        emitter: &crate::emit::LocalEmitter<T>,
    ) -> Result<(), UnknownConsumer> {
        let reader = emitter.stats_reader();
        let producer = emitter.producer().clone();
        let capacity = producer.capacity();
        let mut entries = self.entries.write();
        let Some(e) = entries.get_mut(name) else {
            return Err(UnknownConsumer::new(name, entries.keys()));
        };
        e.fallback = Some((Arc::new(move || (producer.len(), producer.stats())), capacity));
        e.emitter = Some(Arc::new(move || reader.read()));
        e.bulkhead = None;
        Ok(())
    }

    /// Every distinct bulkhead of the attached emitters, once each, in the
    /// order of the first consumer using it.
    #[cfg(feature = "prometheus")]
    pub(crate) fn bulkheads(&self) -> Vec<BulkheadRow> {
        let mut found: Vec<(Bulkhead, Vec<Arc<str>>)> = Vec::new();
        for (name, e) in self.entries.read().iter() {
            let Some(b) = &e.bulkhead else { continue };
            match found.iter_mut().find(|(seen, _)| seen.ptr_eq(b)) {
                Some((_, names)) => names.push(Arc::clone(name)),
                None => found.push((b.clone(), vec![Arc::clone(name)])),
            }
        }
        found
            .into_iter()
            .map(|(b, names)| BulkheadRow {
                // `+` between names, and escaped within one (`\+`, `\\`), so
                // that no two bulkheads share a label: a consumer belongs to
                // one bulkhead, and the names say which.
                label: names
                    .iter()
                    .map(|n| n.replace('\\', "\\\\").replace('+', "\\+"))
                    .collect::<Vec<_>>()
                    .join("+"),
                in_flight: b.in_flight(),
                max_in_flight: b.max_in_flight(),
            })
            .collect()
    }

    /// Number of consumers.
    ///
    /// ```
    /// assert_eq!(tailguard::Registry::new().len(), 0);
    /// ```
    pub fn len(&self) -> usize {
        self.entries.read().len()
    }

    /// Whether there are no consumers.
    ///
    /// ```
    /// assert!(tailguard::Registry::new().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.entries.read().is_empty()
    }

    /// Calls `f` with each consumer's name and breaker, in name order (under
    /// the registry's read lock: `f` must not create or remove consumers).
    ///
    /// ```
    /// let r = tailguard::Registry::new();
    /// r.get_or_create("b", tailguard::Breaker::builder).unwrap();
    /// r.get_or_create("a", tailguard::Breaker::builder).unwrap();
    /// let mut names = Vec::new();
    /// r.for_each(|name, _| names.push(name.to_string()));
    /// assert_eq!(names, ["a", "b"]);
    /// ```
    pub fn for_each(&self, mut f: impl FnMut(&str, &Breaker)) {
        for (name, e) in self.entries.read().iter() {
            f(name, &e.breaker);
        }
    }

    /// Every consumer's snapshot and fallback depth, in name order: what a
    /// metrics scrape reads.
    ///
    /// ```
    /// let r = tailguard::Registry::new();
    /// r.get_or_create("a", tailguard::Breaker::builder).unwrap();
    /// assert_eq!(&*r.consumers()[0].name, "a");
    /// ```
    pub fn consumers(&self) -> Vec<ConsumerSnapshot> {
        let rows: Vec<Row> = self
            .entries
            .read()
            .iter()
            .map(|(n, e)| (Arc::clone(n), e.breaker.clone(), e.fallback.clone(), e.emitter.clone()))
            .collect();
        // Snapshots are taken outside the registry lock.
        rows.into_iter()
            .map(|(name, breaker, fallback, emitter)| {
                let queue = fallback.as_ref().map(|(read, _)| read());
                ConsumerSnapshot {
                    name,
                    snapshot: breaker.snapshot(),
                    latency_histogram: breaker.latency_histogram(),
                    fallback_depth: queue.map(|(depth, _)| depth),
                    fallback_capacity: fallback.as_ref().map(|(_, cap)| *cap),
                    fallback_stats: queue.map(|(_, stats)| stats),
                    emitter: emitter.map(|read| read()),
                }
            })
            .collect()
    }
}

/// There is no consumer of that name in the registry
/// ([`Registry::attach_fallback`], [`Registry::attach_emitter`]): nothing
/// was attached. Names the consumer asked for and, if one is close (a
/// letter or two off, or another case), the registered name it may have
/// meant.
///
/// ```
/// use tailguard::{Breaker, Registry};
/// use tailguard::dlq::DeadLetterQueue;
///
/// let r = Registry::new();
/// r.get_or_create("compliance", Breaker::builder)?;
/// let q: DeadLetterQueue<u8> = DeadLetterQueue::with_capacity(4)?;
/// let err = r.attach_fallback("complaince", q.producer()).unwrap_err();
/// assert_eq!((err.name(), err.nearest()), ("complaince", Some("compliance")));
/// let err = r.attach_fallback("ledger", q.producer()).unwrap_err();
/// assert_eq!(err.nearest(), None, "nothing close");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownConsumer {
    name: String,
    nearest: Option<String>,
}

impl UnknownConsumer {
    fn new<'a>(name: &str, known: impl Iterator<Item = &'a Arc<str>>) -> Self {
        // The closest name within a third of the longer one's length (at
        // least one edit), a case difference counting as no distance.
        let lower = name.to_lowercase();
        let nearest = known
            .map(|k| (edit_distance(&lower, &k.to_lowercase()), k))
            .filter(|(d, k)| *d <= (name.chars().count().max(k.chars().count()) / 3).max(1))
            .min_by_key(|(d, _)| *d)
            .map(|(_, k)| k.to_string());
        Self {
            name: name.to_owned(),
            nearest,
        }
    }

    /// The name asked for.
    ///
    /// ```
    /// let r = tailguard::Registry::new();
    /// let q: tailguard::dlq::DeadLetterQueue<u8> = tailguard::dlq::DeadLetterQueue::with_capacity(1)?;
    /// assert_eq!(r.attach_fallback("a", q.producer()).unwrap_err().name(), "a");
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The registered name closest to it, if one is close.
    ///
    /// ```
    /// let r = tailguard::Registry::new();
    /// r.get_or_create("search", tailguard::Breaker::builder)?;
    /// let q: tailguard::dlq::DeadLetterQueue<u8> = tailguard::dlq::DeadLetterQueue::with_capacity(1)?;
    /// assert_eq!(r.attach_fallback("serch", q.producer()).unwrap_err().nearest(), Some("search"));
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn nearest(&self) -> Option<&str> {
        self.nearest.as_deref()
    }
}

impl core::fmt::Display for UnknownConsumer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "no consumer named {:?} in this registry", self.name)?;
        if let Some(n) = &self.nearest {
            write!(f, " (did you mean {n:?}?)")?;
        }
        f.write_str("; create it with Registry::get_or_create first")
    }
}

impl std::error::Error for UnknownConsumer {}

/// Levenshtein distance over chars (short names: quadratic is fine).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (diagonal + usize::from(ca != cb)).min(above + 1).min(row[j] + 1);
            diagonal = above;
        }
    }
    row[b.len()]
}
