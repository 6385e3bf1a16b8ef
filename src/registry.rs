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
/// A consumer's row as read under the lock: name, core, breaker, fallback,
/// emitter.
type Row = (
    Arc<str>,
    Option<u32>,
    Breaker,
    Option<(Fallback, usize)>,
    Option<EmitterRead>,
);
/// The breakers of one consumer name: the shared one (`None`) and the
/// per-core ones (`Some(core)`), in that order.
type Cores = BTreeMap<Option<u32>, Entry>;

struct Entry {
    breaker: Breaker,
    fallback: Option<(Fallback, usize)>,
    emitter: Option<EmitterRead>,
    /// The attached emitter's bulkhead, which other consumers may share.
    bulkhead: Option<Bulkhead>,
}

/// One bulkhead as a scrape reads it: the label naming the consumers that
/// share it (their names in order, joined by `+`, a per-core breaker's as
/// `name@core`, a `+`, `@` or `\` within a name escaped with `\`), calls
/// in flight, bound.
#[cfg(feature = "prometheus")]
pub(crate) struct BulkheadRow {
    pub(crate) label: String,
    pub(crate) in_flight: usize,
    pub(crate) max_in_flight: usize,
}

/// Named breakers, one per consumer (or one per consumer per core):
/// get-or-create, lookup, removal, iteration, and the consumer's
/// dead-letter queue depth for metrics.
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
///
/// A thread-per-core server that gives each core its own breaker of a
/// consumer registers each under the consumer's name and the core
/// ([`ConsumerKey`]: `("pricing", 3)`), rather than encoding the core in the
/// name: every breaker of the consumer then exports the same `consumer`
/// label, and a `core` label tells them apart, so `sum by (consumer)` sees
/// the consumer whole.
///
/// ```
/// use tailguard::{Breaker, Registry};
///
/// let registry = Registry::new();
/// for core in 0..4 {
///     let b = registry.get_or_create(("pricing", core), || Breaker::builder().local_handles(1))?;
///     assert_eq!(b.name(), Some("pricing"));
/// }
/// assert!(registry.get("pricing").is_none(), "no shared breaker of that name");
/// assert!(registry.get(("pricing", 3)).is_some());
/// let cores: Vec<_> = registry.consumers().iter().map(|c| c.core).collect();
/// assert_eq!(cores, [Some(0), Some(1), Some(2), Some(3)]);
/// # Ok::<(), tailguard::ConfigError>(())
/// ```
#[derive(Clone, Default)]
pub struct Registry {
    entries: Arc<parking_lot::RwLock<BTreeMap<Arc<str>, Cores>>>,
}

/// Which of a registry's breakers: a consumer's name, and, for a per-core
/// breaker, the core it serves. Every method of [`Registry`] that names a
/// consumer takes one, or what converts into one: a name (`"pricing"`, a
/// `&String`: the consumer's one shared breaker) or a name and a core
/// (`("pricing", 3)`: that core's breaker of the consumer, exported with
/// the label `core="3"`).
///
/// ```
/// use tailguard::ConsumerKey;
///
/// assert_eq!(ConsumerKey::from("pricing"), ConsumerKey::new("pricing"));
/// assert_eq!(ConsumerKey::from(("pricing", 3)).core(), Some(3));
/// assert_eq!(ConsumerKey::on_core("pricing", 3).to_string(), "\"pricing\" on core 3");
/// assert_eq!(ConsumerKey::new("pricing").to_string(), "\"pricing\"");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConsumerKey<'a> {
    name: &'a str,
    core: Option<u32>,
}

impl<'a> ConsumerKey<'a> {
    /// The consumer `name`'s shared breaker.
    ///
    /// ```
    /// assert_eq!(tailguard::ConsumerKey::new("a").core(), None);
    /// ```
    pub fn new(name: &'a str) -> Self {
        Self { name, core: None }
    }

    /// The consumer `name`'s breaker on core `core`.
    ///
    /// ```
    /// assert_eq!(tailguard::ConsumerKey::on_core("a", 7).core(), Some(7));
    /// ```
    pub fn on_core(name: &'a str, core: u32) -> Self {
        Self { name, core: Some(core) }
    }

    /// The consumer's name.
    ///
    /// ```
    /// assert_eq!(tailguard::ConsumerKey::on_core("a", 7).name(), "a");
    /// ```
    pub fn name(&self) -> &'a str {
        self.name
    }

    /// The core, for a per-core breaker.
    ///
    /// ```
    /// assert_eq!(tailguard::ConsumerKey::from("a").core(), None);
    /// ```
    pub fn core(&self) -> Option<u32> {
        self.core
    }
}

impl<'a> From<&'a str> for ConsumerKey<'a> {
    fn from(name: &'a str) -> Self {
        Self::new(name)
    }
}

impl<'a> From<&'a String> for ConsumerKey<'a> {
    fn from(name: &'a String) -> Self {
        Self::new(name)
    }
}

impl<'a> From<(&'a str, u32)> for ConsumerKey<'a> {
    fn from((name, core): (&'a str, u32)) -> Self {
        Self::on_core(name, core)
    }
}

impl<'a> From<(&'a String, u32)> for ConsumerKey<'a> {
    fn from((name, core): (&'a String, u32)) -> Self {
        Self::on_core(name, core)
    }
}

impl core::fmt::Display for ConsumerKey<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:?}", self.name)?;
        match self.core {
            Some(core) => write!(f, " on core {core}"),
            None => Ok(()),
        }
    }
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
    /// The core of a per-core breaker ([`ConsumerKey::on_core`]); `None`
    /// for a consumer's shared breaker.
    pub core: Option<u32>,
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

    /// The breaker of `key` (a name, or a name and a core: see
    /// [`ConsumerKey`]), built from `make()` if there is none yet (`make`
    /// runs only then, under the registry's lock; the consumer's name is
    /// set on the builder).
    ///
    /// # Errors
    /// The builder's [`ConfigError`], naming the consumer; nothing is
    /// registered then.
    ///
    /// ```
    /// use std::time::Duration;
    /// let r = tailguard::Registry::new();
    /// let b = r.get_or_create("dispatch", || {
    ///     tailguard::Breaker::builder().latency_threshold(Duration::from_millis(20))
    /// })?;
    /// // The same consumer on core 2: a breaker of its own.
    /// let on_2 = r.get_or_create(("dispatch", 2), || tailguard::Breaker::builder().local_handles(1))?;
    /// assert!(!b.ptr_eq(&on_2));
    /// assert_eq!(r.len(), 2);
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn get_or_create<'k>(
        &self,
        key: impl Into<ConsumerKey<'k>>,
        make: impl FnOnce() -> BreakerBuilder,
    ) -> Result<Breaker, ConfigError> {
        let key = key.into();
        if let Some(b) = self.get(key) {
            return Ok(b);
        }
        let mut entries = self.entries.write();
        if let Some(e) = entries.get(key.name).and_then(|cores| cores.get(&key.core)) {
            return Ok(e.breaker.clone());
        }
        let breaker = make().name(key.name).build().map_err(|e| e.for_consumer(key.name))?;
        let entry = Entry {
            breaker: breaker.clone(),
            fallback: None,
            emitter: None,
            bulkhead: None,
        };
        match entries.get_mut(key.name) {
            Some(cores) => {
                cores.insert(key.core, entry);
            }
            None => {
                entries.insert(Arc::from(key.name), BTreeMap::from([(key.core, entry)]));
            }
        }
        Ok(breaker)
    }

    /// The breaker of `key` (a name, or a name and a core).
    ///
    /// ```
    /// let r = tailguard::Registry::new();
    /// assert!(r.get("nobody").is_none());
    /// r.get_or_create(("pricing", 1), tailguard::Breaker::builder)?;
    /// assert!(r.get(("pricing", 1)).is_some());
    /// assert!(r.get(("pricing", 0)).is_none() && r.get("pricing").is_none());
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn get<'k>(&self, key: impl Into<ConsumerKey<'k>>) -> Option<Breaker> {
        let key = key.into();
        self.entries
            .read()
            .get(key.name)
            .and_then(|cores| cores.get(&key.core))
            .map(|e| e.breaker.clone())
    }

    /// Removes and returns the breaker of `key` (clones held elsewhere
    /// keep working; the registry just forgets it). The consumer's other
    /// breakers (its other cores', its shared one) stay.
    ///
    /// ```
    /// let r = tailguard::Registry::new();
    /// r.get_or_create("a", tailguard::Breaker::builder).unwrap();
    /// r.get_or_create(("a", 0), tailguard::Breaker::builder).unwrap();
    /// assert!(r.remove("a").is_some());
    /// assert!(r.remove("a").is_none());
    /// assert_eq!(r.len(), 1, "core 0's breaker stays");
    /// ```
    pub fn remove<'k>(&self, key: impl Into<ConsumerKey<'k>>) -> Option<Breaker> {
        let key = key.into();
        let mut entries = self.entries.write();
        let cores = entries.get_mut(key.name)?;
        let removed = cores.remove(&key.core)?;
        if cores.is_empty() {
            entries.remove(key.name);
        }
        Some(removed.breaker)
    }

    /// The entry of `key`, or why not.
    fn entry_mut<'m>(
        entries: &'m mut BTreeMap<Arc<str>, Cores>,
        key: ConsumerKey<'_>,
    ) -> Result<&'m mut Entry, UnknownConsumer> {
        if entries.get(key.name).is_some_and(|cores| cores.contains_key(&key.core)) {
            let cores = entries.get_mut(key.name).expect("checked above");
            return Ok(cores.get_mut(&key.core).expect("checked above"));
        }
        Err(UnknownConsumer::new(key, entries))
    }

    /// Reports `producer`'s queue as the fallback of consumer `key`: its
    /// depth, capacity and per-class counters appear in
    /// [`consumers`](Self::consumers) and in the `breaker_fallback_*`
    /// metrics.
    ///
    /// # Errors
    /// [`UnknownConsumer`] if there is no breaker for `key` (nothing is
    /// attached): it names the nearest registered one, for a typo.
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
    pub fn attach_fallback<'k, T: Send + 'static>(
        &self,
        key: impl Into<ConsumerKey<'k>>,
        producer: Producer<T>,
    ) -> Result<(), UnknownConsumer> {
        let capacity = producer.capacity();
        let mut entries = self.entries.write();
        let e = Self::entry_mut(&mut entries, key.into())?;
        e.fallback = Some((Arc::new(move || (producer.len(), producer.stats())), capacity));
        Ok(())
    }

    /// Reports `emitter` as consumer `key`'s emit path: its counters and
    /// emit-time histogram appear in [`consumers`](Self::consumers) and in
    /// the `breaker_emit_*` and `breaker_bulkhead_*` metrics, and its queue
    /// as the consumer's fallback (as [`attach_fallback`](Self::attach_fallback)).
    ///
    /// # Errors
    /// [`UnknownConsumer`] if there is no breaker for `key` (nothing is
    /// attached): it names the nearest registered one, for a typo.
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
    pub fn attach_emitter<'k, T: Send + 'static>(
        &self,
        key: impl Into<ConsumerKey<'k>>,
        emitter: &Emitter<T>,
    ) -> Result<(), UnknownConsumer> {
        let producer = emitter.producer().clone();
        let capacity = producer.capacity();
        let bulkhead = emitter.bulkhead().cloned();
        let emitter = emitter.clone();
        let mut entries = self.entries.write();
        let e = Self::entry_mut(&mut entries, key.into())?;
        e.fallback = Some((Arc::new(move || (producer.len(), producer.stats())), capacity));
        e.emitter = Some(Arc::new(move || emitter.stats()));
        e.bulkhead = bulkhead;
        Ok(())
    }

    /// As [`attach_emitter`](Self::attach_emitter), for a per-core
    /// emitter: its counters and emit times (read through a
    /// [`LocalStatsReader`](crate::emit::LocalStatsReader), with `Relaxed`
    /// loads of what its core stores) and its queue's depth appear under
    /// `key`. Its bulkhead is its core's own count, read in the emitter's
    /// stats (`bulkhead_in_flight`), not exported as a shared bulkhead.
    /// A core that owns its breaker registers it under the consumer's name
    /// and its core (`("pricing", 3)`: exported with `core="3"`); a core
    /// whose emitter is over a handle of a shared breaker attaches it to
    /// that breaker's name (one emitter per breaker is reported: the last
    /// attached).
    ///
    /// # Errors
    /// [`UnknownConsumer`] if there is no breaker for `key`.
    ///
    /// ```
    /// use tailguard::dlq::{DeadLetterQueue, Priority};
    /// use tailguard::emit::LocalEmitter;
    /// use tailguard::{Breaker, Registry};
    ///
    /// let r = Registry::new();
    /// let b = r.get_or_create(("pricing", 0), || Breaker::builder().local_handles(1))?;
    /// let e = LocalEmitter::builder(b, DeadLetterQueue::with_capacity(8)?).build_local()?;
    /// r.attach_local_emitter(("pricing", 0), &e)?;
    /// let _ = e.emit_blocking(1u32, Priority::Routine, |_, _| Ok::<_, ()>(()));
    /// let row = &r.consumers()[0];
    /// assert_eq!((&*row.name, row.core), ("pricing", Some(0)));
    /// assert_eq!(row.emitter.as_ref().unwrap().delivered, 1);
    /// let wrong = r.attach_local_emitter(("pricing", 1), &e).unwrap_err();
    /// assert_eq!((wrong.nearest(), wrong.nearest_core()), (Some("pricing"), Some(0)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn attach_local_emitter<'k, T: Send + 'static>(
        &self,
        key: impl Into<ConsumerKey<'k>>,
        emitter: &crate::emit::LocalEmitter<T>,
    ) -> Result<(), UnknownConsumer> {
        let reader = emitter.stats_reader();
        let producer = emitter.producer().clone();
        let capacity = producer.capacity();
        let mut entries = self.entries.write();
        let e = Self::entry_mut(&mut entries, key.into())?;
        e.fallback = Some((Arc::new(move || (producer.len(), producer.stats())), capacity));
        e.emitter = Some(Arc::new(move || reader.read()));
        e.bulkhead = None;
        Ok(())
    }

    /// Every distinct bulkhead of the attached emitters, once each, in the
    /// order of the first consumer using it.
    #[cfg(feature = "prometheus")]
    pub(crate) fn bulkheads(&self) -> Vec<BulkheadRow> {
        let mut found: Vec<(Bulkhead, Vec<String>)> = Vec::new();
        for (name, cores) in self.entries.read().iter() {
            for (core, e) in cores {
                let Some(b) = &e.bulkhead else { continue };
                // Each name escaped (`\\`, `\+`, `\@`), then a per-core
                // breaker's core after an unescaped `@`: `name@core`.
                let escaped = name.replace('\\', "\\\\").replace('+', "\\+").replace('@', "\\@");
                let name = match core {
                    None => escaped,
                    Some(core) => format!("{escaped}@{core}"),
                };
                match found.iter_mut().find(|(seen, _)| seen.ptr_eq(b)) {
                    Some((_, names)) => names.push(name),
                    None => found.push((b.clone(), vec![name])),
                }
            }
        }
        found
            .into_iter()
            .map(|(b, names)| BulkheadRow {
                // `+` between names, and escaped within one (`\+`, `\\`, and
                // `\@` beside a core's `@`), so that no two bulkheads share a
                // label: a breaker belongs to one bulkhead, and the names say
                // which.
                label: names.join("+"),
                in_flight: b.in_flight(),
                max_in_flight: b.max_in_flight(),
            })
            .collect()
    }

    /// Number of breakers: one per consumer, or per consumer per core.
    ///
    /// ```
    /// assert_eq!(tailguard::Registry::new().len(), 0);
    /// ```
    pub fn len(&self) -> usize {
        self.entries.read().values().map(BTreeMap::len).sum()
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
    /// the registry's read lock: `f` must not create or remove consumers); a
    /// consumer with per-core breakers comes once per breaker (its shared
    /// one first, then by core: [`consumers`](Self::consumers) has the
    /// core).
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
        for (name, cores) in self.entries.read().iter() {
            for e in cores.values() {
                f(name, &e.breaker);
            }
        }
    }

    /// Every breaker's snapshot and fallback depth, in name order (a
    /// consumer's shared breaker first, then its per-core ones by core):
    /// what a metrics scrape reads.
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
            .flat_map(|(n, cores)| {
                cores.iter().map(|(core, e)| {
                    (
                        Arc::clone(n),
                        *core,
                        e.breaker.clone(),
                        e.fallback.clone(),
                        e.emitter.clone(),
                    )
                })
            })
            .collect();
        // Snapshots are taken outside the registry lock.
        rows.into_iter()
            .map(|(name, core, breaker, fallback, emitter)| {
                let queue = fallback.as_ref().map(|(read, _)| read());
                ConsumerSnapshot {
                    name,
                    core,
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

/// There is no breaker of that consumer (and core) in the registry
/// ([`Registry::attach_fallback`], [`Registry::attach_emitter`],
/// [`Registry::attach_local_emitter`]): nothing was attached. Names the
/// consumer (and core) asked for and, if one is close (a letter or two
/// off, another case, or the same name on another core), the registered
/// one it may have meant.
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
    core: Option<u32>,
    nearest: Option<(String, Option<u32>)>,
}

impl UnknownConsumer {
    fn new(key: ConsumerKey<'_>, known: &BTreeMap<Arc<str>, Cores>) -> Self {
        let name = key.name;
        // The closest name within a third of the longer one's length (at
        // least one edit), a case difference counting as no distance; of
        // its breakers, the one on the core asked for, else the first.
        let lower = name.to_lowercase();
        let nearest = known
            .iter()
            .map(|(k, cores)| (edit_distance(&lower, &k.to_lowercase()), k, cores))
            .filter(|(d, k, _)| *d <= (name.chars().count().max(k.chars().count()) / 3).max(1))
            // The exact name first among equals (another core of it,
            // before a case variant).
            .min_by_key(|(d, k, _)| (*d, &***k != name))
            .map(|(_, k, cores)| {
                let core = if cores.contains_key(&key.core) {
                    key.core
                } else {
                    cores.keys().next().copied().flatten()
                };
                (k.to_string(), core)
            });
        Self {
            name: name.to_owned(),
            core: key.core,
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

    /// The core asked for, if a per-core breaker was.
    ///
    /// ```
    /// let r = tailguard::Registry::new();
    /// let q: tailguard::dlq::DeadLetterQueue<u8> = tailguard::dlq::DeadLetterQueue::with_capacity(1)?;
    /// assert_eq!(r.attach_fallback(("a", 2), q.producer()).unwrap_err().core(), Some(2));
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn core(&self) -> Option<u32> {
        self.core
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
        self.nearest.as_ref().map(|(name, _)| name.as_str())
    }

    /// The core of the nearest registered breaker, if it is a per-core one
    /// (`None` for a shared breaker, or when nothing is close).
    ///
    /// ```
    /// let r = tailguard::Registry::new();
    /// r.get_or_create(("search", 0), tailguard::Breaker::builder)?;
    /// let q: tailguard::dlq::DeadLetterQueue<u8> = tailguard::dlq::DeadLetterQueue::with_capacity(1)?;
    /// let err = r.attach_fallback("search", q.producer()).unwrap_err();
    /// assert_eq!((err.nearest(), err.nearest_core()), (Some("search"), Some(0)));
    /// assert_eq!(
    ///     err.to_string(),
    ///     "no consumer named \"search\" in this registry (did you mean \"search\" on core 0?); create it with Registry::get_or_create first"
    /// );
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn nearest_core(&self) -> Option<u32> {
        self.nearest.as_ref().and_then(|&(_, core)| core)
    }
}

impl core::fmt::Display for UnknownConsumer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let asked = ConsumerKey {
            name: &self.name,
            core: self.core,
        };
        write!(f, "no consumer named {asked} in this registry")?;
        if let Some((name, core)) = &self.nearest {
            let nearest = ConsumerKey { name, core: *core };
            write!(f, " (did you mean {nearest}?)")?;
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
