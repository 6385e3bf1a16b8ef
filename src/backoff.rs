//! Full-jitter exponential backoff: the OPEN duration of the breaker, and a
//! public type for retry delays. Plain arithmetic, no clock, no atomics, no
//! allocation: [`Backoff`] computes, [`SplitMix64`] is the random source it
//! draws from, [`Delays`] iterates.
//!
//! The delay of attempt `n` is uniform on `[0, min(cap, base × 2ⁿ)]`, both
//! ends included ("full jitter": a fleet of clients that failed together
//! spreads out over the whole window instead of retrying in lockstep).
//!
//! # Design
//!
//! - Time is whole nanoseconds in a `u64` inside, [`Duration`] at the API.
//!   A `Duration` longer than `u64::MAX` ns (about 584 years) is taken as
//!   `u64::MAX` ns, so `Duration::MAX` works as "no cap".
//! - Every operation saturates: no attempt number, base or cap overflows,
//!   and nothing here panics on any input.
//! - The draw is unbiased (see [below](#the-draw)).
//! - The breaker computes its OPEN duration with this same code: the
//!   un-jittered backoff of level `l` is [`Backoff::ceiling`] of attempt `l`,
//!   and [`Jitter::Full`](crate::Jitter::Full) is [`Backoff::delay_with`]'s
//!   draw.
//!
//! # The draw
//!
//! A plain `r % (n + 1)` is biased: the 2⁶⁴ values of `r` do not split
//! evenly into `s = n + 1` results unless `s` is a power of two, and the
//! `2⁶⁴ mod s` smallest results get one value of `r` more than the others
//! (for `s = 3 × 2⁶²`, the lowest third of the range is twice as likely as
//! the rest). Instead the draw is Lemire's widening multiply with rejection
//! (D. Lemire, "Fast random integer generation in an interval", ACM TOMACS
//! 29(1), 2019): the high word of the 128-bit product `r × s` is the
//! result, and the few `r` whose low word falls below `2⁶⁴ mod s` are drawn
//! again, which leaves exactly `⌊2⁶⁴ / s⌋` values of `r` for every result.
//! A redraw is needed with chance `(2⁶⁴ mod s) / 2⁶⁴`: never for a power of
//! two, below one in 200,000 for any bound up to a day, below ½ for any
//! bound at all.

use crate::error::{ConfigError, ConfigErrorKind};
use core::fmt;
use core::iter::FusedIterator;
use std::time::Duration;

/// Full-jitter exponential backoff: the delay before retry `attempt` is
/// uniform on `[0, min(cap, base × 2^attempt)]`, both ends included.
///
/// Attempt 0 is the first retry (its delay is at most `base`); each attempt
/// doubles the bound until it reaches `cap`. This is the backoff the breaker
/// uses for its OPEN duration: backoff level `l` is attempt `l`, with the
/// builder's `base_backoff` and `max_backoff`.
///
/// A `Backoff` is a small `Copy` value (two `u64`); it holds no random
/// state: each draw takes a [`SplitMix64`] (or any source of uniform `u64`s,
/// see [`delay_with`](Self::delay_with)).
///
/// ```
/// use std::time::Duration;
/// use tailguard::backoff::{Backoff, SplitMix64};
///
/// let backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(10))?;
/// let mut rng = SplitMix64::new(7);
/// for attempt in 0..10 {
///     let delay = backoff.delay(attempt, &mut rng);
///     assert!(delay <= backoff.ceiling(attempt));
///     // std::thread::sleep(delay); then retry
/// }
/// assert_eq!(backoff.ceiling(3), Duration::from_millis(800));
/// assert_eq!(backoff.ceiling(30), Duration::from_secs(10));
/// # Ok::<(), tailguard::ConfigError>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Backoff {
    /// The bound of attempt 0, in nanoseconds (at least 1 when validated).
    base_ns: u64,
    /// The largest bound, in nanoseconds (at least `base_ns` when validated).
    cap_ns: u64,
}

impl Backoff {
    /// A backoff starting at `base` and doubling up to `cap`.
    ///
    /// Durations above `u64::MAX` nanoseconds (about 584 years) count as
    /// `u64::MAX` ns, so `cap = Duration::MAX` means "no cap worth the name".
    ///
    /// # Errors
    ///
    /// - `base` zero ([`ConfigErrorKind::Zero`], field `"base"`): every bound
    ///   would be `0 × 2ⁿ = 0`, a retry loop that never waits, which is not
    ///   a backoff.
    /// - `cap` below `base` ([`ConfigErrorKind::Inconsistent`], field
    ///   `"cap"`): the cap would clip even the first attempt, so `base` would
    ///   mean nothing. `cap == base` is accepted: a constant bound, full
    ///   jitter without growth.
    ///
    /// Both are compared after the saturation above (a `base` and a `cap`
    /// both beyond 584 years are equal, and accepted).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tailguard::backoff::Backoff;
    /// use tailguard::ConfigErrorKind;
    ///
    /// assert!(Backoff::new(Duration::from_millis(1), Duration::MAX).is_ok());
    ///
    /// let err = Backoff::new(Duration::ZERO, Duration::from_secs(1)).unwrap_err();
    /// assert_eq!((err.field(), err.kind()), ("base", ConfigErrorKind::Zero));
    ///
    /// let err = Backoff::new(Duration::from_secs(2), Duration::from_secs(1)).unwrap_err();
    /// assert_eq!((err.field(), err.kind()), ("cap", ConfigErrorKind::Inconsistent));
    /// ```
    pub const fn new(base: Duration, cap: Duration) -> Result<Self, ConfigError> {
        let base_ns = saturating_nanos(base);
        let cap_ns = saturating_nanos(cap);
        if base_ns == 0 {
            return Err(ConfigError::fixed(
                "base",
                ConfigErrorKind::Zero,
                "must be at least 1 ns: a zero base never waits",
            ));
        }
        if cap_ns < base_ns {
            return Err(ConfigError::fixed(
                "cap",
                ConfigErrorKind::Inconsistent,
                "must be at least base",
            ));
        }
        Ok(Self { base_ns, cap_ns })
    }

    /// A backoff of already validated nanoseconds (the breaker's builder
    /// checked `1 ≤ base_ns ≤ cap_ns`). Unchecked, but every method is still
    /// total on any pair: it saturates and clamps whatever they are.
    pub(crate) const fn from_ns(base_ns: u64, cap_ns: u64) -> Self {
        Self { base_ns, cap_ns }
    }

    /// The bound of attempt 0 (saturated to `u64::MAX` ns, see
    /// [`new`](Self::new)).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tailguard::backoff::Backoff;
    ///
    /// let backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(5))?;
    /// assert_eq!(backoff.base(), Duration::from_millis(50));
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub const fn base(&self) -> Duration {
        Duration::from_nanos(self.base_ns)
    }

    /// The largest bound (saturated to `u64::MAX` ns, see [`new`](Self::new)).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tailguard::backoff::Backoff;
    ///
    /// let backoff = Backoff::new(Duration::from_millis(50), Duration::MAX)?;
    /// assert_eq!(backoff.cap(), Duration::from_nanos(u64::MAX));
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub const fn cap(&self) -> Duration {
        Duration::from_nanos(self.cap_ns)
    }

    /// The un-jittered bound of `attempt`: `min(cap, base × 2^attempt)`,
    /// saturating (from attempt 64 on, `2^attempt` is taken as `u64::MAX`,
    /// so the bound is `cap`). The longest [`delay`](Self::delay) of that
    /// attempt can be.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tailguard::backoff::Backoff;
    ///
    /// let backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(30))?;
    /// assert_eq!(backoff.ceiling(0), Duration::from_secs(1));
    /// assert_eq!(backoff.ceiling(4), Duration::from_secs(16));
    /// assert_eq!(backoff.ceiling(5), Duration::from_secs(30));
    /// assert_eq!(backoff.ceiling(u32::MAX), Duration::from_secs(30));
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub const fn ceiling(&self, attempt: u32) -> Duration {
        Duration::from_nanos(self.ceiling_ns(attempt))
    }

    /// [`ceiling`](Self::ceiling) in nanoseconds.
    pub(crate) const fn ceiling_ns(&self, attempt: u32) -> u64 {
        let factor = match 1u64.checked_shl(attempt) {
            Some(factor) => factor,
            None => u64::MAX,
        };
        let bound = self.base_ns.saturating_mul(factor);
        if bound < self.cap_ns {
            bound
        } else {
            self.cap_ns
        }
    }

    /// The delay before retry `attempt`: uniform on `[0, ceiling(attempt)]`,
    /// both ends included, drawn from `rng` without bias.
    ///
    /// Takes one value from `rng`, and very rarely more (fewer than once in
    /// 200,000 draws for any bound up to a day; see
    /// [the draw](self#the-draw)).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tailguard::backoff::{Backoff, SplitMix64};
    ///
    /// let backoff = Backoff::new(Duration::from_millis(10), Duration::from_secs(1))?;
    /// let mut rng = SplitMix64::from_entropy();
    /// let delay = backoff.delay(2, &mut rng);
    /// assert!(delay <= Duration::from_millis(40));
    ///
    /// // The same seed gives the same delays.
    /// let a = backoff.delay(5, &mut SplitMix64::new(1));
    /// let b = backoff.delay(5, &mut SplitMix64::new(1));
    /// assert_eq!(a, b);
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn delay(&self, attempt: u32, rng: &mut SplitMix64) -> Duration {
        self.delay_with(attempt, || rng.next_u64())
    }

    /// [`delay`](Self::delay) with any source of uniform `u64`s: `next` is
    /// called once, and again only when a draw is rejected (see
    /// [the draw](self#the-draw); the chance of a rejection is below
    /// `(ceiling + 1) / 2⁶⁴`, and below ½ for any ceiling).
    ///
    /// Always returns: after 64 rejections in a row (a chance below 2⁻⁶⁴
    /// for a uniform source, so in practice only for a broken one, say
    /// `|| 0`) the last draw is kept, still within the bound. A source that
    /// is not uniform gives delays that are not uniform either, but never
    /// one out of range.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tailguard::backoff::Backoff;
    ///
    /// let backoff = Backoff::new(Duration::from_millis(10), Duration::from_secs(1))?;
    /// // Any generator: here a counter mixed by a hash.
    /// let mut i = 0u64;
    /// let next = || {
    ///     i += 1;
    ///     i.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29)
    /// };
    /// assert!(backoff.delay_with(3, next) <= Duration::from_millis(80));
    /// // Even a broken source gives a delay in range, and returns.
    /// assert!(backoff.delay_with(3, || 0) <= Duration::from_millis(80));
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub fn delay_with(&self, attempt: u32, next: impl FnMut() -> u64) -> Duration {
        Duration::from_nanos(self.delay_ns(attempt, next))
    }

    /// [`delay_with`](Self::delay_with) in nanoseconds: the breaker's draw
    /// for [`Jitter::Full`](crate::Jitter::Full).
    pub(crate) fn delay_ns(&self, attempt: u32, next: impl FnMut() -> u64) -> u64 {
        uniform_inclusive(self.ceiling_ns(attempt), next)
    }

    /// The delays of attempts 0, 1, 2, … drawn from `rng`: an endless
    /// iterator (after attempt `u32::MAX` it keeps drawing at that attempt's
    /// bound, the cap); bound it with [`Iterator::take`] or stop on success.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tailguard::backoff::{Backoff, SplitMix64};
    ///
    /// let backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2))?;
    /// let mut attempts = 0;
    /// for delay in backoff.delays(SplitMix64::new(42)).take(5) {
    ///     assert!(delay <= backoff.ceiling(attempts));
    ///     attempts += 1;
    ///     // if try_again().is_ok() { break } else { std::thread::sleep(delay) }
    /// }
    /// assert_eq!(attempts, 5);
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub const fn delays(&self, rng: SplitMix64) -> Delays {
        Delays {
            backoff: *self,
            rng,
            attempt: 0,
        }
    }
}

impl fmt::Debug for Backoff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Backoff")
            .field("base", &self.base())
            .field("cap", &self.cap())
            .finish()
    }
}

/// The delays of successive attempts of a [`Backoff`], made by
/// [`Backoff::delays`]. Endless: it never returns `None`.
///
/// ```
/// use std::time::Duration;
/// use tailguard::backoff::{Backoff, SplitMix64};
///
/// let backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60))?;
/// let mut delays = backoff.delays(SplitMix64::new(3));
/// assert_eq!(delays.attempt(), 0);
/// let first = delays.next().unwrap();
/// assert!(first <= Duration::from_secs(1));
/// assert_eq!(delays.attempt(), 1);
/// # Ok::<(), tailguard::ConfigError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Delays {
    backoff: Backoff,
    rng: SplitMix64,
    attempt: u32,
}

impl Delays {
    /// The attempt whose delay the next call to `next` draws (saturates at
    /// `u32::MAX`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tailguard::backoff::{Backoff, SplitMix64};
    ///
    /// let backoff = Backoff::new(Duration::from_millis(1), Duration::from_secs(1))?;
    /// let mut delays = backoff.delays(SplitMix64::new(0));
    /// delays.by_ref().take(3).for_each(drop);
    /// assert_eq!(delays.attempt(), 3);
    /// # Ok::<(), tailguard::ConfigError>(())
    /// ```
    pub const fn attempt(&self) -> u32 {
        self.attempt
    }
}

impl Iterator for Delays {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let delay = self.backoff.delay(self.attempt, &mut self.rng);
        self.attempt = self.attempt.saturating_add(1);
        Some(delay)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (usize::MAX, None)
    }
}

impl FusedIterator for Delays {}

/// The SplitMix64 generator (Steele, Lea and Flood, "Fast splittable
/// pseudorandom number generators", OOPSLA 2014): a 64-bit counter advanced
/// by the golden-ratio increment, each step hashed by a bijective mixer.
/// Every `u64` comes once per period of 2⁶⁴; it passes BigCrush. Fast,
/// small, seedable, and not cryptographic: for jitter, not for secrets.
///
/// The breaker draws its jitter from the same sequence: its seed is a
/// counter stepped atomically by the same increment and mixed the same way.
///
/// ```
/// use tailguard::backoff::SplitMix64;
///
/// let mut a = SplitMix64::new(1234567);
/// let mut b = a.clone();
/// assert_eq!(a.next_u64(), 6457827717110365317);
/// assert_eq!(b.next_u64(), 6457827717110365317);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SplitMix64 {
    state: u64,
}

/// The golden-ratio increment of SplitMix64 (`2⁶⁴ / φ`, odd).
pub(crate) const GOLDEN_GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

impl SplitMix64 {
    /// A generator whose sequence is fixed by `seed` (every seed is good,
    /// zero included).
    ///
    /// ```
    /// use tailguard::backoff::SplitMix64;
    ///
    /// let mut rng = SplitMix64::new(0);
    /// let first = rng.next_u64();
    /// assert_eq!(SplitMix64::new(0).next_u64(), first);
    /// assert_ne!(rng.next_u64(), first);
    /// ```
    pub const fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// A generator seeded unpredictably, without a dependency: from std's
    /// [`RandomState`](std::collections::hash_map::RandomState), whose keys
    /// come from the operating system's random source once per thread and
    /// change with every instance, so two calls give different seeds.
    ///
    /// ```
    /// use tailguard::backoff::SplitMix64;
    ///
    /// let mut a = SplitMix64::from_entropy();
    /// let mut b = SplitMix64::from_entropy();
    /// assert_ne!(a.next_u64(), b.next_u64());
    /// ```
    pub fn from_entropy() -> Self {
        use std::hash::BuildHasher;
        let keys = std::collections::hash_map::RandomState::new();
        Self::new(keys.hash_one(GOLDEN_GAMMA))
    }

    /// The next value, uniform on all of `u64`.
    ///
    /// ```
    /// use tailguard::backoff::SplitMix64;
    ///
    /// let mut rng = SplitMix64::new(99);
    /// let (x, y) = (rng.next_u64(), rng.next_u64());
    /// assert_ne!(x, y);
    /// ```
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GOLDEN_GAMMA);
        mix(self.state)
    }
}

/// SplitMix64's output function (David Stafford's "Mix13" variant of the
/// MurmurHash3 finaliser): a bijection on `u64`.
const fn mix(x: u64) -> u64 {
    let mut z = x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Redraws a rejected draw may take before the last one is kept (see
/// [`uniform_inclusive`]).
const MAX_REDRAWS: u32 = 64;

/// A uniform integer on `[0, bound]`, both ends included, from `next`, a
/// source of uniform `u64`s.
///
/// Why not `next() % (bound + 1)`: the 2⁶⁴ possible draws do not split
/// evenly into `s = bound + 1` results unless `s` is a power of two; the
/// `2⁶⁴ mod s` smallest results get one draw more than the others. For
/// `s = 3 × 2⁶²` that is a third of the range twice as likely as the rest.
///
/// What instead (D. Lemire, "Fast random integer generation in an
/// interval", ACM TOMACS 29(1), 2019): the 128-bit product `x × s` of a draw
/// `x` maps `[0, 2⁶⁴)` onto `[0, s)` by its high word. Result `k` comes
/// from the `x` whose products lie in `[k·2⁶⁴, (k+1)·2⁶⁴)`: `⌊2⁶⁴/s⌋` or
/// one more of them, whose products, hence whose low words, are `s` apart.
/// Keep only the draws whose low word is at least `t = 2⁶⁴ mod s`: the
/// interval `[t, 2⁶⁴)` is `2⁶⁴ − t = ⌊2⁶⁴/s⌋ · s` long, so it holds exactly
/// `⌊2⁶⁴/s⌋` members of any progression of step `s`, the same count for
/// every result: uniform. Since
/// `t < s`, a low word at or above `s` is never rejected and skips the one
/// division (the common case: rejection happens with chance `t / 2⁶⁴`,
/// below `s / 2⁶⁴` and below ½).
///
/// `bound = u64::MAX` is every `u64`: the draw itself is uniform on it.
///
/// After [`MAX_REDRAWS`] rejections in a row the last draw is kept. For a
/// uniform source that happens with chance below 2⁻⁶⁴ (each redraw is
/// rejected with chance below ½); it exists so that a broken source (one
/// that always returns 0, say) cannot hang a caller. The result is in range
/// whatever the source.
pub(crate) fn uniform_inclusive(bound: u64, mut next: impl FnMut() -> u64) -> u64 {
    let Some(span) = bound.checked_add(1) else {
        return next();
    };
    let span_wide = u128::from(span);
    let mut product = u128::from(next()) * span_wide;
    if (product as u64) < span {
        // 2⁶⁴ mod span, computed in 64 bits: (2⁶⁴ − span) mod span.
        let threshold = span.wrapping_neg() % span;
        let mut redraws = 0;
        while (product as u64) < threshold && redraws < MAX_REDRAWS {
            product = u128::from(next()) * span_wide;
            redraws += 1;
        }
    }
    (product >> 64) as u64
}

/// A `Duration` in whole nanoseconds, `u64::MAX` if it is longer.
const fn saturating_nanos(d: Duration) -> u64 {
    let ns = d.as_nanos();
    if ns > u64::MAX as u128 {
        u64::MAX
    } else {
        ns as u64
    }
}
